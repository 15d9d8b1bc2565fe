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
3. **bandwidth**: first-order low-pass `y += α(y_in − y)`, started at the first input. It runs
   either at the output period (`filter_rate: output`, `α = 1 − exp(−2π f_c Δ)`, on the
   samples) or every physics tick (`filter_rate: physics`, `α = 1 − exp(−2π f_c dt)`, on the
   continuous signal, sampled at acquisition — a MEMS digital filter running at its internal
   rate before decimation, which attenuates vibration above the output Nyquist frequency
   instead of aliasing it). Errors are added after the filter, or before it with
   `noise_before_filter` (output rate only);
4. an optional extra additive term from the sensor (the AHRS's yaw-rate bias on z, the IMU's
   temperature bias), and an optional per-axis gain on the filtered signal (the IMU's
   temperature scale, `components/thermal.py`);
5. **range**: saturation to `±limit`, per-axis flags, cumulative clip counts;
6. **resolution**: `q·round(z/q)`.

The per-sample variance reported with each sample is `σ² + σ_w²·g + q²/12`: AR(1) residual
variance, white-noise variance `N²/Δ` (times the filter's noise-power gain `g = α/(2−α)` when the
noise is added before an enabled filter), quantization. Bias processes are slow states an
estimator models as such, not per-sample measurement noise.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import smallmat
from fibril_mjx.mechanisms import signal
from fibril_mjx.components import base

# Channel fields, in Params order; a sensor maps the ones it has to manifest field names.
FIELDS = ('bandwidth_hz', 'scale', 'misalignment', 'noise_density', 'noise_stddev',
          'noise_correlation', 'bias', 'bias_turn_on_stddev', 'bias_instability_stddev',
          'bias_correlation_time_s', 'random_walk', 'limit', 'resolution')
# Fields that only parametrize another term (no switch of their own).
DEPENDENT = {'noise_correlation': 'noise_stddev',
             'bias_correlation_time_s': 'bias_instability_stddev'}
TERMS = ('noise', 'bias_turn_on', 'bias_instability', 'random_walk')
UNITS = {'angular_velocity': 'rad/s', 'linear_acceleration': 'm/s²'}


def channel_errors(name: str) -> tuple[em.Chain, em.Chain]:
  """`(BIAS, NOISE)`: the error model of channel `name` over its channel fields, streams
  `<name>_<term>`. Both are applied to zeros (the errors are summed, then added before or
  after the low-pass), `BIAS` first: its sum is the truth's bias."""
  bias = em.chain(
      em.constant_bias('bias', (3,)),
      em.turn_on_bias('bias_turn_on_stddev', (3,), f'{name}_bias_turn_on', 'turn_on'),
      em.gauss_markov('bias_instability_stddev', 'bias_correlation_time_s',
                      f'{name}_bias_instability', 'instability', (3,)),
      em.random_walk('random_walk', f'{name}_random_walk', 'random_walk', (3,)))
  noise = em.chain(
      em.white_noise('noise_density', f'{name}_noise', (3,),
                     scale_fn=lambda p, ctx: signal.white_sigma(p.noise_density, ctx.period_s)),
      em.ar1_noise('noise_stddev', 'noise_correlation', f'{name}_noise', 'noise', (3,),
                   owns_stream=False))
  return bias, noise


ERRORS = {name: channel_errors(name) for name in UNITS}


ChannelParams = NamedTuple('ChannelParams', [(f, jax.Array | None) for f in FIELDS])
ChannelParams.__new__.__defaults__ = (None,) * len(FIELDS)
ChannelParams.__doc__ = """Per-world parameters of one channel (`FIELDS`); a field the sensor does
not have is None (no leaf).

Shapes: scalars for `bandwidth_hz`, `limit`, `resolution`; `(3, 3)` for `misalignment`;
`(3,)` for the rest.
"""


class ChannelState(NamedTuple):
  """Per-channel state (all `(3,)`).

  Attributes:
    filter: low-pass output.
    turn_on: per-episode turn-on bias b_on.
    instability: Gauss–Markov bias b_gm of the latest acquisition.
    random_walk: random-walk bias b_rw of the latest acquisition.
    noise: AR(1) residual of the latest acquisition.
    bias: total additive bias `bias + b_on + b_gm + b_rw` of the latest acquisition (truth).
    clip_count: int32 cumulative saturation counts.
  """
  filter: jax.Array
  turn_on: jax.Array
  instability: jax.Array
  random_walk: jax.Array
  noise: jax.Array
  bias: jax.Array
  clip_count: jax.Array


