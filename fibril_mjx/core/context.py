"""What a component sees while it is built (`BuildContext`), its resolved MuJoCo sensor
bindings, and the probes through which it reads physics: the contract between the host builder
and the component modules (neither imports the other through it).

Components read physics only through MuJoCo sensors, so that every physics backend that
produces `sensordata` at the stamp (MJX in the loop, MuJoCo C through `mujoco.rollout`, a
recorded trajectory through `mj_forward`) serves every component. A component names the
sensors its manifest binds (`BuildContext.sensor`); what else it reads — a site's pose or
velocity, a joint's position and velocity, an actuator's force — it asks for as a probe
(`BuildContext.site_pose`, `joint_probe`, ...): a hidden sensor the builder appends to the
MjSpec after every component is built (`ProbeSet.add_to_spec`), named `fibril_probe:<i>` so
that it never meets a user's name. A probe's `sensordata` address is known when it is asked for
(user sensors first, probes after them in request order); the builder checks it after the
recompile. `framexaxis` / `frameyaxis` / `framezaxis` copy the columns of `site_xmat` and
`framepos` copies `site_xpos`, so a pose probe reads exactly what MJX computed.

A component that binds MuJoCo sensors by name (IMU, AHRS, rangefinder, airspeed, GNSS,
barometer) may instead name a site (`site: imu`): the sensors it needs are added the same way,
but visibly, named `fibril_<component id>_<what>` (`fibril_imu_gyro`), so that a robot's file
is used as it comes (`BuildContext.site_sensors`, one `Wanted` per sensor-name field; `plan`
lists them). Components that read a joint or a site's pose name the object and read probes.

The one read that is not a sensor is an actuator's look at the joint *before* the tick's
forward (`actuate`: hold the current position, a PD law on the measured state): that closes a
loop on physics, and is what keeps such a component on a backend that steps in the loop."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx.errors import ConfigError, did_you_mean

PROBE_PREFIX = 'fibril_probe:'

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

  shaping = ('field', 'type', 'dim')   # what shapes the trace (`core/groups.py`)

  def read(self, sensordata):
    """`sensordata[adr : adr + dim]`; `adr` may be traced (a member of a group)."""
    return section(sensordata, self.adr, self.dim)


def section(sensordata, adr, dim: int):
  """`sensordata[adr : adr + dim]`, with `adr` an int or traced (a member of a group,
  `core/groups.py`: then a dynamic slice)."""
  if isinstance(adr, (int, np.integer)):
    return sensordata[adr:adr + dim]
  return jax.lax.dynamic_slice_in_dim(sensordata, adr, dim)


@dataclasses.dataclass(frozen=True)
class Probe:
  """A hidden MuJoCo sensor read by a component (static): `kind` of `objtype` `obj` (id
  `objid`), at `sensordata[adr : adr + dim]`."""
  kind: str
  objtype: str
  obj: str
  adr: int
  dim: int
  objid: int = -1

  shaping = ('kind', 'objtype', 'dim')   # what shapes the trace (`core/groups.py`)

  def read(self, data):
    """The probe's value in `data` (anything with `sensordata`): `()` for dim 1, else `(dim,)`;
    `adr` may be traced (a member of a group, `core/groups.py`) where `dim` is 1."""
    if isinstance(self.adr, int) and data.sensordata.shape[-1] < self.adr + self.dim:
      raise ValueError(f'probe {self.kind} of {self.objtype} {self.obj!r} reads '
                       f'sensordata[{self.adr}:{self.adr + self.dim}] but the data has '
                       f'{data.sensordata.shape[-1]}: run on the model the builder compiled '
                       '(fibril_mjx.load), or on ProbeSet.compile(spec) of the context')
    if self.dim == 1:
      return data.sensordata[self.adr]
    return section(data.sensordata, self.adr, self.dim)


@dataclasses.dataclass(frozen=True)
class SitePose:
  """A site's world position (`framepos`) and orientation (the columns of `site_xmat`)."""
  shaping = ()   # nothing of its own shapes the trace (`core/groups.py`)
  site: str
  position: Probe
  axes: tuple

  def pos(self, data):
    return self.position.read(data)

  def mat(self, data):
    """`(3, 3)` rotation site → world, equal to `site_xmat`."""
    return jnp.stack([a.read(data) for a in self.axes], axis=1)


