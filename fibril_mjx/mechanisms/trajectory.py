"""Time-optimal trapezoidal trajectories (bounded velocity and acceleration) that end at rest:
the setpoint generator of a motor driver's `trajectory` commands, pure JAX."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Plan(NamedTuple):
  """A time-optimal trapezoid from `(p0, v0)` to rest at `p0 + sigma·dist`, started at
  application instant `n0` (joint units; `u0 = sigma·v0`)."""
  p0: jax.Array
  u0: jax.Array
  sigma: jax.Array
  peak: jax.Array
  t1: jax.Array
  t2: jax.Array
  t3: jax.Array
  dist: jax.Array
  n0: jax.Array


def trapezoid_plan(p0, v0, target, vmax, amax, n0) -> Plan:
  """Time-optimal rest-ending profile from `(p0, v0)` with |v| ≤ vmax, |a| ≤ amax (|v0| ≤ vmax).

  Direction: towards the target after accounting for the stopping distance `v0|v0|/(2a)`;
  accelerate to the peak, cruise at vmax if the peak would exceed it, decelerate to rest.
  """
  e = target - p0
  d = e - v0 * jnp.abs(v0) / (2 * amax)
  sigma = jnp.where(d != 0, jnp.sign(d), jnp.where(v0 != 0, jnp.sign(v0), 1.0))
  u0 = sigma * v0
  dist = sigma * e
  peak = jnp.sqrt(jnp.maximum(0.0, (2 * amax * dist + u0 * u0) / 2))
  cruise = peak > vmax
  peak = jnp.minimum(peak, vmax)
  d1 = (peak * peak - u0 * u0) / (2 * amax)
  d3 = peak * peak / (2 * amax)
  t1 = jnp.maximum(0.0, (peak - u0) / amax)
  t2 = jnp.where(cruise, jnp.maximum(0.0, (dist - d1 - d3) / vmax), 0.0)
  t3 = peak / amax
  return Plan(p0, u0, sigma, peak, t1, t2, t3, dist, jnp.asarray(n0, jnp.int32))


def trapezoid_sample(pl: Plan, t, amax):
  """Position and velocity of a plan at time `t ≥ 0` after its start."""
  u0, vp, t1, t2, t3 = pl.u0, pl.peak, pl.t1, pl.t2, pl.t3
  d1 = u0 * t1 + amax * t1 * t1 / 2
  ta = jnp.minimum(t, t1)
  tc = jnp.clip(t - t1, 0.0, t2)
  td = jnp.clip(t - t1 - t2, 0.0, t3)
  s = jnp.where(t < t1, u0 * ta + amax * ta * ta / 2,
                d1 + vp * tc + vp * td - amax * td * td / 2)
  u = jnp.where(t < t1, u0 + amax * ta, jnp.where(t < t1 + t2, vp, vp - amax * td))
  done = t >= t1 + t2 + t3
  s = jnp.where(done, pl.dist, s)
  u = jnp.where(done, 0.0, u)
  return pl.p0 + pl.sigma * s, pl.sigma * u
