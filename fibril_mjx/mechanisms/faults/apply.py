"""The health machine and the traced fault stages: windows in ticks, data faults, the reset
edges and the packet of an acquisition, which `fibril_mjx.mechanisms.sensing.sense` runs for a
component with a fault plan (see the package docstring)."""

from __future__ import annotations


import jax
import jax.numpy as jnp

from fibril_mjx.mechanisms.faults.spec import (BAD, DATA_TYPES, DEGRADED, FaultParams,
                                               FaultPlan, FaultState, HEALTHY, INVALID, MISSED,
                                               OK, RECOVERING, WEAK)


# ----------------------------------------------------------------------- health machine

def transition(health, streak, condition, invalid_after_missed: int, recovery_samples: int):
  """One step of the health state machine (docs/internals/faults.md, "Health").

  Args:
    health, streak: int32 current state and its counter.
    condition: int32 `OK`, `WEAK`, `MISSED` or `BAD` of this acquisition instant.

  Returns:
    `(health, streak)`.
  """
  h, c = health, condition
  ok = c == OK
  # HEALTHY / DEGRADED
  misses = jnp.where(h == DEGRADED, streak, 0) + 1
  hd_missed = jnp.where(misses >= invalid_after_missed, INVALID, DEGRADED)
  hd = jnp.select([ok, c == WEAK, c == MISSED], [HEALTHY, DEGRADED, hd_missed], INVALID)
  hd_streak = jnp.where(c == MISSED, misses, 0)
  # INVALID / RECOVERING
  good = jnp.where(h == RECOVERING, streak, 0) + 1
  rec = jnp.where(good >= recovery_samples, HEALTHY, RECOVERING)
  ir = jnp.where(ok, rec, INVALID)
  ir_streak = jnp.where(ok & (rec == RECOVERING), good, 0)
  calm = (h == HEALTHY) | (h == DEGRADED)
  return (jnp.where(calm, hd, ir).astype(jnp.int32),
          jnp.where(calm, hd_streak, ir_streak).astype(jnp.int32))


# ----------------------------------------------------------------------- fault stages

def _first_tick(seconds, dt):
  """First tick at or after `seconds` (float32; a bound within ~1e-4 tick after a tick counts
  as on it)."""
  x = seconds / dt
  finite = jnp.isfinite(x)
  safe = jnp.where(finite, x, 0.0)
  return jnp.where(finite, jnp.ceil(safe - (1e-4 + 2.4e-7 * jnp.abs(safe))), x)


def window(fp: FaultParams, tick, dt: float):
  """Whether the window `[start_s, end_s)` is active at `tick` (bounds rounded up to ticks)."""
  k = jnp.asarray(tick, jnp.float32)
  return (k >= _first_tick(fp.start_s, dt)) & (k < _first_tick(fp.end_s, dt))


def _replace_fields(sample, names, fn):
  return sample._replace(**{n: fn(n, getattr(sample, n)) for n in names})


def _cast(value, like):
  """`value` (a scalar, or one value per element of `like`) with the shape and dtype of
  `like`."""
  like = jnp.asarray(like)
  if jnp.shape(value) != like.shape and jnp.size(value) == like.size:   # e.g. [v] for a scalar
    value = jnp.reshape(value, like.shape)
  value = jnp.broadcast_to(value, like.shape)
  if jnp.issubdtype(like.dtype, jnp.floating):
    return value.astype(like.dtype)
  if like.dtype == jnp.bool_:
    return value != 0
  return jnp.round(value).astype(like.dtype)


def apply_data(plan: FaultPlan, fps, sample, last, has_last, tick, dt: float):
  """Applies the data faults active at `t` to `sample` (bias, stuck, NaN, sentinel).

  Args:
    fps: tuple of `FaultParams` (one per entry).
    last: the last packet sent (stuck without value freezes its fields); `has_last` whether
      there is one.
    tick: acquisition tick; dt: physics timestep (s).
  """
  t = jnp.asarray(tick, jnp.float32) * dt
  for kind, names, fp, has_value in zip(plan.types, plan.fields, fps, plan.has_value):
    if kind not in DATA_TYPES:
      continue
    on = window(fp, tick, dt)
    if kind == 'bias_step':
      fn = lambda n, x, fp=fp: x + _cast(fp.value, x)                            # noqa: E731
    elif kind == 'bias_ramp':
      fn = lambda n, x, fp=fp: x + _cast(fp.value * (t - fp.start_s), x)         # noqa: E731
    elif kind == 'nan':
      fn = lambda n, x: jnp.full_like(x, jnp.nan)                                # noqa: E731
    elif kind == 'sentinel':
      fn = lambda n, x, fp=fp: _cast(fp.value, x)                                # noqa: E731
    elif has_value:   # stuck at a given value
      fn = lambda n, x, fp=fp: _cast(fp.value, x)                                # noqa: E731
    else:   # stuck, frozen at the last value sent (the current one before any was sent)
      fn = lambda n, x: jnp.where(has_last, getattr(last, n), x)                 # noqa: E731
    sample = _replace_fields(sample, names,
                             lambda n, x, fn=fn, on=on: jnp.where(on, fn(n, x), x))
  return sample


