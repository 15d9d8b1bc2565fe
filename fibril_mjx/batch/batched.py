"""The world axis over the one-world pipeline (`fibril_mjx.core.pipeline`): `vmap` of its `init`
/ `step` over a batch of worlds, `lax.scan` over ticks, and the per-world model fields.

A batch's `SimState` has a leading world axis on the per-world fields only (`state_axes`): the
tick and the schedules are shared by all worlds (static config), so they stay unbatched under
`vmap` and an acquisition instant is a real branch, not a select; with shared physics
(`Simulation.physics_sharing`) the physics (`data`, `ctrl`, `dcmotor`) is computed once,
unbatched, and only the components are per world. These functions are traceable (a caller's
`jit` / `grad` owns them); `Simulation` lays them out on devices and sub-batches
(`fibril_mjx.batch.worlds`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Callable

import jax
import jax.numpy as jnp

from fibril_mjx.batch import worlds
from fibril_mjx.core import pipeline
from fibril_mjx.core.built import Built
from fibril_mjx.core.pipeline import SimState
from fibril_mjx.errors import FibrilError, did_you_mean

SHARED_FIELDS = ('tick', 'clocks')             # never a world axis
PHYSICS_FIELDS = ('data', 'ctrl', 'dcmotor')   # no world axis when the physics is shared


def is_shared(state: SimState) -> bool:
  """Whether a batch's physics is shared by its worlds (`ctrl` without a world axis)."""
  return jnp.ndim(state.ctrl) == 1


def state_axes(share: bool) -> SimState:
  """The `vmap` axes of a batch's `SimState`: 0 on the per-world fields, None on the shared
  ones (and on the physics when `share`)."""
  shared = SHARED_FIELDS + (PHYSICS_FIELDS if share else ())
  return SimState(*(None if f in shared else 0 for f in SimState._fields))


def split_state(st: SimState, share: bool) -> tuple[dict, dict]:
  """`(fields without a world axis, fields with one)` of a batch's state."""
  axes = state_axes(share)
  return ({f: getattr(st, f) for f in SimState._fields if getattr(axes, f) is None},
          {f: getattr(st, f) for f in SimState._fields if getattr(axes, f) is not None})


def join_state(shared: dict, world: dict) -> SimState:
  return SimState(**shared, **world)


def concat_worlds(trees: list):
  """Host chunks' trees (leaves `(nworld_i, ...)`) joined on the world axis."""
  return trees[0] if len(trees) == 1 else jax.tree.map(
      lambda *xs: jnp.concatenate(xs, axis=0), *trees)


def concat_states(states: list, share: bool) -> SimState:
  """Host chunks' batch states joined: the shared fields are the first chunk's."""
  if len(states) == 1:
    return states[0]
  sh, _ = split_state(states[0], share)
  return join_state(sh, concat_worlds([split_state(s, share)[1] for s in states]))


def reset(built: Built, mx, params, world_keys, *, data0=None, qpos_offset=None,
          qvel_offset=None, model_fields=(), share=False, latency=None, commands=None,
          impl='jax', tick0=True) -> SimState:
  """`pipeline.init` of a batch of worlds (vmapped): tick 0's application, forward and
  acquisitions, or with `tick0` False the worlds before it (`pipeline.before_tick0`).
  `model_fields` are the fields of `mx` with a leading world axis; `latency` as from
  `latencies.latency_inputs`; `commands` those issued at tick 0 `(nworld, ...)`."""
  def one(m, p, key, cmd, qo, vo, lat):
    kw = dict(data0=data0, qpos_offset=qo, qvel_offset=vo, latency=lat, mx=m)
    return (pipeline.init(built, p, key, commands=cmd, impl=impl, **kw) if tick0
            else pipeline.before_tick0(built, p, key, **kw))
  return jax.vmap(one, in_axes=(worlds.model_in_axes(mx, model_fields), 0, 0, 0, 0, 0, 0),
                  out_axes=state_axes(share))(mx, params, world_keys, commands, qpos_offset,
                                              qvel_offset, latency)


