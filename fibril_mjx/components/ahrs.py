"""`fibril_sim/ahrs` — processed IMU/AHRS as a black box (SPEC §5.1, seed `000_…`).

Output dynamics (first-order filters) plus residual errors (bias, AR(1) noise, a per-episode
yaw-rate bias shared by gyro Z and yaw drift, saturation, resolution); not a vendor filter.
Terms whose manifest value is the default are absent from the traced graph.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import pydantic

from fibril_mjx import quat, rng
from fibril_mjx import signal as sig
from fibril_mjx import transport as tp
from fibril_mjx.build import BuildContext, SensorBinding
from fibril_mjx.components import base
from fibril_mjx.components.base import Corr3, NonNeg, NonNeg3, Positive3, Vec3
from fibril_mjx.schedule import Schedule
from fibril_mjx.validation import Strict

TYPE = 'fibril_sim/ahrs'
SAMPLE_TYPE = 'fibril_sim/ahrs_sample/v1'

RATE_CHANNELS = ('angular_velocity', 'linear_acceleration')
SOURCES = ('orientation_noise', 'angular_velocity_noise', 'linear_acceleration_noise',
           'yaw_rate_bias', 'delivery_jitter', 'delivery_loss')


class AhrsConfigModel(Strict):
  """Validated manifest config of `fibril_sim/ahrs` (field table of SPEC §5.1)."""
  orientation_sensor: str
  gyroscope_sensor: str
  accelerometer_sensor: str
  period_s: float = pydantic.Field(gt=0)
  phase_s: NonNeg = 0.0
  latency_s: NonNeg = 0.0
  jitter_s: NonNeg = 0.0
  loss_probability: float = pydantic.Field(0.0, ge=0, lt=1)
  quantization: Literal['next_boundary', 'strict'] = 'next_boundary'
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


class Params(NamedTuple):
  """Per-world, differentiable parameters (vectors `(3,)`, the rest scalars)."""
  orientation_bandwidth_hz: jax.Array
  angular_velocity_bandwidth_hz: jax.Array
  linear_acceleration_bandwidth_hz: jax.Array
  angular_velocity_scale: jax.Array
  linear_acceleration_scale: jax.Array
  angular_velocity_bias: jax.Array
  linear_acceleration_bias: jax.Array
  orientation_noise_stddev_rad: jax.Array
  angular_velocity_noise_stddev: jax.Array
  linear_acceleration_noise_stddev: jax.Array
  orientation_noise_correlation: jax.Array
  angular_velocity_noise_correlation: jax.Array
  linear_acceleration_noise_correlation: jax.Array
  yaw_rate_bias_stddev_rad_s: jax.Array
  orientation_resolution_rad: jax.Array
  angular_velocity_limit_rad_s: jax.Array
  linear_acceleration_limit_m_s2: jax.Array
  angular_velocity_resolution: jax.Array
  linear_acceleration_resolution: jax.Array


class Sample(NamedTuple):
  """`fibril_sim/ahrs_sample/v1`.

  Attributes:
    orientation: `(4,)` device orientation `[w, x, y, z]`, `w >= 0`.
    angular_velocity: `(3,)` rad/s, device (site) axes.
    linear_acceleration: `(3,)` m/s², specific force, device axes.
    orientation_variance: `(3,)` rad², roll/pitch/yaw (σ² + q²/12).
    angular_velocity_variance, linear_acceleration_variance: `(3,)` (σ² + q²/12).
    angular_velocity_saturated, linear_acceleration_saturated: `(3,)` bool, this sample.
    angular_velocity_clip_count, linear_acceleration_clip_count: `(3,)` int32, cumulative.
  """
  orientation: jax.Array
  angular_velocity: jax.Array
  linear_acceleration: jax.Array
  orientation_variance: jax.Array
  angular_velocity_variance: jax.Array
  linear_acceleration_variance: jax.Array
  angular_velocity_saturated: jax.Array
  linear_acceleration_saturated: jax.Array
  angular_velocity_clip_count: jax.Array
  linear_acceleration_clip_count: jax.Array


class State(NamedTuple):
  """Per-world state.

  Attributes:
    streams: named stream keys, `{source: (2,) uint32}`.
    yaw_rate_bias: per-episode b_ψ (rad/s).
    yaw0: reference yaw of `yaw_reference: initial` (rad).
    orientation_filter: `(4,)`; rate filters `(3,)` each.
    orientation_noise, angular_velocity_noise, linear_acceleration_noise: AR(1) states.
    angular_velocity_clip_count, linear_acceleration_clip_count: `(3,)` int32.
    queue, held: delivery queue and the delivered output.
  """
  streams: dict
  yaw_rate_bias: jax.Array
  yaw0: jax.Array
  orientation_filter: jax.Array
  angular_velocity_filter: jax.Array
  linear_acceleration_filter: jax.Array
  orientation_noise: jax.Array
  angular_velocity_noise: jax.Array
  linear_acceleration_noise: jax.Array
  angular_velocity_clip_count: jax.Array
  linear_acceleration_clip_count: jax.Array
  queue: tp.QueueState
  held: tp.Delivered


@dataclasses.dataclass(frozen=True)
class Ahrs(base.Sensing):
  """A built `fibril_sim/ahrs` component: static, hashable; arrays live in Params / State."""
  id: str
  cfg: AhrsConfigModel
  schedule: Schedule
  transport: tp.Transport
  sensors: tuple[SensorBinding, SensorBinding, SensorBinding]
  first_tick: int
  dt: float
  fields: tuple  # ((name, FieldValue), ...) for the plan

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type = Params

  def __hash__(self):
    return hash((self.id, self.cfg, self.schedule, self.transport, self.sensors))


  def init(self, params: Params, world_key: jax.Array) -> State:
    streams = {s: rng.stream_key(world_key, self.id, s) for s in SOURCES}
    b = jnp.float32(0.0)
    if self._on('yaw_rate_bias_stddev_rad_s'):
      b = params.yaw_rate_bias_stddev_rad_s * rng.normal(streams['yaw_rate_bias'], 0)
    z3 = jnp.zeros(3, jnp.float32)
    zi = jnp.zeros(3, jnp.int32)
    neutral = Sample(jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32), z3, z3,
                     *self._variances(params), jnp.zeros(3, bool), jnp.zeros(3, bool), zi, zi)
    queue, held = tp.init(self.transport, neutral)
    return State(streams, b, jnp.float32(0.0), neutral.orientation, z3, z3, z3, z3, z3, zi, zi,
                 queue, held)

  def _variances(self, p: Params):
    def var(std, res):
      return std * std + res * res / 12.0 * jnp.ones(3)
    return (var(p.orientation_noise_stddev_rad, p.orientation_resolution_rad),
            var(p.angular_velocity_noise_stddev, p.angular_velocity_resolution),
            var(p.linear_acceleration_noise_stddev, p.linear_acceleration_resolution))

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

  def _rate(self, p: Params, s: State, ch: str, x, n, first):
    """scale → low-pass → + bias + AR(1) noise (→ caller adds b_ψ, saturates, quantizes)."""
    period = self.cfg.period_s
    y = x * getattr(p, f'{ch}_scale')
    filt = getattr(s, f'{ch}_filter')
    if self._on(f'{ch}_bandwidth_hz'):
      y = sig.lowpass(filt, y, sig.lowpass_alpha(getattr(p, f'{ch}_bandwidth_hz'), period),
                      first)
      filt = y
    y = y + getattr(p, f'{ch}_bias')
    noise = getattr(s, f'{ch}_noise')
    if self._on(f'{ch}_noise_stddev'):
      z = rng.normal(s.streams[f'{ch}_noise'], n, (3,))
      noise = sig.ar1(noise, z, getattr(p, f'{ch}_noise_correlation'),
                      getattr(p, f'{ch}_noise_stddev'), first)
      y = y + noise
    return y, filt, noise

  def _finish(self, y, limit_field, res_field, p, count):
    return sig.limit_and_quantize(
        y, count, getattr(p, limit_field) if self._on(limit_field) else None,
        getattr(p, res_field) if self._on(res_field) else None)

  def acquire(self, p: Params, s: State, sensordata, tick, n) -> tuple[State, Sample]:
    """Computes sample `n` from the state at `tick` and returns it with the updated state."""
    cfg = self.cfg
    first = n == 0
    q_mj, gyro, accel = self._read(sensordata)

    w, w_filt, w_noise = self._rate(p, s, 'angular_velocity', gyro, n, first)
    if self._on('yaw_rate_bias_stddev_rad_s'):
      w = w.at[2].add(s.yaw_rate_bias)
    w, w_flags, w_count = self._finish(w, 'angular_velocity_limit_rad_s',
                                       'angular_velocity_resolution', p,
                                       s.angular_velocity_clip_count)
    a, a_filt, a_noise = self._rate(p, s, 'linear_acceleration', accel, n, first)
    a, a_flags, a_count = self._finish(a, 'linear_acceleration_limit_m_s2',
                                       'linear_acceleration_resolution', p,
                                       s.linear_acceleration_clip_count)

    # Orientation: rpy → yaw sign → yaw reference → quaternion → filter → residual → drift.
    yaw0 = s.yaw0
    if cfg.yaw_reference == 'initial':
      raw_yaw = quat.to_rpy(q_mj)[2] * cfg.orientation_yaw_sign
      yaw0 = jnp.where(first, raw_yaw, s.yaw0)
    q = quat.from_rpy(self._device_rpy(q_mj, yaw0))
    q_filt = s.orientation_filter
    if self._on('orientation_bandwidth_hz'):
      q = jnp.where(jnp.dot(q_filt, q) < 0, -q, q)
      alpha = sig.lowpass_alpha(p.orientation_bandwidth_hz, cfg.period_s)
      q = quat.normalize(sig.lowpass(q_filt, q, alpha, first))
      q_filt = q
    q_noise = s.orientation_noise
    if self._on('orientation_noise_stddev_rad'):
      z = rng.normal(s.streams['orientation_noise'], n, (3,))
      q_noise = sig.ar1(q_noise, z, p.orientation_noise_correlation,
                        p.orientation_noise_stddev_rad, first)
      q = quat.multiply(q, quat.from_rpy(q_noise))
    if self._on('yaw_rate_bias_stddev_rad_s'):
      # Drift of the device yaw from the same b_ψ that biases gyro Z (see yaw sign note in
      # the README: the device yaw integrates sign·ω_z, so its drift is sign·b_ψ·t).
      t = (tick - self.first_tick).astype(jnp.float32) * self.dt
      q = quat.multiply(quat.about_z(cfg.orientation_yaw_sign * s.yaw_rate_bias * t), q)
    if self._on('orientation_resolution_rad'):
      q = quat.from_rpy(sig.quantize(quat.to_rpy(q), p.orientation_resolution_rad))
    q = quat.canonical(q)

    sample = Sample(q, w, a, *self._variances(p), w_flags, a_flags, w_count, a_count)
    s = s._replace(yaw0=yaw0, orientation_filter=q_filt, angular_velocity_filter=w_filt,
                   linear_acceleration_filter=a_filt, orientation_noise=q_noise,
                   angular_velocity_noise=w_noise, linear_acceleration_noise=a_noise,
                   angular_velocity_clip_count=w_count, linear_acceleration_clip_count=a_count)
    return s, sample

  def status(self, s: State) -> dict:
    return {'lost': s.queue.lost, 'overflow': s.queue.overflow,
            'angular_velocity_clip_count': s.angular_velocity_clip_count,
            'linear_acceleration_clip_count': s.linear_acceleration_clip_count}

  def truth(self, s: State, data) -> dict:
    """Ideal device outputs of this tick (no dynamics, no errors), for `truth/<id>/...`."""
    q_mj, gyro, accel = self._read(data.sensordata)
    q = quat.canonical(quat.from_rpy(self._device_rpy(q_mj, s.yaw0)))
    return {'orientation': q, 'angular_velocity': gyro, 'linear_acceleration': accel}

  def describe(self) -> list[str]:
    lines = [f'sample type {SAMPLE_TYPE}',
             f'schedule: {self.schedule.describe()}',
             f'transport: {self.transport.describe()}',
             'bound sensors:']
    for b in self.sensors:
      lines.append(f'  {b.field}: {b.name} ({b.type}, adr {b.adr}, dim {b.dim}'
                   + (f', site {b.site})' if b.site else ')'))
    return lines


def build(cid: str, raw, ctx: BuildContext, catalog) -> Ahrs:
  """Validates the config (profiles layered) and binds the MuJoCo sensors."""
  cfg, fields = base.resolve_config(AhrsConfigModel, TYPE, raw, catalog=catalog,
                                    file=ctx.file, path=ctx.path)
  sensors = (
      ctx.sensor('orientation_sensor', cfg.orientation_sensor, mujoco.mjtSensor.mjSENS_FRAMEQUAT, 4),
      ctx.sensor('gyroscope_sensor', cfg.gyroscope_sensor, mujoco.mjtSensor.mjSENS_GYRO, 3),
      ctx.sensor('accelerometer_sensor', cfg.accelerometer_sensor,
                 mujoco.mjtSensor.mjSENS_ACCELEROMETER, 3),
  )
  origin = base.field_origin(fields, ctx)
  schedule = Schedule.build(cfg.period_s, cfg.phase_s, ctx.dt, cfg.quantization, origin=origin)
  transport = tp.Transport.build(cfg.latency_s, cfg.jitter_s, cfg.loss_probability,
                                 cfg.period_s, ctx.dt, cfg.quantization, origin=origin)
  return Ahrs(cid, cfg, schedule, transport, sensors, schedule.tick_of(0), ctx.dt,
              tuple(fields.items()))


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per-world error statistics of delivered samples vs truth at their sample tick (NumPy).

  Args:
    sensor: `{field: (nworld, T, ...)}` delivered output (`sample.*` flattened, `new_data`,
      `sample_tick`, ...).
    truth: `{field: (nworld, T, ...)}`.

  Returns:
    `{metric: (nworld,)}`: RMS orientation error (deg), RMS angular-velocity error (rad/s),
    RMS acceleration error (m/s²), delivered sample count.
  """
  import numpy as np
  from fibril_mjx import report
  new = sensor['new_data']
  st = np.clip(sensor['sample_tick'], 0, None)
  take = lambda a: np.take_along_axis(a, st.reshape(st.shape + (1,) * (a.ndim - 2)), axis=1)  # noqa
  out = {}
  count = np.maximum(new.sum(axis=1), 1)
  ang = np.degrees(report.angle_rad(sensor['orientation'], take(truth['orientation'])))
  out['orientation_error_rms_deg'] = np.sqrt((ang ** 2 * new).sum(1) / count)
  for f, unit in (('angular_velocity', 'rad_s'), ('linear_acceleration', 'm_s2')):
    e = np.sum((sensor[f] - take(truth[f])) ** 2, axis=-1)
    out[f'{f}_error_rms_{unit}'] = np.sqrt((e * new).sum(1) / count / 3)
  out['delivered'] = new.sum(axis=1)
  return out


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Truth vs delivered samples for one world and the error distribution across worlds."""
  from fibril_mjx import report
  report.plot_ahrs(path, cid, time_s, sensor, truth, world,
                   metrics['orientation_error_rms_deg'], title)
