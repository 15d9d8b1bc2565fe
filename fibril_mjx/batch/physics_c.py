"""Physics outside the loop: MuJoCo C through `mujoco.rollout` (`physics='c'`) and recorded
state logs through `mj_forward` (`physics='trajectory'`), under the same device layer.

Open loop, one tick k is what the in-loop pipeline does (SPEC §4), in three passes:
1. **controls** — the pipeline over the command trace on placeholder frames, the same compiled
   program as pass 3 (a component whose controls read the physics is refused up front:
   `open_loop_problems`);
2. **physics** — `mujoco.rollout` of every world under those controls (the `sensordata` of step
   k is that of `x_k` with `ctrl_k`, the in-loop stamp), or a log's `x_k` through `mj_forward`
   (`mj_inverse` with the log's accelerations);
3. **devices** — `pipeline.step(..., frame=)` over the recorded frames, the actuators re-run
   beside them, so every component's state is the in-loop one.

Worlds go in chunks (`chunk_worlds`; recorded `sensordata` under `FRAME_BUDGET_BYTES`) padded to
one shape of at least two lanes, so one program serves every chunk and a world's result depends
only on its inputs. The passes explained: docs/concepts/physics-backends.md.
"""
from __future__ import annotations

import copy
import functools
import os
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

from fibril_mjx.batch import batched
from fibril_mjx.batch import worlds
from fibril_mjx.core import groups, latencies, pipeline
from fibril_mjx.core.built import Built
from fibril_mjx.core.context import DCMOTOR_PARAMS
from fibril_mjx.core.pipeline import Frame
from fibril_mjx.errors import FibrilError
from fibril_mjx.physics import mjcf

FRAME_BUDGET_BYTES = 512 * 2**20   # recorded float64 sensordata + states of one world chunk
_STATE = mujoco.mjtState.mjSTATE_FULLPHYSICS


def open_loop_problems(built: Built, *, controller=None) -> list[str]:
  """Why the physics of this manifest cannot be computed before its devices run, one reason
  per offending component (empty when an open-loop backend serves it)."""
  out = []
  if controller is not None:
    out.append('a controller closes the loop on delivered samples')
  for cid, c in built.components.items():
    why = c.closes_loop() if hasattr(c, 'closes_loop') else ''
    if why:
      out.append(f'component {cid!r} ({c.type}) closes a loop on physics: {why}')
    elif not getattr(c, 'reads_sensors_only', False):
      out.append(f'component {cid!r} ({c.type}) still reads mjx.Data fields, not only MuJoCo '
                 'sensors')
  return out


PHYSICS = ('mjx', 'c')


def check_backend(built: Built, physics: str) -> None:
  """Refuses an unknown backend, or `c` for a manifest it cannot serve (one line)."""
  if physics not in PHYSICS:
    raise FibrilError(f'physics {physics!r}: unknown; choose one of {", ".join(PHYSICS)}')
  if physics == 'c':
    check_open_loop(built, physics)


def choose(built: Built, physics: str | None = 'auto', *, impl: str = 'jax', controller=None,
           trajectory=None) -> tuple[str, str]:
  """`(backend, why)`: the one physics chooser (`run`, `tune`, `campaign`, `validate`, `plan`).
  `physics` `'auto'` picks MuJoCo C on a CPU host when nothing closes a loop on physics (it is
  faster there: `bench/scaling.py`), else MJX in the loop; an explicit `'c'` that cannot serve
  the manifest (or `controller`, not None when a controller closes the loop) is an error.
  With a recorded state log `trajectory` (its path) the backend is `'trajectory'` (physics
  None or `'auto'`); None alone is `'mjx'`."""
  if physics is None:
    physics = 'mjx' if trajectory is None else 'trajectory'
  if trajectory is not None:
    if physics not in ('auto', 'trajectory'):
      raise FibrilError(f'--trajectory replays a recorded state log; it cannot be combined '
                        f'with --physics {physics}')
    check_open_loop(built, 'trajectory')
    return 'trajectory', f'recorded state log {trajectory}'
  if physics == 'trajectory':
    raise FibrilError("physics 'trajectory' needs a state log: --trajectory LOG")
  if physics not in PHYSICS + ('auto',):
    raise FibrilError(f'physics {physics!r}: unknown; choose one of auto, {", ".join(PHYSICS)}')
  if physics != 'auto':
    check_backend(built, physics)
    if physics == 'c':
      check_open_loop(built, physics, controller=controller)
    return physics, 'as asked'
  problems = open_loop_problems(built, controller=controller)
  if problems:
    return 'mjx', f'auto: MJX in the loop, because {problems[0]}'
  if impl != 'jax' or jax.default_backend() != 'cpu':
    return 'mjx', f'auto: MJX on the {jax.default_backend()} accelerator'
  return 'c', ('auto: open loop on a CPU host, so MuJoCo C through mujoco.rollout (faster '
               'than MJX there; physics mjx steps MJX in the loop)')


