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
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx.batch import worlds
from fibril_mjx.core import groups, pipeline
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


class Batch(NamedTuple):
  """What every world of a batch shares: the built manifest, the MJX model `mx` (its
  `model_fields` with a leading world axis, every other field the same for all worlds) and
  the physics implementation (`'jax'` / `'warp'`)."""
  built: Built
  mx: Any
  model_fields: tuple = ()
  impl: str = 'jax'


class Start(NamedTuple):
  """Where each world starts: `qpos_offset` / `qvel_offset` `(nworld, nq)` / `(nworld, nv)`
  added to the initial `qpos` / `qvel`, per-world transport `latency` (`Simulation` takes
  `{component id: {field: seconds}}`, the functions here `latencies.latency_inputs`'s ticks),
  and `data0`, the `mjx.Data` every world starts from (None: the model's). None: the
  manifest's."""
  qpos_offset: Any = None
  qvel_offset: Any = None
  latency: dict | None = None
  data0: Any = None


class Controller(NamedTuple):
  """A closed loop: `policy(obs, carry) -> (commands, carry)`, one world's JAX function
  (vmapped over the worlds), called after each tick with that tick's delivered outputs
  (`obs['sensor'][id]`; `obs['truth']` too with `observe_truth`); its commands are issued at
  the next tick. `init` is one world's carry, broadcast to every world, or with `per_world`
  a carry per world (leaves `(nworld, ...)`)."""
  policy: Callable
  init: Any = ()
  per_world: bool = False
  observe_truth: bool = False


@dataclasses.dataclass(frozen=True)
class Options:
  """How a verb runs its worlds; none of it changes a world's result but `record` (what it
  keeps).

  Attributes:
    record: `run` / `rollout` return the outputs of every tick (False: None).
    share_physics: compute the physics once for every world when `physics_sharing` allows it;
      None: the verb's default (`rollout` shares, `reset` does not).
    devices: None (every local device), a count, or a sequence of devices; worlds are sharded
      over them (`fibril_mjx.batch.worlds`).
    sub_batch: worlds per vmapped call (None: the LAPACK-safe size, `sub_batch_cap`).
    chunk_worlds: `rollout`'s host chunks (memory only; None: one chunk).
    stall_s: `rollout`'s watchdog (`worlds.Watchdog`): `worlds.WorldsStalled` after so long
      idle.
    world_major: `run` takes its command trace and returns its outputs `(nworld, n_ticks, ...)`
      instead of `(n_ticks, nworld, ...)`.
  """
  record: bool = True
  share_physics: bool | None = None
  devices: Any = None
  sub_batch: int | None = None
  chunk_worlds: int | None = None
  stall_s: float | None = None
  world_major: bool = False


def reset(batch: Batch, params, world_keys, start: Start = Start(), commands=None, *,
          share=False, tick0=True) -> SimState:
  """`pipeline.init` of a batch of worlds (vmapped): tick 0's application, forward and
  acquisitions, or with `tick0` False the worlds before it (`pipeline.before_tick0`);
  `commands` those issued at tick 0 `(nworld, ...)`; `share`: the physics has no world axis."""
  built, mx = batch.built, batch.mx

  def one(m, p, key, cmd, qo, vo, lat):
    at = pipeline.WorldStart(start.data0, qo, vo, lat)
    return (pipeline.init(built, p, key, at, commands=cmd, mx=m, impl=batch.impl) if tick0
            else pipeline.before_tick0(built, p, key, at, mx=m))
  return jax.vmap(one, in_axes=(worlds.model_in_axes(mx, batch.model_fields), 0, 0, 0, 0, 0,
                                0),
                  out_axes=state_axes(share))(mx, params, world_keys, commands,
                                              start.qpos_offset, start.qvel_offset,
                                              start.latency)


def step(batch: Batch, params, state: SimState, commands=None, *,
         integrate=True) -> tuple[SimState, dict]:
  """`pipeline.step` of a batch (vmapped; `integrate` as there): tick k → k + 1 with the
  `commands` `(nworld, ...)` issued at tick k + 1; returns `(state, outputs of tick k + 1)`."""
  axes = state_axes(is_shared(state))
  one = functools.partial(pipeline.step, batch.built, impl=batch.impl, integrate=integrate)
  return jax.vmap(lambda m, p, s, c: one(p, s, c, mx=m),
                  in_axes=(worlds.model_in_axes(batch.mx, batch.model_fields), 0, axes, 0),
                  out_axes=(axes, 0))(batch.mx, params, state, commands)


def outputs(built: Built, state: SimState) -> dict:
  """`pipeline.outputs` of every world of a batch, leaves `(nworld, ...)`."""
  return jax.vmap(functools.partial(pipeline.outputs, built),
                  in_axes=(state_axes(is_shared(state)),))(state)


