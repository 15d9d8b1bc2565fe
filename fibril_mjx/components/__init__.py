"""Component types by manifest `type`.

Each module defines `TYPE` and `build(cid, raw_config, ctx, catalog) -> component`, and may
define host-side `host_metrics(sensor, truth) -> {metric: (nworld,)}` and
`plot(path, cid, time_s, sensor, truth, world, per_world_metrics, title)` used by
`fibril-mjx run`.
"""

from fibril_mjx.components import ahrs
from fibril_mjx.components import motion_motor
from fibril_mjx.components import motor
from fibril_mjx.components import scalar_actuator
from fibril_mjx.components import attitude_ekf, imu

MODULES = {
    ahrs.TYPE: ahrs,
    scalar_actuator.TYPE: scalar_actuator,
    motor.TYPE: motor,
    motion_motor.TYPE: motion_motor,
    imu.TYPE: imu,
    attitude_ekf.TYPE: attitude_ekf,
}

REGISTRY = {t: m.build for t, m in MODULES.items()}
