"""Tiny MJCF rigs and reference rollouts shared by the dcmotor tests."""

from __future__ import annotations

import mujoco
import numpy as np

# a 0.3 m capsule arm (1 kg) on a hinge about y: gravity loads it, no contacts at all
_RIG = """
<mujoco model="dcmotor_rig">
  <option timestep="{timestep}" {option}/>
  <worldbody>
    <body name="arm">
      <joint name="hinge" type="hinge" axis="0 1 0" {joint}/>
      <geom type="capsule" size="0.02" fromto="0 0 0 0.3 0 0" mass="1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    {before}
    <dcmotor name="motor" joint="hinge" {motor}/>
    {extra}
  </actuator>
</mujoco>
"""


def rig_xml(motor: str, joint: str = '', option: str = '', extra: str = '', before: str = '',
            timestep: float = 0.002) -> str:
  """MJCF of the one-joint rig with a dcmotor named `motor` on joint `hinge`.

  Args:
    motor: attributes of the `<dcmotor>` element.
    joint: extra attributes of the hinge (damping, armature, ...).
    option: extra attributes of `<option>`.
    before, extra: actuator elements placed before / after the dcmotor.
  """
  return _RIG.format(motor=motor, joint=joint, option=option, extra=extra, before=before,
                     timestep=timestep)


_ARM = """
    <body name="arm_{name}" pos="{x} 0 0">
      <joint name="hinge_{name}" type="hinge" axis="0 1 0" {joint}/>
      <geom type="capsule" size="0.02" fromto="0 0 0 0.3 0 0" mass="1" contype="0" conaffinity="0"/>
    </body>"""


def arms_xml(arms: dict[str, tuple[str, str]], option: str = '', timestep: float = 0.002) -> str:
  """MJCF of independent one-joint arms, each driven by its own dcmotor.

  Arm `name` has joint `hinge_<name>` and a dcmotor named `name` (actuators in dict order), so
  one compiled model checks several single-joint rigs at once.

  Args:
    arms: name -> (dcmotor attributes, hinge attributes).
    option: extra attributes of `<option>`.
  """
  bodies = ''.join(_ARM.format(name=n, x=1.0 * k, joint=j) for k, (n, (_, j)) in
                   enumerate(arms.items()))
  motors = ''.join(f'\n    <dcmotor name="{n}" joint="hinge_{n}" {a}/>' for n, (a, _) in
                   arms.items())
  return (f'<mujoco model="dcmotor_arms">\n  <option timestep="{timestep}" {option}/>\n'
          f'  <worldbody>{bodies}\n  </worldbody>\n  <actuator>{motors}\n  </actuator>\n'
          '</mujoco>\n')


def controls(m: mujoco.MjModel, n_steps: int, scale: np.ndarray, seed: int = 0) -> np.ndarray:
  """Varying controls `(n_steps, nu)`: a sum of two sines plus a held random step per 50 ticks.

  Args:
    scale: `(nu,)` amplitude per control.
  """
  rng = np.random.default_rng(seed)
  t = np.arange(n_steps)[:, None] * m.opt.timestep
  f1, f2 = rng.uniform(0.5, 3.0, (2, m.nu))
  ph = rng.uniform(0, 2 * np.pi, (2, m.nu))
  held = np.repeat(rng.uniform(-1, 1, (n_steps // 50 + 1, m.nu)), 50, axis=0)[:n_steps]
  u = 0.6 * np.sin(2 * np.pi * f1 * t + ph[0]) + 0.3 * np.sin(2 * np.pi * f2 * t + ph[1])
  return (u + 0.5 * held) * np.asarray(scale)


def c_rollout(m: mujoco.MjModel, ctrl: np.ndarray) -> dict[str, np.ndarray]:
  """MuJoCo C `mj_step` from `mj_resetData`; arrays `(n_steps, ...)` after each step.

  `actuator_force` is the force of the step (computed from the pre-step state), as
  `MjData.actuator_force` reads after `mj_step`.
  """
  d = mujoco.MjData(m)
  out = {'qpos': [], 'qvel': [], 'actuator_force': [], 'act': []}
  for u in ctrl:
    d.ctrl[:] = u
    mujoco.mj_step(m, d)
    out['qpos'].append(d.qpos.copy())
    out['qvel'].append(d.qvel.copy())
    out['actuator_force'].append(d.actuator_force.copy())
    out['act'].append(d.act.copy())
  return {k: np.array(v) for k, v in out.items()}
