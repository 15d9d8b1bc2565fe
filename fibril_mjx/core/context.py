"""What a component sees while it is built (`BuildContext`), and its resolved MuJoCo sensor
bindings: the contract between the host builder and the component modules (neither imports the
other through it)."""

from __future__ import annotations

import dataclasses
from typing import Any

import mujoco

from fibril_mjx.errors import ConfigError, did_you_mean

_SENSOR_NAMES = {
    mujoco.mjtSensor.mjSENS_FRAMEQUAT: 'framequat',
    mujoco.mjtSensor.mjSENS_GYRO: 'gyro',
    mujoco.mjtSensor.mjSENS_ACCELEROMETER: 'accelerometer',
    **{getattr(mujoco.mjtSensor, f'mjSENS_{n.upper()}'): n for n in ('velocimeter', 'rangefinder', 'magnetometer', 'framepos')},
}


@dataclasses.dataclass(frozen=True)
class SensorBinding:
  """A MuJoCo sensor bound to a component field (resolved on the host)."""
  field: str
  name: str
  type: str
  adr: int
  dim: int
  site: str


@dataclasses.dataclass
class BuildContext:
  """What a component sees while it is built: the compiled model and where its config sits.

  Attributes:
    assembly: the resolved `assemblies` entry bound to this component
      (`fibril_mjx.physics.assemblies.ResolvedAssembly`), or None.
    built: the components built before this one, `{id: component}` in manifest order.
    entries: `(id, type)` of every component entry in the manifest, in order.
    vary: manifest fields of this component named for per-world variation (their terms are
      compiled in even at the default value).
  """
  model: mujoco.MjModel
  dt: float
  file: str
  path: str
  assembly: Any = None
  built: dict = dataclasses.field(default_factory=dict)
  entries: tuple = ()
  vary: frozenset = frozenset()

  def sensor(self, field: str, name: str, kind: mujoco.mjtSensor, dim: int) -> SensorBinding:
    m = self.model
    sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, name)
    where = f'{self.path}.{field}'
    if sid < 0:
      names = [m.sensor(i).name for i in range(m.nsensor)]
      raise ConfigError(self.file, where, 'no MuJoCo sensor of that name in the compiled model'
                        + did_you_mean(name, names), name)
    want = _SENSOR_NAMES.get(kind, str(kind))
    if m.sensor_type[sid] != kind:
      got = mujoco.mjtSensor(m.sensor_type[sid]).name.replace('mjSENS_', '').lower()
      raise ConfigError(self.file, where, f'must name a {want} sensor (dim {dim}); '
                        f'{name!r} is a {got} sensor', name)
    if m.sensor_dim[sid] != dim:
      raise ConfigError(self.file, where, f'must name a {want} sensor of dim {dim}; '
                        f'{name!r} has dim {m.sensor_dim[sid]}', name)
    site = ''
    if m.sensor_objtype[sid] == mujoco.mjtObj.mjOBJ_SITE:
      site = m.site(m.sensor_objid[sid]).name
    return SensorBinding(field, name, want, int(m.sensor_adr[sid]), dim, site)


DCMOTOR_PARAMS = 'mjcf.dcmotor'   # params key of the dcmotor actuators' parameters
