"""The simulator (SPEC §8): host-side build, then pure reset / step / rollout over worlds.

Single-world code is vmapped over worlds at the edge; ticks run in `lax.scan`. The tick
counter and the schedules are shared by all worlds (they depend on static config only), so
an acquisition instant is a real branch under `vmap`, not a select.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx import assemblies as asm
from fibril_mjx import build as bld
from fibril_mjx import command_script as cscript
from fibril_mjx import dcmotor
from fibril_mjx import rng
from fibril_mjx import schedule as sch
from fibril_mjx._mjx import mjx
from fibril_mjx.components import REGISTRY
from fibril_mjx.errors import ConfigError, did_you_mean
from fibril_mjx.manifest import ComponentConfig, Manifest, read_manifest

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


# Schedules evaluated before physics at tick k (actuator application); every other schedule
# is evaluated after physics at tick k + 1 (acquisition, feedback).
PRE_PHYSICS = ('application',)
DCMOTOR_PARAMS = 'mjcf.dcmotor'


@dataclasses.dataclass(frozen=True)
class Script:
  """Static open-loop ctrl drive of test-rig actuators (manifest `actuator_script`)."""
  ctrl_index: tuple[int, ...]
  square: tuple[bool, ...]
  amplitude: tuple[float, ...]
  frequency_hz: tuple[float, ...]
  phase_rad: tuple[float, ...]
  offset: tuple[float, ...]

  def ctrl(self, ctrl0, t):
    """`ctrl0` `(nu,)` with the scripted entries replaced by their value at time `t`."""
    if not self.ctrl_index:
      return ctrl0
    idx = np.asarray(self.ctrl_index)
    s = jnp.sin(2 * jnp.pi * np.asarray(self.frequency_hz) * t + np.asarray(self.phase_rad))
    s = jnp.where(np.asarray(self.square), jnp.sign(s), s)
    vals = np.asarray(self.offset) + np.asarray(self.amplitude) * s
    # A dense select instead of per-entry scatters: elementwise under vmap (scatters into a
    # batched ctrl cost a quarter of a small model's step on the CPU).
    dense = jnp.zeros(ctrl0.shape, ctrl0.dtype).at[idx].set(vals.astype(ctrl0.dtype))
    mask = np.zeros(ctrl0.shape, bool)
    mask[idx] = True
    return jnp.where(mask, dense, ctrl0)


class Simulation:
  """A built manifest: the MJX model, the components, and jitted reset / step / rollout.

  Attributes:
    manifest: the parsed manifest.
    mj_model: the compiled MuJoCo model.
    mx: the MJX model.
    dt: physics timestep (s).
    components: component id → built component (static).
  """

  def __init__(self, manifest: Manifest):
    self.manifest = manifest
    file = str(manifest.path)
    spec = bld.load_spec(manifest.model_path, manifest.packages)
    # Robot geometry and calibration are materialized into the spec before compile (SPEC §3.3,
    # §3.4): assembly gears first, then overlays in manifest order.
    self.assemblies = asm.apply_assemblies(manifest, spec)
    self.overlays, overlay_fields = asm.apply_overlays(manifest, spec)
    self.mj_model = bld.compile_spec(spec, manifest.model_path)
    bld.reject_mjx_ignored(self.mj_model, manifest.model_path)
    self.dt = float(self.mj_model.opt.timestep)
    self.components = {}
    for i, entry in enumerate(manifest.model.components):
      path = f'components[{i}]'
      if entry.type not in REGISTRY:
        raise ConfigError(file, f'{path}.type', 'unknown component type'
                          + did_you_mean(entry.type, REGISTRY) +
                          f'; known types: {", ".join(sorted(REGISTRY))}', entry.type)
      if entry.id == DCMOTOR_PARAMS:
        raise ConfigError(file, f'{path}.id', 'reserved name', entry.id)
      ctx = bld.BuildContext(self.mj_model, self.dt, file, f'{path}.config',
                             assembly=self.assemblies.get(entry.id),
                             built=dict(self.components),
                             entries=tuple((e.id, e.type) for e in manifest.model.components))
      raw = ComponentConfig(entry.config, overlay_fields.get(entry.id, ()))
      self.components[entry.id] = REGISTRY[entry.type](entry.id, raw, ctx, manifest.catalog)
    self.script = self._build_script(file)
    self._check_one_driver_per_actuator(file)
    self.command_script = cscript.build(manifest, self.components, self.dt)
    # MJX cannot step dcmotor: step a twin model and evaluate dcmotor in JAX (fibril_mjx.dcmotor).
    self.physics_model, self.dcmotor = dcmotor.prepare(self.mj_model, spec)
    try:
      self.mx = mjx.put_model(self.physics_model)
    except NotImplementedError as e:
      raise ConfigError(str(manifest.model_path), 'model',
                        f'MJX cannot step this model: {e}') from None
    d = mujoco.MjData(self.physics_model)
    mujoco.mj_forward(self.physics_model, d)
    self._data0 = mjx.put_data(self.physics_model, d)
    self._ctrl0 = jnp.zeros(self.mj_model.nu, jnp.float32)
    self._jit_reset = jax.jit(self._reset_batch)
    self._jit_step = jax.jit(self._step_batch)
    self._jit_run = jax.jit(self._run_batch,
                            static_argnames=('n_ticks', 'record', 'controller', 'observe_truth'))

  def _check_one_driver_per_actuator(self, file) -> None:
    """Each MuJoCo actuator is written by one component (or the actuator_script), never two."""
    owner = {}
    for i, s in enumerate(self.manifest.model.actuator_script):
      owner[s.actuator] = f'actuator_script[{i}]'
    for i, (cid, c) in enumerate(self.components.items()):
      for b in getattr(c, 'bindings', ()):
        if b.name in owner:
          raise ConfigError(file, f'components[{i}].config.{b.field}',
                            f'actuator already driven by {owner[b.name]}; one driver per '
                            'actuator', b.name)
        owner[b.name] = f'component {cid!r}'

  def _build_script(self, file) -> Script:
    m = self.mj_model
    cols = ([], [], [], [], [], [])
    for i, s in enumerate(self.manifest.model.actuator_script):
      aid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, s.actuator)
      if aid < 0:
        names = [m.actuator(j).name for j in range(m.nactuator)]
        raise ConfigError(file, f'actuator_script[{i}].actuator',
                          'no MuJoCo actuator of that name' + did_you_mean(s.actuator, names),
                          s.actuator)
      if m.actuator_ctrlnum[aid] != 1:
        raise ConfigError(file, f'actuator_script[{i}].actuator',
                          f'the actuator owns {m.actuator_ctrlnum[aid]} controls; scripts drive '
                          'single-control actuators', s.actuator)
      for col, v in zip(cols, (int(m.actuator_ctrladr[aid]), s.waveform == 'square',
                               s.amplitude, s.frequency_hz, s.phase_rad, s.offset)):
        col.append(v)
    return Script(*(tuple(c) for c in cols))

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

  def null_commands(self) -> dict:
    """`{actuator component id: command}` meaning "nothing issued this tick" (one world).

    A component missing from the commands passed to `step` / `run` / `rollout` (or returned by
    a controller) gets its manifest `command_script` command if it has one, else this.
    """
    return {cid: c.null_command() for cid, c in self.components.items()
            if hasattr(c, 'null_command')}

  # ---------------------------------------------------------------- single world

  def _clocks0(self):
    clocks = {cid: {name: sch.init(s) for name, s in c.schedules.items()}
              for cid, c in self.components.items()}
    clocks[cscript.KEY] = {k: sch.init(s) for k, s in self.command_script.schedules.items()}
    return clocks

  def _sense(self, params, comps, data, tick, dues):
    comps, env = dict(comps), {}
    for cid, c in self.components.items():
      if hasattr(c, 'sense'):
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
    for cid, c in self.components.items():
      if hasattr(c, 'reset_ctrl'):   # what an actuator holds before its first application
        comps[cid], ctrl = c.reset_ctrl(params[cid], comps[cid], data, ctrl)
    return data, ctrl, dc, self._sense(params, comps, data, tick, dues)

  def _world_step(self, mx, params, data, ctrl, dc, comps, commands, tick, pre, post):
    """Tick `tick` → `tick + 1` of one world (SPEC §4 order)."""
    ctrl = self.script.ctrl(ctrl, tick.astype(jnp.float32) * self.dt)
    comps = dict(comps)
    for cid, c in self.components.items():
      if hasattr(c, 'actuate'):
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
        if (name in PRE_PHYSICS) == pre_physics:
          due, n, new[cid][name] = sch.advance(s, clocks[cid][name], tick)
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
    dues, new = {}, dict(clocks[cscript.KEY])
    for k, s in self.command_script.schedules.items():
      due, n, new[k] = sch.advance(s, clocks[cscript.KEY][k], tick)
      dues[k] = (due, n)
    return dues, {**clocks, cscript.KEY: new}

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


def load(manifest_path) -> Simulation:
  """Builds a `Simulation` from a manifest file (host side: parse, compile, bind, plan)."""
  return Simulation(read_manifest(manifest_path))


world_keys = rng.world_keys
