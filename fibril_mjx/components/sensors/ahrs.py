"""`fibril_sim/ahrs` — processed IMU/AHRS as a black box (SPEC §5.1).

Output dynamics (first-order filters) plus residual errors (bias, AR(1) noise, a per-episode
yaw-rate bias shared by gyro Z and yaw drift, saturation, resolution); not a vendor filter.
Terms whose manifest value is the default are absent from the traced graph. The thermal model
of `components/thermal.py` (ambient table, sensor lag, bias and scale polynomials) acts on the
rate outputs when a coefficient is set; `temperature_output: true` delivers the module's
temperature channel (`temperature_c`: its own lag, noise and resolution), as the IMU's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults, quat, rng
from fibril_mjx.mechanisms import signal
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext, SensorBinding
from fibril_mjx.components import base
from fibril_mjx.components.sensors import inertial, thermal
from fibril_mjx.components.base import Corr3, NonNeg, NonNeg3, Positive3, Vec3

TYPE = 'fibril_sim/ahrs'
SAMPLE_TYPE = 'fibril_sim/ahrs_sample/v1'

# The orientation residual's error model, over `OrientationParams` field names: an AR(1)
# roll/pitch/yaw residual (stream `orientation_noise`), applied to zeros; its state `noise` is
# the rotation the orientation output is multiplied by.
ORIENTATION_ERRORS = em.chain(em.ar1_noise('noise_stddev_rad', 'noise_correlation',
                                           'orientation_noise', 'noise', (3,)))

SOURCES = ORIENTATION_ERRORS.streams + ('angular_velocity_noise', 'linear_acceleration_noise',
                                        'yaw_rate_bias', 'delivery_jitter', 'delivery_loss')


class AhrsConfigModel(base.SamplingConfig, faults.FaultConfig, thermal.ThermalConfig):
  """Validated manifest config of `fibril_sim/ahrs` (field table of SPEC §5.1)."""
  orientation_sensor: str
  gyroscope_sensor: str
  accelerometer_sensor: str
  yaw_reference: Literal['initial', 'world'] = 'initial'
  orientation_bandwidth_hz: NonNeg = 0.0
  angular_velocity_bandwidth_hz: NonNeg = 0.0
  linear_acceleration_bandwidth_hz: NonNeg = 0.0
  angular_velocity_scale: Positive3 = (1.0, 1.0, 1.0)
  linear_acceleration_scale: Positive3 = (1.0, 1.0, 1.0)
  angular_velocity_bias: Vec3 = (0.0, 0.0, 0.0)
  linear_acceleration_bias: Vec3 = (0.0, 0.0, 0.0)
  orientation_noise_stddev_rad: NonNeg3 = (0.0, 0.0, 0.0)
  angular_velocity_noise_stddev: NonNeg3 = (0.0, 0.0, 0.0)
  linear_acceleration_noise_stddev: NonNeg3 = (0.0, 0.0, 0.0)
  orientation_noise_correlation: Corr3 = (0.0, 0.0, 0.0)
  angular_velocity_noise_correlation: Corr3 = (0.0, 0.0, 0.0)
  linear_acceleration_noise_correlation: Corr3 = (0.0, 0.0, 0.0)
  orientation_yaw_sign: float = 1.0
  yaw_rate_bias_stddev_rad_s: NonNeg = 0.0
  orientation_resolution_rad: NonNeg = 0.0
  angular_velocity_limit_rad_s: NonNeg = 0.0
  linear_acceleration_limit_m_s2: NonNeg = 0.0
  angular_velocity_resolution: NonNeg = 0.0
  linear_acceleration_resolution: NonNeg = 0.0

  @pydantic.field_validator('orientation_yaw_sign')
  @classmethod
  def _sign(cls, v):
    if v not in (-1.0, 1.0):
      raise ValueError('must be -1.0 or 1.0')
    return v


# Manifest field of each channel field of the rate outputs (inertial chain).
RATE_FIELDS = {
    'angular_velocity': {'bandwidth_hz': 'angular_velocity_bandwidth_hz',
                         'scale': 'angular_velocity_scale', 'bias': 'angular_velocity_bias',
                         'noise_stddev': 'angular_velocity_noise_stddev',
                         'noise_correlation': 'angular_velocity_noise_correlation',
                         'limit': 'angular_velocity_limit_rad_s',
                         'resolution': 'angular_velocity_resolution'},
    'linear_acceleration': {'bandwidth_hz': 'linear_acceleration_bandwidth_hz',
                            'scale': 'linear_acceleration_scale',
                            'bias': 'linear_acceleration_bias',
                            'noise_stddev': 'linear_acceleration_noise_stddev',
                            'noise_correlation': 'linear_acceleration_noise_correlation',
                            'limit': 'linear_acceleration_limit_m_s2',
                            'resolution': 'linear_acceleration_resolution'},
}
ORIENTATION_FIELDS = {'bandwidth_hz': 'orientation_bandwidth_hz',
                      'noise_stddev_rad': 'orientation_noise_stddev_rad',
                      'noise_correlation': 'orientation_noise_correlation',
                      'resolution_rad': 'orientation_resolution_rad'}


class OrientationParams(NamedTuple):
  """Orientation output: bandwidth (Hz), AR(1) residual std (rad) and correlation `(3,)`
  (roll/pitch/yaw), roll/pitch/yaw resolution (rad)."""
  bandwidth_hz: jax.Array
  noise_stddev_rad: jax.Array
  noise_correlation: jax.Array
  resolution_rad: jax.Array


class Params(NamedTuple):
  """Per-world, differentiable parameters, e.g. `params.angular_velocity.bias` for the
  manifest field `angular_velocity_bias`, `params.orientation.bandwidth_hz` for
  `orientation_bandwidth_hz` (`param_path` maps the names)."""
  orientation: OrientationParams
  angular_velocity: inertial.ChannelParams
  linear_acceleration: inertial.ChannelParams
  yaw_rate_bias_stddev_rad_s: jax.Array
  faults: tuple = ()   # `faults.FaultParams` per manifest `faults` entry
  thermal: Any = None  # `thermal.ThermalParams` (always present; used when the model is on)


Sample = inertial.sample_type('Sample', ('orientation', 'orientation_variance'), doc="""\
`fibril_sim/ahrs_sample/v1`: `orientation` `(4,)` device orientation `[w, x, y, z]`, `w >= 0`;
`orientation_variance` `(3,)` rad² roll/pitch/yaw — σ² + q²/12, plus on yaw the variance
`(σ_b·t)²` of the drift `b_ψ·t` since the first sample; then `inertial.RATE_SAMPLE_FIELDS` in
device (site) axes (variances σ² + q²/12).""")
SampleWithTemperature = inertial.sample_type(
    'Sample', ('temperature_c', 'orientation', 'orientation_variance'), doc="""\
