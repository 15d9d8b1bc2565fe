"""Signal mechanisms shared by every component: first-order filter, AR(1) / Gauss–Markov,
saturation and quantization. Pure, elementwise, single-world."""

from __future__ import annotations

import jax.numpy as jnp


def lowpass_alpha(bandwidth_hz, period_s):
  """Update coefficient `α = 1 − exp(−2π f_c Δ)` of a first-order low-pass."""
  return -jnp.expm1(-2.0 * jnp.pi * bandwidth_hz * period_s)


def lowpass(y_prev, x, alpha, first):
  """`y = y_prev + α (x − y_prev)`; the first update returns `x` (no turn-on transient)."""
  return jnp.where(first, x, y_prev + alpha * (x - y_prev))


def ar1(n_prev, z, rho, sigma, first):
  """Stationary AR(1): `n[0] = σ z`, `n[k] = ρ n[k−1] + σ √(1−ρ²) z`.

  Also the exact discretization of a first-order Gauss–Markov process with `ρ = exp(−Δ/τ)`.
  """
  return jnp.where(first, sigma * z, rho * n_prev + sigma * jnp.sqrt(1.0 - rho * rho) * z)


def saturate(x, limit):
  """Clips to `±limit`; returns `(clipped, flags)` with per-element `|x| > limit` flags."""
  return jnp.clip(x, -limit, limit), jnp.abs(x) > limit


def quantize(x, step):
  """`step · round(x / step)`."""
  return step * jnp.round(x / step)
