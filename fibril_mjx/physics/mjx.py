"""`mujoco.mjx`, imported without the "Failed to import warp" lines it prints on CPU hosts, with
acceleration-stage sensors evaluated in constraint-free models.

MJX 3.17.0's `forward` returns early when the model has no constraint rows
(`efc_J.size == 0`: no contacts, no joint limits, no equality constraints) and so never calls
`sensor_acc`: accelerometer, force, torque, framelinacc and frameangacc readings then stay at
whatever `put_data` gave them (e.g. the reset state), while MuJoCo C's `mj_forward` always
evaluates them. `mjx` below is `mujoco.mjx` with `forward` and `step` completed by that missing
call (after the early return `qacc = qacc_smooth`, which is what C's sensors see as well), plus
`integrate`, the second half of a step; every other attribute is the module's own. The
integrator dispatch of `integrate` mirrors `mujoco/mjx/_src/forward.py:step` of the pinned
version.

A step is `forward` then `integrate`. fibril_mjx acquires its samples between the two (SPEC §4,
"a sample describes the state at its stamp"): after `forward`, `sensordata` and every derived
quantity describe the state `x_k` with the controls of tick k; after `integrate`, `qpos`,
`qvel`, `act` and `time` are those of `x_{k+1}` while `sensordata` still describes `x_k` — which
is why reading sensors after `mjx.step` is one tick stale.
"""

import contextlib
import io

import jax
import mujoco

from fibril_mjx.physics.mjcf import initial_data

with contextlib.redirect_stdout(io.StringIO()):
  from mujoco import mjx as _mjx
  from mujoco.mjx._src import forward as _forward
  from mujoco.mjx._src import sensor as _sensor
  from mujoco.mjx._src.types import IntegratorType as _Integrator


# `forward` and `integrate` are jitted: a process traces each once per model and shapes, and
# every program that steps that model (reset, step, run, rollout, gradients, any world count
# or tick count) reuses the trace, batched or differentiated as a jaxpr, instead of running
# MJX's Python again (tests/batch/test_simulator.py counts the traces; the time saved:
# docs/internals/performance.md). XLA inlines the call, so the results are those without the
# jit, bitwise.
@jax.jit
def forward(m, d):
  """`mjx.forward`, plus acceleration-stage sensors when the model has no constraints."""
  d = _mjx.forward(m, d)
  if d._impl.efc_J.size == 0:  # pyrefly: ignore[missing-attribute]
    d = _sensor.sensor_acc(m, d)
  return d


@jax.jit
def integrate(m, d):
  """The integration half of `mjx.step`: `d` is the output of `forward(m, d)`; returns the
  data of the next state (`qpos`, `qvel`, `act`, `time` advanced; the rest still describes
  the state `forward` saw)."""
  if m.opt.integrator == _Integrator.EULER:
    return _forward.euler(m, d)
  if m.opt.integrator == _Integrator.RK4:
    return _forward.rungekutta4(m, d)
  if m.opt.integrator == _Integrator.IMPLICITFAST:
    return _forward.implicit(m, d)
  raise NotImplementedError(f'integrator {m.opt.integrator} not implemented.')


def step(m, d):
  """`mjx.step` with `forward` above (sensors of the state at the start of the step, as C)."""
  return integrate(m, forward(m, d))


def impl_fns(impl: str = 'jax'):
  """`(forward, integrate)` of a physics implementation: the functions above for MJX-JAX; for
  MJX-Warp (`'warp'`, NVIDIA GPUs only) its own `forward`, and its `step` as the integration
  (Warp has no separate one, so a tick costs two forwards there)."""
  if impl == 'warp':   # pragma: no cover — needs an NVIDIA GPU
    return _mjx.forward, lambda m, d: _mjx.step(m, d)
  return forward, integrate


class _Mjx:
  """`mujoco.mjx` with the `forward` / `integrate` / `step` above."""
  forward = staticmethod(forward)
  integrate = staticmethod(integrate)
  step = staticmethod(step)

  def __getattr__(self, name):
    return getattr(_mjx, name)


mjx = _Mjx()


def warp_model_and_data(mj_model, keyframe: int = -1):   # pragma: no cover — needs an NVIDIA GPU
  """`(mjx.Model, mjx.Data)` of MJX-Warp (`impl='warp'`), the data after `mj_forward` of the
  initial state (`mjcf.initial_data`: at `keyframe` when >= 0)."""
  d = initial_data(mj_model, keyframe)
  return _mjx.put_model(mj_model, impl='warp'), _mjx.put_data(mj_model, d, impl='warp')