`fibril_sim/ahrs_sample/v1` with the delivered module temperature `temperature_c` (°C) first
(`temperature_output: true`), then the fields of `Sample`.""")


class State(NamedTuple):
  """Per-world state: the named RNG `streams`, the two rate channels
  (`inertial.ChannelState`), the per-episode yaw-rate bias b_ψ (rad/s) and reference yaw of
  `yaw_reference: initial` (rad), the orientation filter `(4,)` and its AR(1) roll/pitch/yaw
  residual `(3,)`, then the delivery `queue`, the `held` output and the `faults.FaultState`."""
  streams: dict
  angular_velocity: inertial.ChannelState
  linear_acceleration: inertial.ChannelState
  yaw_rate_bias: jax.Array
  yaw0: jax.Array
  orientation_filter: jax.Array
  orientation_noise: jax.Array
  queue: tp.QueueState
  held: tp.Delivered
  faults: faults.FaultState
  thermal: Any = None   # `thermal.ThermalState`, or None when the thermal model is off


# Fields of the AHRS's own terms that scale a random draw: the orientation error model's, then
# the yaw-rate bias (its rate channels' come from their error model).
OWN_STOCHASTIC = tuple(ORIENTATION_FIELDS[f] for f in ORIENTATION_ERRORS.stochastic_fields()) + (
    'yaw_rate_bias_stddev_rad_s',)


@dataclasses.dataclass(frozen=True)
class Ahrs(inertial.RateSensor):
  """A built `fibril_sim/ahrs` component: static, hashable; arrays live in Params / State.

  Attributes:
    channels: the rate outputs as `inertial.Channel`s (angular velocity, linear acceleration).
    first_tick: tick of the first acquisition (origin of the yaw drift).
  """
  reads_sensors_only = True
  type = TYPE
  sample_type = SAMPLE_TYPE
  samples: ClassVar[tuple] = (Sample, SampleWithTemperature)   # `RateSensor._sample`

  def stochastic_fields(self) -> tuple[str, ...]:
    """Fields that scale a random draw (what `tune` holds at zero): its own, its rate
    channels' (read off their error model), the thermal model's."""
    return (OWN_STOCHASTIC + tuple(f for c in self.channels for f in c.stochastic_fields())
            + thermal.STOCHASTIC)

  sensors: tuple[SensorBinding, SensorBinding, SensorBinding]
  channels: tuple[inertial.Channel, inertial.Channel]
  first_tick: int   # tick of the first acquisition
  thermal: Any = None   # the static `thermal.Thermal`, or None (off)

  def default_params(self) -> Params:
    f32 = host.array
    orientation = OrientationParams(**{f: f32(getattr(self.cfg, m))
                                       for f, m in ORIENTATION_FIELDS.items()})
    return Params(orientation, *(c.params(self.cfg) for c in self.channels),
                  f32(self.cfg.yaw_rate_bias_stddev_rad_s), faults.default_params(self.cfg),
                  thermal.Thermal.params(self.cfg))

  def param_path(self, field: str):
    if field in thermal.PARAM_FIELDS:
      return ('thermal', field)
    for f, m in ORIENTATION_FIELDS.items():
      if m == field:
        return ('orientation', f)
    if self.channel_path(field):
      return self.channel_path(field)
    return ('yaw_rate_bias_stddev_rad_s',) if field == 'yaw_rate_bias_stddev_rad_s' else None

  def uses(self, field: str) -> bool:
    if self.param_path(field) is None:
      return False
    if field in thermal.PARAM_FIELDS:
      return self.thermal is not None and self.thermal.uses(field)
    if self.channel_path(field):
      return self.channel_uses(field)
    if field == 'orientation_noise_correlation':
      return self._on('orientation_noise_stddev_rad')
    return self._on(field)

  def init(self, params: Params, world_key: jax.Array) -> State:
    sources = SOURCES + (thermal.SOURCES if self.thermal is not None else ())
    streams = {s: rng.stream_key(world_key, self.id, s) for s in sources}
    b = jnp.float32(0.0)
    if self._on('yaw_rate_bias_stddev_rad_s'):
      b = params.yaw_rate_bias_stddev_rad_s * rng.normal(streams['yaw_rate_bias'], 0)
    w, a = (c.init(p, streams) for c, p in zip(self.channels, params[1:3]))
    q0 = jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32)
    extra = ({'temperature_c': jnp.zeros((), jnp.float32)}
             if self.thermal is not None and self.thermal.output else {})
    neutral = self._sample(orientation=q0, orientation_variance=self._orientation_variance(
        params, jnp.float32(0.0)), **self.neutral_rates(params), **extra)
    queue, held, fault_state = self.init_transport(neutral)
    return State(streams, w, a, yaw_rate_bias=b, yaw0=jnp.float32(0.0), orientation_filter=q0,
                 orientation_noise=jnp.zeros(3, jnp.float32), queue=queue, held=held,
                 faults=fault_state,
                 thermal=self.thermal.init() if self.thermal is not None else None)

  def orientation_ctx(self, streams: dict, n=0) -> em.Ctx:
    """What `ORIENTATION_ERRORS` sees: switches by `OrientationParams` field name."""
    return em.Ctx(lambda f: self._on(ORIENTATION_FIELDS[f]), streams, n, self.cfg.period_s, {})

  def _orientation_variance(self, p: Params, t):
    """Roll/pitch/yaw variances; `t` (s) since the first sample for the yaw drift term."""
    o = ORIENTATION_ERRORS.variance(p.orientation, self.orientation_ctx({}), (3,))
    if self._on('orientation_resolution_rad'):
      o = o + p.orientation.resolution_rad ** 2 / 12.0
    if self._on('yaw_rate_bias_stddev_rad_s'):
      o = o.at[2].add((p.yaw_rate_bias_stddev_rad_s * t) ** 2)
    return o

  def _read(self, sensordata):
    q_b, g_b, a_b = self.sensors
    return (sensordata[q_b.adr:q_b.adr + 4], sensordata[g_b.adr:g_b.adr + 3],
            sensordata[a_b.adr:a_b.adr + 3])

  def _device_rpy(self, q_mj, yaw0):
    """MuJoCo framequat → device roll/pitch/yaw (yaw sign, yaw reference)."""
    rpy = quat.to_rpy(q_mj)
    yaw = rpy[2] * self.cfg.orientation_yaw_sign
    if self.cfg.yaw_reference == 'initial':
      yaw = quat.wrap_angle(yaw - yaw0)
    return rpy.at[2].set(yaw)

  def acquire(self, p: Params, s: State, data, tick, n) -> tuple[State, Sample]:
    """Computes sample `n` from `mjx.Data` of `tick`; returns the new state and the sample."""
    cfg = self.cfg
    first = n == 0
    q_mj, gyro, accel = self._read(data.sensordata)
    b_psi = None
    if self._on('yaw_rate_bias_stddev_rad_s'):
      b_psi = jnp.zeros(3, jnp.float32).at[2].set(s.yaw_rate_bias)
    delivered = None
    if self.thermal is None:
      rates, s = self.step_rates(p, s, gyro, accel, n, extra=b_psi)
    else:
      th, terms, delivered = self.thermal.step(p.thermal, s.thermal, s.streams, tick, n)
      (wb, wg), (ab, ag) = terms['angular_velocity'], terms['linear_acceleration']
      extra = wb if b_psi is None else (b_psi if wb is None else b_psi + wb)
      rates, s = self.step_rates(p, s, gyro, accel, n, extra=extra, accel_extra=ab,
                                 gains=(wg, ag))
      s = s._replace(thermal=th)

    # Orientation: rpy → yaw sign → yaw reference → quaternion → filter → residual → drift.
    po = p.orientation
    yaw0 = s.yaw0
    if cfg.yaw_reference == 'initial':
      raw_yaw = quat.to_rpy(q_mj)[2] * cfg.orientation_yaw_sign
      yaw0 = jnp.where(first, raw_yaw, s.yaw0)
    q = quat.from_rpy(self._device_rpy(q_mj, yaw0))
    q_filt = s.orientation_filter
    if self._on('orientation_bandwidth_hz'):
      q = jnp.where(jnp.dot(q_filt, q) < 0, -q, q)
      alpha = signal.lowpass_alpha(po.bandwidth_hz, cfg.period_s)
      q = quat.normalize(signal.lowpass(q_filt, q, alpha, first))
      q_filt = q
    ctx = self.orientation_ctx(s.streams, n)
    st, _, _ = ORIENTATION_ERRORS.apply(po, {'noise': s.orientation_noise},
                                        jnp.zeros(3, jnp.float32), ctx)
    q_noise = st['noise']
    if ORIENTATION_ERRORS.on_terms(ctx.on):
      q = quat.multiply(q, quat.from_rpy(q_noise))
    t = (tick - self.first_tick).astype(jnp.float32) * self.dt
    if self._on('yaw_rate_bias_stddev_rad_s'):
      # Drift of the device yaw from the same b_ψ that biases gyro Z (see the yaw sign note
      # in the README: the device yaw integrates sign·ω_z, so its drift is sign·b_ψ·t).
      q = quat.multiply(quat.about_z(cfg.orientation_yaw_sign * s.yaw_rate_bias * t), q)
    if self._on('orientation_resolution_rad'):
      q = quat.from_rpy(signal.quantize(quat.to_rpy(q), po.resolution_rad))
    q = quat.canonical(q)

    if delivered is not None:
      rates['temperature_c'] = delivered
    sample = self._sample(orientation=q, orientation_variance=self._orientation_variance(p, t),
                          **rates)
    return s._replace(yaw0=yaw0, orientation_filter=q_filt, orientation_noise=q_noise), sample

  def truth(self, s: State, data) -> dict:
    """Ideal device outputs of this tick (no dynamics, no errors), for `truth/<id>/...`."""
    q_mj, gyro, accel = self._read(data.sensordata)
    q = quat.canonical(quat.from_rpy(self._device_rpy(q_mj, s.yaw0)))
    out = {'orientation': q, 'angular_velocity': gyro, 'linear_acceleration': accel,
           'health': s.faults.health}
    if self.thermal is not None:
      out['temperature_c'] = s.thermal.sensor_c
    return out

  def describe(self) -> list[str]:
    return super().describe() + (self.thermal.describe() if self.thermal is not None else [])


def build(cid: str, raw, ctx: BuildContext, catalog) -> Ahrs:
  """Validates the config (profiles layered) and binds the MuJoCo sensors."""
  sb = base.SensorBuild(AhrsConfigModel, TYPE, cid, raw, ctx, catalog)
  cfg = sb.cfg
  sensors = (
      ctx.sensor('orientation_sensor', cfg.orientation_sensor, mujoco.mjtSensor.mjSENS_FRAMEQUAT, 4),
      ctx.sensor('gyroscope_sensor', cfg.gyroscope_sensor, mujoco.mjtSensor.mjSENS_GYRO, 3),
      ctx.sensor('accelerometer_sensor', cfg.accelerometer_sensor,
                 mujoco.mjtSensor.mjSENS_ACCELEROMETER, 3),
  )
  schedule, _ = sb.timing()
  channels = tuple(inertial.Channel.build(ch, RATE_FIELDS[ch], sb.is_on,
                                          period_s=cfg.period_s, dt=ctx.dt)
                   for ch in ('angular_velocity', 'linear_acceleration'))
  z3 = host.zeros(3)
  th = thermal.Thermal.build(cfg, sb.is_on, cfg.period_s, ctx.dt)
  neutral = (host.zeros(4), z3, z3, z3, z3, z3, host.zeros(3, bool), host.zeros(3, bool),
             host.zeros(3, np.int32), host.zeros(3, np.int32))
  neutral = (SampleWithTemperature(host.zeros(), *neutral)
             if th is not None and th.output else Sample(*neutral))
  return sb.make(Ahrs, neutral, sensors=sensors, channels=channels,
                 first_tick=schedule.tick_of(0), thermal=th)


CONFIG_MODEL = AhrsConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.add(TYPE, build=build, config_model=CONFIG_MODEL)
