"""Estimators in the loop (SPEC §7), fed by sensor samples."""
