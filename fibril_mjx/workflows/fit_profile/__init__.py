"""`fibril-mjx fit-profile`: an empirical profile estimated from recordings of a real unit.

Inputs are recordings (`fibril_mjx.io.recording`: `.npz` / `.parquet`, CSV with a column
mapping, or ROS bags with `--topics ID=TOPIC`, `fibril_mjx.io.bags`) of one `fibril_sim/imu` or `fibril_sim/ahrs` component, by role:

- **static** logs (unit at rest): noise terms. IMU (`imu_static`), from the logs as recorded:
  records cut at gaps > 4.5 periods (shorter gaps drop the lost samples; never a resample),
  or at the stretches at rest found inside a session log (`--find-rest`, `session.find_rest`);
  the output step q from the lattice the samples sit on, written as `<channel>_resolution`;
  per axis the strongest spectral line (Welch PSD ≥ 4× a running-median floor, `spectral`)
  fitted as a narrowband process (`<channel>_narrowband_*`: centre, bandwidth, std); white
  noise density N (less q²/12), random walk K and an optional first-order Gauss–Markov bias
  (σ, τ_c) from a weighted least-squares fit of the exact Allan variance model
  (`stats.allan_variance_model`, linear in N², K², σ² for each τ_c on a grid from 2Δ; the
  Gauss–Markov term is kept only when it lowers χ² by more than 10; the line's exact Allan
  variance taken out first); the turn-on bias dispersion only across ≥ 3 logs marked as
  separate power-ups (`--power-ups`). The held-out verdict per axis (`verdict`) is printed and
  sets the exit status (`verdict.EXIT_DISAGREE`), naming what the model cannot explain (Allan
  excess and its τ range, PSD lines, motion left in a stretch, the likely cause). AHRS:
  residual std and AR(1) ρ per axis (rates and orientation), and with ≥ 3 logs the yaw-rate
  bias dispersion.
- **six-orientation** logs (the unit resting on each face): accelerometer gain matrix and
  bias, gyro bias (calibration of this unit: reported in the evidence and `fit.json`, not
  written to the reusable profile).
- **timing** logs: sample period, latency (arrival − sample), jitter and loss (sequence gaps,
  or gaps in the sample times) → a transport profile beside the empirical one.
- **thermal** logs (IMU, one log per soaked chamber set-point, unit at rest, with the sample
  field `temperature_c`): the log means of each axis fitted by weighted least squares to
  `c0 + k1 (T − T_ref) + k2 (T − T_ref)²` at the log's mean temperature (≥ 3 logs; 2 fit k1
  only) → `*_bias_temperature_k1/_k2` with standard errors from batch means of each log.

Data are split into a fitting and a held-out part (the last ~30 % of the logs when there are
≥ 3 separate logs, else the last 30 % of each record in time); the evidence markdown reports
the fitted values with standard errors and the agreement on the held-out part.
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
