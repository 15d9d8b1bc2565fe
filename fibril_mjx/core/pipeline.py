"""The one-world pipeline (SPEC §8): `init` and `step` of one world over a `Built`, pure and
jittable, as `mjx.step(m, d)` is. The world axis (`vmap` over worlds, `lax.scan` over ticks,
devices, sub-batches, chunks) is a wrapper over these functions, in `fibril_mjx.batch`.

One tick k (SPEC §4): the commands issued at tick k enter the actuators' transports, the
actuators write `ctrl` at their application instants, `mjx.forward` evaluates the state `x_k`
with those controls (positions, velocities, accelerations, `sensordata`), and the sensors,
feedback and estimators acquire and deliver the tick's samples from it; the next tick starts by
integrating `x_k` to `x_{k+1}` (`mjx.step` = forward + integrate, split in two). So a sample
stamped tick k describes `x_k` — what MuJoCo C's `mj_forward` gives at that state — and each
tick costs one forward. `init` runs tick 0; `step` integrates and runs one more tick. A loop
over ticks 0 … n starts from `before_tick0` (tick −1) and steps with `integrate=None`, so tick
0 is the loop body's code, not a second copy of every component traced and compiled beside it
(`Simulation.rollout`'s program: about half the compile time of the IMU + EKF example's).

The tick counter and the schedules depend on static config only, so a batch wrapper keeps them
unbatched (`vmap` with `in_axes=None` on `SimState.tick` and `SimState.clocks`) and an
acquisition instant stays a real branch under `vmap`, not a select. Components are driven by
their declared roles (`core/protocol.py`): actuators before physics, sensors and estimators
after it, in manifest order.

    state = pipeline.init(built, params, key)             # tick 0
    state, outs = pipeline.step(built, params, state, {})  # tick 1
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.core import command_script
from fibril_mjx.core import groups as groups_lib
from fibril_mjx.core import latencies
from fibril_mjx.core import protocol
from fibril_mjx.core.built import Built
from fibril_mjx.core.context import DCMOTOR_PARAMS
from fibril_mjx.errors import FibrilError
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import fifo, jax_compat, schedule, transport
from fibril_mjx.physics import dcmotor
from fibril_mjx.physics.mjx import impl_fns, mjx

class Frame(NamedTuple):
  """The physics of one tick when it comes from outside the loop (MuJoCo C through
  `mujoco.rollout`, a recorded trajectory through `mj_forward`): what a component reads in
  place of an `mjx.Data`. `qpos`, `qvel`, `act` are the state `x_k`; `sensordata` is what
  MuJoCo's forward of `x_k` with the tick's controls computed (user sensors and the probes of
  `fibril_mjx.core.context`); `ctrl` is what the actuators wrote at the tick."""
  qpos: jax.Array
  qvel: jax.Array
  act: jax.Array
  sensordata: jax.Array
  ctrl: jax.Array

  def replace(self, **kw) -> 'Frame':
    return self._replace(**kw)


class SimState(NamedTuple):
  """State of one world (`init` / `step`), or of a batch of worlds (`fibril_mjx.batch`).

  A batch carries a leading world axis on the per-world fields only (`batch.batched.
  state_axes`): `tick` and `clocks` are shared by all worlds, and so are `data`, `ctrl` and
  `dcmotor` when the physics is shared (`Simulation.physics_sharing`).

  Attributes:
    tick: int32 scalar (tick k is time k·dt).
    clocks: `{group key: {schedule name: ScheduleState}}` (one per group, `_clocks0`).
    data: `mjx.Data` after the forward of tick `tick` (the state `x_tick` with the tick's
      controls; its `sensordata` is that of `x_tick`).
    ctrl: `(nu,)` controls in the compiled model's layout (what actuators wrote at tick
      `tick`).
    dcmotor: `dcmotor.Pending` (the activations after the next integration, and what it
      needs) when the model has dcmotor actuators, else ().
    components: `{component id: state}`.
    diverged: int32, the first tick at which the world's physics or component state was
      non-finite, -1 while it is finite (MJX neither stops nor resets such a world; its later
      outputs are meaningless and summaries exclude it).
  """
  tick: jax.Array
  clocks: dict
  data: Any
  ctrl: jax.Array
  dcmotor: Any
  components: dict
  diverged: Any = ()


# ---------------------------------------------------------------- params and commands

def default_params(built: Built, n_worlds: int | None = None) -> dict:
  """`{component id: Params}` (plus `'mjcf.dcmotor'` for dcmotor models).

  With `n_worlds`, every leaf gets a leading world axis (per-world values, e.g. for
  randomization or gradients).
  """
  p = {cid: c.default_params() for cid, c in built.components.items()}
  if built.dcmotor is not None:
    p[DCMOTOR_PARAMS] = dcmotor.default_params(built.dcmotor, built.mj_model, jnp.float32)
  if n_worlds is None:
    return p
  return host.broadcast_leaves(p, n_worlds)


def check_params(built: Built, params: dict) -> None:
  """Refuses a per-world value for a term that is compiled out of the graph.

  A term whose manifest value is the default is absent from the traced graph (unless named
  in `vary`), so a value passed for it would be ignored silently; this raises instead,
  naming the component, the field and how to enable it. Traced params (inside `jax.grad`)
  cannot be inspected: load with `vary=` before differentiating wrt such a field.
  """
  for cid, c in built.components.items():
    fields = c.compiled_out()
    if not fields or cid not in params:
      continue
    default = None
    for field in fields:
      given = c.get_param(params[cid], field)
      if jax_compat.is_tracer(given):
        continue
      if default is None:
        with jax.ensure_compile_time_eval():   # concrete even when called inside a trace
          default = c.default_params()
      nominal = np.asarray(c.get_param(default, field))
      if np.any(np.asarray(given) != nominal):
        raise FibrilError(
            f'component {cid!r} ({c.type}) field {field!r}: per-world values differ from '
            f'the manifest value {nominal.tolist()}, but the term is compiled out (the '
            "manifest leaves it at its default); load with "
            f"vary={{'{cid}': ['{field}']}} (a campaign's vary: does this), or set a "
            'non-default value in the manifest')


def actuators(built: Built) -> tuple:
  """`((id, component), ...)` of the actuator components, in manifest order."""
  return tuple((cid, c) for cid, c in built.components.items() if protocol.ACTUATOR in c.roles)


def null_commands(built: Built) -> dict:
  """`{actuator component id: command}` meaning "nothing issued this tick" (one world).

  A component missing from the commands passed to `init` / `step` gets its manifest
  `command_script` command if it has one, else this.
  """
  return {cid: c.null_command() for cid, c in actuators(built)}


# ---------------------------------------------------------------- the tick's shared inputs

def _clocks0(built: Built) -> dict:
  """`{group key: {schedule name: ScheduleState}}` (a group's members share their schedules:
  one clock each), and the command script's under `command_script.KEY`."""
  clocks = {g.key: {name: schedule.init(s) for name, s in _leader(built, g).schedules.items()}
            for g in built.groups}
  clocks[command_script.KEY] = {k: schedule.init(s)
                                for k, s in built.command_script.schedules.items()}
  return clocks


