"""`fibril_sim/gnss` — a GNSS receiver's navigation solution
(docs/guides/sensors.md, "Navigation sensors, faults and health").

The world frame is east-north-up (x east, y north, z up) around the geodetic origin
`origin_latitude_deg`, `origin_longitude_deg`, `origin_height_m` (WGS-84). Per solution `k`
(`Δ = period_s`, the solution rate; `latency_s` is the solution latency):

- **antenna**: `r = x_site + R·l`, `v = R·(v_site + ω × l)` with the lever arm `l`
  (`lever_arm_m`, site axes), the site of `velocity_sensor` (velocimeter) and, when the lever arm
  is set, `angular_velocity_sensor` (gyro) on the same site;
- **position error**: slow first-order Gauss–Markov processes, stationary from the first
  solution — east and north each `σ_h`, `τ_h` (`horizontal_error_stddev_m`,
  `horizontal_correlation_time_s`, stream `horizontal_error`), up `σ_v`, `τ_v`
  (`vertical_*`, stream `vertical_error`) — plus a common-mode part `σ_cm·x[k]` (unit
  Gauss–Markov per axis, `common_mode_correlation_time_s`) on the shared stream
  `shared:<common_mode_stream>` (e.g. atmosphere error common to two receivers; horizontal and
  vertical scales `common_mode_horizontal_stddev_m`, `common_mode_vertical_stddev_m`);
- **velocity error**: white, independent of the position error (the receiver measures
  Doppler): horizontal `σ_vh`, vertical `σ_vv` per sample (stream `velocity_noise`);
- **geodetic output** (`fibril_mjx.mechanisms.geodesy`): latitude / longitude in 1e-7 degree (int32) and
  ellipsoidal height (m);
- **outages** (`outage_start_s[i]`, `outage_end_s[i]`): no fix from the start of an outage
  until `reacquisition_s` after its end; the receiver keeps sending solutions with
  `fix_type = 0`, the last fixed position and velocity, `satellites_no_fix` satellites, DOP
  99.99 and accuracy `no_fix_accuracy_m` — never a "no fix" with a fix's accuracy — and the
  health is `DEGRADED` (`fibril_mjx.mechanisms.faults`);
- **reported quality**, consistent with the error actually generated: with a fix,
  `horizontal_accuracy_m = √(σ_h² + σ_cm,h²)` and `vertical_accuracy_m = √(σ_v² + σ_cm,v²)`
  are the 1σ of each east / north / up error component (≈ 68 % of each component within it),
  `speed_accuracy_m_s = σ_vh` (1σ per horizontal velocity component); `fix_type = 3`,
  `satellites` and the configured `hdop`, `vdop`.

Truth (`truth/<id>/…`): the antenna position and velocity in the world frame. The actual error
of each solution is the reported position (converted back on the host with
`fibril_mjx.mechanisms.geodesy.geodetic_e7_to_enu`) minus truth at its sample tick.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults, geodesy, smallmat
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext, SensorBinding, Wanted
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg, Vec3
from fibril_mjx.errors import ConfigError

TYPE = 'fibril_sim/gnss'
SAMPLE_TYPE = 'fibril_sim/gnss_sample/v1'
FIX_NONE, FIX_3D = 0, 3
NO_FIX_DOP = 99.99
H, V = 'horizontal', 'vertical'

# The error model: the receiver's own position error (E, N, U Gauss–Markov, one state vector),
# the common-mode part on a shared stream, and white velocity noise.
POSITION = em.chain(
    em.gauss_markov(f'{H}_error_stddev_m', f'{H}_correlation_time_s', f'{H}_error', 'error',
                    (2,), at=(0, 2), size=3, add=False),
    em.gauss_markov(f'{V}_error_stddev_m', f'{V}_correlation_time_s', f'{V}_error', 'error',
                    at=2, size=3, add=False))
COMMON = em.chain(em.common_mode(
    (f'common_mode_{H}_stddev_m', f'common_mode_{H}_stddev_m', f'common_mode_{V}_stddev_m'),
    'common_mode_correlation_time_s', 'atmosphere', 'common', 'common_mode_stream', (3,)))
VELOCITY = em.chain(em.white_noise(
    (f'{H}_velocity_noise_stddev_m_s', f'{H}_velocity_noise_stddev_m_s',
     f'{V}_velocity_noise_stddev_m_s'), 'velocity_noise', (3,)))
ERRORS = em.chain(POSITION, COMMON, VELOCITY)
SOURCES = ERRORS.streams + ('delivery_jitter', 'delivery_loss')


class _OwnConfig(faults.DeviceConfig):
  """The receiver's own manifest fields (its error model adds the rest). The MuJoCo
  velocimeter (and, with a lever arm, gyro) are named (`velocity_sensor`,
  `angular_velocity_sensor`) or added at `site` (`fibril_<id>_vel`, `fibril_<id>_gyro`)."""
  velocity_sensor: str | None = None
  angular_velocity_sensor: str | None = None
  site: str | None = None
  lever_arm_m: Vec3 = (0.0, 0.0, 0.0)
  origin_latitude_deg: float = pydantic.Field(ge=-89.9, le=89.9)
  origin_longitude_deg: float = pydantic.Field(ge=-180, le=180)
  origin_height_m: float = 0.0
  outage_start_s: tuple[NonNeg, ...] = ()
  outage_end_s: tuple[NonNeg, ...] = ()
  reacquisition_s: NonNeg = 0.0
  satellites: int = pydantic.Field(12, ge=4, le=255)
  satellites_no_fix: int = pydantic.Field(0, ge=0, le=3)
  hdop: float = pydantic.Field(0.9, gt=0)
  vdop: float = pydantic.Field(1.3, gt=0)
  no_fix_accuracy_m: float = pydantic.Field(9999.0, ge=100)


class GnssConfigModel(em.with_errors(_OwnConfig, ERRORS)):
  """Validated manifest config of `fibril_sim/gnss` (m, m/s, s, degrees): its own fields and those
  of its error model."""


class Params(NamedTuple):
  """Per-world parameters (config names; outages `(n_outages,)`), faults."""
  # the sensor's own
  lever_arm_m: jax.Array
  # Gauss–Markov drift
  horizontal_error_stddev_m: jax.Array
  horizontal_correlation_time_s: jax.Array
  vertical_error_stddev_m: jax.Array
  vertical_correlation_time_s: jax.Array
  # common-mode process
  common_mode_horizontal_stddev_m: jax.Array
  common_mode_vertical_stddev_m: jax.Array
  common_mode_correlation_time_s: jax.Array
  # white noise
  horizontal_velocity_noise_stddev_m_s: jax.Array
  vertical_velocity_noise_stddev_m_s: jax.Array
  # the sensor's own
  outage_start_s: jax.Array
  outage_end_s: jax.Array
  reacquisition_s: jax.Array
  hdop: jax.Array
  vdop: jax.Array
  no_fix_accuracy_m: jax.Array
  faults: tuple  # `faults.FaultParams` per manifest `faults` entry


class Sample(NamedTuple):
  """`fibril_sim/gnss_sample/v1` (a navigation solution, as UBX-NAV-PVT carries it).

  Attributes:
    latitude_e7, longitude_e7: int32, 1e-7 degree (WGS-84).
    height_m: above the WGS-84 ellipsoid.
    velocity_enu_m_s: `(3,)` east, north, up.
    horizontal_accuracy_m, vertical_accuracy_m: reported 1σ per position component.
    speed_accuracy_m_s: reported 1σ per horizontal velocity component.
    fix_type: int32, 0 no fix, 3 3D fix.
    satellites: int32 used in the solution.
    hdop, vdop: dilution of precision.
    health: int32 (`fibril_mjx.mechanisms.faults`).
  """
  latitude_e7: jax.Array
  longitude_e7: jax.Array
  height_m: jax.Array
  velocity_enu_m_s: jax.Array
  horizontal_accuracy_m: jax.Array
  vertical_accuracy_m: jax.Array
  speed_accuracy_m_s: jax.Array
  fix_type: jax.Array
  satellites: jax.Array
  hdop: jax.Array
  vdop: jax.Array
  health: jax.Array


class State(NamedTuple):
  """Per-world state: stream keys, the lever arm (for truth), the error model's, the last fix,
  queue, held output, faults."""
  streams: dict
  lever_arm: jax.Array
  error: jax.Array  # Gauss–Markov drift
  common: jax.Array  # common-mode process
  last_fix: Sample
  queue: tp.QueueState
  held: tp.Delivered
  faults: faults.FaultState | None


def _neutral(origin: geodesy.Origin) -> Sample:
  z, i32 = host.zeros(), lambda v: host.array(v, np.int32)   # noqa: E731
  return Sample(i32(origin.lat_e7), i32(origin.lon_e7), host.array(origin.height_m),
                host.zeros(3), z, z, z, i32(FIX_NONE), i32(0), z, z, i32(faults.HEALTHY))


@dataclasses.dataclass(frozen=True)
class Gnss(base.SiteFields, base.SensorBase):
  """A built `fibril_sim/gnss` (static, hashable; `cfg` a `GnssConfigModel`, the common
  fields of `base.SensorBase` and `base.SiteFields`).

  Attributes:
    velocity, angular_velocity: bound velocimeter and gyro (None without a lever arm).
    site_id: the reference site; origin: the geodetic origin (`fibril_mjx.mechanisms.geodesy.Origin`).
  """
  velocity: SensorBinding
  angular_velocity: SensorBinding | None
  origin: geodesy.Origin

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type, state_type = Params, State
  errors = ERRORS
  fault_fields = ('latitude_e7', 'longitude_e7', 'height_m', 'velocity_enu_m_s')
  always_used = ('hdop', 'vdop', 'no_fix_accuracy_m')
  # in a group (`core/groups.py`): its site's probes, velocimeter and gyro per member
  per_member = ('site_id', 'site', 'velocity', 'angular_velocity')
  member_config = ('velocity_sensor', 'angular_velocity_sensor', 'site')

  def _outages(self) -> bool:
    return bool(self.cfg.outage_start_s)

  def init(self, p: Params, world_key) -> State:
    neutral = _neutral(self.origin)
    return self.init_state(State, p, world_key, neutral, p.lever_arm_m, last_fix=neutral)

  def antenna(self, lever_arm, data):
    """True antenna position and velocity in the world (ENU) frame, `(3,)`, `(3,)`."""
    rot = self.site.mat(data)
    v = self.velocity.read(data.sensordata)
    pos = self.site.pos(data)
    if self._on('lever_arm_m'):
      pos = pos + smallmat.matvec(rot, lever_arm)
      v = v + jnp.cross(self.angular_velocity.read(data.sensordata), lever_arm)
    return pos, smallmat.matvec(rot, v)

  def has_fix(self, p: Params, t):
    if not self._outages():
      return jnp.bool_(True)
    out = (t >= p.outage_start_s) & (t < p.outage_end_s + p.reacquisition_s)
    return ~jnp.any(out)

  def accuracy(self, p: Params):
    """Reported `(horizontal, vertical)` 1σ with a fix, m."""
    return (jnp.sqrt(p.horizontal_error_stddev_m ** 2 + p.common_mode_horizontal_stddev_m ** 2),
            jnp.sqrt(p.vertical_error_stddev_m ** 2 + p.common_mode_vertical_stddev_m ** 2))

  def acquire(self, p: Params, s: State, data, tick, n):
    ctx = self.error_ctx(s.streams, n)
    pos, vel = self.antenna(p.lever_arm_m, data)
    st, _, _ = POSITION.apply(p, ERRORS.state_of(s), pos, ctx)
    pos = pos + st['error']
    st, pos, _ = COMMON.apply(p, st, pos, ctx)
    st, vel, _ = VELOCITY.apply(p, st, vel, ctx)
    lat, lon, h = geodesy.enu_to_geodetic_e7(self.origin, pos)
    h_acc, v_acc = self.accuracy(p)
    fixed = Sample(lat, lon, h, vel, h_acc, v_acc, p.horizontal_velocity_noise_stddev_m_s,
                   jnp.int32(FIX_3D), jnp.int32(self.cfg.satellites), p.hdop, p.vdop,
                   jnp.int32(faults.HEALTHY))
    if not self._outages():
      return s._replace(**st), fixed
    fix = self.has_fix(p, jnp.asarray(tick, jnp.float32) * self.dt)
    last = s.last_fix
    big = p.no_fix_accuracy_m
    lost = last._replace(horizontal_accuracy_m=big, vertical_accuracy_m=big,
                         speed_accuracy_m_s=big, fix_type=jnp.int32(FIX_NONE),
                         satellites=jnp.int32(self.cfg.satellites_no_fix),
                         hdop=jnp.float32(NO_FIX_DOP), vdop=jnp.float32(NO_FIX_DOP))
    sample = jax.tree.map(lambda a, b: jnp.where(fix, a, b), fixed, lost)
    return s._replace(**st,
                      last_fix=jax.tree.map(lambda a, b: jnp.where(fix, a, b), fixed, last)
                      ), sample

  def condition(self, p: Params, sample: Sample):
    """`WEAK` (health degraded) while there is no fix."""
    del p
    return jnp.where(sample.fix_type == FIX_NONE, faults.WEAK, faults.OK).astype(jnp.int32)

  def truth(self, s: State, data) -> dict:
    """Antenna position and velocity (world ENU), the receiver's own Gauss–Markov position
    error (E, N, U; the common-mode part is not included) and the health."""
    pos, vel = self.antenna(s.lever_arm, data)
    return {'antenna_position_m': pos, 'antenna_velocity_m_s': vel,
            'position_error_m': s.error, 'health': s.faults.health}

  def describe(self) -> list[str]:
    c = self.cfg
    return self.describe_errors([
        f'antenna: site {self.velocity.site!r} + lever arm {list(c.lever_arm_m)} m; origin '
        f'{c.origin_latitude_deg:.7f}°, {c.origin_longitude_deg:.7f}°, {c.origin_height_m:g} m',
        f'outages: {len(c.outage_start_s)}, reacquisition {c.reacquisition_s:g} s'],
        ('lever_arm_m',))


def build(cid: str, raw, ctx: BuildContext, catalog) -> Gnss:
  sb = base.SensorBuild(GnssConfigModel, TYPE, cid, raw, ctx, catalog)
  cfg, origin, vary = sb.cfg, sb.origin, sb.vary
  a, b = cfg.outage_start_s, cfg.outage_end_s
  base.check(len(a) == len(b), *origin('outage_end_s'), f'needs one end per entry of '
             f'outage_start_s ({len(a)})', list(b))
  for i, (x, y) in enumerate(zip(a, b)):
    file, path = origin('outage_end_s')
    base.check(y > x, file, f'{path}[{i}]', f'must be > outage_start_s[{i}] = {x:g}', y)
  lever = any(cfg.lever_arm_m) or 'lever_arm_m' in vary
  if (lever and cfg.site is None and cfg.velocity_sensor is not None
      and cfg.angular_velocity_sensor is None):
    raise ConfigError(*origin('angular_velocity_sensor'), 'required with a lever arm (the '
                      'gyro on the site of velocity_sensor gives ω for v + ω × l); or set '
                      'site: SITE instead of both sensor names, and both are added there')
  velocity, gyro = ctx.site_sensors(cid, cfg.site, [
      Wanted('velocity_sensor', cfg.velocity_sensor, mujoco.mjtSensor.mjSENS_VELOCIMETER, 3,
             'vel'),
      Wanted('angular_velocity_sensor', cfg.angular_velocity_sensor,
             mujoco.mjtSensor.mjSENS_GYRO, 3, 'gyro', needed=lever)])
  if gyro is not None:
    if gyro.site != velocity.site:
      raise ConfigError(*origin('angular_velocity_sensor'), f'must be on the site of '
                        f'velocity_sensor ({velocity.site!r}); it is on {gyro.site!r}',
                        cfg.angular_velocity_sensor)
  ERRORS.check(sb)
  sid = mujoco.mj_name2id(ctx.model, mujoco.mjtObj.mjOBJ_SITE, velocity.site)
  geo = geodesy.Origin.build(cfg.origin_latitude_deg, cfg.origin_longitude_deg,
                             cfg.origin_height_m)
  return sb.make(Gnss, _neutral(geo), weak=bool(cfg.outage_start_s), velocity=velocity,
                 angular_velocity=gyro, origin=geo,
                 **base.at_site(ctx, sid))


CONFIG_MODEL = GnssConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
