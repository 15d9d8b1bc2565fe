"""Host-side analysis of runs (NumPy, matplotlib), apart from the traced component code.

Each component type may register two host-side functions here:

- `metrics(sensor, truth) -> {metric: (nworld,)}` — per-world statistics of a run, from the
  flattened trace fields of that component (`sensor`: `{field: (nworld, T, ...)}` delivered
  output, `truth`: `{field: (nworld, T, ...)}`);
- `plot(path, cid, time_s, sensor, truth, world, metrics, title)` — one PNG.

`fibril-mjx run` (and campaigns) look them up by component type; a type with none is run
and traced, just not summarized.
"""

from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Analysis:
  metrics: Callable | None = None
  plot: Callable | None = None


_BY_TYPE: dict[str, Analysis] = {}


def register(type_name: str, *, metrics: Callable | None = None,
             plot: Callable | None = None) -> None:
  """Registers the host-side metrics and/or plot of a component type (replaces earlier)."""
  _BY_TYPE[type_name] = Analysis(metrics, plot)


def for_type(type_name: str) -> Analysis:
  """The registered analysis of a type (empty when it has none)."""
  return _BY_TYPE.get(type_name, Analysis())


def _register_builtin():
  from fibril_mjx.analysis import (ahrs, airspeed, attitude_ekf, barometer, gnss, imu, magnetometer, motion_motor, motor, rangefinder, scalar_actuator)
  for type_name, module in (('fibril_sim/ahrs', ahrs), ('fibril_sim/imu', imu),
                            ('fibril_sim/motor', motor),
                            ('fibril_sim/motion_motor', motion_motor),
                            ('fibril_sim/scalar_actuator', scalar_actuator),
                            ('fibril_mjx/attitude_ekf', attitude_ekf),
                            ('fibril_sim/magnetometer', magnetometer),
                            ('fibril_sim/barometer', barometer),
                            ('fibril_sim/airspeed', airspeed), ('fibril_sim/gnss', gnss),
                            ('fibril_sim/rangefinder', rangefinder)):
    register(type_name, metrics=module.host_metrics, plot=module.plot)
  from fibril_mjx.analysis import camera, lidar, optical_flow
  for type_name, module in (('fibril_sim/camera', camera), ('fibril_sim/lidar', lidar),
                            ('fibril_sim/optical_flow', optical_flow)):
    register(type_name, metrics=module.host_metrics, plot=module.plot)


_register_builtin()