def _leader(built: Built, g: groups_lib.Group):
  return built.components[g.ids[0]]


def _advance_clocks(built: Built, clocks, tick, pre_physics: bool):
  """Advances the schedules of one phase at `tick`, once per group; returns `(dues, clocks)`,
  both keyed by group key."""
  dues, new = {}, dict(clocks)
  for g in built.groups:
    dues[g.key], new[g.key] = {}, dict(clocks[g.key])
    for name, s in _leader(built, g).schedules.items():
      if (name in protocol.PRE_PHYSICS) == pre_physics:
        due, n, new[g.key][name] = schedule.advance(s, clocks[g.key][name], tick)
        dues[g.key][name] = (due, n)
  return dues, new


def _advance_script(built: Built, clocks, tick):
  dues, new = {}, dict(clocks[command_script.KEY])
  for k, s in built.command_script.schedules.items():
    due, n, new[k] = schedule.advance(s, clocks[command_script.KEY][k], tick)
    dues[k] = (due, n)
  return dues, {**clocks, command_script.KEY: new}


def _fill_commands(built: Built, commands, tick, script_dues):
  """Commands of every actuator component: given, else scripted (manifest `command_script`),
  else the null command."""
  out = {}
  scripted = built.command_script.commands(built.components, tick, script_dues)
  for cid, null in null_commands(built).items():
    cmd = (commands or {}).get(cid)
    out[cid] = cmd if cmd is not None else scripted.get(cid, null)
  return out


class TickInputs(NamedTuple):
  """The inputs of one tick that depend on static config only (`tick_inputs`): the tick,
  the clocks after it, every actuator's command (given, else scripted, else null), and the
  pre-physics (application) and acquisition dues `{group key: {schedule: (due, n)}}`."""
  tick: jax.Array
  clocks: dict
  commands: dict
  pre: dict
  post: dict


