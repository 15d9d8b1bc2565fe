"""The error terms sensors compose: each a factory over manifest field names returning a `Term`.

Every term reuses a mechanism of `fibril_mjx.mechanisms` (AR(1) / Gauss–Markov, first-order lag
and low-pass, saturation, quantization, named streams); none re-derives one. A field given as a tuple of
names (`scale=('h', 'h', 'v')`) is stacked per axis, so one term serves a vector sensor whose
axes have different scales.
"""

from __future__ import annotations

from typing import Annotated

import jax.numpy as jnp
import pydantic

from fibril_mjx.error_models.core import (DETERMINISTIC, SLOW, STOCHASTIC, ConfigField, Term,
                                          check, is_set)
from fibril_mjx.errors import ConfigError, ConfigErrors
from fibril_mjx.mechanisms import faults, quat, rng, smallmat
from fibril_mjx.mechanisms import signal as sig

NonNeg = Annotated[float, pydantic.Field(ge=0)]
Positive = Annotated[float, pydantic.Field(gt=0)]
Vec3 = tuple[float, float, float]
NonNeg3 = tuple[NonNeg, NonNeg, NonNeg]
Positive3 = tuple[Positive, Positive, Positive]
ZERO3 = (0.0, 0.0, 0.0)


def _nonneg(names, shape):
  """Config fields of non-negative scales: a vector field for shape `(3,)` given by one name."""
  if shape == (3,) and len(names) == 1:
    return tuple(ConfigField(n, NonNeg3, ZERO3) for n in names)
  return tuple(ConfigField(n, NonNeg, 0.0) for n in names)


def _names(field) -> tuple[str, ...]:
  return (field,) if isinstance(field, str) else tuple(dict.fromkeys(field))


def _scale(p, field):
  """The Params value of `field`, or the per-axis stack of a tuple of fields."""
  if isinstance(field, str):
    return getattr(p, field)
  return jnp.stack([getattr(p, f) for f in field])


def _zeros(shape, dtype=jnp.float32):
  return lambda: jnp.zeros(shape, dtype)


def _positive_where_on(build, tau: str, sigma: str):
  """`tau > 0` where `sigma` is on (a Gauss–Markov process needs a correlation time); per axis
  where `tau` is given per axis (each axis whose σ is > 0, or every axis where `sigma` is named
  for per-world variation)."""
  t = getattr(build.cfg, tau)
  if not isinstance(t, tuple):
    check(t > 0 or not build.is_on(sigma), *build.origin(tau),
          f'must be > 0 where {sigma} > 0 (Gauss–Markov correlation time)', t)
    return
  file, path = build.origin(tau)
  errors = [ConfigError(file, f'{path}[{i}]', f'must be > 0 where {sigma}[{i}] > 0 '
                        '(Gauss–Markov correlation time)', t_i)
            for i, (s_i, t_i) in enumerate(zip(getattr(build.cfg, sigma), t))
            if (s_i > 0 or sigma in build.vary) and not t_i > 0]
  if errors:
    raise ConfigErrors(errors)


def constant_bias(field: str, shape=()) -> Term:
  """`x + b`: a fixed offset (`bias_pa`, `offset_pa`)."""
  ann, default = (Vec3, ZERO3) if shape == (3,) else (float, 0.0)

  def apply(p, st, x, ctx):
    return st, x + getattr(p, field), None
  return Term('constant bias', DETERMINISTIC, (ConfigField(field, ann, default),), (field,),
              (field,), apply=apply)


def gain(field: str, shape=(), cross: str | None = None) -> Term:
  """`k·x`: a scale factor, 1 by default (then compiled out); per axis for shape `(3,)`.

  Args:
    cross: a `(3, 3)` field of off-diagonal cross-axis terms `M` (zero diagonal, 0 by
      default), or None: where it is on, `(diag(k) + M)·x` (`I + diag(k − 1) + M`).
  """
  ann, default = (Positive3, (1.0, 1.0, 1.0)) if shape == (3,) else (Positive, 1.0)
  config = (ConfigField(field, ann, default),)
  if cross is None:
    def apply(p, st, x, ctx):
      return st, getattr(p, field) * x, None
    return Term('scale factor', DETERMINISTIC, config, (field,), (field,), apply=apply)

  def apply_cross(p, st, x, ctx):
    if not ctx.on(cross):
      return st, getattr(p, field) * x, None
    return st, smallmat.matvec(jnp.diag(getattr(p, field)) + getattr(p, cross), x), None
  return Term('scale factor and cross-axis', DETERMINISTIC,
              config + (ConfigField(cross, tuple[Vec3, Vec3, Vec3], (ZERO3,) * 3),),
              (field, cross), (field, cross), apply=apply_cross,
              reads=lambda on: (field, cross) if on(cross) else (field,))