@dataclasses.dataclass(frozen=True)
class JointProbe:
  """A 1-DoF joint's position (`jointpos`) and velocity (`jointvel`)."""
  joint: str
  position: Probe
  velocity: Probe
  shaping = ()   # nothing of its own shapes the trace (`core/groups.py`)

  def state(self, data):
    return self.position.read(data), self.velocity.read(data)


_MJ_SENSOR = {k: getattr(mujoco.mjtSensor, f'mjSENS_{k.upper()}') for k in (
    'framepos', 'framequat', 'framexaxis', 'frameyaxis', 'framezaxis', 'framelinvel', 'frameangvel',
    'jointpos', 'jointvel', 'actuatorfrc', 'jointactfrc', 'gyro', 'accelerometer',
    'magnetometer', 'velocimeter', 'rangefinder')}
_MJ_OBJ = {k: getattr(mujoco.mjtObj, f'mjOBJ_{k.upper()}') for k in (
    'site', 'joint', 'actuator', 'geom')}
_DIM = {'framepos': 3, 'framequat': 4, 'framexaxis': 3, 'frameyaxis': 3, 'framezaxis': 3, 'framelinvel': 3,
        'frameangvel': 3, 'jointpos': 1, 'jointvel': 1, 'actuatorfrc': 1, 'jointactfrc': 1,
        'gyro': 3, 'accelerometer': 3, 'magnetometer': 3, 'velocimeter': 3, 'rangefinder': 1}


class ProbeSet:
  """The probes every component of one build asked for, deduplicated, in request order."""

  def __init__(self, model: mujoco.MjModel):
    self.base = int(model.nsensordata)
    self.probes: dict[tuple, Probe] = {}
    self.names: dict[tuple, str] = {}   # the visible names of sensors added for a site
    self.size = 0

  def request(self, kind: str, objtype: str, obj: str, objid: int = -1,
              name: str | None = None) -> Probe:
    """The probe of `kind` on `obj` (one per kind and object), or with `name` a sensor of
    that name (`BuildContext.site_sensors`)."""
    key = (kind, objtype, obj) if name is None else (kind, objtype, obj, name)
    if key not in self.probes:
      dim = _DIM[kind]
      self.probes[key] = Probe(kind, objtype, obj, self.base + self.size, dim, int(objid))
      self.size += dim
      if name is not None:
        self.names[key] = name
    return self.probes[key]

  def _names(self) -> list[str]:
    return [self.names.get(key, f'{PROBE_PREFIX}{i}') for i, key in enumerate(self.probes)]

  def add_to_spec(self, spec) -> None:
    """Appends the probes to `spec` as sensors `fibril_probe:<i>` (after the user's). An
    unnamed object a probe reads (a geom, typically) is given its hidden name first, found by
    its compiled id (`spec` was compiled once already)."""
    for p in self.probes.values():
      if p.obj.startswith(PROBE_PREFIX):
        element = next(e for e in getattr(spec, f'{p.objtype}s') if e.id == p.objid)
        element.name = p.obj
    for name, p in zip(self._names(), self.probes.values()):
      sensor = spec.add_sensor(name=name, type=_MJ_SENSOR[p.kind], objtype=_MJ_OBJ[p.objtype],
                               objname=p.obj)
      if p.kind == 'rangefinder':   # MJCF's default `data="dist"`: the distance (dim 1)
        sensor.intprm[0] = 1 << int(mujoco.mjtRayDataField.mjRAYDATA_DIST)

  def check(self, model: mujoco.MjModel) -> None:
    """The compiled probes sit where their components read them (an internal invariant)."""
    for name, p in zip(self._names(), self.probes.values()):
      sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, name)
      if sid < 0 or int(model.sensor_adr[sid]) != p.adr or int(model.sensor_dim[sid]) != p.dim:
        raise AssertionError(f'probe {p} compiled at sensordata[{model.sensor_adr[sid]}]')

  def compile(self, spec) -> mujoco.MjModel:
    """`spec` with the probes appended, compiled and checked (what the builder does; tests that
    build components on a context of their own use it to get the model to run them on)."""
    spec.compile()   # element ids, by which unnamed objects are found
    self.add_to_spec(spec)
    model = spec.compile()
    self.check(model)
    return model

  def describe_added(self) -> list[str]:
    """Plan lines: the named sensors added for components that name a site."""
    return [f'{self.names[key]} ({p.kind} at {p.objtype} {p.obj!r})'
            for key, p in self.probes.items() if key in self.names]

  def describe(self) -> list[str]:
    """Plan lines: the hidden sensors, grouped by kind."""
    by = {}
    for key, p in self.probes.items():
      if key in self.names:
        continue
      by.setdefault(f'{p.kind} of {p.objtype}', []).append(p.obj)
    return [f'{k}: {", ".join(dict.fromkeys(v))}' for k, v in by.items()]


