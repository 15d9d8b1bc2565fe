"""IMU / AHRS (`fibril_sim/imu`, `fibril_sim/ahrs`) rigs and checks of `fibril-mjx validate`:

| check | rig | compares |
| --- | --- | --- |
| `static_allan.<channel>` | static bench, long run | pooled overlapping Allan deviation per axis with the exact curve of the configured error model; N / B / K by slope fits vs the same extraction on that curve |
| `static_noise.<channel>` (AHRS) | static bench | stationary std and AR(1) ρ per axis |
| `six_orientation.<channel>` | six static poses | accelerometer gain matrix (scale, cross-axis) and bias; gyro bias and its unit-to-unit dispersion |
| `orientation_noise` (AHRS) | static poses | orientation residual std / ρ, yaw-rate bias dispersion |
| `rate_table` | hinge under a slow sine rate | gyro gain matrix (scale, cross-axis) |
| `range.<channel>` | the rate table / an off-axis site | saturation value, flags and clip counts at and beyond the limit |
| `bode.<channel>` | nested hinges / slides, one tone each | magnitude and phase against the configured first-order filter, one tone above the output Nyquist frequency (shown at its alias) |
| `timing` | all rig sensors | sample period, latency, jitter, loss vs the configured transport |
| `geometry` | static poses, known rotation | sign and unit of each axis under gravity and a known rotation |
| `thermal.<channel>.k1/k2` | one static pose under a soaked temperature staircase (IMU with a thermal model; `workflows/validate/thermal.py`) | bias temperature coefficients |

The other rigs hold the ambient at `reference_temperature_c`, so a thermal model leaves them
unchanged.
"""

from fibril_mjx.workflows.validate.inertial.device import (  # noqa: F401
    CHANNELS,
    Channel,
    Device,
    POSES,
    RATE_SITES,
    SENSOR_FIELDS,
    SKIP,
    SUBSTEPS,
    TONES,
    UNITS,
    WINDOW,
    Inertial,
    ahrs_channels,
    device_from_config,
    imu_channels,
)
from fibril_mjx.workflows.validate.inertial.rigs import (  # noqa: F401
    DynamicPlan,
    INERTIA,
    dynamic_plan,
    dynamic_rig,
    device_entry,
    static_rig,
)
from fibril_mjx.workflows.validate.inertial.driver import (  # noqa: F401
    InertialRig,
    run_inertial,
    thermal_sweep,
)