def turn_on_bias(field: str, shape=(), stream: str = 'bias_turn_on',
                 state: str = 'turn_on') -> Term:
  """`x + b_on`, `b_on ~ N(0, σ²)` drawn once per episode (draw 0 of `stream`), redrawn at a
  device reset (draw `index`)."""

  def draw(p, st, ctx, index):
    return {**st, state: getattr(p, field) * rng.normal(ctx.streams[stream], index, shape)}

  def apply(p, st, x, ctx):
    return st, x + st[state], None
  return Term('turn-on bias', SLOW, _nonneg((field,), shape), (field,), (field,), (field,),
              ((state, _zeros(shape)),), (stream,),
              init=lambda p, st, ctx: draw(p, st, ctx, 0), apply=apply, redraw=draw,
              episode=True)


def gauss_markov(sigma: str, tau: str, stream: str, state: str, shape=(), at=None,
                 size=None, add: bool = True) -> Term:
  """First-order Gauss–Markov drift of stationary σ and correlation time τ (exact AR(1)
  discretization, stationary start: `signal.ar1` with `φ = exp(−Δ/τ)`).

  Args:
    shape: shape of one draw.
    at: index (int) or `(start, stop)` of the draw in a larger state vector of `size`
      (several processes sharing one state field, e.g. horizontal and vertical GNSS error).
    add: whether `apply` adds the state to `x` (False: the sensor reads the state).
  """
  index = slice(*at) if isinstance(at, tuple) else at
  st_shape = shape if size is None else (size,)

  def apply(p, st, x, ctx):
    phi = sig.gauss_markov_phi(ctx.period_s, getattr(p, tau))
    z = rng.normal(ctx.streams[stream], ctx.n, shape)
    if index is None:
      g = sig.ar1(st[state], z, phi, getattr(p, sigma), ctx.first)
    else:
      g = st[state].at[index].set(sig.ar1(st[state][index], z, phi, getattr(p, sigma),
                                          ctx.first))
    return {**st, state: g}, (x + g if add else x), None
  return Term('Gauss–Markov drift', SLOW, _nonneg((sigma,), shape) + (ConfigField(
      tau, NonNeg, 0.0),), (sigma, tau), (sigma,), (sigma,), ((state, _zeros(st_shape)),),
      (stream,), apply=apply, check=lambda b: _positive_where_on(b, tau, sigma))


def random_walk(k: str, stream: str, state: str, shape=()) -> Term:
  """`x + b[k]`, `b[0] = 0`, `b[k] = b[k−1] + K·√Δ·z[k]` (`signal.random_walk`; K in units/√s,
  Var b[k] = K²·kΔ)."""

  def apply(p, st, x, ctx):
    b = sig.random_walk(st[state], rng.normal(ctx.streams[stream], ctx.n, shape), getattr(p, k),
                        ctx.period_s, ctx.first)
    return {**st, state: b}, x + b, None
  return Term('random walk', SLOW, _nonneg((k,), shape), (k,), (k,), (k,),
              ((state, _zeros(shape)),), (stream,), apply=apply)