def check_open_loop(built: Built, physics: str, *, controller=None) -> None:
  """Raises a one-line `FibrilError` naming what needs the physics in the loop."""
  problems = open_loop_problems(built, controller=controller)
  if problems:
    raise FibrilError(f"physics {physics!r} runs the physics open loop (controls first, then "
                      f"MuJoCo C, then the devices), but {problems[0]}"
                      + (f' (and {len(problems) - 1} more)' if len(problems) > 1 else '')
                      + "; use physics='mjx'")


# ---------------------------------------------------------------- MuJoCo C

def initial_states(m: mujoco.MjModel, n: int, qpos_offset=None, qvel_offset=None,
                   keyframe: int = -1) -> np.ndarray:
  """`(n, nstate)` FULLPHYSICS states: the model's initial state (at `keyframe` when >= 0,
  `mjcf.initial_data`) after `mj_forward`, plus the per-world offsets (as `pipeline.init` adds
  them)."""
  d = mjcf.initial_data(m, keyframe)
  s0 = np.zeros(mujoco.mj_stateSize(m, _STATE))
  mujoco.mj_getState(m, d, s0, _STATE)
  s = np.tile(s0, (n, 1))
  if qpos_offset is not None:
    s[:, 1:1 + m.nq] += np.asarray(qpos_offset, np.float64).reshape(n, m.nq)
  if qvel_offset is not None:
    s[:, 1 + m.nq:1 + m.nq + m.nv] += np.asarray(qvel_offset, np.float64).reshape(n, m.nv)
  return s


def world_models(m: mujoco.MjModel, model: Mapping | None, lo: int, hi: int):
  """The `MjModel` (one, or one per world) of worlds `lo:hi`: per-world MJCF fields are
  written into copies, by the same names MJX uses (`dof_damping`, `body_mass`, ...)."""
  if not model:
    return m
  out = []
  for w in range(lo, hi):
    mw = copy.copy(m)
    for f, v in model.items():
      getattr(mw, f)[...] = np.asarray(v[w], np.float64).reshape(getattr(mw, f).shape)
    out.append(mw)
  return out


class Rollout:
  """`mujoco.rollout` with a persistent pool of one `MjData` per thread."""

  def __init__(self, m: mujoco.MjModel, threads: int | None = None):
    self.threads = threads or os.cpu_count() or 1
    self.datas = [mujoco.MjData(m) for _ in range(self.threads)]

  def __call__(self, models, state0: np.ndarray, ctrl: np.ndarray):
    """`(states (n, T, nstate), sensordata (n, T, nsensordata))` after T steps from `state0`
    with `ctrl (n, T, nu)` (float64)."""
    return mj_rollout.rollout(models, self.datas, state0, ctrl, persistent_pool=True)


def frames_from_states(m: mujoco.MjModel, states: np.ndarray, sensordata: np.ndarray,
                       ctrl: np.ndarray) -> Frame:
  """float32 `Frame` leaves `(n, T, ...)` from FULLPHYSICS states of the ticks themselves."""
  nq, nv, na = m.nq, m.nv, m.na
  f = lambda x: jnp.asarray(x, jnp.float32)   # noqa: E731
  return Frame(f(states[..., 1:1 + nq]), f(states[..., 1 + nq:1 + nq + nv]),
               f(states[..., 1 + nq + nv:1 + nq + nv + na]), f(sensordata), f(ctrl))


# ---------------------------------------------------------------- the JAX passes

