"""`Simulation`: a built manifest with reset / step / run / rollout over a batch of worlds — a
thin facade over the one-world pipeline (`fibril_mjx.core.pipeline`: `init` / `step` of one
world) and its world axis (`fibril_mjx.batch.batched`: `vmap` over worlds, `lax.scan` over
ticks), laid out on devices, sub-batches and host chunks by `fibril_mjx.batch.worlds`.

Each verb is one jitted program per layout (`_program`; `rollout`: reset and run in one per host
chunk): a block over one sub-batch of worlds, mapped over the sub-batches and sharded over the
devices, whose LAPACK-safe sub-batch is read from its own trace (a new process finds its
compilation in JAX's persistent compilation cache when one is set up).
Inside a user's `jit` / `vmap` / `grad` (traced inputs) a verb runs the batched pipeline as it
is: the caller owns the world axis.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.batch import batched
from fibril_mjx.batch.batched import Controller, Options, Start  # noqa: F401 (public here)
from fibril_mjx.batch import lapack
from fibril_mjx.batch import physics_c
from fibril_mjx.batch import worlds
from fibril_mjx.builder import build
from fibril_mjx.config.manifest import read_manifest
from fibril_mjx.core import groups, latencies, pipeline
from fibril_mjx.core.pipeline import SimState
from fibril_mjx.errors import FibrilError
from fibril_mjx.mechanisms import rng
from fibril_mjx.physics.mjx import warp_model_and_data


class Rollout(NamedTuple):
  """`Simulation.rollout`'s result: the final `state`, the `trace` (leaves `(nworld,
  n_ticks + 1, ...)`, or None) and the controller's final `carry` (or None)."""
  state: SimState
  trace: Any
  carry: Any


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
    data0: the `mjx.Data` every world starts from (`Start(data0=)` replaces it).
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

  def refresh(self, params, state: SimState, *, model=None) -> SimState:
    """`state` with its tick's forward recomputed under `model` (as in `reset`) / `params`
    (traced; no acquisition, no actuation): for a traced caller that holds a state fixed (e.g.
    `tune`'s window starts) and differentiates what follows, so that the integration into the
    next tick depends on the model it differentiates. Values are unchanged when the model /
    `params` are the ones `state` was computed with."""
    return batched.refresh(self._batch(batched.full_model(self.mx, model),
                                       batched.model_field_names(model)), params, state)

  def world_nbytes(self, *, share: bool = False) -> tuple[float, float]:
    """`(bytes of one world's state on the device, bytes of one world's outputs of one tick)`,
    from the shapes only (nothing runs); with `share` the physics is not a world's."""
    if share not in self._nbytes:
      p, keys = self.default_params(2), rng.world_keys(0, 2)
      st, out = jax.eval_shape(lambda: (lambda s: (s, batched.outputs(self.built, s)))(
          batched.reset(self._batch(), p, keys, self._start(None, 2), share=share)))
      self._nbytes[share] = (worlds.tree_nbytes(batched.split_state(st, share)[1]) / 2,
                             worlds.tree_nbytes(out) / 2)
    return self._nbytes[share]

  # ---------------------------------------------------------------- the batched pipeline

  def _batch(self, mx=None, model_fields=()) -> batched.Batch:
    """This simulation's `batched.Batch`: `mx` (None: `self.mx`) with `model_fields` per
    world."""
    return batched.Batch(self.built, self.mx if mx is None else mx, model_fields, self.impl)

  def _start(self, start: Start | None, n_worlds: int) -> Start:
    """`start` for `batched.reset`: latencies in ticks (`latency_inputs`), the initial data
    `data0` (None: `self.data0`, embedded as constants in a program)."""
    start = start or Start()
    return start._replace(latency=self.latency_inputs(start.latency, n_worlds),
                          data0=self.data0 if start.data0 is None else start.data0)

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
    asked for (the CLI's plan, a campaign), it lays out every later program (`_program`)."""
    if self._sub_batch is None:
      if jax.default_backend() != 'cpu':
        self._sub_batch = (None, f'{jax.default_backend()} backend: no CPU LAPACK call')
      else:
        p, keys = self.default_params(1), rng.world_keys(0, 1)
        st = jax.eval_shape(lambda: batched.reset(self._batch(), p, keys, self._start(None, 1)))
        self._sub_batch = lapack.lapack_safe_sub_batch(
            lambda pp, s: batched.step(self._batch(), pp, s), p, st)
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

  def _program(self, block: Callable, n: int, options: Options, shared, world, **static):
    """`(program, its arguments)`: the jitted `block` (`_reset_block`, ...) over `n` worlds on
    `(shared, world)`, laid out (`last_layout`) with `options.sub_batch`, any with shared
    (unbatched) physics, `sub_batch_cap` once asked for, else the LAPACK-safe size read from
    its own trace (`lapack.laid_out`)."""
    devices = worlds.resolve_devices(options.devices)
    pinned = lambda lay: (shared, world) if lay.n_devices == 1 else (   # noqa: E731
        worlds.unpin(shared), worlds.unpin(world))
    key, cap = (block, devices, tuple(sorted(static.items()))), options.sub_batch
    if cap is None and not static['share'] and self._sub_batch is not None:
      cap = self._sub_batch[0]
    find = cap is None and not static['share'] and self._sub_batch is None

    def jitted(lay):
      if (key, lay) not in self._programs:
        fn = worlds.program(functools.partial(block, self, **static), lay, devices)
        self._programs[(key, lay)] = jax.jit(fn)
      return self._programs[(key, lay)]
    prog, self.last_layout = lapack.laid_out(jitted, n, devices, cap, find, self._caps, key,
                                             pinned)
    return prog, pinned(self.last_layout)

  # ---------------------------------------------------------------- public API

  def reset(self, params: dict, world_keys: jax.Array, *, commands: dict | None = None,
            model=None, start: Start | None = None, options: Options | None = None
            ) -> SimState:
    """Resets a batch of worlds and runs tick 0: the tick-0 application, `mjx.forward` of the
    initial state with those controls, and the tick-0 acquisitions (`outputs(state)`).

    Args:
      params: `{id: Params}` with a leading `(nworld,)` axis.
      world_keys: `(nworld, 2)` from `fibril_mjx.world_keys(seed, nworld, first_world)`.
      commands: `{actuator component id: command pytree with leading (nworld,)}` issued at
        tick 0 (a missing component gets its scripted or null command, as in `step`).
      model: per-world MJCF fields, a mapping `{mjx.Model field: (nworld, ...)}` (e.g.
        `{'dof_damping': d}` with `d (nworld, nv)`, `{'body_mass': m}`): vmapped, sub-batched,
        chunked and sharded with the worlds, every other field embedded as constants. Or an
        `mjx.Model` that every world uses instead of `sim.mx` (e.g. `sim.mx.replace(...)`, to
        differentiate wrt MJCF fields), traced as an argument (the embedded model lets XLA
        fold constants).
      start: where each world starts (`Start`). Its `latency` `{component id: {field:
        seconds}}` (fields of `latency_fields()`, scalar or `(nworld,)`) is rounded up to whole
        ticks on the host as a manifest value is, at most the built latency (which sized the
        queue); host values, not differentiable.
      options: `Options` (`share_physics` False by default here; when True and shared, the
        state's `data` has no world axis).

    Inside a user's `jit` / `vmap` / `grad` (traced inputs) the batch runs as one plain
    vmap: the caller owns the world axis.
    """
    self.check_params(params)
    opt, n = options or Options(), world_keys.shape[0]
    fields, shared_model, world_model = batched.model_parts(self.mx, model, n)
    st0 = self._start(start, n)
    share = bool(opt.share_physics) and self.physics_sharing(
        model_fields=fields, qpos_offset=st0.qpos_offset, qvel_offset=st0.qvel_offset)[0]
    if worlds.is_traced((params, world_keys, commands, model, start)):
      return batched.reset(self._batch(batched.full_model(self.mx, model), fields), params,
                           world_keys, st0, commands, share=share)
    prog, args = self._program(_reset_block, n, opt,
                               {'model': shared_model, 'data0': (start or Start()).data0},
                               {'params': params, 'keys': world_keys, 'model': world_model,
                                'qpos': st0.qpos_offset, 'qvel': st0.qvel_offset,
                                'latency': st0.latency, 'commands': commands},
                               fields=fields, share=share)
    return batched.join_state(*prog(*args))

  def outputs(self, state: SimState) -> dict:
    """`{'sensor': {id: Delivered}, 'truth': {id: {...}}}` of the current tick (one program)."""
    return _outputs(self.built, state)

  def component_states(self, state: SimState) -> dict:
    """`{component id: state}` of a batch's `state`, leaves `(nworld, ...)`: the components'
    state is kept by group (the members of a group stacked along a member axis,
    `groups.pack`); this is its per-id view."""
    return groups.unpack(self.built, state.components, axis=1)

  def step(self, params: dict, state: SimState, commands: dict | None = None, *, model=None,
           options: Options | None = None) -> tuple[SimState, dict]:
    """Advances every world one tick (`state.tick` → `state.tick + 1`); returns `(state,
    outputs of the new tick)`.

    Args:
      commands: `{actuator component id: command pytree with leading (nworld,)}` issued at
        the new tick `state.tick + 1`; a missing component gets its scripted command
        (manifest `command_script`), else its null command (nothing issued).
      model, options: as in `reset` (`devices`, `sub_batch`).
    """
    n = state.diverged.shape[0]
    fields, shared_model, world_model = batched.model_parts(self.mx, model, n)
    if worlds.is_traced((params, state, commands, model)):
      return batched.step(self._batch(batched.full_model(self.mx, model), fields), params,
                          state, commands)
    share = batched.is_shared(state)
    sh_st, wo_st = batched.split_state(state, share)
    prog, args = self._program(_step_block, n, options or Options(),
                               {'model': shared_model, 'state': sh_st},
                               {'params': params, 'state': wo_st, 'commands': commands,
                                'model': world_model}, fields=fields, share=share)
    sh, wo = prog(*args)
    return batched.join_state(sh, wo['state']), wo['outs']

  def run(self, params: dict, state: SimState, n_ticks: int, *,
          commands: dict | None = None, controller: Controller | None = None, model=None,
          options: Options | None = None) -> tuple[SimState, Any, Any]:
    """`n_ticks` steps in one `lax.scan`: ticks `state.tick + 1 … state.tick + n_ticks`.

    Commands come from one of:
      * `commands`: an open-loop trace `{id: pytree with leading (n_ticks, nworld)}`, entry i
        issued at tick `state.tick + 1 + i`;
      * `controller` (`Controller`): a single-world JAX policy called after each tick with
        that tick's delivered outputs; its commands are issued at the next tick;
      * neither: scripted (`command_script`) or null commands.

    `model` as in `reset`; `options`: `record`, `devices`, `sub_batch` and `world_major` (the
    command trace and the outputs `(nworld, n_ticks, ...)` instead: what the program computes,
    no transposition on either side; `fibril-mjx run` uses it).

    Returns:
      `(state, outputs, carry)`: outputs of ticks `state.tick + 1 …` stacked `(n_ticks,
      nworld, ...)` (None unless `options.record`); `carry` the controller's final carry per
      world `(nworld, ...)` (None without a controller).
    """
    opt, n = options or Options(), state.diverged.shape[0]
    swap = lambda t: jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), t)   # noqa: E731
    carry = _carry(controller, n)
    if worlds.is_traced((params, state, commands, carry, model)):
      fields = batched.model_field_names(model)
      (state, carry), outs = batched.run(
          self._batch(batched.full_model(self.mx, model), fields), params, state, carry,
          swap(commands) if opt.world_major else commands, n_ticks, opt.record,
          _static(controller))
      outs = swap(outs) if opt.world_major and opt.record else outs
      return state, outs, carry if controller is not None else None
    fields, shared_model, world_model = batched.model_parts(self.mx, model, n)
    share = batched.is_shared(state)
    sh_st, wo_st = batched.split_state(state, share)
    prog, args = self._program(_run_block, n, opt, {'model': shared_model, 'state': sh_st},
                               {'params': params, 'state': wo_st, 'carry': carry,
                                'commands': commands if opt.world_major else swap(commands),
                                'model': world_model},
                               fields=fields, share=share, n_ticks=n_ticks, record=opt.record,
                               controller=_static(controller))
    sh, wo = prog(*args)
    outs = wo['outs'] if opt.world_major or not opt.record else swap(wo['outs'])
    return (batched.join_state(sh, wo['state']), outs,
            wo['carry'] if controller is not None else None)

  def rollout(self, params: dict, world_keys: jax.Array, n_ticks: int, *,
              commands: dict | None = None, controller: Controller | None = None,
              model=None, start: Start | None = None, options: Options | None = None
              ) -> Rollout:
    """Reset then `n_ticks` steps of every world, in one program per host chunk.

    Worlds are laid out by `fibril_mjx.batch.worlds` (devices, LAPACK-safe sub-batches, host
    chunks of `options.chunk_worlds`); a world's result depends on none of these.

    Args:
      params: `{id: Params}` with a leading `(nworld,)` axis.
      world_keys: `(nworld, 2)`.
      commands: open-loop trace `{id: pytree with leading (n_ticks, nworld)}`, entry k
        issued at tick k (tick `n_ticks` issues nothing), or (never both)
      controller: a `Controller` (see `run`): it sees the outputs of tick k and issues the
        commands of tick k + 1 (tick 0 gets the scripted or null commands).
      model, start: per-world MJCF fields and where each world starts, as in `reset`.
      options: `Options` (`share_physics` True by default here: sensor-only Monte Carlo runs
        the physics once for every world; shared and per-world outputs agree to float
        rounding, each bitwise reproducible).

    Returns:
      `Rollout(state, trace, carry)`: trace leaves `(nworld, n_ticks + 1, ...)` with tick 0
      first (None unless `options.record`); `state.diverged` `(nworld,)` is the first tick at
      which a world became non-finite (-1: never); `carry` the controller's final carry
      `(nworld, ...)` (None without a controller).
    """
    opt, n = options or Options(), world_keys.shape[0]
    start = start or Start()
    if commands and controller is not None:   # tick 0 is the loop's code (`batched.run`)
      raise FibrilError('commands= and controller= together: the controller issues the commands '
                        'of ticks 1 … n and tick 0 the scripted or null ones; pass one of them')
    if self.physics == 'c':   # MuJoCo C, open loop: refuses a controller
      physics_c.check_open_loop(self.built, self.physics, controller=controller)
      return Rollout(*physics_c.simulation_rollout(self, params, world_keys, n_ticks,
                                                   commands=commands, model=model,
                                                   start=start, options=opt), None)
    fields = batched.model_field_names(model)
    self.check_params(params)
    self.latency_inputs(start.latency, n)   # validated once, before anything runs
    lat = {cid: {k: np.broadcast_to(np.asarray(v, np.float64), (n,)) for k, v in per.items()}
           for cid, per in (start.latency or {}).items()}
    share, _ = self.physics_sharing(commands=commands, controller=controller,
                                    model_fields=fields, qpos_offset=start.qpos_offset,
                                    qvel_offset=start.qvel_offset,
                                    share_physics=opt.share_physics is not False)
    carry_all = _carry(controller, n)
    finals, traces, carries = [], [], []
    for lo, hi in worlds.chunks(n, opt.chunk_worlds):
      whole = (lo, hi) == (0, n)   # one chunk: the inputs as they are (no eager slicing)
      sl = lambda t: t if whole else jax.tree.map(lambda x: x[lo:hi], t)   # noqa: E731
      _, shared_model, world_model = batched.model_parts(
          self.mx, model if whole else batched.model_rows(model, lo, hi), hi - lo)
      prog, args = self._program(
          _rollout_block, hi - lo, opt, {'model': shared_model, 'data0': start.data0},
          {'params': sl(params), 'keys': sl(world_keys), 'model': world_model,
           'qpos': sl(start.qpos_offset), 'qvel': sl(start.qvel_offset),
           'latency': self.latency_inputs(sl(lat) or None, hi - lo), 'carry': sl(carry_all),
           'commands': batched.world_trace(commands, self.null_commands(), lo, hi)},
          fields=fields, share=share, n_ticks=n_ticks, record=opt.record,
          controller=_static(controller))
      sh, wo = prog(*args)
      st, outs = batched.join_state(sh, wo['state']), wo['outs']
      worlds.Watchdog(f'{self.manifest.path}: rollout of worlds {lo}..{hi - 1} '
                      f'({self.last_layout.describe()}, {n_ticks} ticks)', opt.stall_s).wait(
                          (st, outs))
      finals.append(st)
      carries.append(wo['carry'])
      traces.append(outs)
    return Rollout(batched.concat_states(finals, share),
                   batched.concat_worlds(traces) if opt.record else None,
                   batched.concat_worlds(carries) if controller is not None else None)


# ---------------------------------------------------------------- the programs' blocks
# One sub-batch of worlds each (`worlds.program` maps them over sub-batches and devices):
# `(sim, shared, world, **static) -> (fields without a world axis, fields with one)`.

def _world_start(sim, shared, world) -> Start:
  """A block's `Start`: `shared['data0']` None is `sim.data0`, embedded as constants."""
  data0 = sim.data0 if shared['data0'] is None else shared['data0']
  return Start(world['qpos'], world['qvel'], world['latency'], data0)


def _reset_block(sim, shared, world, *, fields, share):
  mx = batched.join_model(sim.mx, shared['model'], world['model'])
  st = batched.reset(sim._batch(mx, fields), world['params'], world['keys'],
                     _world_start(sim, shared, world), world['commands'], share=share)
  return batched.split_state(st, share)


def _step_block(sim, shared, world, *, fields, share):
  mx = batched.join_model(sim.mx, shared['model'], world['model'])
  st = batched.join_state(shared['state'], world['state'])
  st, out = batched.step(sim._batch(mx, fields), world['params'], st, world['commands'])
  sh, wo = batched.split_state(st, share)
  return sh, {'state': wo, 'outs': out}


def _run_block(sim, shared, world, *, fields, share, n_ticks, record, controller):
  mx = batched.join_model(sim.mx, shared['model'], world['model'])
  st = batched.join_state(shared['state'], world['state'])
  cmds = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), world['commands'])   # → (T, k, ...)
  (st, carry), outs = batched.run(sim._batch(mx, fields), world['params'], st, world['carry'],
                                  cmds, n_ticks, record, controller)
  sh, wo = batched.split_state(st, share)
  outs = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), outs) if record else None
  return sh, {'state': wo, 'carry': carry, 'outs': outs}   # outs world-major (k, T, ...)


def _rollout_block(sim, shared, world, *, fields, share, n_ticks, record, controller):
  """`rollout`'s program (one per host chunk): ticks 0 … n_ticks in one scan from before
  tick 0 (`pipeline.before_tick0`), so each tick's code is compiled once."""
  batch = sim._batch(batched.join_model(sim.mx, shared['model'], world['model']), fields)
  st = batched.reset(batch, world['params'], world['keys'], _world_start(sim, shared, world),
                     share=share, tick0=False)
  cmds = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), world['commands'])   # → (T, k, ...)
  (st, carry), outs = batched.run(batch, world['params'], st, world['carry'], cmds,
                                  n_ticks + 1, record, controller, integrate=None)
  sh, wo = batched.split_state(st, share)
  outs = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), outs) if record else None
  return sh, {'state': wo, 'carry': carry, 'outs': outs}   # outs world-major (k, T, ...)


def _static(controller: Controller | None) -> Controller | None:
  """A controller without its carry: what a program compiles in (hashable)."""
  return None if controller is None else controller._replace(init=None)


def _carry(controller: Controller | None, n_worlds: int):
  """A controller's carry per world `(nworld, ...)`: `init` broadcast, or as it is with
  `per_world`; None without a controller."""
  if controller is None:
    return None
  if controller.per_world:
    return controller.init
  return jax.tree.map(lambda x: jnp.broadcast_to(x, (n_worlds,) + jnp.shape(x)),
                      controller.init)


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