def reset_edges(plan: FaultPlan, fps, st, fs: FaultState, tick, dt: float, reset=None):
  """The reset edges of one acquisition: the first one inside a reset window re-initializes
  the device.

  Args:
    fps: tuple of `FaultParams`; st: the component's state; fs: its `FaultState`.
    reset: `(state, index) -> state`, the component's re-initialized state after its
      `index`-th reset, or None (a reset leaves the state as it is).

  Returns:
    `(state, fault state)`.
  """
  for j, i in enumerate(plan.resets):
    edge = window(fps[i], tick, dt) & ~fs.reset_done[j]
    if reset is not None:
      st = jax.tree.map(lambda a, b, e=edge: jnp.where(e, a, b), reset(st, fs.resets + 1), st)
    fs = fs._replace(reset_done=fs.reset_done.at[j].set(fs.reset_done[j] | edge),
                     resets=fs.resets + edge.astype(jnp.int32))
  return st, fs


def packet(plan: FaultPlan, fps, fs: FaultState, sample, cond, n, tick, dt: float):
  """What the faults make of acquisition `n` (docs/internals/faults.md, "Sensor fault types"):
  data faults → condition → health → stale packet.

  Args:
    fps: tuple of `FaultParams`; fs: the `FaultState` after the reset edges.
    sample: the acquired sample (a NamedTuple; its `health` field, where it has one, is set).
    cond: int32 `OK` or `WEAK`, the component's own condition.
    tick: acquisition tick; dt: physics timestep (s).

  Returns:
    `(sample, sequence, stamp, active, fault state)`: the packet to send as `sequence` stamped
    `stamp` when `active` (per-world bool; None where no fault entry can hold it back).
  """
  missed = jnp.bool_(False)
  bad = jnp.bool_(False)
  if plan.types:
    sample = apply_data(plan, fps, sample, fs.last, fs.last_sequence >= 0, tick, dt)
    for kind, fp, warm in zip(plan.types, fps, plan.warmup_s):
      on = window(fp, tick, dt)
      if kind == 'dropout':
        missed = missed | on
      elif kind == 'reset':
        missed = missed | on
        if warm > 0:
          warming = FaultParams(fp.end_s, fp.end_s + warm, fp.value)
          bad = bad | window(warming, tick, dt)
      elif kind == 'invalid_status':
        bad = bad | on
  health, streak = fs.health, fs.streak
  if plan.active:
    cond = jnp.where(missed, MISSED, jnp.where(bad, BAD, cond)).astype(jnp.int32)
    health, streak = transition(fs.health, fs.streak, cond, plan.invalid_after_missed,
                                plan.recovery_samples)
  if 'health' in type(sample)._fields:
    sample = sample._replace(health=health)
  seq, stamp = jnp.asarray(n, jnp.int32), jnp.asarray(tick, jnp.int32)
  stale = jnp.bool_(False)
  has_last = fs.last_sequence >= 0
  for kind, fp in zip(plan.types, fps):
    if kind in ('stale_new_timestamp', 'stale_old_timestamp'):
      on = window(fp, tick, dt) & has_last
      stale = stale | on
      sample = jax.tree.map(lambda a, b, on=on: jnp.where(on, a, b), fs.last, sample)
      if kind == 'stale_old_timestamp':
        seq = jnp.where(on, fs.last_sequence, seq)
        stamp = jnp.where(on, fs.last_tick, stamp)
  send = ~missed
  if not plan.active:
    return sample, seq, stamp, None, fs
  fs = fs._replace(health=health, streak=streak)
  if plan.types:
    keep = send & ~stale
    fs = fs._replace(
        last=jax.tree.map(lambda a, b: jnp.where(keep, a, b), sample, fs.last),
        last_sequence=jnp.where(keep, seq, fs.last_sequence),
        last_tick=jnp.where(keep, stamp, fs.last_tick),
        dropped=fs.dropped + missed.astype(jnp.int32))
  return sample, seq, stamp, send if plan.types else None, fs