def refresh(batch: Batch, params, state: SimState) -> SimState:
  """`pipeline.refresh` of every world of a batch."""
  axes = state_axes(is_shared(state))
  return jax.vmap(lambda m, p, s: pipeline.refresh(batch.built, p, s, mx=m, impl=batch.impl),
                  in_axes=(worlds.model_in_axes(batch.mx, batch.model_fields), 0, axes),
                  out_axes=axes)(batch.mx, params, state)


def run(batch: Batch, params, state, carry, commands, n_ticks: int, record: bool,
        controller: Controller | None = None, *, integrate=True):
  """`n_ticks` batched steps in one `lax.scan`; commands time-major `(n_ticks, nworld, ...)`
  (or None), or from `controller` (its `policy` vmapped over the worlds, `carry` its state
  per world). With `integrate=None`, `state` is `before_tick0`'s and tick 0 runs first (a
  controller acts from tick 1, on its outputs). Returns `((state, carry), outputs (n_ticks,
  nworld, ...) | None)`."""
  built = batch.built

  def observe(out):
    # Only a controller needs last tick's outputs in the carry; otherwise they stay out of it
    # so that unrecorded outputs (e.g. truth) are not computed at all.
    if controller is None:
      return ()
    return out if controller.observe_truth else {'sensor': out['sensor']}

  # each group's Params read stacked, as its state is kept (`groups.pack`): no stacking
  # per tick
  state = state._replace(components=groups.pack(built, state.components, axis=1))
  loop_params = groups.pack(built, params, axis=1)

  def body(c, cmd):
    st, ctl, obs = c
    if controller is not None:   # before tick 0 nothing has been observed: no controller call
      act = lambda: jax.vmap(controller.policy)(obs, ctl)   # noqa: E731
      first = lambda: (tick0_commands(built, st, jax.eval_shape(act)[0]), ctl)  # noqa
      cmd, ctl = act() if integrate is not None else jax.lax.cond(st.tick < 0, first, act)
    st, out = step(batch, loop_params, st, cmd, integrate=integrate)
    return (st, ctl, observe(out)), (out if record else None)
  obs0 = observe(outputs(built, state))   # before tick 0 (integrate None): never read
  (state, carry, _), outs = jax.lax.scan(body, (state, carry, obs0), commands, length=n_ticks)
  return (state, carry), outs


def tick0_commands(built: Built, state: SimState, like: dict) -> dict:
  """A batch's tick-0 commands (`state` before tick 0) in a controller's layout `like` (its
  output's shapes): scripted, else null, as `pipeline.step` fills them (a rollout with a
  controller takes no command trace)."""
  full = pipeline.tick_inputs(built, state.clocks, None, state.tick + 1).commands  # every world's
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

def model_field_names(model) -> tuple:
  """The per-world fields of a `model=` argument: a mapping's keys, sorted; none of an
  `mjx.Model` (every world uses it)."""
  return tuple(sorted(model)) if isinstance(model, Mapping) else ()


def full_model(mx, model):
  """The `mjx.Model` of a traced (caller-owned) batch: `model`, or `mx` with the per-world
  fields of a mapping, or `mx` itself."""
  if model is None:
    return mx
  return mx.replace(**model) if isinstance(model, Mapping) else model


def model_parts(mx, model, n_worlds):
  """`(per-world field names, shared model or None, {field: (nworld, ...)})` of a `model=`
  argument: a mapping of per-world fields keeps every other field of `mx` compiled in; an
  `mjx.Model` is every world's, traced as an argument."""
  if not isinstance(model, Mapping):
    return (), model, {}
  fields = tuple(sorted(model))
  for f in fields:
    if not hasattr(mx, f):
      names = [x.name for x in dataclasses.fields(mx)]
      raise FibrilError(f'model: mjx.Model has no field {f!r}' + did_you_mean(f, names))
  _, world = worlds.split_model(mx.replace(**model), fields, n_worlds)
  return fields, None, world


def join_model(mx, shared_model, world_model):
  """A program's model: without a shared part (`model=` a mapping of per-world fields, or no
  model) `mx` is embedded as constants, under the per-world fields."""
  if shared_model is None:
    return mx.replace(**world_model) if world_model else mx
  return worlds.join_model(shared_model, world_model)


def model_rows(model, lo: int, hi: int):
  """Worlds `lo:hi` of a `model=` argument: a mapping's per-world fields sliced; an
  `mjx.Model` (every world's) or None as it is."""
  if isinstance(model, Mapping):
    return {f: v[lo:hi] for f, v in model.items()}
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
