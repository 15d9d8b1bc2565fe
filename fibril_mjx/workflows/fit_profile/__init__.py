"""`fibril-mjx fit-profile`: an empirical profile estimated from recordings of a real unit.

Inputs are recordings (`fibril_mjx.io.recording`, or ROS bags with `--topics ID=TOPIC`,
`fibril_mjx.io.bags`) of one `fibril_sim/imu` or `fibril_sim/ahrs` component, by role:
**static** logs (noise terms: white noise, random walk, Gauss–Markov bias, resolution,
narrowband lines; `--power-ups` for the turn-on bias), **six-orientation** logs (accelerometer
gain matrix and bias, gyro bias of this unit), **timing** logs (period, latency, jitter, loss:
a transport profile) and **thermal** logs (bias temperature coefficients). A held-out part of
the data (`verdict`) sets the exit status. Each estimator, its thresholds and the split:
docs/internals/fit-profile.md, "What each role estimates".
"""
from fibril_mjx.workflows.fit_profile.allan import (  # noqa: F401
    CHANNELS,
    G,
    HELDOUT,
    K_SIGMA,
    fit_allan,
    load,
)
from fibril_mjx.workflows.fit_profile.static import (  # noqa: F401
    fit_static,
)
from fibril_mjx.workflows.fit_profile.geometry import (  # noqa: F401
    fit_six,
    fit_timing,
)
from fibril_mjx.workflows.fit_profile.driver import (  # noqa: F401
    ProfileFit,
    FitOptions,
    Logs,
    fit_profile,
    fit_thermal,
    report,
)