def device_pass(built: Built, record: bool, params, keys, frames, cmds, latency):
  """The whole pipeline over frames `(n_worlds, n_ticks + 1, ...)` and commands of the same
  ticks (`batched.world_trace`, or None): pass 3 on the recorded frames, pass 1 on
  placeholders (only its controls kept). Returns `(final state, outputs (n_worlds, n_ticks +
  1, ...) or None, controls)`: one scan of `pipeline.step(..., frame=)` from before tick 0, so each
  tick's code is compiled once. Traceable; `device_program` is its `jax.jit`."""
  def one(p, key, fr, cs, lat):
    st = pipeline.before_tick0(built, p, key, pipeline.WorldStart(
        latency=lat, frame=jax.tree.map(lambda x: x[0], fr)))
    p = groups.pack(built, p)   # each group's Params stacked once, not per tick

    def body(s, xs):
      frame, c = xs
      s, out = pipeline.step(built, p, s, c, frame=frame)
      return s, ((out if record else None), s.ctrl)
    st, (outs, ctrl) = jax.lax.scan(body, st, (fr, cs))
    return st, outs, ctrl
  return jax.vmap(one)(params, keys, frames, cmds, latency)


# `device_pass` under `jax.jit`: one compiled program per built model and `record`
device_program = jax.jit(device_pass, static_argnums=(0, 1))


@functools.partial(jax.jit, static_argnums=(0, 1))
def script_ctrl_program(built: Built, n_ticks: int):
  """`(n_ticks + 1, nu)`: the manifest's `actuator_script` controls of every tick, as the
  pipeline's tick writes them when no actuator component drives a control."""
  return jax.vmap(lambda tick: built.actuator_script.ctrl(
      pipeline.initial_ctrl(built), tick, built.dt))(jnp.arange(n_ticks + 1, dtype=jnp.int32))


def script_ctrl(built: Built, n_ticks: int) -> np.ndarray:
  """`script_ctrl_program` as float64 `(n_ticks + 1, nu)`."""
  return np.asarray(script_ctrl_program(built, int(n_ticks)), np.float64)


def _check_controls(used: np.ndarray, stepped: np.ndarray, physics: str) -> None:
  """The controls the device pass wrote are those MuJoCo C stepped with, else some component
  read the physics before its application without declaring it (`closes_loop`)."""
  bad = np.nonzero(np.any(used != stepped.astype(np.float32), axis=-1))
  if bad[0].size:
    raise FibrilError(f'physics {physics!r}: the controls of world {bad[0][0]} at tick '
                      f'{bad[1][0]} depend on the physics (the open-loop pass wrote others); '
                      "a component closes a loop without declaring it: use physics='mjx'")


def _pad(tree, k: int):
  """Leaves `(n, ...)` padded to `(k, ...)` by repeating the last world."""
  def one(x):
    x = jnp.asarray(x)
    if x.shape[0] == k:
      return x
    return jnp.concatenate([x, jnp.repeat(x[-1:], k - x.shape[0], axis=0)])
  return jax.tree.map(one, tree)


def _cut(tree, n: int):
  return jax.tree.map(lambda x: x[:n], tree)


