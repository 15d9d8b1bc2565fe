"""Component types by manifest `type`, and the public way to add one.

Each component type is a module (see `fibril_mjx/core/protocol.py` for the contract) that defines `TYPE`, its
config model and `build(cid, raw_config, ctx, catalog) -> component`, and registers itself
here with `register`. Host-side metrics and plots of a type live apart, in
`fibril_mjx.analysis` (registered there by type).
"""

from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class ComponentType:
  """A registered component type.

  Attributes:
    type: manifest `type`, e.g. `fibril_sim/imu`.
    build: `(cid, raw_config, ctx, catalog) -> component` (host side).
    config_model: its pydantic config model (for the JSON Schema), or None.
  """
  type: str
  build: Callable
  config_model: type | None = None


TYPES: dict[str, ComponentType] = {}


def register(type_name: str, build: Callable, *, config_model: type | None = None,
             replace: bool = False) -> None:
  """Makes `type_name` available to manifests.

  Args:
    type_name: the manifest `type` (`vendor/name`).
    build: `(cid, raw_config, ctx, catalog) -> component`; the component must satisfy
      `fibril_mjx.core.protocol` for its declared roles (checked at build).
    config_model: the pydantic model of its `config` mapping (used by `fibril-mjx schema`).
    replace: allow re-registering an existing type.
  """
  if type_name in TYPES and not replace:
    raise ValueError(f'component type {type_name!r} is already registered')
  TYPES[type_name] = ComponentType(type_name, build, config_model)


def unregister(type_name: str) -> None:
  TYPES.pop(type_name, None)


def _register_builtin():
  from fibril_mjx.components.sensors import (ahrs, airspeed, barometer, gnss, imu, magnetometer, rangefinder)
  from fibril_mjx.components.estimators import attitude_ekf
  from fibril_mjx.components.actuators import motion_motor, motor, scalar_actuator
  for module in (ahrs, scalar_actuator, motor, motion_motor, imu, attitude_ekf, magnetometer,
                 barometer, airspeed, gnss, rangefinder):
    register(module.TYPE, module.build, config_model=module.CONFIG_MODEL)
  from fibril_mjx.components.sensors import camera, lidar, optical_flow
  for module in (camera, lidar, optical_flow):
    register(module.TYPE, module.build, config_model=module.CONFIG_MODEL)


_register_builtin()