def common_mode(scale, tau: str, stream: str, state: str, shared: str, shape=()) -> Term:
  """`x + s·u[k]`: a unit Gauss–Markov process `u` (correlation time τ) on the shared stream
  `shared:<cfg.<shared>>`, so every sensor naming that stream sees the same process (weather,
  an external field, the atmosphere), each with its own scale `s`."""
  names = _names(scale)
  what = f'{names[0]} > 0' if len(names) == 1 else 'a common-mode stddev > 0'

  def apply(p, st, x, ctx):
    phi = sig.gauss_markov_phi(ctx.period_s, getattr(p, tau))
    u = sig.ar1(st[state], rng.normal(ctx.streams[stream], ctx.n, shape), phi, 1.0, ctx.first)
    return {**st, state: u}, x + _scale(p, scale) * u, None

  def rules(b):
    check(getattr(b.cfg, tau) > 0 or not any(b.is_on(f) for f in names), *b.origin(tau),
          f'must be > 0 where {what} (Gauss–Markov correlation time)', getattr(b.cfg, tau))
    check(getattr(b.cfg, shared) is not None or not any(is_set(b.cfg, f) for f in names),
          *b.origin(shared),
          f'must name a shared stream where {what}', getattr(b.cfg, shared))
    faults.check_shared_stream(b.ctx, b.cid, b.cfg, shared, ('period_s', 'phase_s', tau),
                               b.origin)
  config = (ConfigField(shared, str | None, None),) + _nonneg(names, shape) + (
      ConfigField(tau, NonNeg, 0.0),)
  return Term('common-mode process', SLOW, config, names + (tau,), names, names,
              ((state, _zeros(shape)),), (stream,), shared=shared, apply=apply, check=rules)


def white_noise(sigma, stream: str = 'noise', shape=(), scale_fn=None, extra=()) -> Term:
  """`x + σ·w[k]`, `w` standard normal, one draw per sample (draw `n` of `stream`).

  Args:
    sigma: field (or per-axis tuple of fields) of the per-sample σ.
    shape: shape of one draw; None: the shape of the signal (a beam or landmark count known
      only once the sensor is built).
    scale_fn: `scale_fn(p, ctx) -> σ` when σ depends on the sensor's inputs (e.g. a range);
      then `sigma` lists the fields that scale it (any on switches the term on).
    extra: further fields `scale_fn` reads that do not switch it (e.g. a gain on σ).
  """
  names = _names(sigma)
  sigma_of = scale_fn or (lambda p, ctx: _scale(p, sigma))

  def apply(p, st, x, ctx):
    draw = jnp.shape(x) if shape is None else shape
    return st, x + sigma_of(p, ctx) * rng.normal(ctx.streams[stream], ctx.n, draw), None
  return Term('white noise', STOCHASTIC, _nonneg(names, shape or ()) + _nonneg(extra, ()),
              names + tuple(extra), names, names, (), (stream,), apply=apply,
              variance=lambda p, ctx: sigma_of(p, ctx) ** 2)


def ar1_noise(sigma: str, rho: str, stream: str, state: str, shape=(), owns_stream=True) -> Term:
  """`x + n[k]`, a stationary AR(1) residual `n[0] = σξ[0]`, `n[k] = ρ n[k−1] + σ√(1−ρ²) ξ[k]`
  (`signal.ar1`; ρ a field, 0 where the Params leaf is None: white of variance σ²).

  Args:
    owns_stream: False when another term of the chain draws `stream` and this one reads the
      same ξ (an inertial channel's white noise and residual share one draw per sample).
  """

  def apply(p, st, x, ctx):
    r = getattr(p, rho)
    n = sig.ar1(st[state], rng.normal(ctx.streams[stream], ctx.n, shape),
                r if r is not None else 0.0, getattr(p, sigma), ctx.first)
    return {**st, state: n}, x + n, None
  return Term('AR(1) residual', STOCHASTIC, _nonneg((sigma,), shape) + (ConfigField(
      rho, NonNeg, 0.0),), (sigma, rho), (sigma,), (sigma,), ((state, _zeros(shape)),),
      (stream,) if owns_stream else (), apply=apply,
      variance=lambda p, ctx: getattr(p, sigma) ** 2)