def tick_inputs(built: Built, clocks, commands, tick) -> TickInputs:
  """`TickInputs` of tick `tick` from the clocks before it and the commands given (or None)."""
  script_dues, clocks = _advance_script(built, clocks, tick)
  commands = _fill_commands(built, commands, tick, script_dues)
  pre, clocks = _advance_clocks(built, clocks, tick, True)
  post, clocks = _advance_clocks(built, clocks, tick, False)
  return TickInputs(tick, clocks, commands, pre, post)


# ---------------------------------------------------------------- one tick of one world

def sense(built: Built, params, comps, data, tick, dues):
  """The after-physics half of a tick: every sensing component acquires and delivers at
  `data` (state `x_tick`), in build order (a consumer sees its sources' outputs of the tick);
  `dues` from `tick_inputs`."""
  comps, env = dict(comps), {}
  for g in built.sensing_groups:
    comps.update(g.run(params, comps, lambda c, p, s: (c.sense(
        p, s, data, tick, dues[g.key], env),))[0])
    env.update(g.outputs(built.components, comps, lambda c, s: c.output(s)))
  return comps


def actuate(built: Built, params, comps, data, ctrl, commands, tick, dues):
  """The before-physics half of a tick: every actuator group applies its members' commands
  at `data` (the state before the tick's forward); returns `(comps, ctrl)`. `commands` and
  `dues` from `tick_inputs`."""
  comps = dict(comps)
  for g in built.actuator_groups:
    states, written = g.run(params, comps, lambda c, p, s, cmd, ctrl=ctrl: c.actuate(
        p, s, data, ctrl, cmd, tick, dues[g.key]), commands)
    comps.update(states)
    ctrl = g.write_ctrl(ctrl, written)
  return comps, ctrl


def _tick(built: Built, mx, params, data, ctrl, dc, comps, inputs: TickInputs, forward):
  """Tick `inputs.tick` at the state `x_tick` (SPEC §4): application of the tick's controls,
  `forward` (every stage and `sensordata` of `x_tick` with those controls), then the
  acquisitions and deliveries of the tick. `dc` is the dcmotor activation; returned as the
  `dcmotor.Pending` the next integration needs. `forward` None: `data` is a `Frame` whose
  physics was computed outside (its dcmotors too)."""
  tick = inputs.tick
  ctrl = built.actuator_script.ctrl(ctrl, tick, built.dt)
  comps, ctrl = actuate(built, params, comps, data, ctrl, inputs.commands, tick, inputs.pre)
  if forward is None:
    data = data.replace(ctrl=ctrl)
  elif built.dcmotor is None:
    data = forward(mx, data.replace(ctrl=ctrl))
  else:
    data, dc = dcmotor.forward(built.dcmotor, params[DCMOTOR_PARAMS], mx, data, ctrl, dc)
  return data, ctrl, dc, sense(built, params, comps, data, tick, inputs.post)


def finite(data, comps) -> jax.Array:
  """True while one world's physics and component state are finite (a traced check).

  Delivered data (`transport.QueueState` / `fifo.FifoState` in flight, `transport.Delivered`
  / `fifo.Batch` held) is left
  out: a device may send NaN — a `nan` fault, a motor's `normalized_output` without a
  forcerange — and that is data for the consumer, not a diverged world.
  """
  data_types = (transport.QueueState, transport.Delivered, fifo.FifoState, fifo.Batch)
  internal = jax.tree.leaves(comps, is_leaf=lambda x: isinstance(x, data_types))
  leaves = [data.qpos, data.qvel, data.act] + [
      x for x in internal if not isinstance(x, data_types)
      and jnp.issubdtype(jnp.result_type(x), jnp.floating)]
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves if jnp.size(x)]))


def outputs(built: Built, state: SimState) -> dict:
  """`{'sensor': {id: Delivered}, 'truth': {id: {...}}}` of one world's current tick."""
  truth = {}
  for g in built.groups:
    truth.update(g.outputs(built.components, state.components,
                           lambda c, s: c.truth(s, state.data)))
  return {'sensor': sensor_outputs(built, state.components),
          'truth': {cid: truth[cid] for cid in built.components}}


def sensor_outputs(built: Built, comps: dict) -> dict:
  """`{id: Delivered}`: what each component of one world holds delivered (either layout)."""
  out = {}
  for g in built.groups:
    out.update(g.outputs(built.components, comps, lambda c, s: c.output(s)))
  return {cid: out[cid] for cid in built.components}


# ---------------------------------------------------------------- public one-world API