class Wanted(NamedTuple):
  """A MuJoCo sensor a component reads (`BuildContext.site_sensors`).

  Attributes:
    field: the config field that names it (`gyroscope_sensor`).
    name: the name given there, or None.
    kind: its `mujoco.mjtSensor`; dim: its `sensordata` width.
    suffix: the added sensor's name is `fibril_<component id>_<suffix>`.
    needed: whether the component reads it (an optional one, e.g. GNSS's gyro without a lever
      arm, is neither required nor added when False).
  """
  field: str
  name: str | None
  kind: int
  dim: int
  suffix: str
  needed: bool = True


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
  probes: ProbeSet | None = None

  def _name(self, objtype: str, i: int) -> str:
    """The object's name, or a hidden one (`fibril_probe:<objtype><id>`) the builder gives
    it."""
    return (mujoco.mj_id2name(self.model, _MJ_OBJ[objtype], int(i))
            or f'{PROBE_PREFIX}{objtype}{int(i)}')

  def _probe(self, kind: str, objtype: str, name: str) -> Probe:
    if self.probes is None:
      self.probes = ProbeSet(self.model)
    objid = mujoco.mj_name2id(self.model, _MJ_OBJ[objtype], name)
    if objid < 0 and name.startswith(PROBE_PREFIX):
      objid = int(name[len(PROBE_PREFIX) + len(objtype):])
    return self.probes.request(kind, objtype, name, objid)

  def _probes(self, objtype: str, i: int, *kinds: str) -> tuple[Probe, ...]:
    """Probes of `kinds` (requested in that order) on object `i` of `objtype`."""
    name = self._name(objtype, i)
    return tuple(self._probe(kind, objtype, name) for kind in kinds)

  def _pose(self, objtype: str, i: int) -> SitePose:
    name = self._name(objtype, i)
    return SitePose(name, self._probe('framepos', objtype, name),
                    tuple(self._probe(f'frame{a}axis', objtype, name) for a in 'xyz'))

  def geom_pose(self, geom_id: int) -> SitePose:
    """Probes of a geom's position and orientation (`geom_xpos`, the columns of
    `geom_xmat`)."""
    return self._pose('geom', geom_id)

  def site_pose(self, site_id: int) -> SitePose:
    """Probes of a site's position and orientation (`site_xpos`, the columns of
    `site_xmat`)."""
    return self._pose('site', site_id)

  def site_position(self, site_id: int) -> Probe:
    """Probe of a site's world position (`framepos` = `site_xpos`)."""
    return self._probes('site', site_id, 'framepos')[0]

  def site_quat(self, site_id: int) -> Probe:
    """Probe of a site's orientation quaternion, site → world (`framequat`)."""
    return self._probes('site', site_id, 'framequat')[0]

  def site_velocity(self, site_id: int) -> tuple[Probe, Probe]:
    """Probes of a site's linear and angular velocity, world frame (`framelinvel`,
    `frameangvel`)."""
    return self._probes('site', site_id, 'framelinvel', 'frameangvel')

  def joint_probe(self, joint_id: int) -> JointProbe:
    """Probes of a hinge or slide joint's position and velocity."""
    return JointProbe(self._name('joint', joint_id),
                      *self._probes('joint', joint_id, 'jointpos', 'jointvel'))

  def actuator_force(self, actuator_id: int) -> Probe:
    """Probe of an actuator's force (`actuatorfrc` = `actuator_force`)."""
    return self._probes('actuator', actuator_id, 'actuatorfrc')[0]

  def joint_actuator_force(self, joint_id: int) -> Probe:
    """Probe of the actuator force on a joint (`jointactfrc` = `qfrc_actuator` at its dof)."""
    return self._probes('joint', joint_id, 'jointactfrc')[0]

  def site_sensors(self, cid: str, site: str | None, wanted: list[Wanted],
                   own_site: bool = False) -> tuple[SensorBinding | None, ...]:
    """Binds a component's MuJoCo sensors: each by the name its config gives, or added at
    `site` (named `fibril_<cid>_<suffix>`, requested as visible probes).

    Args:
      cid: the component id.
      site: the config's `site`, or None.
      wanted: the config's sensor-name fields, in the order their bindings are returned.
      own_site: the site is the device's own measurement point (e.g. a barometer's), not only
        a way to bind: a sensor named beside it is bound by name, an unnamed one added there.
        Without it, naming a sensor beside `site` is an error (one or the other).

    Returns:
      `(SensorBinding or None, ...)`, one per entry: None where the entry is neither named
      nor needed.

    Raises:
      ConfigError: a needed sensor-name field missing without `site`, or one set beside it
        (not `own_site`); no site of that name (did-you-mean); an added name the model already
        uses.
    """
    if site is not None and not own_site:
      given = [w for w in wanted if w.name is not None]
      if given:
        raise ConfigError(self.file, f'{self.path}.{given[0].field}', f'set beside site '
                          f'{site!r}: name the MuJoCo sensors or the site, not both (with site '
                          'the sensors are added)', given[0].name)
    if site is None:
      for w in wanted:
        if w.name is None and w.needed:
          raise ConfigError(self.file, f'{self.path}.{w.field}', 'required: the name of a '
                            f'MuJoCo {_SENSOR_NAMES[w.kind]} sensor; or set site: SITE '
                            f'instead, and the sensors are added (as fibril_{cid}_{w.suffix}, '
                            '...) without editing the robot\'s file')
    m = self.model
    sid = -1
    if site is not None:
      sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, site)
      if sid < 0:
        names = [m.site(i).name for i in range(m.nsite) if m.site(i).name]
        raise ConfigError(self.file, f'{self.path}.site', 'no MuJoCo site of that name '
                          'in the compiled model' + did_you_mean(site, names)
                          + f'; the model\'s sites: {", ".join(names) or "(none)"}', site)
    out = []
    for w in wanted:
      if w.name is not None:
        out.append(self.sensor(w.field, w.name, w.kind, w.dim))
      elif not w.needed:
        out.append(None)
      else:
        out.append(self._added(cid, site, sid, w))
    return tuple(out)

  def _added(self, cid: str, site: str, sid: int, w: Wanted) -> SensorBinding:
    """The visible sensor `fibril_<cid>_<suffix>` of `w.kind` requested at site `site`."""
    name = f'fibril_{cid}_{w.suffix}'
    if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SENSOR, name) >= 0:
      raise ConfigError(self.file, f'{self.path}.site', f'the model already has a '
                        f'sensor named {name!r}, the name of the sensor site adds for '
                        f'{w.field}: bind the sensors by name ({w.field}: {name}, ...) instead',
                        site)
    if self.probes is None:
      self.probes = ProbeSet(self.model)
    kind = _SENSOR_NAMES[w.kind]
    p = self.probes.request(kind, 'site', site, sid, name=name)
    return SensorBinding(w.field, name, kind, p.adr, w.dim, site)

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
