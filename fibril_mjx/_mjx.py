"""`mujoco.mjx`, imported without the "Failed to import warp" lines it prints on CPU hosts, with
acceleration-stage sensors evaluated in constraint-free models.

MJX 3.17.0's `forward` returns early when the model has no constraint rows
(`efc_J.size == 0`: no contacts, no joint limits, no equality constraints) and so never calls
`sensor_acc`: accelerometer, force, torque, framelinacc and frameangacc readings then stay at
whatever `put_data` gave them (e.g. the reset state), while MuJoCo C's `mj_forward` always
evaluates them. `mjx` below is `mujoco.mjx` with `forward` and `step` completed by that missing
call (after the early return `qacc = qacc_smooth`, which is what C's sensors see as well); every
other attribute is the module's own. The integrator dispatch of `step` mirrors
`mujoco/mjx/_src/forward.py:step` of the pinned version.
"""

import contextlib
import io

with contextlib.redirect_stdout(io.StringIO()):
  from mujoco import mjx as _mjx
  from mujoco.mjx._src import forward as _forward
  from mujoco.mjx._src import sensor as _sensor
  from mujoco.mjx._src.types import IntegratorType as _Integrator


def forward(m, d):
  """`mjx.forward`, plus acceleration-stage sensors when the model has no constraints."""
  d = _mjx.forward(m, d)
  if d._impl.efc_J.size == 0:  # pyrefly: ignore[missing-attribute]
    d = _sensor.sensor_acc(m, d)
  return d


def step(m, d):
  """`mjx.step` with `forward` above (sensors of the state at the start of the step, as C)."""
  d = forward(m, d)
  if m.opt.integrator == _Integrator.EULER:
    return _forward.euler(m, d)
  if m.opt.integrator == _Integrator.RK4:
    return _forward.rungekutta4(m, d)
  if m.opt.integrator == _Integrator.IMPLICITFAST:
    return _forward.implicit(m, d)
  raise NotImplementedError(f'integrator {m.opt.integrator} not implemented.')


class _Mjx:
  """`mujoco.mjx` with the `forward` / `step` above."""
  forward = staticmethod(forward)
  step = staticmethod(step)

  def __getattr__(self, name):
    return getattr(_mjx, name)


mjx = _Mjx()
