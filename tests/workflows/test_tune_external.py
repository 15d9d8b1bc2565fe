"""`fibril-mjx tune` on recordings the project did not make: MuJoCo C with `mj_forward` at each
sample stamp, plus white sensor noise drawn with NumPy (SPEC §4, §11).

A double pendulum (shoulder damping, elbow stiffness, lower-link mass unknown) released from
rest; an IMU at the tip sampled every 8 ms. The recording is written here from MuJoCo C's
float64 state at each stamp, so a simulator whose samples are one tick stale cannot fit it
down to the noise (before the fix: a train loss far above 1 and parameters many σ off).
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import yaml

from fibril_mjx.io import recording
from fibril_mjx.workflows import tune
from ref_helpers import c_imu_samples, imu_recording

DT, PERIOD, DURATION_S = 0.004, 0.008, 0.6
GYRO_SIGMA, ACCEL_SIGMA = 2e-3, 2e-2          # per-sample white noise of the recording
TRUTH = {'damping': 0.03, 'stiffness': 0.8, 'mass': 0.3}
Q0 = (math.radians(45.0), math.radians(-15.0))

MODEL = """\
<mujoco model="double_pendulum">
  <option timestep="{dt}" integrator="implicitfast"/>
  <worldbody>
    <body name="upper" pos="0 0 1">
      <joint name="shoulder" type="hinge" axis="0 1 0" damping="{damping}"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.25" size="0.015" mass="0.5" contype="0"
            conaffinity="0"/>
      <body name="lower" pos="0 0 -0.25">
        <joint name="elbow" type="hinge" axis="0 1 0" stiffness="{stiffness}"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.012" mass="{mass}" contype="0"
              conaffinity="0"/>
        <site name="imu" pos="0.01 0 -0.18"/>
      </body>
    </body>
  </worldbody>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""


START = {'damping': 0.0345, 'stiffness': 0.68, 'mass': 0.345}   # the manifest's MJCF: 15 % off


def c_recording(seed: int, duration_s: float = DURATION_S) -> recording.Recording:
  """MuJoCo C at the true parameters: `mj_forward` at each stamp k·PERIOD up to `duration_s`,
  the gyro and accelerometer there plus N(0, σ²) noise from NumPy.

  The model is the manifest's MJCF compiled by MuJoCo with the true values written into the
  fields `tune` fits (`dof_damping`, `jnt_stiffness`, `body_mass`; the body inertia stays the
  compiled one, as a fitted `body:NAME.mass` leaves it)."""
  m = mujoco.MjModel.from_xml_string(MODEL.format(dt=DT, **START))
  m.dof_damping[0] = TRUTH['damping']
  m.jnt_stiffness[1] = TRUTH['stiffness']
  m.body_mass[m.body('lower').id] = TRUTH['mass']
  d = mujoco.MjData(m)
  d.qpos[:] = Q0
  ticks, gyro, accel = c_imu_samples(m, d, every=int(round(PERIOD / DT)),
                                     n_ticks=int(round(duration_s / DT)))
  z = np.random.default_rng(seed).standard_normal((len(ticks), 2, 3))   # per stamp: gyro, accel
  t = ticks * DT
  return imu_recording(gyro + GYRO_SIGMA * z[:, 0], accel + ACCEL_SIGMA * z[:, 1], t, t,
                       {'qpos': np.asarray(Q0), 'qvel': np.zeros(2)})


@pytest.fixture(scope='module')
def problem(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('tune_c')
  start = START   # the tune file's init repeats the manifest's values
  (tmp / 'model.xml').write_text(MODEL.format(dt=DT, **start))
  man = {'fibril_manifest': 1, 'model': 'model.xml', 'components': [
      {'id': 'imu', 'type': 'fibril_sim/imu',
       'config': {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel',
                  'period_s': PERIOD}}]}
  (tmp / 'm.yaml').write_text(yaml.safe_dump(man))
  recording.write_recording(tmp / 'train.npz', c_recording(1))
  recording.write_recording(tmp / 'heldout.npz', c_recording(2))
  spec = {
      'fibril_tune': 1, 'manifest': 'm.yaml', 'train': ['train.npz'],
      'heldout': ['heldout.npz'],
      'parameters': [
          {'mjcf': 'joint:shoulder.damping', 'bounds': [0.003, 0.3], 'log': True,
           'init': start['damping']},
          {'mjcf': 'joint:elbow.stiffness', 'bounds': [0.05, 5.0], 'log': True,
           'init': start['stiffness']},
          {'mjcf': 'body:lower.mass', 'bounds': [0.05, 2.0], 'log': True,
           'init': start['mass']}],
      'loss': [{'component': 'imu', 'field': 'angular_velocity', 'weight': 1 / GYRO_SIGMA},
               {'component': 'imu', 'field': 'linear_acceleration',
                'weight': 1 / ACCEL_SIGMA}],
      'optimizer': {'method': 'gauss_newton', 'iterations': 15, 'starts': 1, 'seed': 0}}
  (tmp / 'tune.yaml').write_text(yaml.safe_dump(spec))
  return tune.Problem.from_file(tmp / 'tune.yaml', progress=False)


@pytest.mark.parametrize('gradients', ['exact', 'fd'])
def test_tune_on_mujoco_c_recordings_reaches_the_noise_floor(problem, gradients):
  """Weights 1/σ: at the truth the weighted residuals are unit white noise, so the train loss
  is 1 within 3·√(2/N) (N residuals) and the held-out loss too; every parameter within its
  reported ± 2σ of the value MuJoCo C recorded with — through MJX's forward-mode Jacobians
  (`exact`) and through MuJoCo C rollouts with exact device derivatives (`fd`)."""
  if gradients == 'fd':
    problem = tune.RolloutProblem(problem.spec, progress=False)
  res = tune.tune(None, problem=problem)
  N = sum(problem.train.maps[w][t][2].astype(bool).sum()
          for w in range(len(problem.train.maps)) for t in problem.spec.loss)
  assert N > 400
  tol = 3 * math.sqrt(2 / N)
  assert abs(res.train_loss - 1) < tol, (res.train_loss, tol)
  assert abs(res.heldout_loss - 1) < 2 * tol, (res.heldout_loss, tol)
  truth = np.array([TRUTH['damping'], TRUTH['stiffness'], TRUTH['mass']])
  err = res.estimate - truth
  assert np.all(np.abs(err) <= 2 * res.sigma), (res.names, res.estimate, truth, res.sigma)
  assert np.all(res.sigma < 0.1 * truth), res.sigma    # the data does pin them down
