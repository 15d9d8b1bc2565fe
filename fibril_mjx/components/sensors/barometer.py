"""`fibril_sim/barometer` — static pressure in Pa, not altitude (docs/guides/sensors.md,
"Navigation sensors, faults and health"): the firmware's pressure → altitude conversion stays
under test.

Per acquisition `k` (`Δ = period_s`):

    h    = site z (m, world) + altitude_offset_m            height above mean sea level
    T(h) = T0 − L·h,  P(h) = P0·(T(h)/T0)^(g0·M/(R·L))     ISA troposphere (h < 11 km)
    p    = P(h) + bias + b_on + b_gm[k] + σ_cm·x[k] + c_T·(T(h) + ΔT − T_ref)
           + B_thr(u) + B_air(|v_air|) + w[k]
    z    = Q(clip(p, pressure_min_pa, pressure_max_pa))

with `L = 0.0065 K/m`, `g0·M/(R·L) = 5.255877` (ISA), `P0 = sea_level_pressure_pa`,
`T0 = sea_level_temperature_k`; `b_on` per-episode turn-on offset (redrawn at a `reset`
fault), `b_gm` Gauss–Markov drift (`bias_instability_stddev_pa`, `bias_correlation_time_s`),
`x` a unit Gauss–Markov process on the shared stream `shared:<common_mode_stream>` (weather,
common to every barometer naming it), `c_T` the temperature coefficient against the sensor
temperature `T(h) + temperature_offset_k`, `w` white noise. `B_thr`, `B_air` are empirical
bias tables (linear interpolation, clamped at the ends) versus the `ctrl` of a MuJoCo actuator
(`throttle_actuator`) and the air-relative speed of the site of `velocity_sensor` (a
velocimeter; one is added at `site` when it is not set; wind `wind_m_s` in the world frame): identified from logs or tunnel data, zero
(absent) by default. The sample also carries the sensor temperature (K).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults, smallmat
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext, SensorBinding, SitePose, Wanted
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg, Positive, Vec3
from fibril_mjx.errors import ConfigError, did_you_mean

TYPE = 'fibril_sim/barometer'
SAMPLE_TYPE = 'fibril_sim/barometer_sample/v1'
LAPSE_K_M = 0.0065
ISA_EXPONENT = 5.255877   # g0·M/(R·L) with g0 9.80665, M 0.0289644, R 8.31432, L 0.0065

# The error model, in application order: biases where the ISA pressure leaves the atmosphere,
# white noise after the sensor's own couplings (temperature, throttle, airspeed), then the
# pressure range and the resolution of the output.
BIAS = em.chain(
    em.turn_on_bias('bias_turn_on_stddev_pa'),
    em.constant_bias('bias_pa'),
    em.gauss_markov('bias_instability_stddev_pa', 'bias_correlation_time_s',
                    'bias_instability', 'gm'),
    em.common_mode('common_mode_stddev_pa', 'common_mode_correlation_time_s', 'weather',
                   'common', 'common_mode_stream'))
NOISE = em.chain(em.white_noise('noise_stddev_pa'))
OUTPUT = em.chain(em.bounds('pressure_min_pa', 'pressure_max_pa'),
                  em.quantization('resolution_pa'))
ERRORS = em.chain(BIAS, NOISE, OUTPUT)
SOURCES = ERRORS.streams + ('delivery_jitter', 'delivery_loss')


def isa_pressure(h_m, p0_pa, t0_k):
  """ISA troposphere pressure (Pa) at height `h_m` above mean sea level."""
  return p0_pa * (1.0 - LAPSE_K_M * h_m / t0_k) ** ISA_EXPONENT


class _OwnConfig(faults.DeviceConfig):
  """The barometer's own manifest fields (its error model adds the rest). With the airspeed
  bias table, the velocimeter is `velocity_sensor`'s, or one added at `site`
  (`fibril_<id>_vel`) when that is not set."""
  site: str
  altitude_offset_m: float = 0.0
  sea_level_pressure_pa: Positive = 101325.0
  sea_level_temperature_k: Positive = 288.15
  temperature_coefficient_pa_per_k: float = 0.0
  temperature_offset_k: float = 0.0
  reference_temperature_k: Positive = 298.15
  throttle_actuator: str | None = None
  throttle_bias_points: tuple[float, ...] = ()
  throttle_bias_pa: tuple[float, ...] = ()
  velocity_sensor: str | None = None
  wind_m_s: Vec3 = (0.0, 0.0, 0.0)
  airspeed_bias_points_m_s: tuple[NonNeg, ...] = ()
  airspeed_bias_pa: tuple[float, ...] = ()


class BarometerConfigModel(em.with_errors(_OwnConfig, ERRORS)):
  """Validated manifest config of `fibril_sim/barometer` (Pa, K, m): its own fields and those of its
  error model."""


class Params(NamedTuple):
  """Per-world parameters (config names; tables as arrays): its own, its error model's, faults."""
  # the sensor's own
  altitude_offset_m: jax.Array
  sea_level_pressure_pa: jax.Array
  sea_level_temperature_k: jax.Array
  temperature_coefficient_pa_per_k: jax.Array
  temperature_offset_k: jax.Array
  reference_temperature_k: jax.Array
  throttle_bias_points: jax.Array
  throttle_bias_pa: jax.Array
  wind_m_s: jax.Array
  airspeed_bias_points_m_s: jax.Array
  airspeed_bias_pa: jax.Array
  # turn-on bias
  bias_turn_on_stddev_pa: jax.Array
  # constant bias
  bias_pa: jax.Array
  # Gauss–Markov drift
  bias_instability_stddev_pa: jax.Array
  bias_correlation_time_s: jax.Array
  # common-mode process
  common_mode_stddev_pa: jax.Array
  common_mode_correlation_time_s: jax.Array
  # white noise
  noise_stddev_pa: jax.Array
  # range limits
  pressure_min_pa: jax.Array
  pressure_max_pa: jax.Array
  # quantization
  resolution_pa: jax.Array
  faults: tuple  # `faults.FaultParams` per manifest `faults` entry


