"""The one-world device pipeline on PyTorch tensors (`pip install -e '.[torch]'`), batched over
worlds, for loops written in PyTorch (MuJoCo Warp, MuJoCo C, a recorded trajectory).

The physics stays the caller's: each tick it hands the state `x_k` and the `sensordata` of its
forward on the compiled model (`sim.mj_model`: the user's sensors, then the probes the
components read; `pipeline.Frame`), and gets back the components' delivered samples and the new
device state. Tensors cross through DLPack: on the same device nothing is copied (a CPU tensor
becomes a JAX CPU array over the same buffer and back). The device state is a pytree of torch
tensors the caller holds and passes back; its structure is JAX's (`pipeline.SimState`).

    bridge = TorchPipeline(fibril_mjx.load('manifests/rl/leg_hold.yaml'))
    state, out = bridge.init(keys, frame)          # frame: {'qpos': (n, nq), ...} tensors
    state, out = bridge.step(state, frame, commands)
    out['sensor']['imu'].sample.angular_velocity   # (n, 3) torch tensor

`commands` is `{actuator component id: command}` of torch tensors with the world axis (e.g. a
motor's `MotorCommand` fields), or None for the null / scripted commands.
"""

from __future__ import annotations

import jax
import torch

from fibril_mjx.batch.simulation import Simulation
from fibril_mjx.core import pipeline

FRAME = pipeline.Frame._fields   # qpos, qvel, act, sensordata, ctrl


def to_jax(tree):
  """Torch tensors → JAX arrays over the same buffers (DLPack; contiguous tensors)."""
  return jax.tree.map(lambda t: jax.dlpack.from_dlpack(t.contiguous()) if isinstance(
      t, torch.Tensor) else t, tree)


def to_torch(tree):
  """JAX arrays → torch tensors over the same buffers (DLPack)."""
  return jax.tree.map(lambda x: torch.from_dlpack(x) if isinstance(x, jax.Array) else x, tree)


class TorchPipeline:
  """`pipeline.init` / `step` with frames (`WorldStart.frame`, `frame=`) of `sim`, vmapped
  over worlds and jitted, on torch tensors.

  Args:
    sim: a `Simulation` (`fibril_mjx.load(...)`).
    params: one world's `{component id: Params}` shared by every world (default the
      manifest's), or per-world Params with a leading world axis (`per_world_params=True`).
  """

  def __init__(self, sim: Simulation, params: dict | None = None, *,
               per_world_params: bool = False):
    self.sim, self.built = sim, sim.built
    self.params = sim.default_params() if params is None else params
    pax = 0 if per_world_params else None
    built = self.built

    def init(params, key, frame, commands):
      st = pipeline.init(built, params, key, pipeline.WorldStart(frame=frame), commands=commands)
      return st, pipeline.outputs(built, st)

    def step(params, state, frame, commands):
      return pipeline.step(built, params, state, commands, frame=frame)
    self._init = jax.jit(jax.vmap(init, in_axes=(pax, 0, 0, 0)))
    self._step = jax.jit(jax.vmap(step, in_axes=(pax, 0, 0, 0)))

  def frame(self, frame: dict) -> pipeline.Frame:
    """`{'qpos': (n, nq), 'qvel', 'act', 'sensordata', 'ctrl'}` tensors → a JAX `Frame`."""
    missing = [k for k in FRAME if k not in frame]
    if missing:
      raise ValueError(f'TorchPipeline: the frame has no {missing[0]!r}; it needs '
                       f'{", ".join(FRAME)} (torch tensors with the world axis first)')
    return pipeline.Frame(*(to_jax(frame[k]) for k in FRAME))

  def init(self, keys: torch.Tensor, frame: dict, commands: dict | None = None):
    """Tick 0 of `n` worlds.

    Args:
      keys: `(n, 2)` uint32 world keys (`fibril_mjx.world_keys` as a tensor).
      frame: the physics of tick 0 (`frame`).
      commands: `{actuator component id: command}` with the world axis, or None.

    Returns:
      `(state, outputs)`: the device state (torch pytree) and `{'sensor': {id: Delivered},
      'truth': {id: {...}}}` of torch tensors `(n, ...)`.
    """
    f = self.frame(frame)
    cmds = self._commands(commands)
    st, out = self._init(self.params, to_jax(keys), f, cmds)
    return to_torch(st), to_torch(out)

  def step(self, state, frame: dict, commands: dict | None = None):
    """The next tick of `n` worlds on the physics `frame` of that tick: `(state, outputs)`."""
    f = self.frame(frame)
    cmds = self._commands(commands)
    st, out = self._step(self.params, to_jax(state), f, cmds)
    return to_torch(st), to_torch(out)

  @staticmethod
  def _commands(commands) -> dict:
    """The given commands as JAX arrays (a missing component gets its scripted, else null,
    command inside the pipeline)."""
    return {cid: to_jax(c) for cid, c in (commands or {}).items()}
