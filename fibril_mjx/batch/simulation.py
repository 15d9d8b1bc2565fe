"""The simulator (SPEC §8): pure single-world reset / step over a `build.Built`, then the
batch edge — `vmap` over worlds, `lax.scan` over ticks — laid out on devices, sub-batches and
host chunks by `fibril_mjx.batch.worlds`.

One tick k (SPEC §4): the commands issued at tick k enter the actuators' transports, the
actuators write `ctrl` at their application instants, `mjx.forward` evaluates the state `x_k`
with those controls (positions, velocities, accelerations, `sensordata`), and the sensors,
feedback and estimators acquire and deliver the tick's samples from it; the next tick starts by
integrating `x_k` to `x_{k+1}` (`mjx.step` = forward + integrate, split in two). So a sample
stamped tick k describes `x_k` — what MuJoCo C's `mj_forward` gives at that state — and each
tick costs one forward. `reset` runs tick 0; `step` runs one more tick.

The tick counter and the schedules are shared by all worlds (they depend on static config
only), so an acquisition instant is a real branch under `vmap`, not a select. Components are
driven by their declared roles (`core/protocol.py`): actuators before physics,
sensors and estimators after it, in manifest order.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.builder import build
from fibril_mjx.core import command_script
from fibril_mjx.physics import dcmotor
from fibril_mjx.mechanisms import rng
from fibril_mjx.mechanisms import schedule
from fibril_mjx.mechanisms import transport
from fibril_mjx.batch import worlds
from fibril_mjx.physics.mjx import mjx
from fibril_mjx.builder.build import DCMOTOR_PARAMS
from fibril_mjx.core import protocol
from fibril_mjx.errors import FibrilError, did_you_mean
from fibril_mjx.config.manifest import read_manifest

# Transport latencies that may differ per world (`Simulation.reset(latency=)`): the manifest
# field → (the component's `Transport` attribute, the path of its queue in the state).
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


class SimState(NamedTuple):
  """State of a batch of worlds.

  Attributes:
    tick: int32 scalar, shared by all worlds (tick k is time k·dt).
    clocks: `{component id: {schedule name: ScheduleState}}`, shared by all worlds.
    data: `mjx.Data` after the forward of tick `tick` (the state `x_tick` with the tick's
      controls; its `sensordata` is that of `x_tick`), leaves `(nworld, ...)` — or without the
      world axis when the physics is shared by all worlds (`Simulation.physics_sharing`).
    ctrl: `(nworld, nu)` controls in the compiled model's layout (what actuators wrote at
      tick `tick`); `(nu,)` with shared physics.
    dcmotor: `dcmotor.Pending` `(nworld, ...)` (the activations after the next integration,
      and what it needs) when the model has dcmotor actuators, else ().
    components: `{component id: state}`, leaves `(nworld, ...)`.
    diverged: `(nworld,)` int32, the first tick at which the world's physics or component
      state was non-finite, -1 while it is finite (MJX neither stops nor resets such a world;
      its later outputs are meaningless and summaries exclude it).
  """
  tick: jax.Array
  clocks: dict
  data: Any
  ctrl: jax.Array
  dcmotor: Any
  components: dict
  diverged: Any = ()


_SHARED_FIELDS = ('tick', 'clocks')
_PHYSICS_FIELDS = ('data', 'ctrl', 'dcmotor')


def _split_state(st: SimState, share: bool) -> tuple[dict, dict]:
  """`(fields without a world axis, fields with one)` of a state."""
  shared = _SHARED_FIELDS + (_PHYSICS_FIELDS if share else ())
  return ({f: getattr(st, f) for f in shared},
          {f: getattr(st, f) for f in SimState._fields if f not in shared})


def _join_state(shared: dict, world: dict) -> SimState:
  return SimState(**shared, **world)


def _call_unpinned(prog, shared, world):
  return prog(worlds.unpin(shared), worlds.unpin(world))


def _is_shared(state: SimState) -> bool:
  return jnp.ndim(state.ctrl) == 1


class Simulation:
  """A built manifest with jitted reset / step / run / rollout.

  Attributes:
    built: the static `build.Built` (hashable).
    impl: physics implementation, `'jax'` (MJX-JAX, differentiable, default) or `'warp'`
      (MJX-Warp: NVIDIA GPUs only, not differentiable; refused elsewhere).
    manifest, mj_model, mx, dt, components, dcmotor, assemblies, overlays, command_script,
    actuator_script: shortcuts into `built`.
  """

  def __init__(self, built: build.Built, *, impl: str = 'jax'):
    worlds.check_impl(impl)
    self.impl = impl
    self.built = built
    self.manifest = built.manifest
    self.mj_model = built.mj_model
    self.physics_model = built.physics_model
    self.mx = built.mx
    self.dt = built.dt
    self.components = built.components
    self.dcmotor = built.dcmotor
    self.assemblies = built.assemblies
    self.overlays = built.overlays
    self.command_script = built.command_script
    self.actuator_script = built.actuator_script
    self._data0 = built.data0
    self._ctrl0 = jnp.zeros(built.mj_model.nu, jnp.float32)
    self._sensing = tuple((cid, c) for cid, c in self.components.items()
                          if protocol.SENSOR in c.roles or protocol.ESTIMATOR in c.roles)
    self._actuators = tuple((cid, c) for cid, c in self.components.items()
                            if protocol.ACTUATOR in c.roles)
    self._physics_forward, self._physics_integrate = mjx.forward, mjx.integrate
    if impl == 'warp':   # pragma: no cover — needs an NVIDIA GPU
      import mujoco
      from mujoco import mjx as mjx_native
      self.mx = mjx_native.put_model(built.physics_model, impl='warp')
      d = mujoco.MjData(built.physics_model)
      mujoco.mj_forward(built.physics_model, d)
      self._data0 = mjx_native.put_data(built.physics_model, d, impl='warp')
      # MJX-Warp has no separate integration; its step recomputes the forward (2 per tick)
      self._physics_forward = mjx_native.forward
      self._physics_integrate = lambda m, d: mjx_native.step(m, d)
    self._programs: dict = {}
    self._sub_batch: tuple | None = None

  # ---------------------------------------------------------------- params

  def default_params(self, n_worlds: int | None = None) -> dict:
    """`{component id: Params}` (plus `'mjcf.dcmotor'` for dcmotor models).

    With `n_worlds`, every leaf gets a leading world axis (per-world values, e.g. for
    randomization or gradients).
    """
    p = {cid: c.default_params() for cid, c in self.components.items()}
    if self.dcmotor is not None:
      p[DCMOTOR_PARAMS] = dcmotor.default_params(self.dcmotor, self.mj_model, jnp.float32)
    if n_worlds is None:
      return p
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (n_worlds,) + jnp.shape(x)), p)

  def check_params(self, params: dict) -> None:
    """Refuses a per-world value for a term that is compiled out of the graph.

    A term whose manifest value is the default is absent from the traced graph (unless named
    in `vary`), so a value passed for it would be ignored silently; this raises instead,
    naming the component, the field and how to enable it. Traced params (inside `jax.grad`)
    cannot be inspected: load with `vary=` before differentiating wrt such a field.
    """
    for cid, c in self.components.items():
      fields = c.compiled_out()
      if not fields or cid not in params:
        continue
      default = None
      for field in fields:
        given = c.get_param(params[cid], field)
        if isinstance(given, jax.core.Tracer):
          continue
        if default is None:
          default = c.default_params()
        nominal = np.asarray(c.get_param(default, field))
        if np.any(np.asarray(given) != nominal):
          raise FibrilError(
              f'component {cid!r} ({c.type}) field {field!r}: per-world values differ from '
              f'the manifest value {nominal.tolist()}, but the term is compiled out (the '
              "manifest leaves it at its default); load with "
              f"vary={{'{cid}': ['{field}']}} (a campaign's vary: does this), or set a "
              'non-default value in the manifest')

  def null_commands(self) -> dict:
    """`{actuator component id: command}` meaning "nothing issued this tick" (one world).

    A component missing from the commands passed to `step` / `run` / `rollout` (or returned by
    a controller) gets its manifest `command_script` command if it has one, else this.
    """
    return {cid: c.null_command() for cid, c in self._actuators}

  def latency_fields(self) -> dict:
    """`{component id: (latency field, ...)}`: the transport latencies that `reset` and
    `rollout` take per world (`latency=`), e.g. `{'ahrs': ('latency_s',)}`."""
    out = {}
    for cid, c in self.components.items():
      names = tuple(n for n, (attr, _) in LATENCY_FIELDS.items()
                    if isinstance(_attr_path(c, attr), transport.Transport))
      if names:
        out[cid] = names
    return out

  def latency_inputs(self, latency: dict | None, n_worlds: int) -> dict | None:
    """Validates per-world latencies and rounds them to whole ticks on the host.

    Args:
      latency: `{component id: {latency field: seconds, () or (nworld,)}}` (see `reset`).

    Returns:
      `{component id: {field: (latency_s float32 (nworld,), delay_ticks int32 (nworld,))}}`,
      or None without latencies.

    Raises:
      FibrilError: an unknown component or field, a traced value, a negative or non-finite
        value, one above the built latency (which sized the queue), or one that is not a
        whole number of ticks under `quantization: strict`.
    """
    if not latency:
      return None
    if worlds.is_traced(latency):
      raise FibrilError('latency=: per-world latencies are host values (rounded to whole ticks '
                        'on the host), not traced arrays')
    known = self.latency_fields()
    out = {}
    for cid, per in latency.items():
      if cid not in known:
        why = 'has no transport latency' if cid in self.components else 'no component of that id'
        raise FibrilError(f'latency: component {cid!r}: {why}'
                          + did_you_mean(cid, list(known)) + f' (components with one: '
                          f'{", ".join(known) or "none"})')
      if not isinstance(per, Mapping):
        raise FibrilError(f'latency[{cid!r}]: must be a mapping of latency field to per-world '
                          f"seconds, e.g. {{'{known[cid][0]}': values}}")
      c, out[cid] = self.components[cid], {}
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
        ticks = np.array([latency_ticks(x, self.dt) for x in uniq], np.int32)[inv.reshape(-1)]
        quant = dict(c.fields).get('quantization')
        if quant is not None and quant.value == 'strict':
          off = [x for x in uniq if schedule.ticks_fraction(x, self.dt).denominator != 1]
          if off:
            raise FibrilError(f'{where}: {off[0]:g} s: quantization strict requires an integer '
                              f'multiple of dt = {self.dt:g} s')
        out[cid][name] = (jnp.asarray(v, jnp.float32), jnp.asarray(ticks, jnp.int32))
    return out

  # ---------------------------------------------------------------- single world

  def _clocks0(self):
    clocks = {cid: {name: schedule.init(s) for name, s in c.schedules.items()}
              for cid, c in self.components.items()}
    clocks[command_script.KEY] = {k: schedule.init(s) for k, s in self.command_script.schedules.items()}
    return clocks

  def _sense(self, params, comps, data, tick, dues):
    comps, env = dict(comps), {}
    for cid, c in self._sensing:
      comps[cid] = c.sense(params[cid], comps[cid], data, tick, dues[cid], env)
      env[cid] = c.output(comps[cid])
    return comps

  def _world_reset(self, mx, params, world_key, commands, tick, pre, post, qpos_offset=None,
                   qvel_offset=None, latency=None):
    """Tick 0 of one world: initial state, components, then the tick's application,
    forward and acquisitions (`_world_tick`)."""
    data = self._data0
    if qpos_offset is not None:   # per-world initial state (added before the first forward)
      data = data.replace(qpos=data.qpos + qpos_offset)
    if qvel_offset is not None:
      data = data.replace(qvel=data.qvel + qvel_offset)
    data = mjx.forward(mx, data)   # what actuators and dcmotors start from
    comps = {cid: c.init(params[cid], world_key) for cid, c in self.components.items()}
    for cid, per in (latency or {}).items():   # this world's latencies, before anything is sent
      for name, (lat_s, ticks) in per.items():
        comps[cid] = _replace_path(comps[cid], LATENCY_FIELDS[name][1],
                                   lambda q, s=lat_s, t=ticks: transport.with_latency(q, s, t))
    dc = ()
    if self.dcmotor is not None:
      dc = dcmotor.init(self.dcmotor, params[DCMOTOR_PARAMS], mx, data)
    ctrl = self._ctrl0
    for cid, c in self._actuators:   # what an actuator holds before its first application
      comps[cid], ctrl = c.reset_ctrl(params[cid], comps[cid], data, ctrl)
    return self._world_tick(mx, params, data, ctrl, dc, comps, commands, tick, pre, post)

  def _world_tick(self, mx, params, data, ctrl, dc, comps, commands, tick, pre, post):
    """Tick `tick` of one world at its state `x_tick` (SPEC §4): application of the tick's
    controls, `forward` (every stage and `sensordata` of `x_tick` with those controls), then
    the acquisitions and deliveries of the tick. `dc` is the dcmotor activation; returned as
    the `dcmotor.Pending` the next integration needs."""
    ctrl = self.actuator_script.ctrl(ctrl, tick.astype(jnp.float32) * self.dt)
    comps = dict(comps)
    for cid, c in self._actuators:
      comps[cid], ctrl = c.actuate(params[cid], comps[cid], data, ctrl, commands[cid], tick,
                                   pre[cid])
    if self.dcmotor is None:
      data = self._physics_forward(mx, data.replace(ctrl=ctrl))
    else:
      data, dc = dcmotor.forward(self.dcmotor, params[DCMOTOR_PARAMS], mx, data, ctrl, dc)
    return data, ctrl, dc, self._sense(params, comps, data, tick, post)

  def _world_step(self, mx, params, data, ctrl, dc, comps, commands, tick, pre, post):
    """Tick `tick - 1` → `tick` of one world: integrate `x_{tick-1}` (whose forward the last
    tick computed) to `x_tick`, then tick `tick` (`_world_tick`)."""
    if self.dcmotor is None:
      data = self._physics_integrate(mx, data)
    else:
      data, dc = dcmotor.integrate(self.dcmotor, mx, data, dc)
    return self._world_tick(mx, params, data, ctrl, dc, comps, commands, tick, pre, post)

  def refresh(self, mx, params, state: SimState, model_fields=()) -> SimState:
    """`state` with its tick's forward recomputed under `mx` / `params` (traced; no acquisition,
    no actuation): for a traced caller that holds a state fixed (e.g. `tune`'s window starts)
    and differentiates what follows, so that the integration into the next tick depends on the
    model it differentiates. Values are unchanged when `mx` / `params` are the ones `state` was
    computed with."""
    mx = self.mx if mx is None else mx
    phys = None if _is_shared(state) else 0

    def world(m, p, data, ctrl, dc):
      if self.dcmotor is None:
        return self._physics_forward(m, data), dc
      return dcmotor.forward(self.dcmotor, p[DCMOTOR_PARAMS], m, data, ctrl, dc.current)
    data, dc = jax.vmap(world, in_axes=(worlds.model_in_axes(mx, model_fields), 0, phys, phys,
                                        phys), out_axes=(phys, phys))(
        mx, params, state.data, state.ctrl, state.dcmotor)
    return state._replace(data=data, dcmotor=dc)

  def _world_finite(self, data, comps):
    """True while one world's physics and component state are finite (a traced check).

    Delivered data (`transport.QueueState` in flight, `transport.Delivered` held) is left
    out: a device may send NaN — a `nan` fault, a motor's `normalized_output` without a
    forcerange — and that is data for the consumer, not a diverged world.
    """
    data_types = (transport.QueueState, transport.Delivered)
    internal = jax.tree.leaves(comps, is_leaf=lambda x: isinstance(x, data_types))
    leaves = [data.qpos, data.qvel, data.act] + [
        x for x in internal if not isinstance(x, data_types)
        and jnp.issubdtype(jnp.result_type(x), jnp.floating)]
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves if jnp.size(x)]))

  def _outputs(self, data, comps):
    sensor = {cid: c.output(comps[cid]) for cid, c in self.components.items()}
    truth = {cid: c.truth(comps[cid], data) for cid, c in self.components.items()}
    return {'sensor': sensor, 'truth': truth}

  # ---------------------------------------------------------------- batch (one sub-batch)

  def _advance_clocks(self, clocks, tick, pre_physics: bool):
    """Advances the schedules of one phase at `tick`; returns `(dues, clocks)`."""
    dues, new = {}, dict(clocks)
    for cid, c in self.components.items():
      dues[cid], new[cid] = {}, dict(clocks[cid])
      for name, s in c.schedules.items():
        if (name in protocol.PRE_PHYSICS) == pre_physics:
          due, n, new[cid][name] = schedule.advance(s, clocks[cid][name], tick)
          dues[cid][name] = (due, n)
    return dues, new

  def _reset_batch(self, mx, params, world_keys, qpos_offset=None, qvel_offset=None,
                   model_fields=(), share=False, latency=None, commands=None):
    """Reset of a batch of worlds (vmapped single-world reset), through tick 0's application,
    forward and acquisitions. With `share` the physics is computed once (no world axis) and
    only the components are per world; `model_fields` are the fields of `mx` with a leading
    world axis; `latency` as from `latency_inputs`; `commands` those issued at tick 0."""
    mx = self.mx if mx is None else mx
    tick = jnp.int32(0)
    n_worlds = world_keys.shape[0]
    clocks, commands, pre, post = self._tick_inputs(self._clocks0(), commands, n_worlds, tick)
    phys = None if share else 0
    data, ctrl, dc, comps = jax.vmap(
        self._world_reset, in_axes=(worlds.model_in_axes(mx, model_fields), 0, 0, 0, None,
                                    None, None, 0, 0, 0),
        out_axes=(phys, phys, phys, 0))(mx, params, world_keys, commands, tick, pre, post,
                                        qpos_offset, qvel_offset, latency)
    finite = jax.vmap(self._world_finite, in_axes=(phys, 0))(data, comps)
    return SimState(tick, clocks, data, ctrl, dc, comps,
                    jnp.where(finite, -1, 0).astype(jnp.int32))

  def _tick_inputs(self, clocks, commands, n_worlds, tick):
    """The shared inputs of tick `tick`: `(clocks after it, commands, pre-physics dues,
    acquisition dues)`; the commands are given, else scripted, else null."""
    script_dues, clocks = self._advance_script(clocks, tick)
    commands = self._fill_commands(commands, n_worlds, tick, script_dues)
    pre, clocks = self._advance_clocks(clocks, tick, True)
    post, clocks = self._advance_clocks(clocks, tick, False)
    return clocks, commands, pre, post

  def _fill_commands(self, commands, n_worlds, tick, script_dues):
    """Commands of every actuator component: given, else scripted (manifest
    `command_script`), else the null command."""
    out = {}
    scripted = self.command_script.commands(self.components, tick, script_dues)
    for cid, null in self.null_commands().items():
      cmd = (commands or {}).get(cid)
      out[cid] = cmd if cmd is not None else jax.tree.map(
          lambda x: jnp.broadcast_to(x, (n_worlds,) + jnp.shape(x)), scripted.get(cid, null))
    return out

  def _advance_script(self, clocks, tick):
    dues, new = {}, dict(clocks[command_script.KEY])
    for k, s in self.command_script.schedules.items():
      due, n, new[k] = schedule.advance(s, clocks[command_script.KEY][k], tick)
      dues[k] = (due, n)
    return dues, {**clocks, command_script.KEY: new}

  def _step_batch(self, mx, params, state: SimState, commands=None, model_fields=()):
    """One tick of a batch: `state` at tick k → tick k + 1 with the `commands` issued at
    tick k + 1; returns `(state, outputs of tick k + 1)`."""
    mx = self.mx if mx is None else mx
    share = _is_shared(state)
    phys = None if share else 0
    n_worlds = state.diverged.shape[0]
    tick = state.tick + 1
    clocks, commands, pre, post = self._tick_inputs(state.clocks, commands, n_worlds, tick)
    data, ctrl, dc, comps = jax.vmap(
        self._world_step, in_axes=(worlds.model_in_axes(mx, model_fields), 0, phys, phys, phys,
                                   0, 0, None, None, None),
        out_axes=(phys, phys, phys, 0))(
            mx, params, state.data, state.ctrl, state.dcmotor, state.components, commands,
            tick, pre, post)
    finite = jax.vmap(self._world_finite, in_axes=(phys, 0))(data, comps)
    diverged = jnp.where((state.diverged < 0) & ~finite, tick, state.diverged)
    state = SimState(tick, clocks, data, ctrl, dc, comps, diverged)
    return state, jax.vmap(self._outputs, in_axes=(phys, 0))(data, comps)

  def _observe(self, outputs, observe_truth):
    return outputs if observe_truth else {'sensor': outputs['sensor']}

  def _run_batch(self, mx, params, state, carry, commands, n_ticks: int, record: bool,
                 controller=None, observe_truth=False, model_fields=()):
    mx = self.mx if mx is None else mx
    phys = None if _is_shared(state) else 0

    def observe(out):
      # Only a controller needs last tick's outputs in the carry; otherwise they stay out of
      # it so that unrecorded outputs (e.g. truth) are not computed at all.
      return self._observe(out, observe_truth) if controller is not None else ()

    def body(c, cmd):
      st, ctl, obs = c
      if controller is not None:
        cmd, ctl = jax.vmap(controller)(obs, ctl)
      st, out = self._step_batch(mx, params, st, cmd, model_fields)
      return (st, ctl, observe(out)), (out if record else None)
    obs0 = observe(jax.vmap(self._outputs, in_axes=(phys, 0))(state.data, state.components))
    (state, carry, _), outs = jax.lax.scan(body, (state, carry, obs0), commands,
                                           length=n_ticks)
    return (state, carry), outs

  # ---------------------------------------------------------------- the world axis

  def physics_sharing(self, *, commands=None, controller=None, model_fields=(),
                      qpos_offset=None, qvel_offset=None, share_physics: bool = True
                      ) -> tuple[bool, str]:
    """Whether every world can use one physics trajectory, and why (not).

    Physics is shared when nothing per world can change it: the manifest drives actuators
    only open loop (`actuator_script`), no actuator component (whose per-world state or
    randomness reaches `ctrl`), no dcmotor actuators (per-world motor parameters), no
    controller or command trace, no per-world MJCF field or initial state. The sensor
    pipelines stay per world (each with its own noise, bias, transport) and read the shared
    data. Returns `(shared, reason)`.
    """
    acts = [cid for cid, _ in self._actuators]
    reasons = []
    if not share_physics:
      reasons.append('switched off (share_physics=False / --no-share-physics)')
    if acts:
      reasons.append(f'actuator component(s) {", ".join(map(repr, acts))} write ctrl from '
                     'per-world state')
    if self.dcmotor is not None:
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

  def sub_batch_cap(self) -> tuple[int | None, str]:
    """Worlds per vmapped call below jaxlib's LAPACK thread-pool split (`worlds.
    lapack_safe_sub_batch`, from the traced step), and why; None: no limit."""
    if self._sub_batch is None:
      if jax.default_backend() != 'cpu':
        self._sub_batch = (None, f'{jax.default_backend()} backend: no CPU LAPACK call')
      else:
        p = self.default_params(1)
        keys = rng.world_keys(0, 1)
        st = jax.eval_shape(lambda: self._reset_batch(None, p, keys))
        self._sub_batch = worlds.lapack_safe_sub_batch(
            lambda pp, s: self._step_batch(None, pp, s), p, st)
    return self._sub_batch

  def layout(self, n_worlds: int, *, devices=None, sub_batch: int | None = None,
             share: bool = False) -> worlds.Layout:
    """How `n_worlds` worlds run in one program (`worlds.Layout`)."""
    devs = worlds.resolve_devices(devices)
    cap = sub_batch
    if cap is None and not share:   # shared physics is unbatched: no batched LAPACK call
      cap = self.sub_batch_cap()[0]
    return worlds.layout(n_worlds, len(devs), cap)

  def _program(self, kind: str, lay, devices, **static):
    key = (kind, lay, devices, tuple(sorted(static.items())))
    prog = self._programs.get(key)
    if prog is None:
      block = getattr(self, f'_{kind}_block')
      prog = jax.jit(worlds.program(functools.partial(block, **static), lay, devices))
      if lay.n_devices > 1:   # a model or state pinned to one device is moved by the program
        prog = functools.partial(_call_unpinned, prog)
      self._programs[key] = prog
    return prog

  def _join_model(self, shared_model, world_model):
    """A block's model: without a shared part (`model=` a mapping of per-world fields) the
    compiled model is embedded as constants under the per-world fields."""
    if shared_model is None and world_model:
      return self.mx.replace(**world_model)
    return worlds.join_model(shared_model, world_model)

  def _reset_block(self, shared, world, *, model_fields, share):
    mx = self._join_model(shared['model'], world['model'])
    st = self._reset_batch(mx, world['params'], world['keys'], world['qpos'], world['qvel'],
                           model_fields, share, world['latency'], world['commands'])
    return _split_state(st, share)

  def _step_block(self, shared, world, *, model_fields, share):
    mx = self._join_model(shared['model'], world['model'])
    st = _join_state(shared['state'], world['state'])
    st, out = self._step_batch(mx, world['params'], st, world['commands'], model_fields)
    sh, wo = _split_state(st, share)
    return sh, {'state': wo, 'outs': out}

  def _run_block(self, shared, world, *, model_fields, share, n_ticks, record, controller,
                 observe_truth):
    mx = self._join_model(shared['model'], world['model'])
    st = _join_state(shared['state'], world['state'])
    cmds = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), world['commands'])   # → (T, k, ...)
    (st, carry), outs = self._run_batch(mx, world['params'], st, world['carry'], cmds, n_ticks,
                                        record, controller, observe_truth, model_fields)
    sh, wo = _split_state(st, share)
    outs = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), outs) if record else None
    return sh, {'state': wo, 'carry': carry, 'outs': outs}   # outs world-major (k, T, ...)

  def _split_trace(self, commands, lo: int, hi: int):
    """A rollout's open-loop trace `{id: (n_ticks, nworld, ...)}` for worlds `lo:hi`, as the
    tick-0 commands for `reset` `(k, ...)` and the world-major commands of ticks 1 … n_ticks
    for `run` `(k, n_ticks, ...)` (tick n_ticks issues nothing: the null command)."""
    if not commands:
      return None, None
    null = self.null_commands()
    first, rest = {}, {}
    for cid, cmd in commands.items():
      first[cid] = jax.tree.map(lambda x: x[0, lo:hi], cmd)
      rest[cid] = jax.tree.map(
          lambda x, z: jnp.swapaxes(jnp.concatenate(
              [x[1:, lo:hi], jnp.broadcast_to(jnp.asarray(z, x.dtype),
                                              (1, hi - lo) + x.shape[2:])]), 0, 1),
          cmd, null[cid])
    return first, rest

  def _model_field_names(self, model, model_axes) -> tuple:
    if isinstance(model, Mapping):
      return tuple(sorted(model))
    return worlds.model_fields(model_axes)

  def _full_model(self, model):
    """An `mjx.Model` for the traced (caller-owned) path."""
    return self.mx.replace(**model) if isinstance(model, Mapping) else model

  def _model_parts(self, model, model_axes, n_worlds):
    if isinstance(model, Mapping):   # per-world fields; the rest stays compiled in
      fields = tuple(sorted(model))
      if model_axes is not None and worlds.model_fields(model_axes) != fields:
        raise FibrilError('model_axes: with model= a mapping of per-world fields, the world '
                          'axis is on exactly those fields (leave model_axes out)')
      for f in fields:
        if not hasattr(self.mx, f):
          names = [x.name for x in dataclasses.fields(self.mx)]
          raise FibrilError(f'model: mjx.Model has no field {f!r}' + did_you_mean(f, names))
      _, world = worlds.split_model(self.mx.replace(**model), fields, n_worlds)
      return fields, None, world
    fields = worlds.model_fields(model_axes)
    if fields and model is None:
      raise FibrilError('model_axes given without model=: pass the mjx.Model whose fields '
                        f'{", ".join(fields)} have a leading world axis')
    shared, world = worlds.split_model(model, fields, n_worlds)
    return fields, shared, world

  # ---------------------------------------------------------------- public API

  def reset(self, params: dict, world_keys: jax.Array, *, commands: dict | None = None,
            model=None, model_axes=None, qpos_offset=None, qvel_offset=None,
            latency: dict | None = None, share_physics: bool = False, devices=None,
            sub_batch: int | None = None) -> SimState:
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

    Inside a user's `jit` / `vmap` / `grad` (traced inputs) the batch runs as one plain
    vmap: the caller owns the world axis.
    """
    self.check_params(params)
    n = world_keys.shape[0]
    fields, shared_model, world_model = self._model_parts(model, model_axes, n)
    lat = self.latency_inputs(latency, n)
    share = share_physics and self.physics_sharing(
        model_fields=fields, qpos_offset=qpos_offset, qvel_offset=qvel_offset)[0]
    if worlds.is_traced((params, world_keys, commands, model, qpos_offset, qvel_offset)):
      return self._reset_batch(self._full_model(model), params, world_keys, qpos_offset,
                               qvel_offset, fields, share, lat, commands)
    devs = worlds.resolve_devices(devices)
    lay = self.layout(n, devices=devs, sub_batch=sub_batch, share=share)
    prog = self._program('reset', lay, devs, model_fields=fields, share=share)
    sh, wo = prog({'model': shared_model},
                  {'params': params, 'keys': world_keys, 'model': world_model,
                   'qpos': qpos_offset, 'qvel': qvel_offset, 'latency': lat,
                   'commands': commands})
    return _join_state(sh, wo)

  def outputs(self, state: SimState) -> dict:
    """`{'sensor': {id: Delivered}, 'truth': {id: {...}}}` of the current tick."""
    phys = None if _is_shared(state) else 0
    return jax.vmap(self._outputs, in_axes=(phys, 0))(state.data, state.components)

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
    fields, shared_model, world_model = self._model_parts(model, model_axes, n)
    if worlds.is_traced((params, state, commands, model)):
      return self._step_batch(self._full_model(model), params, state, commands, fields)
    share = _is_shared(state)
    devs = worlds.resolve_devices(devices)
    lay = self.layout(n, devices=devs, sub_batch=sub_batch, share=share)
    sh_st, wo_st = _split_state(state, share)
    prog = self._program('step', lay, devs, model_fields=fields, share=share)
    sh, wo = prog({'model': shared_model, 'state': sh_st},
                  {'params': params, 'state': wo_st, 'commands': commands,
                   'model': world_model})
    return _join_state(sh, wo['state']), wo['outs']

  def run(self, params: dict, state: SimState, n_ticks: int, record: bool = True, *,
          commands: dict | None = None, controller: Callable | None = None,
          controller_state: Any = None, observe_truth: bool = False, model=None,
          model_axes=None, devices=None, sub_batch: int | None = None):
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

    Returns:
      `(state, outputs)` with outputs of ticks `state.tick + 1 …` stacked `(n_ticks, nworld,
      ...)` (None unless `record`); with a controller, `((state, controller_state),
      outputs)`.
    """
    if worlds.is_traced((params, state, commands, controller_state, model)):
      fields = self._model_field_names(model, model_axes)
      (state, carry), outs = self._run_batch(self._full_model(model), params, state,
                                             controller_state, commands,
                                             n_ticks, record, controller, observe_truth,
                                             fields)
    else:
      cmds = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), commands)
      state, carry, outs = self._run_world_major(
          params, state, n_ticks, record, commands=cmds, controller=controller,
          controller_state=controller_state, observe_truth=observe_truth, model=model,
          model_axes=model_axes, devices=devices, sub_batch=sub_batch)
      outs = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), outs) if record else None
    return ((state, carry) if controller is not None else state), outs

  def _run_world_major(self, params, state, n_ticks, record, *, commands=None, controller=None,
                       controller_state=None, observe_truth=False, model=None, model_axes=None,
                       devices=None, sub_batch=None):
    """`run` with world-major commands and outputs `(nworld, n_ticks, ...)`; returns
    `(state, controller_state, outputs)` (used by `rollout` and `fibril-mjx run`)."""
    n = state.diverged.shape[0]
    fields, shared_model, world_model = self._model_parts(model, model_axes, n)
    share = _is_shared(state)
    devs = worlds.resolve_devices(devices)
    lay = self.layout(n, devices=devs, sub_batch=sub_batch, share=share)
    sh_st, wo_st = _split_state(state, share)
    prog = self._program('run', lay, devs, model_fields=fields, share=share, n_ticks=n_ticks,
                         record=record, controller=controller, observe_truth=observe_truth)
    sh, wo = prog({'model': shared_model, 'state': sh_st},
                  {'params': params, 'state': wo_st, 'carry': controller_state,
                   'commands': commands, 'model': world_model})
    return _join_state(sh, wo['state']), wo['carry'], wo['outs']

  def rollout(self, params: dict, world_keys: jax.Array, n_ticks: int, *,
              record: bool = True, chunk_worlds: int | None = None,
              commands: dict | None = None, controller: Callable | None = None,
              controller_init: Any = None, observe_truth: bool = False, model=None,
              model_axes=None, qpos_offset=None, qvel_offset=None,
              latency: dict | None = None, share_physics: bool = True, devices=None,
              sub_batch: int | None = None, stall_s: float | None = None):
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
        issued at tick k (tick `n_ticks` issues nothing), or
      controller: a single-world controller with a single-world `controller_init` carry
        (see `run`): it sees the outputs of tick k and issues the commands of tick k + 1
        (tick 0 gets the scripted or null commands).
      model, model_axes: a per-world `mjx.Model`, e.g.
        `rollout(params, keys, T, model=sim.mx.replace(dof_damping=d), model_axes={'dof_damping':
        0})` with `d` of shape `(nworld, nv)`, or `model={'dof_damping': d}` with the rest of
        the model compiled in (see `reset`).
      qpos_offset, qvel_offset: `(nworld, nq)` / `(nworld, nv)` per-world initial state.
      latency: per-world transport latencies `{component id: {field: seconds}}` (see
        `reset`).
      share_physics: when `physics_sharing` allows it (sensor-only Monte Carlo), run the
        physics once and broadcast its data to every world's components; False forces one
        physics rollout per world. Shared and per-world sensor outputs agree to float
        rounding (the physics is compiled unbatched); each is bitwise reproducible.
      stall_s: watchdog (`worlds.Watchdog`): a program with no CPU progress for this long
        raises `worlds.WorldsStalled` naming the model and world count.

    Returns:
      `(final_state, trace)`: trace leaves `(nworld, n_ticks + 1, ...)` with tick 0 first
      (None when `record` is False); `final_state.diverged` `(nworld,)` is the first tick at
      which a world became non-finite (-1: never).
    """
    n = world_keys.shape[0]
    fields = self._model_field_names(model, model_axes)
    self.latency_inputs(latency, n)   # validated once, before anything runs
    lat = {cid: {k: np.broadcast_to(np.asarray(v, np.float64), (n,)) for k, v in per.items()}
           for cid, per in (latency or {}).items()}
    share, _ = self.physics_sharing(commands=commands, controller=controller,
                                    model_fields=fields, qpos_offset=qpos_offset,
                                    qvel_offset=qvel_offset, share_physics=share_physics)
    devs = worlds.resolve_devices(devices)
    finals, traces = [], []
    for lo, hi in worlds.chunks(n, chunk_worlds):
      sl = lambda t: jax.tree.map(lambda x: x[lo:hi], t)   # noqa: E731
      p, keys = sl(params), world_keys[lo:hi]
      m = model
      if fields and isinstance(model, Mapping):
        m = {f: model[f][lo:hi] for f in fields}
      elif fields:
        m = model.replace(**{f: getattr(model, f)[lo:hi] for f in fields})
      cmds0, cmds = self._split_trace(commands, lo, hi)
      carry = None
      if controller is not None:
        carry = jax.tree.map(lambda x: jnp.broadcast_to(x, (hi - lo,) + jnp.shape(x)),
                             controller_init)
      st = self.reset(p, keys, commands=cmds0, model=m, model_axes=fields,
                      qpos_offset=sl(qpos_offset),
                      qvel_offset=sl(qvel_offset), latency=sl(lat) or None,
                      share_physics=share, devices=devs, sub_batch=sub_batch)
      out0 = self.outputs(st) if record else None
      st, carry, outs = self._run_world_major(
          p, st, n_ticks, record, commands=cmds, controller=controller, controller_state=carry,
          observe_truth=observe_truth, model=m, model_axes=fields, devices=devs,
          sub_batch=sub_batch)
      lay = self.layout(hi - lo, devices=devs, sub_batch=sub_batch, share=share)
      worlds.Watchdog(f'{self.manifest.path}: rollout of worlds {lo}..{hi - 1} '
                      f'({lay.describe()}, {n_ticks} ticks)', stall_s).wait((st, outs))
      finals.append(st)
      if record:
        traces.append(jax.tree.map(lambda a, b: jnp.concatenate([a[:, None], b], axis=1),
                                   out0, outs))
    trace = None
    if record:
      trace = traces[0] if len(traces) == 1 else jax.tree.map(
          lambda *xs: jnp.concatenate(xs, axis=0), *traces)
    final = finals[0]
    if len(finals) > 1:
      sh, _ = _split_state(finals[0], share)
      wo = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0),
                        *[_split_state(s, share)[1] for s in finals])
      final = _join_state(sh, wo)
    return final, trace


def load(manifest_path, overrides=None, *, vary: dict | None = None, impl: str = 'jax'
         ) -> Simulation:
  """Builds a `Simulation` from a manifest file (host side: parse, compile, bind, plan).

  Args:
    overrides (SPEC §8): `{'components': [{component, field, value}], 'mjcf': [{element,
      name, attribute, value}]}` as in an overlay file, applied as the last layer (`override`).
    vary: `{component id: [manifest field, ...]}` — per-world Params fields whose terms are
      compiled in even when the manifest leaves them at the default, so that per-world
      values (randomization, gradients) take effect. A per-world value given for a term that
      is compiled out is an error (`Simulation.reset`).
    impl: physics implementation, `'jax'` (MJX-JAX, default, differentiable) or `'warp'`
      (MJX-Warp, NVIDIA GPUs only, not differentiable); refused with a clear error where it
      cannot run.
  """
  worlds.check_impl(impl)
  return Simulation(build.build(read_manifest(manifest_path, overrides=overrides), vary=vary),
                    impl=impl)


world_keys = rng.world_keys
