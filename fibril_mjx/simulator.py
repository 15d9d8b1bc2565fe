"""The simulator (SPEC §8): pure single-world reset / step over a `build.Built`, then the
batch edge — `vmap` over worlds, `lax.scan` over ticks.

The tick counter and the schedules are shared by all worlds (they depend on static config
only), so an acquisition instant is a real branch under `vmap`, not a select. Components are
driven by their declared roles (`components/protocol.py`): actuators before physics,
sensors and estimators after it, in manifest order.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx import build
from fibril_mjx import command_script
from fibril_mjx import dcmotor
from fibril_mjx import rng
from fibril_mjx import schedule
from fibril_mjx._mjx import mjx
from fibril_mjx.build import DCMOTOR_PARAMS
from fibril_mjx.components import protocol
from fibril_mjx.errors import FibrilError
from fibril_mjx.manifest import read_manifest

CHUNK_WORLDS = 1024


class SimState(NamedTuple):
  """State of a batch of worlds.

  Attributes:
    tick: int32 scalar, shared by all worlds (tick k is time k·dt).
    clocks: `{component id: {schedule name: ScheduleState}}`, shared by all worlds.
    data: `mjx.Data`, leaves `(nworld, ...)`.
    ctrl: `(nworld, nu)` controls in the compiled model's layout (what actuators write).
    dcmotor: dcmotor activations `(nworld, ...)` when the model has dcmotor actuators, else ().
    components: `{component id: state}`, leaves `(nworld, ...)`.
  """
  tick: jax.Array
  clocks: dict
  data: Any
  ctrl: jax.Array
  dcmotor: Any
  components: dict


class Simulation:
  """A built manifest with jitted reset / step / run / rollout.

  Attributes:
    built: the static `build.Built` (hashable).
    manifest, mj_model, mx, dt, components, dcmotor, assemblies, overlays, command_script,
    actuator_script: shortcuts into `built`.
  """

  def __init__(self, built: build.Built):
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
    self._jit_reset = jax.jit(self._reset_batch)
    self._jit_step = jax.jit(self._step_batch)
    self._jit_run = jax.jit(self._run_batch,
                            static_argnames=('n_ticks', 'record', 'controller', 'observe_truth'))

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

  def _world_reset(self, mx, params, world_key, tick, dues):
    data = mjx.forward(mx, self._data0)
    comps = {cid: c.init(params[cid], world_key) for cid, c in self.components.items()}
    dc = ()
    if self.dcmotor is not None:
      dc = dcmotor.init(self.dcmotor, params[DCMOTOR_PARAMS], mx, data)
    ctrl = self._ctrl0
    for cid, c in self._actuators:   # what an actuator holds before its first application
      comps[cid], ctrl = c.reset_ctrl(params[cid], comps[cid], data, ctrl)
    return data, ctrl, dc, self._sense(params, comps, data, tick, dues)

  def _world_step(self, mx, params, data, ctrl, dc, comps, commands, tick, pre, post):
    """Tick `tick` → `tick + 1` of one world (SPEC §4 order)."""
    ctrl = self.actuator_script.ctrl(ctrl, tick.astype(jnp.float32) * self.dt)
    comps = dict(comps)
    for cid, c in self._actuators:
      comps[cid], ctrl = c.actuate(params[cid], comps[cid], data, ctrl, commands[cid], tick,
                                   pre[cid])
    if self.dcmotor is None:
      data = mjx.step(mx, data.replace(ctrl=ctrl))
    else:
      data, dc = dcmotor.step(self.dcmotor, params[DCMOTOR_PARAMS], mx, data, ctrl, dc)
    return data, ctrl, dc, self._sense(params, comps, data, tick + 1, post)

  def _outputs(self, data, comps):
    sensor = {cid: c.output(comps[cid]) for cid, c in self.components.items()}
    truth = {cid: c.truth(comps[cid], data) for cid, c in self.components.items()}
    return {'sensor': sensor, 'truth': truth}

  # ---------------------------------------------------------------- batch

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

  def _reset_batch(self, mx, params, world_keys):
    mx = self.mx if mx is None else mx
    tick = jnp.int32(0)
    dues, clocks = self._advance_clocks(self._clocks0(), tick, False)
    data, ctrl, dc, comps = jax.vmap(self._world_reset, in_axes=(None, 0, 0, None, None))(
        mx, params, world_keys, tick, dues)
    return SimState(tick, clocks, data, ctrl, dc, comps)

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

  def _step_batch(self, mx, params, state: SimState, commands=None):
    mx = self.mx if mx is None else mx
    n_worlds = state.ctrl.shape[0]
    script_dues, clocks = self._advance_script(state.clocks, state.tick)
    commands = self._fill_commands(commands, n_worlds, state.tick, script_dues)
    pre, clocks = self._advance_clocks(clocks, state.tick, True)
    post, clocks = self._advance_clocks(clocks, state.tick + 1, False)
    data, ctrl, dc, comps = jax.vmap(
        self._world_step, in_axes=(None, 0, 0, 0, 0, 0, 0, None, None, None))(
            mx, params, state.data, state.ctrl, state.dcmotor, state.components, commands,
            state.tick, pre, post)
    state = SimState(state.tick + 1, clocks, data, ctrl, dc, comps)
    return state, jax.vmap(self._outputs)(data, comps)

  def _observe(self, outputs, observe_truth):
    return outputs if observe_truth else {'sensor': outputs['sensor']}

  def _run_batch(self, mx, params, state, carry, commands, n_ticks: int, record: bool,
                 controller=None, observe_truth=False):
    mx = self.mx if mx is None else mx
    def observe(out):
      # Only a controller needs last tick's outputs in the carry; otherwise they stay out of
      # it so that unrecorded outputs (e.g. truth) are not computed at all.
      return self._observe(out, observe_truth) if controller is not None else ()

    def body(c, cmd):
      st, ctl, obs = c
      if controller is not None:
        cmd, ctl = jax.vmap(controller)(obs, ctl)
      st, out = self._step_batch(mx, params, st, cmd)
      return (st, ctl, observe(out)), (out if record else None)
    obs0 = observe(jax.vmap(self._outputs)(state.data, state.components))
    (state, carry, _), outs = jax.lax.scan(body, (state, carry, obs0), commands,
                                           length=n_ticks)
    return (state, carry), outs

  # ---------------------------------------------------------------- public API

  def reset(self, params: dict, world_keys: jax.Array, *, model=None) -> SimState:
    """Resets a batch of worlds; runs `mjx.forward` and the tick-0 acquisitions.

    Args:
      params: `{id: Params}` with a leading `(nworld,)` axis.
      world_keys: `(nworld, 2)` from `fibril_mjx.world_keys(seed, nworld, first_world)`.
      model: optional `mjx.Model` to use instead of `sim.mx` (e.g. `sim.mx.replace(...)` to
        differentiate wrt or vary MJCF physical fields); traced as an argument. By default the
        compiled model is embedded as constants, which XLA can fold (measured about 7 %
        faster on the CPU for the demo turntable).
    """
    self.check_params(params)
    return self._jit_reset(model, params, world_keys)

  def outputs(self, state: SimState) -> dict:
    """`{'sensor': {id: Delivered}, 'truth': {id: {...}}}` of the current tick."""
    return jax.vmap(self._outputs)(state.data, state.components)

  def step(self, params: dict, state: SimState, commands: dict | None = None, *, model=None
           ) -> tuple[SimState, dict]:
    """Advances every world one tick; returns the new state and its outputs.

    Args:
      commands: `{actuator component id: command pytree with leading (nworld,)}`; a missing
        component gets its null command (nothing issued).
    """
    return self._jit_step(model, params, state, commands)

  def run(self, params: dict, state: SimState, n_ticks: int, record: bool = True, *,
          commands: dict | None = None, controller: Callable | None = None,
          controller_state: Any = None, observe_truth: bool = False, model=None):
    """`n_ticks` steps in one `lax.scan` (`model` as in `reset`).

    Commands come from one of:
      * `commands`: an open-loop trace `{id: pytree with leading (n_ticks, nworld)}`;
      * `controller(obs, carry) -> (commands, carry)`: a single-world JAX policy (vmapped
        here) that sees the delivered sensor/feedback outputs of the previous tick
        (`obs['sensor'][id]`), and truth only with `observe_truth=True`;
      * neither: null commands.

    Returns:
      `(state, outputs)` with outputs stacked `(n_ticks, nworld, ...)` (None unless
      `record`); with a controller, `((state, controller_state), outputs)`.
    """
    (state, carry), outs = self._jit_run(
        model, params, state, controller_state, commands, n_ticks=n_ticks, record=record,
        controller=controller, observe_truth=observe_truth)
    return ((state, carry) if controller is not None else state), outs

  def rollout(self, params: dict, world_keys: jax.Array, n_ticks: int, *,
              record: bool = True, chunk_worlds: int = CHUNK_WORLDS,
              commands: dict | None = None, controller: Callable | None = None,
              controller_init: Any = None, observe_truth: bool = False):
    """Reset then `n_ticks` steps, in chunks of at most `chunk_worlds` worlds.

    Chunking only bounds memory and avoids an XLA CPU hang with thousands of worlds; a
    world's result does not depend on it. `commands` (leading `(n_ticks, nworld)`) or a
    `controller` with a single-world `controller_init` carry drive actuator components (see
    `run`).

    Returns:
      `(final_state_or_None, trace)`: trace leaves `(nworld, n_ticks + 1, ...)` with tick 0
      first (None when `record` is False); with one chunk, the final `SimState` too.
    """
    n = world_keys.shape[0]
    finals, traces = [], []
    for lo in range(0, n, chunk_worlds):
      hi = min(n, lo + chunk_worlds)
      p = jax.tree.map(lambda x: x[lo:hi], params)
      keys = world_keys[lo:hi]
      cmds = jax.tree.map(lambda x: x[:, lo:hi], commands)
      carry = None
      if controller is not None:
        carry = jax.tree.map(lambda x: jnp.broadcast_to(x, (hi - lo,) + jnp.shape(x)),
                             controller_init)
      single = hi - lo == 1
      if single:
        # XLA compiles a batch of one to different (scalar) code whose float results can
        # differ in the last bit from any larger batch; two lanes keep a world bitwise
        # identical whatever batch it runs in. The extra lane is dropped below.
        p, keys, carry = jax.tree.map(lambda x: jnp.concatenate([x, x]), (p, keys, carry))
        cmds = jax.tree.map(lambda x: jnp.concatenate([x, x], axis=1), cmds)
      st = self.reset(p, keys)
      out0 = self.outputs(st) if record else None
      st, outs = self.run(p, st, n_ticks, record, commands=cmds, controller=controller,
                          controller_state=carry, observe_truth=observe_truth)
      if controller is not None:
        st = st[0]
      if single:
        st = jax.tree.map(lambda x: x[:1] if jnp.ndim(x) else x, st)
        outs = jax.tree.map(lambda x: x[:, :1], outs) if record else None
        out0 = jax.tree.map(lambda x: x[:1], out0) if record else None
      finals.append(st)
      if record:
        traces.append(jax.tree.map(
            lambda a, b: jnp.concatenate([a[:, None], jnp.swapaxes(b, 0, 1)], axis=1),
            out0, outs))
    trace = None
    if record:
      trace = traces[0] if len(traces) == 1 else jax.tree.map(
          lambda *xs: jnp.concatenate(xs, axis=0), *traces)
    return (finals[0] if len(finals) == 1 else None), trace


def load(manifest_path, overrides=None, *, vary: dict | None = None) -> Simulation:
  """Builds a `Simulation` from a manifest file (host side: parse, compile, bind, plan).

  Args:
    overrides (SPEC §8): `{'components': [{component, field, value}], 'mjcf': [{element,
      name, attribute, value}]}` as in an overlay file, applied as the last layer (`override`).
    vary: `{component id: [manifest field, ...]}` — per-world Params fields whose terms are
      compiled in even when the manifest leaves them at the default, so that per-world
      values (randomization, gradients) take effect. A per-world value given for a term that
      is compiled out is an error (`Simulation.reset`).
  """
  return Simulation(build.build(read_manifest(manifest_path, overrides=overrides), vary=vary))


world_keys = rng.world_keys
