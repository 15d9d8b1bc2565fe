"""`Simulation`: a built manifest with reset / step / run / rollout over a batch of worlds — a
thin facade over the one-world pipeline (`fibril_mjx.core.pipeline`: `init` / `step` of one
world) and its world axis (`fibril_mjx.batch.batched`: `vmap` over worlds, `lax.scan` over
ticks), laid out on devices, sub-batches and host chunks by `fibril_mjx.batch.worlds`.

Each verb is one jitted program per layout (`_call`; `rollout`: reset and run in one per host
chunk): a block over one sub-batch of worlds, mapped over the sub-batches and sharded over the
devices, whose LAPACK-safe sub-batch is read from its own trace (a new process finds its
compilation in JAX's persistent compilation cache when one is set up).
Inside a user's `jit` / `vmap` / `grad` (traced inputs) a verb runs the batched pipeline as it
is: the caller owns the world axis.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.batch import batched
from fibril_mjx.batch import lapack
from fibril_mjx.batch import physics_c
from fibril_mjx.batch import worlds
from fibril_mjx.builder import build
from fibril_mjx.config.manifest import read_manifest
from fibril_mjx.core import latencies, pipeline
from fibril_mjx.core.pipeline import SimState
from fibril_mjx.errors import FibrilError
from fibril_mjx.mechanisms import rng
from fibril_mjx.physics.mjx import warp_model_and_data


class Simulation:
  """A built manifest with jitted reset / step / run / rollout.

  Attributes:
    built: the static `build.Built` (hashable).
    impl: physics implementation, `'jax'` (MJX-JAX, differentiable, default) or `'warp'`
      (MJX-Warp: NVIDIA GPUs only, not differentiable; refused elsewhere).
    physics: the backend of `rollout`: `'mjx'` (MJX in the loop, `impl`) or `'c'` (MuJoCo C
      through `mujoco.rollout`, open loop: `fibril_mjx.batch.physics_c`). `reset` / `step`
      always step MJX in the loop.
    manifest, mj_model, mx, dt, components, dcmotor, assemblies, overlays, command_script,
    actuator_script: shortcuts into `built` (`mx` is the Warp model under `impl='warp'`).
    data0: the `mjx.Data` every world starts from (`reset(data0=)` replaces it).
  """

  def __init__(self, built: build.Built, *, impl: str = 'jax', physics: str = 'mjx'):
    worlds.check_impl(impl)
    physics_c.check_backend(built, physics)
    self.impl, self.physics, self.built, self._c_runner = impl, physics, built, None
    self._mx = self._data0 = None   # the Warp model and data under impl='warp'
    for name in ('manifest', 'mj_model', 'physics_model', 'dt', 'components', 'dcmotor',
                 'assemblies', 'overlays', 'command_script', 'actuator_script'):
      setattr(self, name, getattr(built, name))   # shortcuts into `built`
    _ = built.mx if physics == 'mjx' else None   # a model MJX cannot step: refused here
    if impl == 'warp':   # pragma: no cover — needs an NVIDIA GPU
      self._mx, self._data0 = warp_model_and_data(built.physics_model, built.keyframe)
    self._programs, self._caps = {}, {}   # jitted programs; their LAPACK-safe sub-batches
    self._sub_batch: tuple | None = None   # sub_batch_cap, once asked for
    self.last_layout: worlds.Layout | None = None   # the layout of the last program run
    self._nbytes: dict = {}

  mx = property(lambda self: self.built.mx if self._mx is None else self._mx)   # class doc
  data0 = property(lambda self: self.built.data0 if self._data0 is None else self._data0)

  # ---------------------------------------------------------------- params

  def default_params(self, n_worlds: int | None = None) -> dict:
    """`{component id: Params}` (plus `'mjcf.dcmotor'` for dcmotor models).

    With `n_worlds`, every leaf gets a leading world axis (per-world values, e.g. for
    randomization or gradients).
    """
    return pipeline.default_params(self.built, n_worlds)

  def check_params(self, params: dict) -> None:
    """Refuses a per-world value for a term that is compiled out of the graph
    (`pipeline.check_params`): load with `vary=` to compile it in."""
    pipeline.check_params(self.built, params)

  def null_commands(self) -> dict:
    """`{actuator component id: command}` meaning "nothing issued this tick" (one world).

    A component missing from the commands passed to `step` / `run` / `rollout` (or returned by
    a controller) gets its manifest `command_script` command if it has one, else this.
    """
    return pipeline.null_commands(self.built)

  def latency_fields(self) -> dict:
    """`{component id: (latency field, ...)}`: the transport latencies that `reset` and
    `rollout` take per world (`latency=`), e.g. `{'ahrs': ('latency_s',)}`."""
    return latencies.latency_fields(self.built)

  def latency_inputs(self, latency: dict | None, n_worlds: int) -> dict | None:
    """Validates per-world latencies and rounds them to whole ticks on the host
    (`latencies.latency_inputs`: `{component id: {field: (latency_s (nworld,), delay_ticks
    (nworld,))}}`, or None)."""
    return latencies.latency_inputs(self.built, latency, n_worlds)

  def refresh(self, mx, params, state: SimState, model_fields=()) -> SimState:
    """`state` with its tick's forward recomputed under `mx` / `params` (traced; no acquisition,
    no actuation): for a traced caller that holds a state fixed (e.g. `tune`'s window starts)
    and differentiates what follows, so that the integration into the next tick depends on the
    model it differentiates. Values are unchanged when `mx` / `params` are the ones `state` was
    computed with."""
    return batched.refresh(self.built, self.mx if mx is None else mx, params, state,
                           model_fields=model_fields, impl=self.impl)

  def world_nbytes(self, *, share: bool = False) -> tuple[float, float]:
    """`(bytes of one world's state on the device, bytes of one world's outputs of one tick)`,
    from the shapes only (nothing runs); with `share` the physics is not a world's."""
    if share not in self._nbytes:
      p, keys = self.default_params(2), rng.world_keys(0, 2)
      st, out = jax.eval_shape(lambda: (lambda s: (s, batched.outputs(self.built, s)))(
          self._reset_batch(None, p, keys, share=share)))
      self._nbytes[share] = (worlds.tree_nbytes(batched.split_state(st, share)[1]) / 2,
                             worlds.tree_nbytes(out) / 2)
    return self._nbytes[share]

  # ---------------------------------------------------------------- the batched pipeline

  def _reset_batch(self, mx, params, world_keys, qpos_offset=None, qvel_offset=None,
                   model_fields=(), share=False, latency=None, commands=None, data0=None,
                   tick0=True):
    """`batched.reset` with this simulation's model, initial data and impl (traceable)."""
    return batched.reset(self.built, self.mx if mx is None else mx, params, world_keys,
                         data0=self.data0 if data0 is None else data0,
                         qpos_offset=qpos_offset, qvel_offset=qvel_offset,
                         model_fields=model_fields, share=share, latency=latency,
                         commands=commands, impl=self.impl, tick0=tick0)

  def _step_batch(self, mx, params, state: SimState, commands=None, model_fields=()):
    return batched.step(self.built, self.mx if mx is None else mx, params, state, commands,
                        model_fields=model_fields, impl=self.impl)

  def _run_batch(self, mx, params, state, carry, commands, n_ticks: int, record: bool,
                 controller=None, observe_truth=False, model_fields=(), integrate=True):
    """`batched.run` with this simulation's model and impl (traceable)."""
    return batched.run(self.built, self.mx if mx is None else mx, params, state, carry,
                       commands, n_ticks, record, controller, observe_truth,
                       model_fields=model_fields, impl=self.impl, integrate=integrate)

  # ---------------------------------------------------------------- the world axis

  def physics_sharing(self, *, commands=None, controller=None, model_fields=(),
                      qpos_offset=None, qvel_offset=None, share_physics: bool = True
                      ) -> tuple[bool, str]:
    """Whether every world can use one physics trajectory, and why (not)
    (`batched.physics_sharing`)."""
    return batched.physics_sharing(
        self.built, commands=commands, controller=controller, model_fields=model_fields,
        qpos_offset=qpos_offset, qvel_offset=qvel_offset, share_physics=share_physics)

  def sub_batch_cap(self) -> tuple[int | None, str]:
    """Worlds per vmapped call below jaxlib's LAPACK thread-pool split (`lapack.
    lapack_safe_sub_batch` of one world's step, traced for it), and why; None: no limit. Once
    asked for (the CLI's plan, a campaign), it lays out every later program (`_call`)."""
    if self._sub_batch is None:
      if jax.default_backend() != 'cpu':
        self._sub_batch = (None, f'{jax.default_backend()} backend: no CPU LAPACK call')
      else:
        p, keys = self.default_params(1), rng.world_keys(0, 1)
        st = jax.eval_shape(lambda: self._reset_batch(None, p, keys))
        self._sub_batch = lapack.lapack_safe_sub_batch(
            lambda pp, s: self._step_batch(None, pp, s), p, st)
    return self._sub_batch

  def layout(self, n_worlds: int, *, devices=None, sub_batch: int | None = None,
             share: bool = False) -> worlds.Layout:
    """How `n_worlds` worlds run in one program (`worlds.Layout`), with the sub-batch of
    `sub_batch_cap` (a verb's own layout: `last_layout`)."""
    devs = worlds.resolve_devices(devices)
    cap = sub_batch
    if cap is None and not share:   # shared physics is unbatched: no batched LAPACK call
      cap = self.sub_batch_cap()[0]
    return worlds.layout(n_worlds, len(devs), cap)

  def _call(self, kind: str, n: int, devices, sub_batch, shared, world, **static):
    """Runs program `kind` (`_<kind>_block` over `n` worlds) on `(shared, world)`, laid out
    (`last_layout`) with `sub_batch`, any with shared (unbatched) physics, `sub_batch_cap` once
    asked for, else the LAPACK-safe size read from its own trace (`lapack.laid_out`)."""
    pinned = lambda lay: (shared, world) if lay.n_devices == 1 else (   # noqa: E731
        worlds.unpin(shared), worlds.unpin(world))
    key, cap = (kind, devices, tuple(sorted(static.items()))), sub_batch
    if cap is None and not static['share'] and self._sub_batch is not None:
      cap = self._sub_batch[0]
    find = cap is None and not static['share'] and self._sub_batch is None
    prog, self.last_layout = lapack.laid_out(lambda lay: self._program(key, lay, devices), n,
                                             devices, cap, find, self._caps, key, pinned)
    return prog(*pinned(self.last_layout))

  def _program(self, key: tuple, lay, devices):
    kind, _, static = key
    prog = self._programs.get((key, lay))
    if prog is None:
      fn = worlds.program(functools.partial(getattr(self, f'_{kind}_block'), **dict(static)),
                          lay, devices)
      prog = self._programs[(key, lay)] = jax.jit(fn)
    return prog

  def _reset_block(self, shared, world, *, model_fields, share, data0=False, tick0=True):
    mx = batched.join_model(self.mx, shared['model'], world['model'])
    st = self._reset_batch(mx, world['params'], world['keys'], world['qpos'], world['qvel'],
                           model_fields, share, world['latency'], world['commands'],
                           shared['data0'] if data0 else None, tick0)
    return batched.split_state(st, share)

  def _step_block(self, shared, world, *, model_fields, share):
    mx = batched.join_model(self.mx, shared['model'], world['model'])
    st = batched.join_state(shared['state'], world['state'])
    st, out = self._step_batch(mx, world['params'], st, world['commands'], model_fields)
    sh, wo = batched.split_state(st, share)
    return sh, {'state': wo, 'outs': out}

  def _run_block(self, shared, world, *, model_fields, share, n_ticks, record, controller,
                 observe_truth, integrate=True):
    mx = batched.join_model(self.mx, shared['model'], world['model'])
    st = batched.join_state(shared['state'], world['state'])
    cmds = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), world['commands'])   # → (T, k, ...)
    (st, carry), outs = self._run_batch(mx, world['params'], st, world['carry'], cmds, n_ticks,
                                        record, controller, observe_truth, model_fields,
                                        integrate)
    sh, wo = batched.split_state(st, share)
    outs = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), outs) if record else None
    return sh, {'state': wo, 'carry': carry, 'outs': outs}   # outs world-major (k, T, ...)

  def _rollout_block(self, shared, world, *, model_fields, share, n_ticks, record, controller,
                     observe_truth):
    """`rollout`'s program (one per host chunk): ticks 0 … n_ticks in one scan from before
    tick 0 (`pipeline.before_tick0`), so each tick's code is compiled once."""
    reset = {k: world[k] for k in ('params', 'keys', 'model', 'qpos', 'qvel', 'latency')}
    sh, wo = self._reset_block(shared, reset | {'commands': None}, model_fields=model_fields,
                               share=share, tick0=False)
    run = {k: world[k] for k in ('params', 'carry', 'commands', 'model')}
    return self._run_block({'model': shared['model'], 'state': sh}, run | {'state': wo},
                           model_fields=model_fields, share=share, n_ticks=n_ticks + 1,
                           record=record, controller=controller, observe_truth=observe_truth,
                           integrate=None)

  # ---------------------------------------------------------------- public API

  def reset(self, params: dict, world_keys: jax.Array, *, commands: dict | None = None,
            model=None, model_axes=None, qpos_offset=None, qvel_offset=None,
            latency: dict | None = None, share_physics: bool = False, devices=None,
            sub_batch: int | None = None, data0=None) -> SimState:
    """Resets a batch of worlds and runs tick 0: the tick-0 application, `mjx.forward` of the
    initial state with those controls, and the tick-0 acquisitions (`outputs(state)`).

    Args:
      params: `{id: Params}` with a leading `(nworld,)` axis.
      world_keys: `(nworld, 2)` from `fibril_mjx.world_keys(seed, nworld, first_world)`.
      commands: `{actuator component id: command pytree with leading (nworld,)}` issued at
        tick 0 (a missing component gets its scripted or null command, as in `step`).
      model: optional `mjx.Model` to use instead of `sim.mx` (e.g. `sim.mx.replace(...)` to
        differentiate wrt or vary MJCF physical fields); traced as an argument. By default the
        compiled model is embedded as constants, which XLA can fold (measured about 7 %
        faster on the CPU for the demo turntable). Or a mapping `{field: (nworld, ...)}` of
        per-world fields only (e.g. `{'body_mass': m}`): every other field stays embedded as
        constants (the cheaper way to vary MJCF fields per world; no `model_axes` needed).
      model_axes: fields of `model` that carry a leading world axis, per world: `{'dof_damping':
        0, 'body_mass': 0}` or a set of names (e.g. `dof_damping (nworld, nv)`,
        `geom_friction (nworld, ngeom, 3)`, `actuator_gainprm (nworld, nu, 10)`). They are
        vmapped, sub-batched, chunked and sharded with the worlds.
      qpos_offset, qvel_offset: `(nworld, nq)` / `(nworld, nv)` added to the model's initial
        `qpos` / `qvel` before the first `mjx.forward` (per-world initial state).
      latency: per-world transport latencies `{component id: {field: seconds}}`, each value
        a scalar or `(nworld,)`, for the fields of `latency_fields()` (`latency_s` of a
        sensor, `command_latency_s` / `feedback_latency_s` of an actuator). Each world's
        delivery queue starts with its own latency, rounded up to whole ticks on the host
        exactly as a manifest value is, so a world equals one built with that latency in
        the manifest. Values are at most the built latency (the manifest's, which sized the
        queue): build with the largest of the batch. Host values only (not differentiable).
      share_physics: compute the physics once for all worlds when `physics_sharing` allows it
        (`rollout` decides this itself); the returned state's `data` then has no world axis.
      devices: None (every local device), a count, or a sequence of devices; worlds are
        sharded over them (`fibril_mjx.batch.worlds`).
      sub_batch: worlds per vmapped call (default: the LAPACK-safe size, `sub_batch_cap`).
      data0: the `mjx.Data` every world starts from instead of `sim.data0` (e.g. a recorded
        initial state, with `qpos` / `qvel` replaced).

    Inside a user's `jit` / `vmap` / `grad` (traced inputs) the batch runs as one plain
    vmap: the caller owns the world axis.
    """
    self.check_params(params)
    n = world_keys.shape[0]
    fields, shared_model, world_model = batched.model_parts(self.mx, model, model_axes, n)
    lat = self.latency_inputs(latency, n)
    share = share_physics and self.physics_sharing(
        model_fields=fields, qpos_offset=qpos_offset, qvel_offset=qvel_offset)[0]
    if worlds.is_traced((params, world_keys, commands, model, qpos_offset, qvel_offset, data0)):
      return self._reset_batch(batched.full_model(self.mx, model), params, world_keys,
                               qpos_offset, qvel_offset, fields, share, lat, commands, data0)
    sh, wo = self._call('reset', n, worlds.resolve_devices(devices), sub_batch,
                        {'model': shared_model, 'data0': data0},
                        {'params': params, 'keys': world_keys, 'model': world_model,
                         'qpos': qpos_offset, 'qvel': qvel_offset, 'latency': lat,
                         'commands': commands},
                        model_fields=fields, share=share, data0=data0 is not None)
    return batched.join_state(sh, wo)

  def outputs(self, state: SimState) -> dict:
    """`{'sensor': {id: Delivered}, 'truth': {id: {...}}}` of the current tick (one program)."""
    return _outputs(self.built, state)

  def step(self, params: dict, state: SimState, commands: dict | None = None, *, model=None,
           model_axes=None, devices=None, sub_batch: int | None = None
           ) -> tuple[SimState, dict]:
    """Advances every world one tick (`state.tick` → `state.tick + 1`); returns the new state
    and the outputs of the new tick.

    Args:
      commands: `{actuator component id: command pytree with leading (nworld,)}` issued at
        the new tick `state.tick + 1`; a missing component gets its scripted command
        (manifest `command_script`), else its null command (nothing issued).
      model, model_axes, devices, sub_batch: as in `reset`.
    """
    n = state.diverged.shape[0]
    fields, shared_model, world_model = batched.model_parts(self.mx, model, model_axes, n)
    if worlds.is_traced((params, state, commands, model)):
      return self._step_batch(batched.full_model(self.mx, model), params, state, commands,
                              fields)
    share = batched.is_shared(state)
    sh_st, wo_st = batched.split_state(state, share)
    sh, wo = self._call('step', n, worlds.resolve_devices(devices), sub_batch,
                        {'model': shared_model, 'state': sh_st},
                        {'params': params, 'state': wo_st, 'commands': commands,
                         'model': world_model},
                        model_fields=fields, share=share)
    return batched.join_state(sh, wo['state']), wo['outs']

  def run(self, params: dict, state: SimState, n_ticks: int, record: bool = True, *,
          commands: dict | None = None, controller: Callable | None = None,
          controller_state: Any = None, observe_truth: bool = False, model=None,
          model_axes=None, devices=None, sub_batch: int | None = None,
          world_major: bool = False):
    """`n_ticks` steps in one `lax.scan` (`model`, `model_axes`, `devices`, `sub_batch` as in
    `reset`).

    Ticks `state.tick + 1 … state.tick + n_ticks`. Commands come from one of:
      * `commands`: an open-loop trace `{id: pytree with leading (n_ticks, nworld)}`, entry i
        issued at tick `state.tick + 1 + i`;
      * `controller(obs, carry) -> (commands, carry)`: a single-world JAX policy (vmapped
        here) called after each tick with that tick's delivered sensor/feedback outputs
        (`obs['sensor'][id]`: a latency-0 sample describes the state of that tick), and truth
        only with `observe_truth=True`; its commands are issued at the next tick;
      * neither: scripted (`command_script`) or null commands.

    With `world_major`, the command trace and the outputs are `(nworld, n_ticks, ...)` instead
    (what the program computes: no transposition on either side; `fibril-mjx run` uses it).

    Returns:
      `(state, outputs)` with outputs of ticks `state.tick + 1 …` stacked `(n_ticks, nworld,
      ...)` (None unless `record`); with a controller, `((state, controller_state),
      outputs)`.
    """
    swap = lambda t: jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), t)   # noqa: E731
    if worlds.is_traced((params, state, commands, controller_state, model)):
      fields = batched.model_field_names(model, model_axes)
      (state, carry), outs = self._run_batch(batched.full_model(self.mx, model), params, state,
                                             controller_state,
                                             swap(commands) if world_major else commands,
                                             n_ticks, record, controller, observe_truth,
                                             fields)
      outs = swap(outs) if world_major and record else outs
    else:
      n = state.diverged.shape[0]
      fields, shared_model, world_model = batched.model_parts(self.mx, model, model_axes, n)
      share = batched.is_shared(state)
      sh_st, wo_st = batched.split_state(state, share)
      sh, wo = self._call('run', n, worlds.resolve_devices(devices), sub_batch,
                          {'model': shared_model, 'state': sh_st},
                          {'params': params, 'state': wo_st, 'carry': controller_state,
                           'commands': commands if world_major else swap(commands),
                           'model': world_model},
                          model_fields=fields, share=share, n_ticks=n_ticks, record=record,
                          controller=controller, observe_truth=observe_truth)
      state, carry, outs = batched.join_state(sh, wo['state']), wo['carry'], wo['outs']
      outs = outs if world_major or not record else swap(outs)
    return ((state, carry) if controller is not None else state), outs

  def rollout(self, params: dict, world_keys: jax.Array, n_ticks: int, *,
              record: bool = True, chunk_worlds: int | None = None,
              commands: dict | None = None, controller: Callable | None = None,
              controller_init: Any = None, observe_truth: bool = False, model=None,
              model_axes=None, qpos_offset=None, qvel_offset=None,
              latency: dict | None = None, share_physics: bool = True, devices=None,
              sub_batch: int | None = None, stall_s: float | None = None,
              controller_per_world: bool = False, return_carry: bool = False):
    """Reset then `n_ticks` steps of every world, in one program per host chunk.

    The world axis (`fibril_mjx.batch.worlds`): worlds are sharded over `devices` (default every
    local device; on a CPU host set `XLA_FLAGS=--xla_force_host_platform_device_count=N`
    before JAX initializes to get N devices, as `fibril-mjx` does with one per core), run
    in LAPACK-safe sub-batches inside the program, and optionally in host chunks of
    `chunk_worlds` (memory only). A world's result depends on none of these.

    Args:
      params: `{id: Params}` with a leading `(nworld,)` axis.
      world_keys: `(nworld, 2)`.
      commands: open-loop trace `{id: pytree with leading (n_ticks, nworld)}`, entry k
        issued at tick k (tick `n_ticks` issues nothing), or (never both)
      controller: a single-world controller with a single-world `controller_init` carry
        (see `run`): it sees the outputs of tick k and issues the commands of tick k + 1
        (tick 0 gets the scripted or null commands). With `controller_per_world`,
        `controller_init`'s leaves have a leading `(nworld,)` axis (a carry per world, e.g.
        each world's goal) instead of being broadcast.
      model, model_axes: a per-world model as in `reset`, e.g. `model={'dof_damping': d}`
        with `d` of shape `(nworld, nv)` (the rest of the model compiled in).
      qpos_offset, qvel_offset: `(nworld, nq)` / `(nworld, nv)` per-world initial state.
      latency: per-world transport latencies `{component id: {field: seconds}}` (`reset`).
      share_physics: when `physics_sharing` allows it (sensor-only Monte Carlo), run the
        physics once and broadcast its data to every world's components; False forces one
        physics rollout per world. Shared and per-world sensor outputs agree to float
        rounding (the physics is compiled unbatched); each is bitwise reproducible.
      stall_s: watchdog (`worlds.Watchdog`): `worlds.WorldsStalled` after so long idle.

    Returns:
      `(final_state, trace)`: trace leaves `(nworld, n_ticks + 1, ...)` with tick 0 first
      (None when `record` is False); `final_state.diverged` `(nworld,)` is the first tick at
      which a world became non-finite (-1: never). With `return_carry`, `(final_state,
      trace, final controller carry (nworld, ...))`.
    """
    n = world_keys.shape[0]
    if commands and controller is not None:   # tick 0 is the loop's code (`batched.run`)
      raise FibrilError('commands= and controller= together: the controller issues the commands '
                        'of ticks 1 … n and tick 0 the scripted or null ones; pass one of them')
    if self.physics == 'c':   # MuJoCo C, open loop: refuses a controller (physics_c)
      return physics_c.simulation_rollout(
          self, params, world_keys, n_ticks, record=record, chunk_worlds=chunk_worlds,
          commands=commands, controller=controller, model=model, model_axes=model_axes,
          qpos_offset=qpos_offset, qvel_offset=qvel_offset, latency=latency, lanes=sub_batch,
          share_physics=share_physics)
    fields = batched.model_field_names(model, model_axes)
    self.check_params(params)
    self.latency_inputs(latency, n)   # validated once, before anything runs
    lat = {cid: {k: np.broadcast_to(np.asarray(v, np.float64), (n,)) for k, v in per.items()}
           for cid, per in (latency or {}).items()}
    share, _ = self.physics_sharing(commands=commands, controller=controller,
                                    model_fields=fields, qpos_offset=qpos_offset,
                                    qvel_offset=qvel_offset, share_physics=share_physics)
    devs = worlds.resolve_devices(devices)
    finals, traces, carries = [], [], []
    for lo, hi in worlds.chunks(n, chunk_worlds):
      whole = (lo, hi) == (0, n)   # one chunk: the inputs as they are (no eager slicing)
      sl = lambda t: t if whole else jax.tree.map(lambda x: x[lo:hi], t)   # noqa: E731
      p, keys = sl(params), sl(world_keys)
      m = model if whole else batched.model_rows(model, fields, lo, hi)
      carry = None
      if controller is not None:
        carry = sl(controller_init) if controller_per_world else jax.tree.map(
            lambda x: jnp.broadcast_to(x, (hi - lo,) + jnp.shape(x)), controller_init)
      _, shared_model, world_model = batched.model_parts(self.mx, m, fields, hi - lo)
      sh, wo = self._call('rollout', hi - lo, devs, sub_batch, {'model': shared_model},
                          {'params': p, 'keys': keys, 'model': world_model,
                           'qpos': sl(qpos_offset), 'qvel': sl(qvel_offset),
                           'latency': self.latency_inputs(sl(lat) or None, hi - lo),
                           'carry': carry, 'commands': batched.world_trace(
                               commands, self.null_commands(), lo, hi)},
                          model_fields=fields, share=share, n_ticks=n_ticks, record=record,
                          controller=controller, observe_truth=observe_truth)
      st, carry, outs = batched.join_state(sh, wo['state']), wo['carry'], wo['outs']
      worlds.Watchdog(f'{self.manifest.path}: rollout of worlds {lo}..{hi - 1} '
                      f'({self.last_layout.describe()}, {n_ticks} ticks)', stall_s).wait(
                          (st, outs))
      finals.append(st)
      carries.append(carry)
      traces.append(outs)
    trace = batched.concat_worlds(traces) if record else None
    final = batched.concat_states(finals, share)
    if return_carry:
      return final, trace, batched.concat_worlds(carries)
    return final, trace


def load(manifest_path, overrides=None, *, vary: dict | None = None, impl: str = 'jax',
         physics: str = 'mjx') -> Simulation:
  """Builds a `Simulation` from a manifest file (host side: parse, compile, bind, plan).

  Args:
    overrides (SPEC §8): `{'components': [{component, field, value}], 'mjcf': [{element,
      name, attribute, value}]}` as in an overlay file, applied as the last layer (`override`).
    vary: `{component id: [manifest field, ...]}` — per-world Params fields whose terms are
      compiled in even when the manifest leaves them at the default, so that per-world
      values (randomization, gradients) take effect. A per-world value given for a term that
      is compiled out is an error (`Simulation.reset`).
    impl, physics: as in `Simulation` (refused with a clear error where they cannot run; a
      one-line error names a component that closes a loop on physics under `physics='c'`).
  """
  worlds.check_impl(impl)
  return Simulation(build.build(read_manifest(manifest_path, overrides=overrides), vary=vary),
                    impl=impl, physics=physics)


world_keys = rng.world_keys
_outputs = jax.jit(batched.outputs, static_argnums=0)   # `Simulation.outputs`