@dataclasses.dataclass(frozen=True)
class Channel:
  """Static description of one channel of a built sensor.

  Attributes:
    name: `angular_velocity` or `linear_acceleration` (prefix of its stream names).
    manifest: `((channel field, manifest field), ...)` for the fields this sensor has.
    on: channel fields whose term is in the traced graph.
    period_s: output period Δ; `dt`: physics timestep.
    noise_before_filter: errors added before the low-pass.
    filter_rate: `output` or `physics`.
  """
  name: str
  manifest: tuple[tuple[str, str], ...]
  on: frozenset
  period_s: float
  dt: float
  noise_before_filter: bool = False
  filter_rate: str = 'output'

  @classmethod
  def build(cls, name: str, manifest: dict[str, str], is_on, **kw) -> 'Channel':
    """`manifest`: `{channel field: manifest field}`; `is_on(manifest field) -> bool`."""
    on = frozenset(f for f, m in manifest.items() if f not in DEPENDENT and is_on(m))
    return cls(name, tuple(manifest.items()), on, **kw)

  def uses(self, field: str) -> bool:
    """Whether channel field `field` reaches the traced graph (its term, or the term it
    parametrizes, is on)."""
    return (field in self.on or DEPENDENT.get(field) in self.on
            or (field == 'scale' and 'misalignment' in self.on))

  def path(self, manifest_field: str) -> tuple[str, str] | None:
    """`(channel name, channel field)` of a manifest field of this channel, or None."""
    for f, m in self.manifest:
      if m == manifest_field:
        return self.name, f
    return None

  def params(self, cfg) -> ChannelParams:
    """Params from the resolved config, float32."""
    return ChannelParams(**{f: host.array(getattr(cfg, m))
                            for f, m in self.manifest})

  @property
  def errors(self) -> tuple[em.Chain, em.Chain]:
    return ERRORS[self.name]

  def error_ctx(self, streams: dict, n=0) -> em.Ctx:
    return em.Ctx(self.on.__contains__, streams, n, self.period_s, {})

  def stochastic_fields(self) -> tuple[str, ...]:
    """Manifest fields of this channel that scale a random draw (read off its chains)."""
    random = {f for c in self.errors for f in c.stochastic_fields()}
    return tuple(m for f, m in self.manifest if f in random)

  def sources(self) -> tuple[str, ...]:
    return tuple(s for c in self.errors for s in c.streams)

  def init(self, p: ChannelParams, streams: dict) -> ChannelState:
    z3 = jnp.zeros(3, jnp.float32)
    turn_on = self.errors[0].init(p, self.error_ctx(streams))['turn_on']
    fixed = p.bias if 'bias' in self.on else z3
    return ChannelState(z3, turn_on, z3, z3, z3, fixed + turn_on, jnp.zeros(3, jnp.int32))

  def variance(self, p: ChannelParams) -> jax.Array:
    """Per-sample variance `(3,)` implied by the config (see the module docstring)."""
    var = jnp.zeros(3, jnp.float32)
    if 'noise_stddev' in self.on:
      var = var + p.noise_stddev ** 2
    if 'noise_density' in self.on:
      white = signal.white_sigma(p.noise_density, self.period_s) ** 2
      if self.noise_before_filter and 'bandwidth_hz' in self.on:
        white = white * signal.lowpass_noise_gain(signal.lowpass_alpha(p.bandwidth_hz,
                                                                 self.period_s))
      var = var + white
    if 'resolution' in self.on:
      var = var + p.resolution ** 2 / 12.0
    return var

  def _gain(self, p: ChannelParams, x):
    if 'misalignment' in self.on:
      scale = p.scale if p.scale is not None else jnp.ones(3, x.dtype)
      return smallmat.matvec(jnp.diag(scale) + p.misalignment, x)   # I + diag(s − 1) + M
    if 'scale' in self.on:
      return p.scale * x
    return x

  @property
  def filters_every_tick(self) -> bool:
    return 'bandwidth_hz' in self.on and self.filter_rate == 'physics'

  def track(self, p: ChannelParams, cs: ChannelState, x, tick) -> ChannelState:
    """Every physics tick: the physics-rate low-pass of the gained input (else unchanged)."""
    if not self.filters_every_tick:
      return cs
    alpha = signal.lowpass_alpha(p.bandwidth_hz, self.dt)
    return cs._replace(filter=signal.lowpass(cs.filter, self._gain(p, x), alpha, tick == 0))

  def step(self, p: ChannelParams, cs: ChannelState, streams: dict, x, n, extra=None,
           gain=None):
    """One acquisition (sample `n`) of input `x` `(3,)`.

    Args:
      extra: an additive `(3,)` term applied after the errors (before range / resolution).
      gain: a `(3,)` factor on the signal after the bandwidth filter (before the errors added
        after it), or None.

    Returns:
      `(y, flags, state)`: the sample `(3,)`, saturation flags `(3,)` bool, the new state.
    """
    on, first, period = self.on, n == 0, self.period_s
    y = self._gain(p, x)
    ctx = self.error_ctx(streams, n)
    bias_chain, noise_chain = self.errors
    st = {'turn_on': cs.turn_on, 'instability': cs.instability,
          'random_walk': cs.random_walk, 'noise': cs.noise}
    st, bias, _ = bias_chain.apply(p, st, jnp.zeros(3, jnp.float32), ctx)   # truth's bias
    st, err, _ = noise_chain.apply(p, st, bias, ctx)
    if not (bias_chain.on_terms(ctx.on) or noise_chain.on_terms(ctx.on)):
      err = None                     # no error term in the graph

    before = self.noise_before_filter
    if before and err is not None:
      y = y + err
    filt = cs.filter
    if self.filters_every_tick:
      y = filt                       # tracked every tick; already includes this tick's input
    elif 'bandwidth_hz' in on:
      y = signal.lowpass(filt, y, signal.lowpass_alpha(p.bandwidth_hz, period), first)
      filt = y
    if gain is not None:
      y = gain * y
    if not before and err is not None:
      y = y + err
    if extra is not None:
      y = y + extra
    y, flags, count = signal.limit_and_quantize(
        y, cs.clip_count, p.limit if 'limit' in on else None,
        p.resolution if 'resolution' in on else None)
    return y, flags, cs._replace(filter=filt, instability=st['instability'],
                                 random_walk=st['random_walk'], noise=st['noise'], bias=bias,
                                 clip_count=count)


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


