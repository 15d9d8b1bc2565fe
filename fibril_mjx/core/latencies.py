"""Transport latencies that differ per world (`Simulation.reset(start=Start(latency=))`, a
campaign's or a tune's per-world latency): which fields may, their host validation and
rounding to whole ticks, and one world's values written into its components' delivery queues
(`pipeline.init`, before anything is sent)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.core.built import Built
from fibril_mjx.errors import FibrilError, did_you_mean
from fibril_mjx.mechanisms import jax_compat, schedule, transport

# The manifest field → (the component's `Transport` attribute, the path of its queue in the
# state).
LATENCY_FIELDS = {'latency_s': ('transport', ('queue',)),
                  'command_latency_s': ('link.transport', ('link', 'queue')),
                  'feedback_latency_s': ('fb_transport', ('fb_queue',))}


def latency_ticks(latency_s: float, dt: float) -> int:
  """A latency in whole ticks, rounded up as the manifest's transports round it
  (`schedule.ticks_fraction`: exact within 1e-9 relative)."""
  return int(math.ceil(schedule.ticks_fraction(float(latency_s), dt)))


def _attr_path(obj, dotted: str):
  for a in dotted.split('.'):
    obj = getattr(obj, a, None)
  return obj


def _replace_path(state, path: tuple, fn):
  """`state` (nested NamedTuples) with `fn` applied at `path`."""
  if not path:
    return fn(state)
  return state._replace(**{path[0]: _replace_path(getattr(state, path[0]), path[1:], fn)})


def latency_fields(built: Built) -> dict:
  """`{component id: (latency field, ...)}`: the transport latencies that may differ per world
  (`init(latency=)`), e.g. `{'ahrs': ('latency_s',)}`."""
  out = {}
  for cid, c in built.components.items():
    names = tuple(n for n, (attr, _) in LATENCY_FIELDS.items()
                  if isinstance(_attr_path(c, attr), transport.Transport))
    if names:
      out[cid] = names
  return out


def latency_inputs(built: Built, latency: dict | None, n_worlds: int) -> dict | None:
  """Validates per-world latencies and rounds them to whole ticks on the host.

  Args:
    latency: `{component id: {latency field: seconds, () or (nworld,)}}` (see
      `Simulation.reset`).

  Returns:
    `{component id: {field: (latency_s float32 (nworld,), delay_ticks int32 (nworld,))}}`,
    or None without latencies; one world's slice is `init`'s `latency`.

  Raises:
    FibrilError: an unknown component or field, a traced value, a negative or non-finite
      value, one above the built latency (which sized the queue), or one that is not a
      whole number of ticks under `quantization: strict`.
  """
  if not latency:
    return None
  if any(jax_compat.is_tracer(x) for x in jax.tree.leaves(latency)):
    raise FibrilError('latency=: per-world latencies are host values (rounded to whole ticks '
                      'on the host), not traced arrays')
  known = latency_fields(built)
  out = {}
  for cid, per in latency.items():
    if cid not in known:
      why = 'has no transport latency' if cid in built.components else 'no component of that id'
      raise FibrilError(f'latency: component {cid!r}: {why}'
                        + did_you_mean(cid, list(known)) + f' (components with one: '
                        f'{", ".join(known) or "none"})')
    if not isinstance(per, Mapping):
      raise FibrilError(f'latency[{cid!r}]: must be a mapping of latency field to per-world '
                        f"seconds, e.g. {{'{known[cid][0]}': values}}")
    c, out[cid] = built.components[cid], {}
    for name, values in per.items():
      where = f'latency[{cid!r}][{name!r}]'
      if name not in known[cid]:
        raise FibrilError(f'{where}: not a transport latency of {c.type} '
                          f'({", ".join(known[cid])})' + did_you_mean(name, known[cid]))
      v = np.asarray(values, np.float64)
      if v.shape not in ((), (n_worlds,)):
        raise FibrilError(f'{where}: expected one value or ({n_worlds},) per world, got '
                          f'shape {v.shape}')
      v = np.broadcast_to(v, (n_worlds,))
      tr = _attr_path(c, LATENCY_FIELDS[name][0])
      if not np.all(np.isfinite(v) & (v >= 0)):
        raise FibrilError(f'{where}: latencies must be finite and >= 0 s')
      if np.max(v) > tr.latency_s * (1 + 1e-9):
        raise FibrilError(f'{where}: {np.max(v):g} s exceeds the built {name} '
                          f'{tr.latency_s:g} s, which sized the queue ({tr.capacity} slots); '
                          'build with the largest latency of the batch (manifest or '
                          'overrides=)')
      uniq, inv = np.unique(v, return_inverse=True)
      ticks = np.array([latency_ticks(x, built.dt) for x in uniq], np.int32)[inv.reshape(-1)]
      quant = dict(c.fields).get('quantization')
      if quant is not None and quant.value == 'strict':
        off = [x for x in uniq if schedule.ticks_fraction(x, built.dt).denominator != 1]
        if off:
          raise FibrilError(f'{where}: {off[0]:g} s: quantization strict requires an integer '
                            f'multiple of dt = {built.dt:g} s')
      out[cid][name] = (jnp.asarray(v, jnp.float32), jnp.asarray(ticks, jnp.int32))
  return out


def apply(comps: dict, latency: dict | None) -> dict:
  """One world's components with its latencies `{component id: {field: (latency_s,
  delay_ticks)}}` (a world's slice of `latency_inputs`) in their delivery queues."""
  comps = dict(comps)
  for cid, per in (latency or {}).items():
    for name, (lat_s, ticks) in per.items():
      comps[cid] = _replace_path(comps[cid], LATENCY_FIELDS[name][1],
                                 lambda q, s=lat_s, t=ticks: transport.with_latency(q, s, t))
  return comps