def step(built: Built, mx, params, state: SimState, commands=None, *, model_fields=(),
         impl='jax', integrate=True) -> tuple[SimState, dict]:
  """`pipeline.step` of a batch (vmapped; `integrate` as there): tick k → k + 1 with the
  `commands` `(nworld, ...)` issued at tick k + 1; returns `(state, outputs of tick k + 1)`."""
  axes = state_axes(is_shared(state))
  one = functools.partial(pipeline.step, built, impl=impl, integrate=integrate)
  return jax.vmap(lambda m, p, s, c: one(p, s, c, mx=m),
                  in_axes=(worlds.model_in_axes(mx, model_fields), 0, axes, 0),
                  out_axes=(axes, 0))(mx, params, state, commands)


def outputs(built: Built, state: SimState) -> dict:
  """`pipeline.outputs` of every world of a batch, leaves `(nworld, ...)`."""
  return jax.vmap(functools.partial(pipeline.outputs, built),
                  in_axes=(state_axes(is_shared(state)),))(state)


def refresh(built: Built, mx, params, state: SimState, *, model_fields=(),
            impl='jax') -> SimState:
  """`pipeline.refresh` of every world of a batch."""
  axes = state_axes(is_shared(state))
  return jax.vmap(lambda m, p, s: pipeline.refresh(built, p, s, mx=m, impl=impl),
                  in_axes=(worlds.model_in_axes(mx, model_fields), 0, axes),
                  out_axes=axes)(mx, params, state)


def run(built: Built, mx, params, state, carry, commands, n_ticks: int, record: bool,
        controller: Callable | None = None, observe_truth=False, *, model_fields=(),
        impl='jax', integrate=True):
  """`n_ticks` batched steps in one `lax.scan`; commands time-major `(n_ticks, nworld, ...)`
  (or None), or from a single-world `controller(obs, carry)` vmapped over the worlds. With
  `integrate=None`, `state` is `before_tick0`'s and tick 0 runs first (a controller acts from
  tick 1, on its outputs). Returns `((state, carry), outputs (n_ticks, nworld, ...) | None)`."""
  def observe(out):
    # Only a controller needs last tick's outputs in the carry; otherwise they stay out of it
    # so that unrecorded outputs (e.g. truth) are not computed at all.
    if controller is None:
      return ()
    return out if observe_truth else {'sensor': out['sensor']}

  def body(c, cmd):
    st, ctl, obs = c
    if controller is not None:   # before tick 0 nothing has been observed: no controller call
      act = lambda: jax.vmap(controller)(obs, ctl)   # noqa: E731
      first = lambda: (tick0_commands(built, st, jax.eval_shape(act)[0]), ctl)  # noqa
      cmd, ctl = act() if integrate is not None else jax.lax.cond(st.tick < 0, first, act)
    st, out = step(built, mx, params, st, cmd, model_fields=model_fields, impl=impl,
                   integrate=integrate)
    return (st, ctl, observe(out)), (out if record else None)
  obs0 = observe(outputs(built, state))   # before tick 0 (integrate None): never read
  # the loop carries each group's state stacked (`pipeline.pack`): no stacking per tick
  grouped = bool(built.stacked_groups)
  per_world = lambda f, st: st._replace(components=jax.vmap(  # noqa: E731
      functools.partial(f, built))(st.components)) if grouped else st
  (state, carry, _), outs = jax.lax.scan(body, (per_world(pipeline.pack, state), carry, obs0),
                                         commands, length=n_ticks)
  return (per_world(pipeline.unpack, state), carry), outs


def tick0_commands(built: Built, state: SimState, like: dict) -> dict:
  """A batch's tick-0 commands (`state` before tick 0) in a controller's layout `like` (its
  output's shapes): scripted, else null, as `pipeline.step` fills them (a rollout with a
  controller takes no command trace)."""
  full = pipeline.tick_inputs(built, state.clocks, None, state.tick + 1)[1]   # every world's
  return {cid: jax.tree.map(lambda x, s: jnp.broadcast_to(x, s.shape).astype(s.dtype),
                            full[cid], like[cid]) for cid in like}


