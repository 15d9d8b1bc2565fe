"""One inertial measurement channel (gyroscope or accelerometer), shared by every sensor that
measures a 3-axis rate: `fibril_sim/imu` (SPEC §5.2) and the rate outputs of `fibril_sim/ahrs`
(SPEC §5.1).

Per acquisition `k` with `Δ = period_s` (terms whose switch is off are absent from the graph):

1. **gain**: `y = (I + diag(scale − 1) + M)·x` (`M`: off-diagonal cross-axis terms), or
   `scale·x` without cross-axis terms;
2. **errors** `e = bias + b_on + b_gm[k] + b_rw[k] + w[k] + n[k]`:
   - `bias`: fixed residual bias;
   - `b_on ~ N(0, bias_turn_on_stddev²)` once per episode (stream `<ch>_bias_turn_on`);
   - `b_gm`: first-order Gauss–Markov bias instability, exact discretization
     `b[k] = φ b[k−1] + σ√(1−φ²) ξ`, `φ = exp(−Δ/τ)`, stationary start
     (stream `<ch>_bias_instability`);
   - `b_rw`: random walk `b[0] = 0`, `b[k] = b[k−1] + K√Δ ξ` (stream `<ch>_random_walk`);
   - `w[k] = (N/√Δ)·ξ`: white noise from the noise density N (IEEE-952 / Kalibr convention:
     Allan deviation `N/√τ`; stream `<ch>_noise`);
   - `n[k]`: stationary AR(1) residual `n[0] = σξ`, `n[k] = ρ n[k−1] + σ√(1−ρ²) ξ` (the AHRS's
     `noise_stddev` / `noise_correlation`; stream `<ch>_noise`);
   - `v[k]`: a narrowband process (a vibration line, `em.narrowband`: second-order resonant
     Gauss–Markov of std `narrowband_stddev`, centre `narrowband_frequency_hz`, bandwidth
     `narrowband_bandwidth_hz`; stream `<ch>_narrowband`; the IMU's);
3. **bandwidth**: first-order low-pass `y += α(y_in − y)`, started at the first input. It runs
   either at the output period (`filter_rate: output`, `α = 1 − exp(−2π f_c Δ)`, on the
   samples) or every physics tick (`filter_rate: physics`, `α = 1 − exp(−2π f_c dt)`, on the
   continuous signal, sampled at acquisition — a MEMS digital filter running at its internal
   rate before decimation, which attenuates vibration above the output Nyquist frequency
   instead of aliasing it). Errors are added after the filter, or before it with
   `noise_before_filter` (output rate only);
4. an optional extra additive term from the sensor (the AHRS's yaw-rate bias on z, the IMU's
   temperature bias), and an optional per-axis gain on the filtered signal (the IMU's
   temperature scale, `components/sensors/thermal.py`);
5. **range**: saturation to `±limit`, per-axis flags, cumulative clip counts;
6. **resolution**: `q·round(z/q)`.

The per-sample variance reported with each sample is `(σ_w² + σ²)·g + q²/12`: white-noise
variance `N²/Δ` and AR(1) residual variance, times the filter's white-noise power gain
`g = α/(2−α)` when the noise is added before an enabled filter (the IMU's `noise_before_filter`:
white noise only; the AHRS's AR(1) residual is always added after its filter), quantization. Bias
processes are slow states an estimator models as such, not per-sample measurement noise.

Each step is a term of `fibril_mjx.error_models` over the sensor's manifest fields
(`channel_errors`): the channel's Params are the sensor's, named as in its manifest, and its
switches, plan lines, stochastic and drift fields are read off its chain.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import signal

# The roles of a channel's fields in its error model, in application order; a sensor names the
# manifest field of each role it has (`channel_errors`).
FIELDS = ('scale', 'misalignment', 'bias', 'bias_turn_on_stddev', 'bias_instability_stddev',
          'bias_correlation_time_s', 'random_walk', 'noise_density', 'noise_stddev',
          'noise_correlation', 'narrowband_stddev', 'narrowband_frequency_hz',
          'narrowband_bandwidth_hz', 'bandwidth_hz', 'limit', 'resolution')
UNITS = {'angular_velocity': 'rad/s', 'linear_acceleration': 'm/s²'}


def with_channels(base: type, channels: tuple[str, ...], spec: dict) -> type:
  """`base` (a sensor's own fields) extended with a field `<channel>_<role>` for each of
  `channels` and each `role: (type, default)` of `spec`, channel by channel: the base an inertial
  sensor's declared config model inherits (as `em.with_errors` for an error model's fields)."""
  return em.extended(base, {f'{ch}_{role}': typed for ch in channels
                            for role, typed in spec.items()}, 'WithChannels', 'its channels')


class ChannelErrors(NamedTuple):
  """The error model of one channel, in application order, over a sensor's manifest fields.

  Attributes:
    gain: scale factor and cross-axis terms, on the input.
    bias: fixed, turn-on, Gauss–Markov and random-walk bias, applied to zeros: the truth's bias.
    noise: white noise from the density and the AR(1) residual (one draw per sample, stream
      `<channel>_noise`), added to the bias: the errors.
    filter: the bandwidth low-pass (state `filter`).
    output: saturation (state `clip_count`) and resolution.
    episode: the terms of `bias` constant over an episode (the truth's bias before the first
      sample).
    chain: all of them, in this order.
  """
  gain: em.Chain
  bias: em.Chain
  noise: em.Chain
  filter: em.Chain
  output: em.Chain
  episode: em.Chain
  chain: em.Chain


def channel_errors(name: str, fields: dict[str, str]) -> ChannelErrors:
  """The error model of channel `name` of a sensor: a term for each role (`FIELDS`) the sensor
  has, over the manifest field it names (`fields`: `{role: manifest field}`), streams
  `<name>_<term>`. One object per channel and sensor type (cached): static, hashable."""
  return _channel_errors(name, tuple(fields.items()))


@functools.cache
def _channel_errors(name: str, fields: tuple[tuple[str, str], ...]) -> ChannelErrors:
  f = dict(fields)

  def terms(*candidates):
    return em.chain(*(make() for role, make in candidates if role in f))

  def white_sigma(p, ctx):
    return signal.white_sigma(getattr(p, f['noise_density']), ctx.period_s)
  gain = terms(('scale', lambda: em.gain(f['scale'], (3,), cross=f.get('misalignment'))))
  bias = terms(
      ('bias', lambda: em.constant_bias(f['bias'], (3,))),
      ('bias_turn_on_stddev', lambda: em.turn_on_bias(
          f['bias_turn_on_stddev'], (3,), f'{name}_bias_turn_on', 'turn_on')),
      ('bias_instability_stddev', lambda: em.gauss_markov(
          f['bias_instability_stddev'], f['bias_correlation_time_s'],
          f'{name}_bias_instability', 'instability', (3,))),
      ('random_walk', lambda: em.random_walk(f['random_walk'], f'{name}_random_walk',
                                             'random_walk', (3,))))
  noise = terms(
      ('noise_density', lambda: em.white_noise(f['noise_density'], f'{name}_noise', (3,),
                                               scale_fn=white_sigma)),
      ('noise_stddev', lambda: em.ar1_noise(f['noise_stddev'], f['noise_correlation'],
                                            f'{name}_noise', 'noise', (3,),
                                            owns_stream='noise_density' not in f)),
      ('narrowband_stddev', lambda: em.narrowband(
          f['narrowband_stddev'], f['narrowband_frequency_hz'], f['narrowband_bandwidth_hz'],
          f'{name}_narrowband', 'narrowband', (3,))))
  filt = terms(('bandwidth_hz', lambda: em.lowpass(f['bandwidth_hz'], 'filter', (3,))))
  output = terms(('limit', lambda: em.saturation(f['limit'], 'clip_count', (3,))),
                 ('resolution', lambda: em.quantization(f['resolution'])))
  episode = em.chain(*(t for t in bias.terms if t.kind == em.DETERMINISTIC or t.episode))
  return ChannelErrors(gain, bias, noise, filt, output, episode,
                       em.chain(gain, bias, noise, filt, output))


class ChannelState(NamedTuple):
  """Per-channel state (all `(3,)`), the chain's by name and the truth's bias.

  Attributes:
    filter: low-pass output.
    turn_on: per-episode turn-on bias b_on.
    instability: Gauss–Markov bias b_gm of the latest acquisition.
    random_walk: random-walk bias b_rw of the latest acquisition.
    noise: AR(1) residual of the latest acquisition.
    narrowband: `(2, 3)` the narrowband process's last two values (`(3,)` zeros in a sensor
      without it).
    bias: total additive bias `bias + b_on + b_gm + b_rw` of the latest acquisition (truth).
    clip_count: int32 cumulative saturation counts.
  """
  filter: jax.Array
  turn_on: jax.Array
  instability: jax.Array
  random_walk: jax.Array
  noise: jax.Array
  narrowband: jax.Array
  bias: jax.Array
  clip_count: jax.Array


@dataclasses.dataclass(frozen=True)
class Channel:
  """Static description of one channel of a built sensor.

  Attributes:
    name: `angular_velocity` or `linear_acceleration` (prefix of its stream names).
    fields: `((role, manifest field), ...)` of the roles this sensor has (`channel_errors`).
    on: manifest fields whose term is in the traced graph.
    period_s: output period Δ; `dt`: physics timestep.
    noise_before_filter: errors added before the low-pass.
    filter_rate: `output` or `physics`.
  """
  name: str
  fields: tuple[tuple[str, str], ...]
  on: frozenset
  period_s: float
  dt: float
  noise_before_filter: bool = False
  filter_rate: str = 'output'

  @classmethod
  def build(cls, name: str, fields: dict[str, str], is_on, **kw) -> 'Channel':
    """`fields`: `{role: manifest field}`; `is_on(manifest field) -> bool`."""
    on = frozenset(f for t in channel_errors(name, fields).chain.terms for f in t.switches
                   if is_on(f))
    return cls(name, tuple(fields.items()), on, **kw)

  @property
  def errors(self) -> ChannelErrors:
    return _channel_errors(self.name, self.fields)

  def error_ctx(self, streams: dict, n=0, period_s=None) -> em.Ctx:
    return em.Ctx(self.on.__contains__, streams, n,
                  self.period_s if period_s is None else period_s, {})

  def uses(self, field: str) -> bool:
    """Whether manifest field `field` reaches the traced graph (read by a term that is on)."""
    return field in self.errors.chain.reads(self.on.__contains__)

  @property
  def filters_every_tick(self) -> bool:
    return bool(self.errors.filter.on_terms(self.on.__contains__)) and (
        self.filter_rate == 'physics')

  def init(self, p, streams: dict) -> ChannelState:
    """Zeros, the per-episode draws, and the truth's bias of the terms constant over the
    episode."""
    e, ctx = self.errors, self.error_ctx(streams)
    z3 = jnp.zeros(3, jnp.float32)
    st = {f: jnp.zeros(3, jnp.int32) if f == 'clip_count' else z3
          for f in ChannelState._fields} | e.chain.init(p, ctx)
    _, bias, _ = e.episode.apply(p, st, z3, ctx)
    return ChannelState(**{**st, 'bias': bias})

  def variance(self, p) -> jax.Array:
    """Per-sample variance `(3,)` implied by the config (see the module docstring)."""
    e, ctx = self.errors, self.error_ctx({})
    var = e.noise.variance(p, ctx, (3,))
    if self.noise_before_filter and e.filter.on_terms(ctx.on):
      bandwidth = getattr(p, dict(self.fields)['bandwidth_hz'])
      var = var * signal.lowpass_noise_gain(signal.lowpass_alpha(bandwidth, self.period_s))
    return var + e.output.variance(p, ctx, (3,))

  def track(self, p, cs: ChannelState, x, tick) -> ChannelState:
    """Every physics tick: the physics-rate low-pass of the gained input (else unchanged)."""
    if not self.filters_every_tick:
      return cs
    e, ctx = self.errors, self.error_ctx({}, tick, self.dt)
    _, x, _ = e.gain.apply(p, {}, x, ctx)
    st, _, _ = e.filter.apply(p, e.filter.state_of(cs), x, ctx)
    return cs._replace(**st)

  def step(self, p, cs: ChannelState, streams: dict, x, n, extra=None, gain=None):
    """One acquisition (sample `n`) of input `x` `(3,)`.

    Args:
      p: the sensor's Params (its manifest fields).
      extra: an additive `(3,)` term applied after the errors (before range / resolution).
      gain: a `(3,)` factor on the signal after the bandwidth filter (before the errors added
        after it), or None.

    Returns:
      `(y, flags, state)`: the sample `(3,)`, saturation flags `(3,)` bool, the new state.
    """
    e, ctx = self.errors, self.error_ctx(streams, n)
    st = e.chain.state_of(cs)
    _, y, _ = e.gain.apply(p, st, x, ctx)
    st, bias, _ = e.bias.apply(p, st, jnp.zeros(3, jnp.float32), ctx)   # truth's bias
    st, err, _ = e.noise.apply(p, st, bias, ctx)
    if not (e.bias.on_terms(ctx.on) or e.noise.on_terms(ctx.on)):
      err = None                     # no error term in the graph

    before = self.noise_before_filter
    if before and err is not None:
      y = y + err
    if self.filters_every_tick:
      y = cs.filter                  # tracked every tick; already includes this tick's input
    else:
      st, y, _ = e.filter.apply(p, st, y, ctx)
    if gain is not None:
      y = gain * y
    if not before and err is not None:
      y = y + err
    if extra is not None:
      y = y + extra
    st, y, flags = e.output.apply(p, st, y, ctx)
    return y, flags, cs._replace(**st, bias=bias)


# Sample fields of the two rate channels, in this order in every inertial sample type:
# the sample `(3,)`, the per-sample variance implied by the config `(3,)`, this sample's
# saturation flags `(3,)` bool, cumulative clip counts `(3,)` int32.
RATE_SAMPLE_FIELDS = ('angular_velocity', 'linear_acceleration', 'angular_velocity_variance',
                      'linear_acceleration_variance', 'angular_velocity_saturated',
                      'linear_acceleration_saturated', 'angular_velocity_clip_count',
                      'linear_acceleration_clip_count')


def sample_type(name: str, leading: tuple[str, ...] = (), doc: str = ''):
  """A sample NamedTuple with fields `leading + RATE_SAMPLE_FIELDS` (all `jax.Array`)."""
  cls = NamedTuple(name, [(f, jax.Array) for f in leading + RATE_SAMPLE_FIELDS])
  cls.__doc__ = doc
  return cls


class RateSensor:
  """What a sensing component whose `channels` are the angular-velocity and linear-acceleration
  `Channel`s, with State fields of the same names (`fibril_sim/imu`, `fibril_sim/ahrs`), and
  faults / health (`fibril_mjx.mechanisms.faults`, a `faults` leaf in Params and State) on its
  rates adds to `base.SensorBase`: a mixin listed before it (`class Imu(inertial.RateSensor,
  base.SensorBase)`), whose `on_reset` is the sensing cycle's reset stage."""
  fault_fields = ('angular_velocity', 'linear_acceleration')
  samples: ClassVar[tuple] = ()   # (Sample, Sample with `temperature_c` first) of the type

  def _sample(self, **fields):
    """The type's sample, the one with `temperature_c` when the thermal model delivers it."""
    plain, with_temperature = self.samples
    return (with_temperature if self.thermal is not None and self.thermal.output
            else plain)(**fields)

  def on_reset(self, p, s, index):
    """A device reset redraws the per-episode turn-on biases (draw `index` of their streams);
    the truth's bias follows."""
    new = {}
    for c in self.channels:
      cs, bias, ctx = getattr(s, c.name), c.errors.bias, c.error_ctx(s.streams)
      if any(t.redraw is not None for t in bias.on_terms(ctx.on)):
        turn_on = bias.redraw(p, bias.state_of(cs), ctx, index)['turn_on']
        cs = cs._replace(turn_on=turn_on, bias=cs.bias - cs.turn_on + turn_on)
      new[c.name] = cs
    return s._replace(**new)

  def channel_path(self, field: str):
    """`(field,)`: the Params path of a manifest field of the rate channels, or None."""
    return (field,) if any(field in c.errors.chain.params for c in self.channels) else None

  def channel_uses(self, field: str) -> bool:
    return any(c.uses(field) for c in self.channels)

  def step_rates(self, p, s, gyro, accel, n, extra=None, accel_extra=None, gains=(None, None)):
    """Both channels of one acquisition.

    Returns:
      `(fields, state)`: the `RATE_SAMPLE_FIELDS` as a dict, the state with both channels
      updated. `extra` / `accel_extra` are additive `(3,)` terms on the angular velocity /
      linear acceleration, `gains` per-axis factors `(3,)` (or None) of the two channels.
    """
    w_c, a_c = self.channels
    w, w_flags, w_state = w_c.step(p, s.angular_velocity, s.streams, gyro, n, extra=extra,
                                   gain=gains[0])
    a, a_flags, a_state = a_c.step(p, s.linear_acceleration, s.streams, accel, n,
                                   extra=accel_extra, gain=gains[1])
    fields = dict(zip(RATE_SAMPLE_FIELDS, (
        w, a, w_c.variance(p), a_c.variance(p), w_flags, a_flags, w_state.clip_count,
        a_state.clip_count)))
    return fields, s._replace(angular_velocity=w_state, linear_acceleration=a_state)

  def neutral_rates(self, p) -> dict:
    """The rate fields of the neutral sample held before the first delivery."""
    z3, zi, zb = jnp.zeros(3, jnp.float32), jnp.zeros(3, jnp.int32), jnp.zeros(3, bool)
    w_c, a_c = self.channels
    return dict(zip(RATE_SAMPLE_FIELDS, (z3, z3, w_c.variance(p), a_c.variance(p), zb, zb, zi,
                                         zi)))

  def describe(self) -> list[str]:
    """Timing, bound sensors, the channels' filter rates, the error model's plan lines (its
    `errors`), the terms on, the fault plan."""
    return self.describe_errors(self.describe_sensors() + self.describe_channels())

  def describe_channels(self) -> list[str]:
    lines = []
    for c in self.channels:
      if c.errors.filter.on_terms(c.on.__contains__):
        lines.append(f'{c.name} ({UNITS[c.name]}): filter at the {c.filter_rate} rate'
                     + (' (errors before the low-pass)' if c.noise_before_filter else ''))
    return lines

  def status(self, s) -> dict:
    return {**super().status(s),
            'angular_velocity_clip_count': s.angular_velocity.clip_count,
            'linear_acceleration_clip_count': s.linear_acceleration.clip_count}

