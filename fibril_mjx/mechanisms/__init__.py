"""Traced building blocks, pure JAX and written once: schedules in integer ticks, the delivery
queue, named RNG streams, filters and Gauss–Markov, small matrices, quaternions, geodesy,
faults, the one sensing cycle (`sensing`), attitude estimators."""
