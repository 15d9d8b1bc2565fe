"""`tune` from the manifest's keyframe: a recording that gives no initial state starts where
the model's `<key>` puts it (SPEC: a keyframe starts every run, campaign, tune and RL reset).

Reference outside the code under test: MuJoCo C from `mj_resetDataKeyframe`, `mj_forward` at
each stamp (the recording written here, with no `initial`). At the recording's own parameters
the fit's model reproduces it through MJX (`exact`) and through MuJoCo C rollouts (`fd`); the
same recording against the manifest without `keyframe` (the arm hanging at rest at `qpos0`) is
off by the swing itself."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import yaml

from fibril_mjx.io import recording
from fibril_mjx.workflows import tune

DT, PERIOD, DURATION_S = 0.004, 0.008, 0.3
DAMPING = 0.02
Q0 = math.radians(45.0)
MODEL = f"""\
<mujoco model="keyed_pendulum">
  <option timestep="{DT}" integrator="implicitfast"/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="{DAMPING}"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.15" size="0.015" mass="0.5"
            contype="0" conaffinity="0"/>
      <site name="imu" pos="0 0 -0.12"/>
    </body>
  </worldbody>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
  <keyframe>
    <key name="raised" qpos="{Q0!r}" qvel="-1.5"/>
  </keyframe>
</mujoco>
"""


def c_recording() -> recording.Recording:
  """MuJoCo C from the `raised` key: the gyro and accelerometer at each stamp, no noise, no
  `initial` (the recording does not say where it started)."""
  m = mujoco.MjModel.from_xml_string(MODEL)
  d = mujoco.MjData(m)
  mujoco.mj_resetDataKeyframe(m, d, 0)
  every = int(round(PERIOD / DT))
  t, gyro, accel = [], [], []
  for k in range(int(round(DURATION_S / DT)) + 1):
    mujoco.mj_forward(m, d)
    if k % every == 0:
      t.append(k * DT)
      gyro.append(d.sensordata[0:3].copy())
      accel.append(d.sensordata[3:6].copy())
    mujoco.mj_step(m, d)
  t = np.asarray(t)
  return recording.Recording(
      {'imu': {'angular_velocity': np.asarray(gyro, np.float32),
               'linear_acceleration': np.asarray(accel, np.float32),
               'sample_time_s': t, 'arrival_time_s': t}},
      meta={'source': 'MuJoCo C from mj_resetDataKeyframe, mj_forward at each stamp (tests)'})


def _spec(tmp, keyframe: bool):
  (tmp / 'model.xml').write_text(MODEL)
  man = {'fibril_manifest': 1, 'model': 'model.xml',
         **({'keyframe': 'raised'} if keyframe else {}),
         'components': [{'id': 'imu', 'type': 'fibril_sim/imu',
                         'config': {'site': 'imu', 'period_s': PERIOD}}]}
  (tmp / 'm.yaml').write_text(yaml.safe_dump(man))
  recording.write_recording(tmp / 'train.npz', c_recording())
  spec = {'fibril_tune': 1, 'manifest': 'm.yaml', 'train': ['train.npz'],
          'parameters': [{'mjcf': 'joint:hinge.damping', 'bounds': [0.002, 0.2], 'log': True,
                          'init': DAMPING}],
          'loss': [{'component': 'imu', 'field': 'angular_velocity'}],
          'optimizer': {'method': 'gauss_newton', 'iterations': 1, 'starts': 1, 'seed': 0}}
  (tmp / 'tune.yaml').write_text(yaml.safe_dump(spec))
  return tmp / 'tune.yaml'


def _max_residual(prob) -> float:
  u = np.array([[p.to_u(DAMPING) for p in prob.params]])
  r, _, _ = prob.evaluate(u, prob.train)
  return float(np.abs(r).max())


@pytest.mark.parametrize('gradients', ['exact', 'fd'])
def test_a_recording_without_initial_state_starts_at_the_keyframe(tmp_path, gradients):
  cls = tune.Problem if gradients == 'exact' else tune.RolloutProblem
  prob = cls.from_file(_spec(tmp_path, keyframe=True), progress=False)
  # the arm swings at up to 5.2 rad/s; MJX in float32 follows MuJoCo C to float32 rounding
  # (1e-6 rad/s measured), MuJoCo C rollouts repeat it exactly
  assert _max_residual(prob) < (1e-5 if gradients == 'exact' else 1e-9)


def test_without_the_keyframe_the_same_recording_is_off_by_the_swing(tmp_path):
  prob = tune.RolloutProblem.from_file(_spec(tmp_path, keyframe=False), progress=False)
  assert _max_residual(prob) > 1.0
