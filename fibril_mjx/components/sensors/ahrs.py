"""`fibril_sim/ahrs` — processed IMU/AHRS as a black box (SPEC §5.1).

Output dynamics (first-order filters) plus residual errors (bias, AR(1) noise, a per-episode
yaw-rate bias shared by gyro Z and yaw drift, saturation, resolution); not a vendor filter.
Terms whose manifest value is the default are absent from the traced graph. The thermal model
of `components/sensors/thermal.py` (ambient table, sensor lag, bias and scale polynomials) acts
on the rate outputs when a coefficient is set; `temperature_output: true` delivers the module's
temperature channel (`temperature_c`: its own lag, noise and resolution), as the IMU's.

Every error term is a term of `fibril_mjx.error_models`: the orientation's in `ORIENTATION`, the
rate outputs' in `RATES` (`inertial.channel_errors`); `ERRORS` declares them together with the
delivered temperature's, so the Params, switches, plan lines and the fields `tune` holds at zero
are read off them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal, NamedTuple, Optional

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults, quat, rng
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext, SensorBinding, Wanted
from fibril_mjx.components import base
from fibril_mjx.components.sensors import inertial, thermal
from fibril_mjx.components.base import Corr3, NonNeg, NonNeg3, Positive3, Vec3

TYPE = 'fibril_sim/ahrs'
SAMPLE_TYPE = 'fibril_sim/ahrs_sample/v1'

# The orientation's error model, in application order on the device attitude: the output
# low-pass (an attitude low-pass, state `orientation_filter`); the AR(1) roll/pitch/yaw residual
# (stream `orientation_noise`), applied to zeros, whose state is the rotation the orientation is
# multiplied by; the per-episode yaw-rate bias b_ψ (stream `yaw_rate_bias`), read from its state:
# it biases gyro Z and drifts the yaw by `sign·b_ψ·t`; the roll/pitch/yaw resolution.
ORIENTATION_FILTER = em.chain(em.lowpass('orientation_bandwidth_hz', 'orientation_filter', (4,),
                                         quaternion=True))
ORIENTATION_NOISE = em.chain(em.ar1_noise('orientation_noise_stddev_rad',
                                          'orientation_noise_correlation', 'orientation_noise',
                                          'orientation_noise', (3,)))
YAW_RATE_BIAS = em.chain(em.turn_on_bias('yaw_rate_bias_stddev_rad_s', (), 'yaw_rate_bias',
                                         'yaw_rate_bias'))
ORIENTATION_OUTPUT = em.chain(em.quantization('orientation_resolution_rad'))
ORIENTATION = em.chain(ORIENTATION_FILTER, ORIENTATION_NOISE, YAW_RATE_BIAS, ORIENTATION_OUTPUT)


class AhrsConfigModel(base.SamplingConfig, faults.FaultConfig, thermal.ThermalConfig):
  """Validated manifest config of `fibril_sim/ahrs` (field table of SPEC §5.1)."""
  orientation_sensor: Optional[str] = None   # or `site`: the three added there as
  gyroscope_sensor: Optional[str] = None     # fibril_<id>_quat, fibril_<id>_gyro,
  accelerometer_sensor: Optional[str] = None   # fibril_<id>_accel
  site: Optional[str] = None
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


# Manifest field of each role of the rate outputs' error model (`inertial.channel_errors`).
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
RATES = {ch: inertial.channel_errors(ch, RATE_FIELDS[ch]) for ch in RATE_FIELDS}
# Everything the AHRS declares: its orientation, its rate outputs, its delivered temperature.
ERRORS = em.partition(orientation=ORIENTATION, **{ch: e.chain for ch, e in RATES.items()},
                      temperature=thermal.DELIVERED)
SOURCES = (ORIENTATION.streams + tuple(s for e in RATES.values() for s in e.chain.streams)
           + ('delivery_jitter', 'delivery_loss'))


class Params(NamedTuple):
  """Per-world parameters: `thermal` (its Params, always present, read when the model is on),
  the orientation's and rate outputs' error model fields (manifest names), faults."""
  thermal: thermal.ThermalParams
  # orientation (error model)
  orientation_bandwidth_hz: jax.Array
  orientation_noise_stddev_rad: jax.Array
  orientation_noise_correlation: jax.Array
  yaw_rate_bias_stddev_rad_s: jax.Array
  orientation_resolution_rad: jax.Array
  # angular_velocity (error model)
  angular_velocity_scale: jax.Array
  angular_velocity_bias: jax.Array
  angular_velocity_noise_stddev: jax.Array
  angular_velocity_noise_correlation: jax.Array
  angular_velocity_bandwidth_hz: jax.Array
  angular_velocity_limit_rad_s: jax.Array
  angular_velocity_resolution: jax.Array
  # linear_acceleration (error model)
  linear_acceleration_scale: jax.Array
  linear_acceleration_bias: jax.Array
  linear_acceleration_noise_stddev: jax.Array
  linear_acceleration_noise_correlation: jax.Array
  linear_acceleration_bandwidth_hz: jax.Array
  linear_acceleration_limit_m_s2: jax.Array
  linear_acceleration_resolution: jax.Array
  faults: tuple  # `faults.FaultParams` per manifest `faults` entry


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


@dataclasses.dataclass(frozen=True)
class Ahrs(inertial.RateSensor, base.SensorBase):
  """A built `fibril_sim/ahrs` component: static, hashable; arrays live in Params / State.

  Attributes:
    channels: the rate outputs as `inertial.Channel`s (angular velocity, linear acceleration).
    first_tick: tick of the first acquisition (origin of the yaw drift).
  """
  reads_sensors_only = True
  type = TYPE
  sample_type = SAMPLE_TYPE
  samples: ClassVar[tuple] = (Sample, SampleWithTemperature)   # `RateSensor._sample`
  params_type, state_type = Params, State
  errors = ERRORS
  # in a group (`core/groups.py`): its MuJoCo sensors' addresses per member
  per_member = ('sensors',)
  member_config = ('orientation_sensor', 'gyroscope_sensor', 'accelerometer_sensor', 'site')

  sensors: tuple[SensorBinding, SensorBinding, SensorBinding]
  channels: tuple[inertial.Channel, inertial.Channel]
  first_tick: int   # tick of the first acquisition
  thermal: Any = None   # the static `thermal.Thermal`, or None (off)

  def default_params(self) -> Params:
    own = {f: host.array(getattr(self.cfg, f)) for f in Params._fields
           if f not in ('thermal', 'faults')}
    return Params(thermal.Thermal.params(self.cfg), **own,
                  faults=faults.default_params(self.cfg))

  def field_path(self, field: str):
    if field in thermal.PARAM_FIELDS:
      return ('thermal', field)
    return (field,) if field in Params._fields and field not in ('thermal', 'faults') else None

  def field_uses(self, field: str) -> bool:
    if field in thermal.PARAM_FIELDS:
      return self.thermal is not None and self.thermal.uses(field)
    return field in ORIENTATION.reads(self._on) or self.channel_uses(field)

  def init(self, params: Params, world_key: jax.Array) -> State:
    sources = SOURCES + (thermal.SOURCES if self.thermal is not None else ())
    streams = {s: rng.stream_key(world_key, self.id, s) for s in sources}
    o = ORIENTATION.init(params, self.error_ctx(streams))   # the per-episode yaw-rate bias
    w, a = (c.init(params, streams) for c in self.channels)
    q0 = jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32)
    extra = ({'temperature_c': jnp.zeros((), jnp.float32)}
             if self.thermal is not None and self.thermal.output else {})
    neutral = self._sample(orientation=q0, orientation_variance=self._orientation_variance(
        params, jnp.float32(0.0)), **self.neutral_rates(params), **extra)
    queue, held, fault_state = self.init_transport(neutral)
    return State(streams, w, a, yaw0=jnp.float32(0.0), **o, queue=queue, held=held,
                 faults=fault_state,
                 thermal=self.thermal.init() if self.thermal is not None else None)

  def _orientation_variance(self, p: Params, t):
    """Roll/pitch/yaw variances σ² + q²/12; `t` (s) since the first sample for the variance
    `(σ_b·t)²` of the yaw drift."""
    o = ORIENTATION.variance(p, self.error_ctx({}), (3,))
    if self._on('yaw_rate_bias_stddev_rad_s'):
      o = o.at[2].add((p.yaw_rate_bias_stddev_rad_s * t) ** 2)
    return o

  def _read(self, sensordata):
    """The MuJoCo `(framequat (4,), gyro (3,), accelerometer (3,))` of `sensordata`."""
    return tuple(b.read(sensordata) for b in self.sensors)

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
    ctx = self.error_ctx(s.streams, n)
    drift = bool(YAW_RATE_BIAS.on_terms(ctx.on))
    b_psi = None
    if drift:
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

    # Orientation: rpy → yaw sign → yaw reference → quaternion → filter → residual → drift →
    # resolution (the terms of `ORIENTATION`).
    yaw0 = s.yaw0
    if cfg.yaw_reference == 'initial':
      raw_yaw = quat.to_rpy(q_mj)[2] * cfg.orientation_yaw_sign
      yaw0 = jnp.where(first, raw_yaw, s.yaw0)
    q = quat.from_rpy(self._device_rpy(q_mj, yaw0))
    st = ORIENTATION.state_of(s)
    st, q, _ = ORIENTATION_FILTER.apply(p, st, q, ctx)
    st, _, _ = ORIENTATION_NOISE.apply(p, st, jnp.zeros(3, jnp.float32), ctx)
    if ORIENTATION_NOISE.on_terms(ctx.on):
      q = quat.multiply(q, quat.from_rpy(st['orientation_noise']))
    t = (tick - self.first_tick).astype(jnp.float32) * self.dt
    if drift:
      # Drift of the device yaw from the same b_ψ that biases gyro Z (see the yaw sign note
      # in the README: the device yaw integrates sign·ω_z, so its drift is sign·b_ψ·t).
      q = quat.multiply(quat.about_z(cfg.orientation_yaw_sign * s.yaw_rate_bias * t), q)
    if ORIENTATION_OUTPUT.on_terms(ctx.on):
      q = quat.from_rpy(ORIENTATION_OUTPUT.apply(p, st, quat.to_rpy(q), ctx)[1])
    q = quat.canonical(q)

    if delivered is not None:
      rates['temperature_c'] = delivered
    sample = self._sample(orientation=q, orientation_variance=self._orientation_variance(p, t),
                          **rates)
    return s._replace(yaw0=yaw0, **st), sample

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
  sensors = ctx.site_sensors(cid, cfg.site, [
      Wanted('orientation_sensor', cfg.orientation_sensor, mujoco.mjtSensor.mjSENS_FRAMEQUAT, 4, 'quat'),
      Wanted('gyroscope_sensor', cfg.gyroscope_sensor, mujoco.mjtSensor.mjSENS_GYRO, 3, 'gyro'),
      Wanted('accelerometer_sensor', cfg.accelerometer_sensor, mujoco.mjtSensor.mjSENS_ACCELEROMETER, 3,
             'accel')])
  ERRORS.check(sb)
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
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