def narrowband(sigma: str, freq: str, bandwidth: str, stream: str, state: str,
               shape=()) -> Term:
  """`x + y[k]`: a narrowband random process (a vibration line whose phase and amplitude
  wander), the second-order resonant Gauss–Markov process `y[k] = a1·y[k−1] + a2·y[k−2] +
  c·ξ[k]` with poles `r·e^{±iθ}`, `θ = 2π f0 Δ`, `r = exp(−π B Δ)` (`a1 = 2r cos θ`,
  `a2 = −r²`; centre frequency f0 Hz, −3 dB bandwidth ≈ B Hz), `c` chosen so that the
  stationary std is σ: `γ0 = c²(1 − a2)/((1 + a2)((1 − a2)² − a1²)) = σ²`. Stationary start:
  `(y[−1], y[−2])` drawn from the stationary pair (lag-1 correlation `a1/(1 − a2)`).

  Args:
    sigma, freq, bandwidth: fields of σ (units of the signal), f0 and B in Hz (f0 below the
      Nyquist frequency 1/(2Δ), B > 0 where σ > 0).
    stream: three standard normals per sample (innovation, two for the stationary start).
    state: `(2, *shape)`: `y[k−1]`, `y[k−2]`.
  """

  def apply(p, st, x, ctx):
    dt = ctx.period_s
    r = jnp.exp(-jnp.pi * getattr(p, bandwidth) * dt)
    a1, a2 = 2.0 * r * jnp.cos(2.0 * jnp.pi * getattr(p, freq) * dt), -r * r
    s = getattr(p, sigma)
    gain = jnp.sqrt(jnp.maximum((1.0 + a2) * ((1.0 - a2) ** 2 - a1 * a1) / (1.0 - a2), 0.0))
    rho1 = a1 / (1.0 - a2)
    z = rng.normal(ctx.streams[stream], ctx.n, (3,) + tuple(shape))
    y2 = s * z[1]
    y1 = rho1 * y2 + s * jnp.sqrt(jnp.maximum(1.0 - rho1 * rho1, 0.0)) * z[2]
    prev = jnp.where(ctx.first, jnp.stack([y1, y2]), st[state])
    y = a1 * prev[0] + a2 * prev[1] + s * gain * z[0]
    return {**st, state: jnp.stack([y, prev[0]])}, x + y, None

  def rules(b):
    file = b.origin(sigma)[0]
    period = b.cfg.period_s   # a sampled sensor's output period (the chain's Δ)
    per_axis = lambda v: v if isinstance(v, tuple) else (v,)
    errors = []
    for i, (s_i, f_i, b_i) in enumerate(zip(*(per_axis(getattr(b.cfg, n))
                                               for n in (sigma, freq, bandwidth)))):
      if not (s_i > 0 or sigma in b.vary):
        continue
      at = (lambda n: f'{b.origin(n)[1]}[{i}]') if shape else (lambda n: b.origin(n)[1])
      if not b_i > 0:
        errors.append(ConfigError(file, at(bandwidth), f'must be > 0 where {sigma} > 0 '
                                  '(bandwidth of the narrowband process)', b_i))
      if period and not 0.0 < f_i < 0.5 / period:
        errors.append(ConfigError(file, at(freq), f'must be > 0 and below the Nyquist '
                                  f'frequency 1/(2·period_s) = {0.5 / period:g} Hz where '
                                  f'{sigma} > 0', f_i))
    if errors:
      raise ConfigErrors(errors)
  config = _nonneg((sigma,), shape) + _nonneg((freq,), shape) + _nonneg((bandwidth,), shape)
  return Term('narrowband process', SLOW, config, (sigma, freq, bandwidth), (sigma,), (sigma,),
              ((state, _zeros((2,) + tuple(shape))),), (stream,), apply=apply, check=rules)


def sinusoids(amplitude: str, angles: str = 'angles') -> Term:
  """`x + Σ_k A[k]·sin(φ[k])`: lines of amplitudes `A` (field `amplitude`, `(K, 3)`) at the
  angles `φ = ctx.inputs[angles]` `(K, 3)` of the sample (the sensor's: e.g. orders of a shaft
  angle plus their phases); deterministic given the angles."""

  def apply(p, st, x, ctx):
    return st, x + jnp.sum(getattr(p, amplitude) * jnp.sin(ctx.inputs[angles]), axis=0), None
  return Term('sinusoidal lines', DETERMINISTIC, (ConfigField(amplitude, tuple[Vec3, ...], ()),),
              (amplitude,), (amplitude,), apply=apply)