class RateSensor(base.FaultySensorFields):
  """A sensing component whose `channels` are the angular-velocity and linear-acceleration
  `Channel`s, with State fields of the same names (`fibril_sim/imu`, `fibril_sim/ahrs`), and
  faults / health (`fibril_mjx.mechanisms.faults`, a `faults` leaf in Params and State) on its rates.
  The common static fields come from `base.FaultySensorFields`."""
  fault_fields = ('angular_velocity', 'linear_acceleration')
  samples: ClassVar[tuple] = ()   # (Sample, Sample with `temperature_c` first) of the type

  def _sample(self, **fields):
    """The type's sample, the one with `temperature_c` when the thermal model delivers it."""
    plain, with_temperature = self.samples
    return (with_temperature if self.thermal is not None and self.thermal.output
            else plain)(**fields)

  def on_reset(self, p, s, index):
    """A device reset redraws the per-episode turn-on biases (draw `index` of their streams)."""
    new = {}
    for c, cp in zip(self.channels, (p.angular_velocity, p.linear_acceleration)):
      cs = getattr(s, c.name)
      if 'bias_turn_on_stddev' in c.on:
        turn_on = c.errors[0].redraw(cp, {'turn_on': cs.turn_on},
                                     c.error_ctx(s.streams), index)['turn_on']
        cs = cs._replace(turn_on=turn_on, bias=cs.bias - cs.turn_on + turn_on)
      new[c.name] = cs
    return s._replace(**new)

  def channel_path(self, field: str):
    """`(channel, channel field)` of a manifest field of the rate channels, or None."""
    for c in self.channels:
      if c.path(field):
        return c.path(field)
    return None

  def channel_uses(self, field: str) -> bool:
    path = self.channel_path(field)
    return path is not None and {c.name: c for c in self.channels}[path[0]].uses(path[1])

  def step_rates(self, p, s, gyro, accel, n, extra=None, accel_extra=None, gains=(None, None)):
    """Both channels of one acquisition.

    Returns:
      `(fields, state)`: the `RATE_SAMPLE_FIELDS` as a dict, the state with both channels
      updated. `extra` / `accel_extra` are additive `(3,)` terms on the angular velocity /
      linear acceleration, `gains` per-axis factors `(3,)` (or None) of the two channels.
    """
    w_c, a_c = self.channels
    w, w_flags, w_state = w_c.step(p.angular_velocity, s.angular_velocity, s.streams, gyro, n,
                                   extra=extra, gain=gains[0])
    a, a_flags, a_state = a_c.step(p.linear_acceleration, s.linear_acceleration, s.streams,
                                   accel, n, extra=accel_extra, gain=gains[1])
    fields = dict(zip(RATE_SAMPLE_FIELDS, (
        w, a, w_c.variance(p.angular_velocity), a_c.variance(p.linear_acceleration), w_flags,
        a_flags, w_state.clip_count, a_state.clip_count)))
    return fields, s._replace(angular_velocity=w_state, linear_acceleration=a_state)

  def neutral_rates(self, p) -> dict:
    """The rate fields of the neutral sample held before the first delivery."""
    z3, zi, zb = jnp.zeros(3, jnp.float32), jnp.zeros(3, jnp.int32), jnp.zeros(3, bool)
    w_c, a_c = self.channels
    return dict(zip(RATE_SAMPLE_FIELDS, (z3, z3, w_c.variance(p.angular_velocity),
                                         a_c.variance(p.linear_acceleration), zb, zb, zi, zi)))

  def describe(self) -> list[str]:
    return (self.describe_timing() + self.describe_sensors() + self.describe_channels()
            + [self.fault_plan.describe()])

  def describe_channels(self) -> list[str]:
    lines = []
    for c in self.channels:
      terms = [f for f in FIELDS if f in c.on]
      lines.append(f'{c.name} ({UNITS[c.name]}) terms on: {", ".join(terms) if terms else "none"}'
                   + (f'; filter at the {c.filter_rate} rate' if 'bandwidth_hz' in c.on else '')
                   + (' (errors before the low-pass)' if c.noise_before_filter else ''))
    return lines

  def status(self, s) -> dict:
    return {**super().status(s),
            'angular_velocity_clip_count': s.angular_velocity.clip_count,
            'linear_acceleration_clip_count': s.linear_acceleration.clip_count}