class WorldStart(NamedTuple):
  """Where one world starts (`before_tick0`, `init`); None: the manifest's.

  Attributes:
    data0: the `mjx.Data` to start from (default `built.data0`, the model's initial state).
    qpos_offset, qvel_offset: `(nq,)` / `(nv,)` added to `data0`'s `qpos` / `qvel` before the
      first `mjx.forward`.
    latency: this world's transport latencies `{component id: {field: (latency_s,
      delay_ticks)}}` (a world's slice of `latency_inputs`).
    frame: tick 0's physics given as a `Frame` (an open-loop backend: MuJoCo C, a recorded
      trajectory) instead of computed by MJX (`data0` and the offsets are then unused);
      `step` then takes each later tick's `Frame` too.
  """
  data0: Any = None
  qpos_offset: Any = None
  qvel_offset: Any = None
  latency: dict | None = None
  frame: Frame | None = None


def init(built: Built, params: dict, key: jax.Array, start: WorldStart = WorldStart(), *,
         commands: dict | None = None, mx=None, impl: str = 'jax') -> SimState:
  """Tick 0 of one world: its initial state and components, then the tick-0 application,
  `mjx.forward` of the initial state with those controls (or `start.frame`), and the tick-0
  acquisitions (`outputs(built, state)`).

  Args:
    built: the static `Built` (hashable; closed over or a static argument under `jit`).
    params: `{component id: Params}` of this world (`default_params(built)`; `groups.pack`ed
      or not).
    key: `(2,)` world key (`fibril_mjx.world_keys(seed, n)[w]`): every stream of the world.
    start: where the world starts (`WorldStart`).
    commands: `{actuator component id: command}` issued at tick 0; a missing component gets
      its scripted command (manifest `command_script`), else its null command.
    mx: the `mjx.Model` (default `built.mx`); pass it as an argument to trace or vary it.
    impl: physics implementation, `'jax'` (MJX-JAX) or `'warp'` (with a Warp `mx` / `data0`).
  """
  state = before_tick0(built, params, key, start, mx=mx)
  return step(built, params, state, commands, frame=start.frame, mx=mx, impl=impl,
              integrate=False)[0]


def before_tick0(built: Built, params: dict, key: jax.Array, start: WorldStart = WorldStart(),
                 *, mx=None) -> SimState:
  """One world before its tick 0 (`tick` −1): the initial physics state, components (kept
  `groups.pack`ed) and clocks, nothing applied or acquired. `step(..., integrate=False)` from it
  runs tick 0 (that is `init`); a loop over ticks 0 … n that starts here (`integrate=None`,
  or with frames: each tick's `Frame`) holds each tick's code once. Arguments as in `init`.

  The initial state is forwarded here only when an actuator reads more of it than `qpos` /
  `qvel` before tick 0's forward (`Built.forward_before_tick0`): tick 0's own forward
  recomputes every derived field from `qpos`, `qvel`, `act` and `ctrl`. dcmotors start from
  `mj_resetData`'s zero activations, held in a `Pending` whose `state` `step` takes at tick 0
  (its other fields: zeros of their shapes)."""
  comps = _init_components(built, params, key, start.latency)
  if start.frame is not None:
    ctrl, comps = _reset_ctrl(built, params, comps, start.frame)
    return SimState(jnp.int32(-1), _clocks0(built), start.frame, ctrl, (), comps,
                    jnp.int32(-1))
  mx = built.mx if mx is None else mx
  data = built.data0 if start.data0 is None else start.data0
  if start.qpos_offset is not None:   # per-world initial state (added before the first forward)
    data = data.replace(qpos=data.qpos + start.qpos_offset)
  if start.qvel_offset is not None:
    data = data.replace(qvel=data.qvel + start.qvel_offset)
  if built.forward_before_tick0:
    data = mjx.forward(mx, data)   # what the actuators start from
  dc = ()
  if built.dcmotor is not None:
    s = dcmotor.init(built.dcmotor, params[DCMOTOR_PARAMS], mx, data)
    dc = dcmotor.Pending(state=s, act_dot=s, dfdv=s.current, current=s)
  ctrl, comps = _reset_ctrl(built, params, comps, data)
  return SimState(jnp.int32(-1), _clocks0(built), data, ctrl, dc, comps, jnp.int32(-1))


def _init_components(built: Built, params, key, latency) -> dict:
  """The components' initial states, packed (`groups.pack`): a group's members initialized
  under one `vmap`, each with its own id's random streams; then the world's latencies (before
  anything is sent)."""
  comps = {}
  for g in built.groups:
    if not g.stacked:
      comps[g.key] = g.skeleton.init(params[g.key], key)
      continue
    comps[g.key] = jax.vmap(lambda numbers, h, p, g=g: groups_lib.member(
        g.skeleton, numbers, h).init(p, key))(g.numbers, g.id_hashes, g.entries(params))
  if latency:
    comps = groups_lib.pack(built, latencies.apply(groups_lib.unpack(built, comps), latency))
  return comps