def physics_sharing(built: Built, *, commands=None, controller=None, model_fields=(),
                    qpos_offset=None, qvel_offset=None,
                    share_physics: bool = True) -> tuple[bool, str]:
  """Whether every world can use one physics trajectory, and why (not).

  Physics is shared when nothing per world can change it: the manifest drives actuators
  only open loop (`actuator_script`), no actuator component (whose per-world state or
  randomness reaches `ctrl`), no dcmotor actuators (per-world motor parameters), no
  controller or command trace, no per-world MJCF field or initial state. The sensor
  pipelines stay per world (each with its own noise, bias, transport) and read the shared
  data. Returns `(shared, reason)`.
  """
  acts = [cid for cid, _ in pipeline.actuators(built)]
  reasons = []
  if not share_physics:
    reasons.append('switched off (share_physics=False / --no-share-physics)')
  if acts:
    reasons.append(f'actuator component(s) {", ".join(map(repr, acts))} write ctrl from '
                   'per-world state')
  if built.dcmotor is not None:
    reasons.append('dcmotor actuators take per-world motor parameters')
  if controller is not None:
    reasons.append('a controller reads the outputs')
  if commands:
    reasons.append('a per-world command trace drives the actuators')
  if model_fields:
    reasons.append(f'per-world MJCF fields ({", ".join(model_fields)})')
  if qpos_offset is not None or qvel_offset is not None:
    reasons.append('per-world initial state')
  if reasons:
    return False, 'not shared: ' + '; '.join(reasons)
  return True, ('shared: open-loop actuator_script only, no per-world input reaches the '
                'physics')


# ---------------------------------------------------------------- per-world model fields

def model_field_names(model, model_axes) -> tuple:
  """The fields of `model` (an `mjx.Model` or a mapping of per-world fields) with a world
  axis."""
  if isinstance(model, Mapping):
    return tuple(sorted(model))
  return worlds.model_fields(model_axes)


def full_model(mx, model):
  """The `mjx.Model` of a traced (caller-owned) batch: `model`, or `mx` with the per-world
  fields of a mapping, or `mx` itself."""
  if model is None:
    return mx
  return mx.replace(**model) if isinstance(model, Mapping) else model


def model_parts(mx, model, model_axes, n_worlds):
  """`(per-world field names, shared model or None, {field: (nworld, ...)})` of a `model=`
  argument: a mapping of per-world fields keeps every other field of `mx` compiled in."""
  if isinstance(model, Mapping):
    fields = tuple(sorted(model))
    if model_axes is not None and worlds.model_fields(model_axes) != fields:
      raise FibrilError('model_axes: with model= a mapping of per-world fields, the world '
                        'axis is on exactly those fields (leave model_axes out)')
    for f in fields:
      if not hasattr(mx, f):
        names = [x.name for x in dataclasses.fields(mx)]
        raise FibrilError(f'model: mjx.Model has no field {f!r}' + did_you_mean(f, names))
    _, world = worlds.split_model(mx.replace(**model), fields, n_worlds)
    return fields, None, world
  fields = worlds.model_fields(model_axes)
  if fields and model is None:
    raise FibrilError('model_axes given without model=: pass the mjx.Model whose fields '
                      f'{", ".join(fields)} have a leading world axis')
  shared, world = worlds.split_model(model, fields, n_worlds)
  return fields, shared, world


def join_model(mx, shared_model, world_model):
  """A program's model: without a shared part (`model=` a mapping of per-world fields, or no
  model) `mx` is embedded as constants, under the per-world fields."""
  if shared_model is None:
    return mx.replace(**world_model) if world_model else mx
  return worlds.join_model(shared_model, world_model)


def model_rows(model, fields: tuple, lo: int, hi: int):
  """Worlds `lo:hi` of a per-world `model` (a mapping of fields, or an `mjx.Model` whose
  `fields` have a world axis); as it is without per-world fields."""
  if fields and isinstance(model, Mapping):
    return {f: model[f][lo:hi] for f in fields}
  if fields:
    return model.replace(**{f: getattr(model, f)[lo:hi] for f in fields})
  return model


def world_trace(commands, null: dict, lo: int, hi: int):
  """A rollout's open-loop trace `{id: (n_ticks, nworld, ...)}` for worlds `lo:hi`,
  world-major over ticks 0 … n_ticks `(k, n_ticks + 1, ...)`: entry k issued at tick k,
  tick n_ticks issuing nothing (the `null` command); None without a trace."""
  if not commands:
    return None
  return {cid: jax.tree.map(
      lambda x, z: jnp.swapaxes(jnp.concatenate(
          [x[:, lo:hi], jnp.broadcast_to(jnp.asarray(z, x.dtype), (1, hi - lo) + x.shape[2:])]),
          0, 1), cmd, null[cid]) for cid, cmd in commands.items()}