def first_order_lag(tau: str, state: str = 'lagged', started: str = 'started') -> Term:
  """First-order lag of time constant τ, updated every `ctx.period_s` and started at the first
  value (no turn-on transient); `apply` returns the lagged value."""

  def apply(p, st, x, ctx):
    alpha = sig.lag_alpha(ctx.period_s, getattr(p, tau))
    lagged = jnp.where(st[started], st[state] + alpha * (x - st[state]), x)
    return {**st, state: lagged, started: jnp.bool_(True)}, lagged, None
  return Term('first-order lag', DETERMINISTIC, (ConfigField(tau, NonNeg, 0.0),), (tau,),
              (tau,), (), ((state, _zeros(())), (started, lambda: jnp.bool_(False))),
              apply=apply)


def lowpass(bandwidth: str, state: str = 'filter', shape=(3,), quaternion: bool = False) -> Term:
  """First-order low-pass of cutoff `f_c` (field `bandwidth`, Hz): `y += α(x − y)`,
  `α = 1 − exp(−2π f_c Δ)` (`signal.lowpass_alpha`, Δ = `ctx.period_s`), started at the first
  input (`ctx.first`: no turn-on transient); `apply` returns the filtered value, also its state.

  Args:
    quaternion: `x` is a unit quaternion `[w, x, y, z]` (shape `(4,)`): taken in the hemisphere
      of the filter state before the update, the output renormalized (an attitude low-pass); its
      state starts at the identity.
  """
  zero = (lambda: jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32)) if quaternion else _zeros(shape)

  def apply(p, st, x, ctx):
    prev = st[state]
    if quaternion:
      x = jnp.where(jnp.dot(prev, x) < 0, -x, x)
    y = sig.lowpass(prev, x, sig.lowpass_alpha(getattr(p, bandwidth), ctx.period_s), ctx.first)
    if quaternion:
      y = quat.normalize(y)
    return {**st, state: y}, y, None
  return Term('first-order low-pass', DETERMINISTIC, (ConfigField(bandwidth, NonNeg, 0.0),),
              (bandwidth,), (bandwidth,), (), ((state, zero),), apply=apply)


def saturation(limit: str, count: str = 'clip_count', shape=()) -> Term:
  """Clips to `±limit` (`signal.saturate`); flags the clipped elements and counts them."""

  def apply(p, st, x, ctx):
    x, flags = sig.saturate(x, getattr(p, limit))
    return {**st, count: st[count] + flags.astype(jnp.int32)}, x, flags
  return Term('saturation', DETERMINISTIC, (ConfigField(limit, NonNeg, 0.0),), (limit,),
              (limit,), (), ((count, _zeros(shape, jnp.int32)),), apply=apply,
              counters=(count,))


def bounds(low: str, high: str, count: str = 'clip_count') -> Term:
  """Clips to `[low, high]` (high left at 0: no upper bound); flags and counts clipped
  samples."""

  def apply(p, st, x, ctx):
    hi = getattr(p, high) if ctx.on(high) else jnp.inf
    lo = getattr(p, low)
    flag = (x < lo) | (x > hi)
    return {**st, count: st[count] + flag.astype(jnp.int32)}, jnp.clip(x, lo, hi), flag

  def rules(b):
    lo, hi = getattr(b.cfg, low), getattr(b.cfg, high)
    check(not hi or hi > lo, *b.origin(high), f'must be > {low} = {lo:g} (or 0: no upper '
          'limit)', hi)
  config = (ConfigField(low, NonNeg, 0.0), ConfigField(high, NonNeg, 0.0))
  return Term('range limits', DETERMINISTIC, config, (low, high), (low, high), (),
              ((count, _zeros((), jnp.int32)),), apply=apply, check=rules, counters=(count,))


def quantization(step: str) -> Term:
  """`step·round(x/step)` (`signal.quantize`); variance `step²/12` (uniform rounding error)."""

  def apply(p, st, x, ctx):
    return st, sig.quantize(x, getattr(p, step)), None
  return Term('quantization', DETERMINISTIC, (ConfigField(step, NonNeg, 0.0),), (step,),
              (step,), apply=apply, variance=lambda p, ctx: getattr(p, step) ** 2 / 12.0)