Sample = em.sample_type('Sample', ('pressure_pa', 'temperature_k'), doc="""\
`fibril_sim/barometer_sample/v1`.

  Attributes:
    pressure_pa: static pressure, Pa.
    temperature_k: sensor temperature, K.
  """)


class State(NamedTuple):
  """Per-world state: the RNG stream keys, the error model's, the delivery queue, the held output,
  the faults."""
  streams: dict
  turn_on: jax.Array  # turn-on bias
  gm: jax.Array  # Gauss–Markov drift
  common: jax.Array  # common-mode process
  clip_count: jax.Array  # range limits
  queue: tp.QueueState
  held: tp.Delivered
  faults: faults.FaultState | None


@dataclasses.dataclass(frozen=True)
class Barometer(base.SiteFields, base.SensorBase):
  """A built `fibril_sim/barometer` (static, hashable; `cfg` a `BarometerConfigModel`, the
  common fields of `base.SensorBase` and `base.SiteFields`).

  Attributes:
    site_id: the site whose height is measured; throttle_ctrl: `ctrl` index of the throttle
    actuator (−1 none); velocity: the velocimeter binding (or None) and its site id; site,
    velocity_pose: the probes of those sites' poses.
  """
  throttle_ctrl: int
  velocity: SensorBinding | None
  velocity_site: int
  velocity_pose: SitePose | None

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type, state_type = Params, State
  errors = ERRORS
  # in a group (`core/groups.py`): its sites' probes and velocimeter per member (the throttle
  # actuator shapes the trace: shared)
  per_member = ('site_id', 'site', 'velocity', 'velocity_site', 'velocity_pose')
  member_config = ('site', 'velocity_sensor')
  always_used = ('altitude_offset_m', 'sea_level_pressure_pa', 'sea_level_temperature_k')

  def _temperature_on(self) -> bool:
    return self._on('temperature_coefficient_pa_per_k')

  def variance(self, p: Params):
    return ERRORS.variance(p, self.error_ctx({}))

  def init(self, p: Params, world_key) -> State:
    z = jnp.float32(0.0)
    neutral = Sample(z, z, self.variance(p), jnp.bool_(False), jnp.int32(faults.HEALTHY))
    return self.init_state(State, p, world_key, neutral)

  def on_reset(self, p: Params, s: State, index) -> State:
    """A device reset redraws the turn-on offset (draw `index` of its stream)."""
    return s._replace(**ERRORS.redraw(p, ERRORS.state_of(s), self.error_ctx(s.streams), index))

  def height_m(self, p: Params, data):
    return self.site.pos(data)[2] + p.altitude_offset_m

  def air_speed(self, p: Params, data):
    """Air-relative speed of the velocimeter's site, m/s."""
    b = self.velocity
    v = b.read(data.sensordata)
    rot = self.velocity_pose.mat(data)
    return jnp.linalg.norm(v - smallmat.matvec(rot.T, p.wind_m_s))

  def ideal(self, p: Params, data):
    """`(pressure Pa, ISA temperature K)` at the site's height."""
    h = self.height_m(p, data)
    return (isa_pressure(h, p.sea_level_pressure_pa, p.sea_level_temperature_k),
            p.sea_level_temperature_k - LAPSE_K_M * h)

  def acquire(self, p: Params, s: State, data, tick, n):
    del tick
    ctx = self.error_ctx(s.streams, n)
    pres, temp = self.ideal(p, data)
    temp = temp + p.temperature_offset_k
    st, x, _ = BIAS.apply(p, ERRORS.state_of(s), pres, ctx)
    if self._temperature_on():
      x = x + p.temperature_coefficient_pa_per_k * (temp - p.reference_temperature_k)
    if self.throttle_ctrl >= 0:
      x = x + jnp.interp(data.ctrl[self.throttle_ctrl], p.throttle_bias_points,
                         p.throttle_bias_pa)
    if self.velocity is not None:
      x = x + jnp.interp(self.air_speed(p, data), p.airspeed_bias_points_m_s,
                         p.airspeed_bias_pa)
    st, x, _ = NOISE.apply(p, st, x, ctx)
    st, x, flag = OUTPUT.apply(p, st, x, ctx)
    sample = Sample(x, temp, self.variance(p), flag, jnp.int32(faults.HEALTHY))
    return s._replace(**st), sample

  def truth(self, s: State, data) -> dict:
    """Site height above mean sea level and the error-free ISA pressure there need the world's
    Params; truth holds the site height in the world frame (m), the drift state and the
    health."""
    return {'site_z_m': self.site.pos(data)[2], 'bias_pa': s.turn_on + s.gm,
            'health': s.faults.health}

  def describe(self) -> list[str]:
    c = self.cfg
    return self.describe_errors([
        f'site {c.site!r}: ISA pressure (P0 {c.sea_level_pressure_pa:g} Pa, T0 '
        f'{c.sea_level_temperature_k:g} K), height offset {c.altitude_offset_m:g} m',
        f'throttle table on {c.throttle_actuator or "none"}; airspeed table via '
        f'{c.velocity_sensor or "none"}'],
        ('sea_level_pressure_pa', 'sea_level_temperature_k', 'temperature_coefficient_pa_per_k',
         'temperature_offset_k', 'reference_temperature_k', 'throttle_bias_pa',
         'airspeed_bias_pa'))


