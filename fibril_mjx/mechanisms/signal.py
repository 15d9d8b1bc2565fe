"""Signal mechanisms shared by every component: first-order filter, AR(1) / Gauss–Markov,
saturation and quantization. Pure, elementwise, single-world."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp

# Straight-through derivatives (tuning, SPEC §11): rounding and clipping have zero derivative
# almost everywhere, so a gradient through a quantized or saturated output is silently 0.
# Inside `straight_through()`, functions *traced* there use the same forward values but pass
# the input's derivative through unchanged (d quantize(x)/dx = 1, d saturate(x)/dx = 1). A
# trace-time switch (static, like every term switch): code jitted outside the context keeps
# the exact zero derivatives, so only the tuner's own jitted functions see it.
_STRAIGHT_THROUGH = [False]


@contextlib.contextmanager
def straight_through(on: bool = True):
  """Traces quantization and saturation with straight-through derivatives (see above)."""
  prev = _STRAIGHT_THROUGH[0]
  _STRAIGHT_THROUGH[0] = on
  try:
    yield
  finally:
    _STRAIGHT_THROUGH[0] = prev


def straight_through_active() -> bool:
  """Whether code traced now gets straight-through derivatives."""
  return _STRAIGHT_THROUGH[0]


@jax.custom_jvp
def _clip_st(x, limit):
  return jnp.clip(x, -limit, limit)


@_clip_st.defjvp
def _clip_st_jvp(primals, tangents):
  x, limit = primals
  return _clip_st(x, limit), tangents[0]


@jax.custom_jvp
def _round_st(x, step):
  return step * jnp.round(x / step)


@_round_st.defjvp
def _round_st_jvp(primals, tangents):
  x, step = primals
  return _round_st(x, step), tangents[0]


def lowpass_alpha(bandwidth_hz, period_s):
  """Update coefficient `α = 1 − exp(−2π f_c Δ)` of a first-order low-pass."""
  return -jnp.expm1(-2.0 * jnp.pi * bandwidth_hz * period_s)


def lag_alpha(period_s, time_constant_s):
  """Update coefficient `α = 1 − exp(−Δ/τ)` of a first-order lag of time constant τ updated
  every Δ; `τ <= 0` gives 1 (no lag), without a division by zero in the gradient."""
  tau = jnp.where(time_constant_s > 0, time_constant_s, 1.0)
  return jnp.where(time_constant_s > 0, -jnp.expm1(-period_s / tau), 1.0)


def lowpass(y_prev, x, alpha, first):
  """`y = y_prev + α (x − y_prev)`; the first update returns `x` (no turn-on transient)."""
  return jnp.where(first, x, y_prev + alpha * (x - y_prev))


def ar1(n_prev, z, rho, sigma, first):
  """Stationary AR(1): `n[0] = σ z`, `n[k] = ρ n[k−1] + σ √(1−ρ²) z`.

  Also the exact discretization of a first-order Gauss–Markov process with `ρ = exp(−Δ/τ)`.
  """
  return jnp.where(first, sigma * z, rho * n_prev + sigma * jnp.sqrt(1.0 - rho * rho) * z)


def saturate(x, limit):
  """Clips to `±limit`; returns `(clipped, flags)` with per-element `|x| > limit` flags.

  Straight-through derivative inside `straight_through()`."""
  if _STRAIGHT_THROUGH[0]:
    return _clip_st(x, limit), jnp.abs(x) > limit
  return jnp.clip(x, -limit, limit), jnp.abs(x) > limit


def quantize(x, step):
  """`step · round(x / step)` (straight-through derivative inside `straight_through()`)."""
  if _STRAIGHT_THROUGH[0]:
    return _round_st(x, step)
  return step * jnp.round(x / step)


def gauss_markov_phi(period_s, correlation_time_s):
  """AR(1) coefficient `φ = exp(−Δ/τ)` of a first-order Gauss–Markov process sampled every Δ.

  With `ar1(..., rho=φ, sigma=σ_stationary)` this is the exact discretization (not Euler).
  `τ <= 0` returns 0 (white), without a division by zero in the gradient.
  """
  safe = jnp.where(correlation_time_s > 0, correlation_time_s, 1.0)
  return jnp.where(correlation_time_s > 0, jnp.exp(-period_s / safe), 0.0)


def random_walk(b_prev, z, k, period_s, first):
  """Random walk `b[0] = 0`, `b[k] = b[k−1] + K·√Δ·z[k]` (K in units/√s; Var b[k] = K²·kΔ)."""
  return jnp.where(first, jnp.zeros_like(b_prev), b_prev + k * jnp.sqrt(period_s) * z)


def white_sigma(noise_density, period_s):
  """Per-sample σ = `N·√(1/Δ)` of white noise of density N (IEEE-952 / Kalibr convention)."""
  return noise_density / jnp.sqrt(period_s)


def lowpass_noise_gain(alpha):
  """Variance gain `α/(2−α)` of the first-order low-pass on white input (stationary)."""
  return alpha / (2.0 - alpha)

