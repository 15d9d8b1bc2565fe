"""`fibril_sim/imu` — raw IMU: gyro + accelerometer with a full error model (SPEC §5.2).

Seed `002_…` ("Model IMU"): `z = sat(Q((I + S + M)·x + b + n))` with dynamics in between.
Per channel (`angular_velocity` in rad/s from the MuJoCo gyro, `linear_acceleration` — specific
force, m/s², from the MuJoCo accelerometer, lever-arm terms included by MuJoCo — both in the
axes of the sensors' site), at each acquisition with `Δ = period_s`:

1. **gain**: `y = (I + diag(scale − 1) + M)·x` (M: off-diagonal cross-axis terms);
2. **errors** `e = bias + b_on + b_gm[k] + b_rw[k] + n[k]`:
   - `bias`: fixed residual bias;
   - `b_on ~ N(0, diag(bias_turn_on_stddev²))`: drawn once per episode (stream
     `<ch>_bias_turn_on`, index 0);
   - `b_gm`: first-order Gauss–Markov bias instability, exact discretization
     `b[k] = φ b[k−1] + σ√(1−φ²) ξ`, `φ = exp(−Δ/τ)`, stationary start `b[0] = σ ξ`
     (stream `<ch>_bias_instability`);
   - `b_rw`: random walk `b[0] = 0`, `b[k] = b[k−1] + K√Δ ξ` (stream `<ch>_random_walk`);
   - `n[k] = (N/√Δ)·ξ`: white noise from the noise density N (IEEE-952 / Kalibr: Allan
     deviation `N/√τ`; stream `<ch>_noise`);
3. **bandwidth**: first-order low-pass `y += α(y_in − y)`, `α = 1 − exp(−2π f_c Δ)`, started at
   the first input (no turn-on transient). With `noise_before_filter: false` (default) the
   errors are added after the filter (`z = LPF(Gx) + e`); with `true` before it
   (`z = LPF(Gx + e)`, the noise density then describes the sensing element before the
   digital filter);
4. **range**: saturation to `±limit` with per-axis flags and cumulative clip counts;
5. **resolution**: `q·round(z/q)` (LSB).

Every term whose manifest value is the default is absent from the traced graph; every random
term has its own named stream (SPEC §4), so switching one on never changes another.
Schedule and transport (latency, jitter, loss) are as in SPEC §4.

The sample carries per-axis variances `σ_n²·g + q²/12`: the white-noise variance
`σ_n² = N²/Δ` (times the filter's noise-power gain `g = α/(2−α)` when the noise is added before
an enabled filter, else 1) plus the quantization variance. Bias processes are not in it: they
are slow states an estimator models as such, not per-sample measurement noise.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pydantic

from fibril_mjx import quat, rng
from fibril_mjx import signal as sig
from fibril_mjx import transport as tp
from fibril_mjx.build import BuildContext, SensorBinding
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg, NonNeg3, Positive3, Vec3
from fibril_mjx.errors import ConfigError, ConfigErrors
from fibril_mjx.schedule import Schedule
from fibril_mjx.validation import Strict

TYPE = 'fibril_sim/imu'
SAMPLE_TYPE = 'fibril_sim/imu_sample/v1'

CHANNELS = ('angular_velocity', 'linear_acceleration')
TERMS = ('noise', 'bias_turn_on', 'bias_instability', 'random_walk')
SOURCES = tuple(f'{ch}_{t}' for ch in CHANNELS for t in TERMS) + ('delivery_jitter',
                                                                   'delivery_loss')
UNITS = {'angular_velocity': 'rad/s', 'linear_acceleration': 'm/s²'}

Mat3 = tuple[Vec3, Vec3, Vec3]
ZERO3 = (0.0, 0.0, 0.0)
ZERO33 = (ZERO3, ZERO3, ZERO3)


def _zero_diagonal(m):
  if any(m[i][i] != 0.0 for i in range(3)):
    raise ValueError('diagonal must be 0 (off-diagonal cross-axis terms only; per-axis gain '
                     'belongs in the _scale field)')
  return m


class ImuConfigModel(Strict):
  """Validated manifest config of `fibril_sim/imu` (SPEC §5.2).

  Units: `angular_velocity_*` in rad/s (density rad/s/√Hz, random walk rad/s/√s),
  `linear_acceleration_*` in m/s² (density m/s²/√Hz, random walk m/s²/√s).
  """
  gyroscope_sensor: str
  accelerometer_sensor: str
  period_s: float = pydantic.Field(gt=0)
  phase_s: NonNeg = 0.0
  latency_s: NonNeg = 0.0
  jitter_s: NonNeg = 0.0
  loss_probability: float = pydantic.Field(0.0, ge=0, lt=1)
  quantization: Literal['next_boundary', 'strict'] = 'next_boundary'
  noise_before_filter: bool = False

  angular_velocity_bandwidth_hz: NonNeg = 0.0
  angular_velocity_scale: Positive3 = (1.0, 1.0, 1.0)
  angular_velocity_misalignment: Mat3 = ZERO33
  angular_velocity_noise_density: NonNeg3 = ZERO3
  angular_velocity_bias: Vec3 = ZERO3
  angular_velocity_bias_turn_on_stddev: NonNeg3 = ZERO3
  angular_velocity_bias_instability_stddev: NonNeg3 = ZERO3
  angular_velocity_bias_correlation_time_s: NonNeg3 = ZERO3
  angular_velocity_random_walk: NonNeg3 = ZERO3
  angular_velocity_limit: NonNeg = 0.0
  angular_velocity_resolution: NonNeg = 0.0

  linear_acceleration_bandwidth_hz: NonNeg = 0.0
  linear_acceleration_scale: Positive3 = (1.0, 1.0, 1.0)
  linear_acceleration_misalignment: Mat3 = ZERO33
  linear_acceleration_noise_density: NonNeg3 = ZERO3
  linear_acceleration_bias: Vec3 = ZERO3
  linear_acceleration_bias_turn_on_stddev: NonNeg3 = ZERO3
  linear_acceleration_bias_instability_stddev: NonNeg3 = ZERO3
  linear_acceleration_bias_correlation_time_s: NonNeg3 = ZERO3
  linear_acceleration_random_walk: NonNeg3 = ZERO3
  linear_acceleration_limit: NonNeg = 0.0
  linear_acceleration_resolution: NonNeg = 0.0

  _diag = pydantic.field_validator('angular_velocity_misalignment',
                                   'linear_acceleration_misalignment')(_zero_diagonal)


CHANNEL_FIELDS = ('bandwidth_hz', 'scale', 'misalignment', 'noise_density', 'bias',
                  'bias_turn_on_stddev', 'bias_instability_stddev', 'bias_correlation_time_s',
                  'random_walk', 'limit', 'resolution')


class Params(NamedTuple):
  """Per-world, differentiable parameters; `<ch>_*` as in the config (`(3,)`, `(3, 3)` for
  the misalignment, scalars for bandwidth, limit and resolution)."""
  angular_velocity_bandwidth_hz: jax.Array
  angular_velocity_scale: jax.Array
  angular_velocity_misalignment: jax.Array
  angular_velocity_noise_density: jax.Array
  angular_velocity_bias: jax.Array
  angular_velocity_bias_turn_on_stddev: jax.Array
  angular_velocity_bias_instability_stddev: jax.Array
  angular_velocity_bias_correlation_time_s: jax.Array
  angular_velocity_random_walk: jax.Array
  angular_velocity_limit: jax.Array
  angular_velocity_resolution: jax.Array
  linear_acceleration_bandwidth_hz: jax.Array
  linear_acceleration_scale: jax.Array
  linear_acceleration_misalignment: jax.Array
  linear_acceleration_noise_density: jax.Array
  linear_acceleration_bias: jax.Array
  linear_acceleration_bias_turn_on_stddev: jax.Array
  linear_acceleration_bias_instability_stddev: jax.Array
  linear_acceleration_bias_correlation_time_s: jax.Array
  linear_acceleration_random_walk: jax.Array
  linear_acceleration_limit: jax.Array
  linear_acceleration_resolution: jax.Array


class Sample(NamedTuple):
  """`fibril_sim/imu_sample/v1` (device axes = site axes).

  Attributes:
    angular_velocity: `(3,)` rad/s.
    linear_acceleration: `(3,)` m/s², specific force.
    angular_velocity_variance, linear_acceleration_variance: `(3,)` per-sample noise
      variance implied by the config (white noise after the filter gain, plus q²/12).
    angular_velocity_saturated, linear_acceleration_saturated: `(3,)` bool, this sample.
    angular_velocity_clip_count, linear_acceleration_clip_count: `(3,)` int32, cumulative.
  """
  angular_velocity: jax.Array
  linear_acceleration: jax.Array
  angular_velocity_variance: jax.Array
  linear_acceleration_variance: jax.Array
  angular_velocity_saturated: jax.Array
  linear_acceleration_saturated: jax.Array
  angular_velocity_clip_count: jax.Array
  linear_acceleration_clip_count: jax.Array


class ChannelState(NamedTuple):
  """Per-channel state (all `(3,)`).

  Attributes:
    filter: low-pass output.
    turn_on: per-episode turn-on bias b_on.
    instability: Gauss–Markov bias b_gm of the latest acquisition.
    random_walk: random-walk bias b_rw of the latest acquisition.
    bias: total additive bias `bias + b_on + b_gm + b_rw` of the latest acquisition (truth).
    clip_count: int32 cumulative saturation counts.
  """
  filter: jax.Array
  turn_on: jax.Array
  instability: jax.Array
  random_walk: jax.Array
  bias: jax.Array
  clip_count: jax.Array


class State(NamedTuple):
  """Per-world state.

  Attributes:
    streams: named stream keys, `{source: (2,) uint32}`.
    angular_velocity, linear_acceleration: `ChannelState`.
    queue, held: delivery queue and the delivered output.
  """
  streams: dict
  angular_velocity: ChannelState
  linear_acceleration: ChannelState
  queue: tp.QueueState
  held: tp.Delivered


@dataclasses.dataclass(frozen=True)
class Imu(base.Sensing):
  """A built `fibril_sim/imu` component: static, hashable; arrays live in Params / State.

  Attributes:
    site_body: body id of the sensors' site; `site_quat` its orientation in that body
      (`[w, x, y, z]`), for the true site attitude.
  """
  id: str
  cfg: ImuConfigModel
  schedule: Schedule
  transport: tp.Transport
  sensors: tuple[SensorBinding, SensorBinding]
  site_body: int
  site_quat: tuple
  dt: float
  fields: tuple  # ((name, FieldValue), ...) for the plan

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type = Params

  def __hash__(self):
    return hash((self.id, self.cfg, self.schedule, self.transport, self.sensors))


  def _variance(self, p: Params, ch: str):
    var = jnp.zeros(3, jnp.float32)
    if self._on(f'{ch}_noise_density'):
      var = sig.white_sigma(getattr(p, f'{ch}_noise_density'), self.cfg.period_s) ** 2
      if self.cfg.noise_before_filter and self._on(f'{ch}_bandwidth_hz'):
        alpha = sig.lowpass_alpha(getattr(p, f'{ch}_bandwidth_hz'), self.cfg.period_s)
        var = var * sig.lowpass_noise_gain(alpha)
    if self._on(f'{ch}_resolution'):
      var = var + getattr(p, f'{ch}_resolution') ** 2 / 12.0
    return var

  def init(self, params: Params, world_key: jax.Array) -> State:
    streams = {s: rng.stream_key(world_key, self.id, s) for s in SOURCES}
    z3 = jnp.zeros(3, jnp.float32)
    zi = jnp.zeros(3, jnp.int32)
    chans = []
    for ch in CHANNELS:
      turn_on = z3
      if self._on(f'{ch}_bias_turn_on_stddev'):
        turn_on = (getattr(params, f'{ch}_bias_turn_on_stddev')
                   * rng.normal(streams[f'{ch}_bias_turn_on'], 0, (3,)))
      fixed = getattr(params, f'{ch}_bias') if self._on(f'{ch}_bias') else z3
      chans.append(ChannelState(z3, turn_on, z3, z3, fixed + turn_on, zi))
    neutral = Sample(z3, z3, self._variance(params, CHANNELS[0]),
                     self._variance(params, CHANNELS[1]), jnp.zeros(3, bool),
                     jnp.zeros(3, bool), zi, zi)
    queue, held = tp.init(self.transport, neutral)
    return State(streams, chans[0], chans[1], queue, held)

  def _read(self, sensordata):
    g_b, a_b = self.sensors
    return sensordata[g_b.adr:g_b.adr + 3], sensordata[a_b.adr:a_b.adr + 3]

  def _channel(self, p: Params, cs: ChannelState, streams, ch: str, x, n, first):
    """One channel of one acquisition: gain → errors / low-pass → saturation → LSB."""
    on = lambda f: self._on(f'{ch}_{f}')  # noqa: E731
    par = lambda f: getattr(p, f'{ch}_{f}')  # noqa: E731
    period = self.cfg.period_s
    y = x
    if on('misalignment'):
      y = (jnp.diag(par('scale')) + par('misalignment')) @ x   # I + diag(s − 1) + M
    elif on('scale'):
      y = par('scale') * x

    terms = []  # additive errors in the graph (off terms are absent)
    if on('bias'):
      terms.append(par('bias'))
    if on('bias_turn_on_stddev'):
      terms.append(cs.turn_on)
    gm, rw = cs.instability, cs.random_walk
    if on('bias_instability_stddev'):
      z = rng.normal(streams[f'{ch}_bias_instability'], n, (3,))
      phi = sig.gauss_markov_phi(period, par('bias_correlation_time_s'))
      gm = sig.ar1(gm, z, phi, par('bias_instability_stddev'), first)
      terms.append(gm)
    if on('random_walk'):
      z = rng.normal(streams[f'{ch}_random_walk'], n, (3,))
      rw = sig.random_walk(rw, z, par('random_walk'), period, first)
      terms.append(rw)
    bias = sum(terms, jnp.zeros(3, jnp.float32))  # for truth only
    if on('noise_density'):
      z = rng.normal(streams[f'{ch}_noise'], n, (3,))
      terms.append(sig.white_sigma(par('noise_density'), period) * z)
    err = sum(terms[1:], terms[0]) if terms else None

    before = self.cfg.noise_before_filter
    if before and err is not None:
      y = y + err
    filt = cs.filter
    if on('bandwidth_hz'):
      y = sig.lowpass(filt, y, sig.lowpass_alpha(par('bandwidth_hz'), period), first)
      filt = y
    if not before and err is not None:
      y = y + err
    y, flags, count = sig.limit_and_quantize(
        y, cs.clip_count, par('limit') if on('limit') else None,
        par('resolution') if on('resolution') else None)
    return y, flags, cs._replace(filter=filt, instability=gm, random_walk=rw, bias=bias,
                                 clip_count=count)

  def acquire(self, p: Params, s: State, sensordata, tick, n) -> tuple[State, Sample]:
    """Computes sample `n` from the sensor data of `tick`; returns the new state and sample.

    Args:
      sensordata: `(nsensordata,)` MuJoCo sensor values of `tick`.
      tick: int32 tick of that state (unused by the model; kept for a uniform signature).
      n: int32 acquisition index (the RNG index; `n == 0` starts filters and processes).
    """
    first = n == 0
    gyro, accel = self._read(sensordata)
    w, w_flags, w_state = self._channel(p, s.angular_velocity, s.streams, 'angular_velocity',
                                        gyro, n, first)
    a, a_flags, a_state = self._channel(p, s.linear_acceleration, s.streams,
                                        'linear_acceleration', accel, n, first)
    sample = Sample(w, a, self._variance(p, 'angular_velocity'),
                    self._variance(p, 'linear_acceleration'), w_flags, a_flags,
                    w_state.clip_count, a_state.clip_count)
    return s._replace(angular_velocity=w_state, linear_acceleration=a_state), sample

  def status(self, s: State) -> dict:
    return {'lost': s.queue.lost, 'overflow': s.queue.overflow,
            'angular_velocity_clip_count': s.angular_velocity.clip_count,
            'linear_acceleration_clip_count': s.linear_acceleration.clip_count}

  def site_orientation(self, data) -> jax.Array:
    """True attitude of the IMU site, body → world `(4,)` `[w, x, y, z]`, `w >= 0`."""
    return quat.canonical(quat.multiply(data.xquat[self.site_body],
                                        jnp.asarray(self.site_quat, data.xquat.dtype)))

  def truth(self, s: State, data) -> dict:
    """Ideal outputs of this tick for `truth/<id>/...`: the MuJoCo gyro and accelerometer,
    the site's attitude, and the additive bias of the error model (fixed + turn-on +
    Gauss–Markov + random walk, as of the latest acquisition)."""
    gyro, accel = self._read(data.sensordata)
    return {'angular_velocity': gyro, 'linear_acceleration': accel,
            'orientation': self.site_orientation(data),
            'angular_velocity_bias': s.angular_velocity.bias,
            'linear_acceleration_bias': s.linear_acceleration.bias}

  def describe(self) -> list[str]:
    lines = [f'sample type {SAMPLE_TYPE}',
             f'schedule: {self.schedule.describe()}',
             f'transport: {self.transport.describe()}',
             'bound sensors:']
    for b in self.sensors:
      lines.append(f'  {b.field}: {b.name} ({b.type}, adr {b.adr}, dim {b.dim}, site {b.site})')
    for ch in CHANNELS:
      terms = [f for f in CHANNEL_FIELDS if f != 'bias_correlation_time_s'
               and self._on(f'{ch}_{f}')]
      lines.append(f'{ch} ({UNITS[ch]}) terms on: {", ".join(terms) if terms else "none"}'
                   + (' (errors before the low-pass)' if self.cfg.noise_before_filter else ''))
    return lines


def build(cid: str, raw, ctx: BuildContext, catalog) -> Imu:
  """Validates the config (profiles layered) and binds the MuJoCo sensors and their site."""
  cfg, fields = base.resolve_config(ImuConfigModel, TYPE, raw, catalog=catalog,
                                    file=ctx.file, path=ctx.path)
  origin = base.field_origin(fields, ctx)
  errors = []
  for ch in CHANNELS:
    sig_f, tau_f = f'{ch}_bias_instability_stddev', f'{ch}_bias_correlation_time_s'
    for i, (s_i, t_i) in enumerate(zip(getattr(cfg, sig_f), getattr(cfg, tau_f))):
      if s_i > 0 and not t_i > 0:
        file, path = origin(tau_f)
        errors.append(ConfigError(file, f'{path}[{i}]', f'must be > 0 where {sig_f}[{i}] > 0 '
                                  f'(Gauss–Markov correlation time)', t_i))
  if errors:
    raise ConfigErrors(errors)
  sensors = (
      ctx.sensor('gyroscope_sensor', cfg.gyroscope_sensor, mujoco.mjtSensor.mjSENS_GYRO, 3),
      ctx.sensor('accelerometer_sensor', cfg.accelerometer_sensor,
                 mujoco.mjtSensor.mjSENS_ACCELEROMETER, 3),
  )
  if sensors[0].site != sensors[1].site:
    raise ConfigError(*origin('accelerometer_sensor'),
                      f'must be on the same site as gyroscope_sensor {cfg.gyroscope_sensor!r} '
                      f'(site {sensors[0].site!r}); {cfg.accelerometer_sensor!r} is on site '
                      f'{sensors[1].site!r}', cfg.accelerometer_sensor)
  m = ctx.model
  sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, sensors[0].site)
  schedule = Schedule.build(cfg.period_s, cfg.phase_s, ctx.dt, cfg.quantization, origin=origin)
  transport = tp.Transport.build(cfg.latency_s, cfg.jitter_s, cfg.loss_probability,
                                 cfg.period_s, ctx.dt, cfg.quantization, origin=origin)
  return Imu(cid, cfg, schedule, transport, sensors, int(m.site_bodyid[sid]),
             tuple(float(v) for v in m.site_quat[sid]), ctx.dt, tuple(fields.items()))


# ------------------------------------------------------------------ host side (run, plots)


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per-world error statistics of delivered samples vs truth at their sample tick (NumPy).

  Args:
    sensor: `{field: (nworld, T, ...)}` delivered output (`sample.*` flattened, `new_data`,
      `sample_tick`, ...).
    truth: `{field: (nworld, T, ...)}`.

  Returns:
    `{metric: (nworld,)}`: RMS angular-velocity error (rad/s) and specific-force error
    (m/s²) over delivered samples, delivered sample count.
  """
  new = sensor['new_data']
  st = np.clip(sensor['sample_tick'], 0, None)
  take = lambda a: np.take_along_axis(a, st.reshape(st.shape + (1,) * (a.ndim - 2)), axis=1)  # noqa
  count = np.maximum(new.sum(axis=1), 1)
  out = {}
  for f, unit in (('angular_velocity', 'rad_s'), ('linear_acceleration', 'm_s2')):
    e = np.sum((sensor[f].astype(np.float64) - take(truth[f])) ** 2, axis=-1)
    out[f'{f}_error_rms_{unit}'] = np.sqrt((e * new).sum(1) / count / 3)
  out['delivered'] = new.sum(axis=1)
  return out


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Truth vs delivered samples for one world, the Allan deviation of its gyro error, and the
  error distribution across worlds."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt

  from fibril_mjx import stats

  new = sensor['new_data'][world].astype(bool)
  st = np.clip(sensor['sample_tick'][world], 0, None)[new]
  t_s = time_s[st]
  fig, axes = plt.subplots(2, 2, figsize=(13, 8))
  colors = ('tab:red', 'tab:green', 'tab:blue')
  for ax, f, unit in ((axes[0, 0], 'angular_velocity', 'rad/s'),
                      (axes[1, 0], 'linear_acceleration', 'm/s²')):
    for i, c in enumerate(colors):
      ax.plot(time_s, truth[f][world][:, i], '-', color='k', lw=0.8)
      ax.plot(t_s, sensor[f][world][new][:, i], '.', ms=1.5, color=c, label='xyz'[i])
    ax.set_ylabel(f'{f.replace("_", " ")} [{unit}]')
    ax.legend(fontsize=8, loc='upper right')
  axes[0, 0].set_title(f'world {world}: delivered samples (dots) vs truth (black)')
  axes[1, 0].set_xlabel('time [s]')
  ax = axes[0, 1]
  if st.size >= 2 * 9:
    rate = 1.0 / np.median(np.diff(t_s)) if st.size > 1 else 1.0
    for i, c in enumerate(colors):
      err = sensor['angular_velocity'][world][new][:, i] - truth['angular_velocity'][world][st, i]
      try:
        taus, adev = stats.allan_deviation(err, rate)
      except ValueError:
        continue
      ax.loglog(taus, adev, '-', color=c, label=f'gyro {"xyz"[i]} error')
    ax.set_xlabel('τ [s]')
    ax.set_ylabel('Allan deviation [rad/s]')
    ax.set_title(f'world {world}: Allan deviation of sample − truth')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8)
  ax = axes[1, 1]
  e = metrics['angular_velocity_error_rms_rad_s']
  ax.hist(e, bins=min(40, max(5, len(e) // 4)), color='tab:purple')
  ax.set_xlabel('angular velocity error RMS per world [rad/s]')
  ax.set_ylabel('worlds')
  ax.set_title(f'error distribution across {len(e)} worlds')
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)