def default_chunk(m: mujoco.MjModel, n_worlds: int, n_ticks: int) -> int:
  per_world = (n_ticks + 1) * (m.nsensordata + mujoco.mj_stateSize(m, _STATE) + m.nu) * 8 * 2
  return int(max(1, min(n_worlds, FRAME_BUDGET_BYTES // max(per_world, 1))))


def frames_from_log(m: mujoco.MjModel, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray,
                    act: np.ndarray | None = None, accelerations: str = 'dynamics',
                    qacc: np.ndarray | None = None) -> Frame:
  """The frames `(T, ...)` of a recorded state log on the ticks: `mj_inverse` with the log's
  own accelerations `qacc (T, nv)` when it has them (a prescribed motion: the accelerometer
  reads its exact specific force), else `mj_forward` at each frame
  (`accelerations='dynamics'`: the model's forward dynamics under the log's controls give the
  accelerations the accelerometer and force sensors see) or `mj_inverse` with accelerations
  differenced from the velocities (`'differentiate'`: `qacc_k = (qvel_{k+1} − qvel_k) / dt`, the
  forward difference that MuJoCo's semi-implicit Euler integrates exactly; the last frame
  repeats the one before it)."""
  d = mujoco.MjData(m)
  t = qpos.shape[0]
  sd = np.zeros((t, m.nsensordata))
  if qacc is None and accelerations == 'differentiate':
    qacc = np.diff(qvel, axis=0) / m.opt.timestep
    qacc = np.concatenate([qacc, qacc[-1:]]) if t > 1 else np.zeros_like(qvel)
  for k in range(t):
    d.qpos[:], d.qvel[:], d.ctrl[:] = qpos[k], qvel[k], ctrl[k]
    if m.na and act is not None:
      d.act[:] = act[k]
    if qacc is None:
      mujoco.mj_forward(m, d)
    else:
      d.qacc[:] = qacc[k]
      mujoco.mj_inverse(m, d)
    sd[k] = d.sensordata
  f = lambda x: jnp.asarray(x, jnp.float32)   # noqa: E731
  return Frame(f(qpos), f(qvel), f(act if act is not None else np.zeros((t, m.na))), f(sd),
               f(ctrl))


def rollout(built: Built, params: dict, world_keys, n_ticks: int, source, *, commands=None,
            model=None, start: batched.Start = batched.Start(),
            options: batched.Options = batched.Options()):
  """`Simulation.rollout` over MuJoCo C (`source` a `Rollout` runner: physics `'c'`) or a
  recorded state log (`source` a dict, physics `'trajectory'`: `{'qpos': (T, nq), 'qvel': (T,
  nv)[, 'ctrl': (T, nu)][, 'act': (T, na)][, 'accelerations': 'dynamics' |
  'differentiate']}` on the ticks, T ≥ n_ticks + 1; every world replays it, each with its own
  devices): same arguments, same `(final_state, trace)` (the final state's `data` is a
  `pipeline.Frame`). `options.sub_batch`: worlds per vmapped call (lanes): a campaign fixes it
  so that a world replayed alone runs in the same batch shape as in its chunk."""
  trajectory = None if isinstance(source, Rollout) else source
  physics = 'c' if trajectory is None else 'trajectory'
  qpos_offset, qvel_offset = start.qpos_offset, start.qvel_offset
  record = options.record
  check_open_loop(built, physics)
  if start.data0 is not None:
    raise FibrilError(f"physics {physics!r}: start data0 is an mjx.Data (MJX's); use "
                      "physics='mjx'")
  device = functools.partial(device_program, built, record)
  m = built.mj_model
  n = int(world_keys.shape[0])
  if model is not None and not isinstance(model, Mapping):
    raise FibrilError(f"physics {physics!r}: model= must be a mapping of per-world MJCF "
                      "fields {field: (nworld, ...)} (an mjx.Model is MJX's)")
  if trajectory is not None and (model or qpos_offset is not None or qvel_offset is not None):
    raise FibrilError("physics 'trajectory': the recorded motion is the physics; per-world "
                      'MJCF fields and initial states do not apply')
  if built.dcmotor is not None and DCMOTOR_PARAMS in params:
    default = pipeline.default_params(built)[DCMOTOR_PARAMS]
    if any(np.any(np.asarray(a) != np.asarray(b)) for a, b in
           zip(jax.tree.leaves(params[DCMOTOR_PARAMS]), jax.tree.leaves(default))):
      raise FibrilError(f"physics {physics!r}: per-world dcmotor parameters are MJX's "
                        "(MuJoCo C steps the MJCF's dcmotor as compiled); use physics='mjx'")
  lat_in = latencies.latency_inputs(built, start.latency, n)
  # Shared physics, as MJX's `physics_sharing`: when nothing per world reaches the physics
  # (no actuator component, dcmotor, command trace, per-world MJCF field or initial state),
  # MuJoCo C steps one world and every world's devices read its frames — the same numbers a
  # rollout per world would give, since C's worlds do not depend on each other.
  share = batched.physics_sharing(built, commands=commands, model_fields=tuple(model or ()),
                                  qpos_offset=qpos_offset, qvel_offset=qvel_offset,
                                  share_physics=options.share_physics is not False)[0]
  chunk = options.sub_batch or options.chunk_worlds or default_chunk(m, n, n_ticks)
  lanes = max(2, chunk)   # XLA compiles one lane to other scalar code: pad to two or more
  if trajectory is None:
    runner = source
    states0 = initial_states(m, n, qpos_offset, qvel_offset, built.keyframe)
  else:
    log = {k: np.asarray(v, np.float64) for k, v in trajectory.items() if k != 'accelerations'}
    if log['qpos'].shape[0] < n_ticks + 1:
      raise FibrilError(f"trajectory: {log['qpos'].shape[0]} frames for {n_ticks + 1} ticks")
    log = {k: v[:n_ticks + 1] for k, v in log.items()}
    states0 = np.concatenate([np.zeros((1, 1)), log['qpos'][:1], log['qvel'][:1],
                              log['act'][:1] if 'act' in log else np.zeros((1, m.na))], axis=1)
    states0 = np.tile(states0, (n, 1))
  finals, traces = [], []
  for lo, hi in worlds.chunks(n, chunk):
    k = hi - lo
    whole = lo == 0 and hi == n == lanes   # one exact chunk: no slicing, padding, cutting

    def sl(t):
      return t if whole else _pad(jax.tree.map(lambda x: x[lo:hi], t), lanes)
    p, keys = sl(params), sl(jnp.asarray(world_keys))
    lat = sl(lat_in) if lat_in else None
    cmds = batched.world_trace(commands, pipeline.null_commands(built), lo, hi)
    cmds = sl(cmds) if cmds is not None else None   # (k, n + 1, ...)
    s0 = states0[lo:hi]
    if trajectory is not None and 'ctrl' in log:
      ctrl = np.broadcast_to(log['ctrl'], (k,) + log['ctrl'].shape)
    elif not pipeline.actuators(built):   # only the actuator_script writes ctrl: no pass 1
      ctrl = np.broadcast_to(script_ctrl(built, n_ticks), (k, n_ticks + 1, m.nu))
    else:   # pass 1 on placeholder frames: the initial state at every tick
      held = frames_from_states(m, np.repeat(s0[:, None], n_ticks + 1, axis=1),
                                np.zeros((k, n_ticks + 1, m.nsensordata)),
                                np.zeros((k, n_ticks + 1, m.nu)))
      ctrl = np.asarray(device(p, keys, _pad(held, lanes), cmds, lat)[2], np.float64)[:k]
    if trajectory is None and share:   # one world's physics serves all (see `rollout`)
      st, sd = runner(m, s0[:1], ctrl[:1])
      one = frames_from_states(m, np.concatenate([s0[:1, None], st[:, :-1]], axis=1), sd,
                               ctrl[:1])
      frames = jax.tree.map(lambda x: jnp.broadcast_to(x[0], (k,) + x.shape[1:]), one)
    elif trajectory is None:
      st, sd = runner(world_models(m, model, lo, hi), s0, ctrl)
      frames = frames_from_states(m, np.concatenate([s0[:, None], st[:, :-1]], axis=1), sd,
                                  ctrl)
    else:
      one = frames_from_log(m, log['qpos'], log['qvel'], ctrl[0], log.get('act'),
                            trajectory.get('accelerations', 'dynamics'), log.get('qacc'))
      frames = jax.tree.map(lambda x: jnp.broadcast_to(x, (k,) + x.shape), one)
    final, outs, used = device(p, keys, _pad(frames, lanes), cmds, lat)
    if pipeline.actuators(built) and (trajectory is None or 'ctrl' not in log):
      _check_controls(np.asarray(used)[:k], ctrl, physics)   # only an actuator can close one
    finals.append(final if whole else _cut(final, k))
    if record:
      traces.append(outs if whole else _cut(outs, k))
  cat = lambda xs: xs[0] if len(xs) == 1 else jax.tree.map(   # noqa: E731
      lambda *a: jnp.concatenate(a, axis=0), *xs)
  final = cat(finals)
  # tick and schedules are shared by every world, as in the in-loop batch
  final = final._replace(tick=final.tick[0], clocks=jax.tree.map(lambda x: x[0], final.clocks))
  return final, (cat(traces) if record else None)


def output_shapes(built: Built, params, keys, *, with_state: bool = False):
  """`jax.eval_shape` of a batch's tick-0 outputs (and state) on frames, no physics traced:
  what a campaign needs to name its metrics, and a run to size its memory."""
  m = built.mj_model
  n = keys.shape[0]
  z = lambda *s: jnp.zeros((n,) + s, jnp.float32)   # noqa: E731
  frames = Frame(z(m.nq), z(m.nv), z(m.na), z(m.nsensordata), z(m.nu))

  def one(p, k, f):
    st = pipeline.init(built, p, k, pipeline.WorldStart(frame=f))
    return (st, pipeline.outputs(built, st)) if with_state else pipeline.outputs(built, st)
  return jax.eval_shape(jax.vmap(one), params, keys, frames)


def simulation_rollout(sim, params, world_keys, n_ticks, *, commands=None, model=None,
                       start: batched.Start | None = None, options: batched.Options | None = None,
                       trajectory=None):
  """`Simulation.rollout` under `sim.physics` ('c', with the simulation's thread pool), or
  replaying `trajectory` (a recorded state log, see `rollout`): `(final_state, trace)`."""
  if getattr(sim, '_c_runner', None) is None:
    sim._c_runner = Rollout(sim.mj_model)
  return rollout(sim.built, params, world_keys, n_ticks,
                 sim._c_runner if trajectory is None else trajectory, commands=commands,
                 model=model, start=start or batched.Start(),
                 options=options or batched.Options())