def build(cid: str, raw, ctx: BuildContext, catalog) -> Barometer:
  sb = base.SensorBuild(BarometerConfigModel, TYPE, cid, raw, ctx, catalog)
  cfg, origin = sb.cfg, sb.origin
  m = ctx.model
  for pts, vals in (('throttle_bias_points', 'throttle_bias_pa'),
                    ('airspeed_bias_points_m_s', 'airspeed_bias_pa')):
    x, y = getattr(cfg, pts), getattr(cfg, vals)
    base.check(len(x) == len(y), *origin(vals), f'needs one value per entry of {pts} '
               f'({len(x)})', list(y))
    base.check(all(b > a for a, b in zip(x, x[1:])), *origin(pts), 'must increase strictly',
               list(x))
  sid = faults.bind_site(ctx, cfg.site, origin)
  ERRORS.check(sb)
  throttle = -1
  if cfg.throttle_bias_points and cfg.throttle_actuator is None:
    raise ConfigError(*origin('throttle_actuator'), 'required with throttle_bias_points '
                      '(the actuator whose ctrl is the throttle)')
  if cfg.throttle_actuator is not None:
    aid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, cfg.throttle_actuator)
    if aid < 0:
      raise ConfigError(*origin('throttle_actuator'), 'no MuJoCo actuator of that name'
                        + did_you_mean(cfg.throttle_actuator,
                                       [m.actuator(i).name for i in range(m.nu)]),
                        cfg.throttle_actuator)
    base.check(bool(cfg.throttle_bias_points), *origin('throttle_bias_points'),
               'must list the throttle values of the bias table when throttle_actuator is set',
               list(cfg.throttle_bias_points))
    throttle = int(m.actuator_ctrladr[aid])
  velocity, = ctx.site_sensors(cid, cfg.site, [Wanted(
      'velocity_sensor', cfg.velocity_sensor, mujoco.mjtSensor.mjSENS_VELOCIMETER, 3, 'vel',
      needed=bool(cfg.airspeed_bias_points_m_s))], own_site=True)
  vsite = -1
  if velocity is not None:
    vsite = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, velocity.site)
    base.check(bool(cfg.airspeed_bias_points_m_s), *origin('airspeed_bias_points_m_s'),
               'must list the airspeeds of the bias table when velocity_sensor is set',
               list(cfg.airspeed_bias_points_m_s))
  z = host.zeros()
  return sb.make(Barometer, Sample(z, z, z, host.zeros((), bool), host.zeros((), np.int32)),
                 throttle_ctrl=throttle, velocity=velocity, velocity_site=int(vsite),
                 **base.at_site(ctx, sid),
                 velocity_pose=ctx.site_pose(vsite) if velocity is not None else None)


CONFIG_MODEL = BarometerConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