def initial_ctrl(built: Built) -> jax.Array:
  """`(nu,)` the controls before any actuator writes: the keyframe's, zeros without one."""
  if built.keyframe < 0:
    return jnp.zeros(built.mj_model.nu, jnp.float32)
  return jnp.asarray(built.mj_model.key_ctrl[built.keyframe], jnp.float32)


def _reset_ctrl(built: Built, params, comps, data):
  """`ctrl` before tick 0: `initial_ctrl`, each actuator's channels overwritten by what it
  holds before its first application."""
  ctrl, comps = initial_ctrl(built), dict(comps)
  for g in built.actuator_groups:   # what an actuator holds before its first application
    states, written = g.run(params, comps, lambda c, p, s, ctrl=ctrl: c.reset_ctrl(
        p, s, data, ctrl))
    comps.update(states)
    ctrl = g.write_ctrl(ctrl, written)
  return ctrl, comps


def step(built: Built, params: dict, state: SimState, commands: dict | None = None, *,
         frame: Frame | None = None, mx=None, impl: str = 'jax',
         integrate: bool | None = True) -> tuple[SimState, dict]:
  """Tick `state.tick` → `state.tick + 1` of one world: integrates `x_tick` (whose forward the
  last tick computed) to `x_{tick+1}`, then runs that tick (application, forward,
  acquisitions).

  Args:
    commands: `{actuator component id: command}` issued at the new tick; a missing component
      gets its scripted command, else its null command (as in `init`).
    frame: the new tick's physics given as a `Frame` (its state `x_{tick+1}` and the
      `sensordata` of its forward, computed outside: MuJoCo C, a recorded trajectory): the
      application, acquisitions and deliveries of the tick run on it exactly as on MJX's
      data; nothing is integrated or forwarded (`mx`, `impl`, `integrate` unused).
    mx, impl: as in `init`.
    integrate: False runs tick 0 from `before_tick0` (nothing to integrate); None decides by
      the tick, for a loop over ticks 0 … n (a `lax.cond` on the unbatched tick: tick 0's code
      is the other ticks' code, traced and compiled once).

  Returns:
    `(state, outputs(built, state))`.
  """
  inputs = tick_inputs(built, state.clocks, commands, state.tick + 1)
  if frame is not None:
    data, ctrl, dc, comps = _tick(built, None, params, frame, state.ctrl, (), state.components,
                                  inputs, None)
  else:
    data, ctrl, dc, comps = _physics_tick(built, params, state, inputs, mx, impl, integrate)
  diverged = jnp.where((state.diverged < 0) & ~finite(data, comps), inputs.tick,
                       state.diverged)
  state = SimState(inputs.tick, inputs.clocks, data, ctrl, dc, comps, diverged)
  return state, outputs(built, state)


def _physics_tick(built: Built, params, state: SimState, inputs: TickInputs, mx, impl,
                  integrate):
  """`_tick` on MJX's physics: `x_tick` integrated (as `integrate` says) and forwarded."""
  mx = built.mx if mx is None else mx
  forward, integrate_fn = impl_fns(impl)

  def integrated(data, dc):
    if built.dcmotor is None:
      return integrate_fn(mx, data), dc
    return dcmotor.integrate(built.dcmotor, mx, data, dc)

  def held(data, dc):   # tick 0: the initial state (dcmotors: the activations `before_tick0` set)
    return data, (() if built.dcmotor is None else dc.state)
  if integrate is None:
    data, dc = jax.lax.cond(inputs.tick > 0, integrated, held, state.data, state.dcmotor)
  else:
    data, dc = (integrated if integrate else held)(state.data, state.dcmotor)
  return _tick(built, mx, params, data, state.ctrl, dc, state.components, inputs, forward)


def refresh(built: Built, params: dict, state: SimState, *, mx=None,
            impl: str = 'jax') -> SimState:
  """`state` with its tick's forward recomputed under `mx` / `params` (no acquisition, no
  actuation): for a traced caller that holds a state fixed (e.g. `tune`'s window starts) and
  differentiates what follows, so that the integration into the next tick depends on the model
  it differentiates. Values are unchanged when `mx` / `params` are the ones `state` was
  computed with."""
  mx = built.mx if mx is None else mx
  if built.dcmotor is None:
    return state._replace(data=impl_fns(impl)[0](mx, state.data))
  data, dc = dcmotor.forward(built.dcmotor, params[DCMOTOR_PARAMS], mx, state.data, state.ctrl,
                             state.dcmotor.current)
  return state._replace(data=data, dcmotor=dc)
