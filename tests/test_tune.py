"""fibril_mjx.tune: forward-mode Jacobians through MJX's constraint solver vs finite
differences (joint limits, contacts), sensitivity check, static-field rejection,
straight-through quantization, and recovery of known parameters from noisy recordings.

Tiny rigs (one pendulum with an active joint limit; a ball sliding on a floor), few ticks,
one compiled Problem per rig (module fixtures)."""

from __future__ import annotations

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

import fibril_mjx
from fibril_mjx import recording, signal, tune
from fibril_mjx.errors import ConfigError, FibrilError

PENDULUM = """\
<mujoco model="limit_pendulum">
  <option timestep="0.004" integrator="implicitfast"/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" range="-40 40" damping="0.05" armature="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5" contype="0" conaffinity="0"/>
      <site name="imu" pos="0.25 0 0"/>
    </body>
  </worldbody>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""

BALL = """\
<mujoco model="sliding_ball">
  <option timestep="0.004"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" friction="0.6"/>
    <body name="ball" pos="0 0 0.05">
      <freejoint name="ball"/>
      <geom name="ball" type="sphere" size="0.05" mass="0.3"/>
      <site name="imu"/>
    </body>
  </worldbody>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""

PERIOD = 0.008
# white noise of these densities: σ = N/√Δ = 2.2e-3 rad/s and 0.022 m/s² per sample
NOISE = {'angular_velocity_noise_density': [2e-4] * 3,
         'linear_acceleration_noise_density': [2e-3] * 3}
TRUTH = {'damping': 0.08, 'armature': 0.012, 'bias': [0.01, -0.02, 0.015]}


def _manifest(tmp, name, xml, config):
  (tmp / f'{name}.xml').write_text(xml)
  m = {'fibril_manifest': 1, 'model': f'{name}.xml', 'components': [
      {'id': 'imu', 'type': 'fibril_sim/imu',
       'config': {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel',
                  'period_s': PERIOD, **config}}]}
  p = tmp / f'{name}.yaml'
  p.write_text(yaml.safe_dump(m))
  return p


def _pendulum_truth():
  return {'mjcf': [{'element': 'joint', 'name': 'hinge', 'attribute': 'damping',
                    'value': TRUTH['damping']},
                   {'element': 'joint', 'name': 'hinge', 'attribute': 'armature',
                    'value': TRUTH['armature']}],
          'components': [{'component': 'imu', 'field': 'angular_velocity_bias',
                          'value': TRUTH['bias']}]}


@pytest.fixture(scope='module')
def pendulum(tmp_path_factory):
  """Pendulum released at 80° from a 40° limit: it hits the limit (constraint solver active)."""
  tmp = tmp_path_factory.mktemp('pend')
  man = _manifest(tmp, 'pend', PENDULUM, {**NOISE, 'angular_velocity_resolution': 1e-3})
  q0 = [np.deg2rad(35.0)]
  for name, seed in (('train', 1), ('heldout', 2)):
    rec = tune.simulate_recording(man, overrides=_pendulum_truth(), seed=seed, duration_s=1.2,
                                  qpos0=q0)
    recording.write_recording(tmp / f'{name}.npz', rec)
  start = 1.3   # 30 % off
  spec = {
      'fibril_tune': 1, 'manifest': 'pend.yaml', 'train': ['train.npz'],
      'heldout': ['heldout.npz'],
      'parameters': [
          {'mjcf': 'joint:hinge.damping', 'bounds': [0.005, 1.0], 'log': True,
           'init': TRUTH['damping'] * start},
          {'mjcf': 'joint:hinge.armature', 'bounds': [0.001, 0.1], 'log': True,
           'init': TRUTH['armature'] * start},
          {'component': 'imu', 'field': 'angular_velocity_bias', 'bounds': [-0.1, 0.1],
           'init': 0.0}],
      'loss': [{'component': 'imu', 'field': 'angular_velocity', 'weight': 1 / 2.2e-3},
               {'component': 'imu', 'field': 'linear_acceleration', 'weight': 1 / 0.022}],
      'windows': {'length_s': 0.6},
      'optimizer': {'method': 'gauss_newton', 'iterations': 15, 'starts': 3, 'seed': 0}}
  path = tmp / 'tune.yaml'
  path.write_text(yaml.safe_dump(spec))
  prob = tune.Problem.from_file(path, progress=False)
  return tmp, path, prob


@pytest.fixture(scope='module')
def ball(tmp_path_factory):
  """A ball launched sideways on a floor: sliding then rolling (contacts in every tick)."""
  tmp = tmp_path_factory.mktemp('ball')
  man = _manifest(tmp, 'ball', BALL, {})
  rec = tune.simulate_recording(man, seed=0, duration_s=0.4)
  # launch it: initial velocity 1 m/s along x
  q0 = np.asarray(fibril_mjx.load(man)._data0.qpos, np.float64)
  rec.initial = {'qpos': q0, 'qvel': np.array([1.0, 0, 0, 0, 0, 0])}
  recording.write_recording(tmp / 'ball.npz', rec)
  spec = {
      'fibril_tune': 1, 'manifest': 'ball.yaml', 'train': ['ball.npz'],
      'parameters': [
          {'mjcf': 'geom:floor.friction', 'bounds': [0.05, 2.0], 'log': True},
          {'mjcf': 'body:ball.mass', 'bounds': [0.05, 2.0], 'log': True},
          {'mjcf': 'joint:ball.damping', 'bounds': [0.0001, 1.0], 'log': True, 'init': 0.01},
          # the loss below sees only the accelerometer: this one is invisible
          {'component': 'imu', 'field': 'angular_velocity_bias', 'index': 1,
           'bounds': [-0.1, 0.1], 'init': 0.0}],
      'loss': [{'component': 'imu', 'field': 'linear_acceleration'}]}
  path = tmp / 'tune.yaml'
  path.write_text(yaml.safe_dump(spec))
  return tmp, path, tune.Problem.from_file(path, progress=False)


def _fd_check(prob, cols, h=2e-2, rtol=0.05):
  """Central differences of the (single-shooting) residuals vs the forward-mode Jacobian."""
  u0 = prob.u0()
  r, _, J = prob.evaluate(u0[None], prob.train, jacobian=True)
  J = J[0]
  for p in cols:
    up, um = u0.copy(), u0.copy()
    up[p] += h
    um[p] -= h
    rp, _, _ = prob.evaluate(up[None], prob.train)
    rm, _, _ = prob.evaluate(um[None], prob.train)
    fd = (rp[0] - rm[0]) / (2 * h)
    err = np.linalg.norm(J[:, p] - fd) / max(np.linalg.norm(fd), 1e-12)
    assert np.linalg.norm(fd) > 0, prob.params[p].name
    assert err < rtol, (prob.params[p].name, err)
  return J


def test_jacobian_matches_fd_with_joint_limit(pendulum):
  _, _, prob = pendulum
  # one window covering everything would be exact; with 0.6 s windows the Jacobian of each
  # window starts from the simulated state, so compare in a one-window copy
  # and without output resolution: finite differences of a rounded output are steps (the
  # straight-through derivative is what the fit uses, by design)
  tmp, _, _ = pendulum
  man = _manifest(tmp, 'pend_fd', PENDULUM, NOISE)
  prob1 = tune.Problem(tune.dataclasses.replace(prob.spec, window_s=None, manifest=str(man)),
                       progress=False)
  sim = prob1.sim
  assert np.any(np.asarray(sim.mj_model.jnt_limited))
  _fd_check(prob1, cols=[0, 1, 2])


def test_jacobian_matches_fd_with_contacts_and_flags_unidentifiable(ball):
  _, _, prob = ball
  J = _fd_check(prob, cols=[0, 1, 2], h=3e-2, rtol=0.1)
  assert np.all(J[:, 3] == 0)
  with pytest.raises(FibrilError, match=r'unidentifiable parameter\(s\) imu.angular_velocity_bias\[1\]'):
    tune.tune(None, problem=prob)


def test_recovers_known_parameters_from_noisy_recordings(pendulum, tmp_path):
  _, _, prob = pendulum
  res = tune.tune(None, problem=prob)
  truth = np.array([TRUTH['damping'], TRUTH['armature'], *TRUTH['bias']])
  err = np.abs(res.estimate - truth)
  # the tolerance the noise implies is the Gauss–Newton σ (white noise σ_w per sample,
  # N samples: σ_p ≈ σ_w / (√N·|∂y/∂p|)); the reported ± (2σ) must cover the truth
  assert np.all(err <= 2 * res.sigma + 1e-6), (res.names, err, res.sigma)
  # and that tolerance is tight: a few % of the physical values, < 2 mrad/s on the biases
  assert np.all(2 * res.sigma[:2] < 0.08 * truth[:2]), res.sigma
  assert np.all(2 * res.sigma[2:] < 2e-3), res.sigma
  assert res.train_loss < 0.5 * res.loss_curve[0, 0]
  assert 0.5 < res.heldout_loss / res.train_loss < 2.0
  for k, v in res.train_rms_after.items():
    assert np.all(np.asarray(v) <= np.asarray(res.train_rms_before[k]) + 1e-9), k
  # outputs: overlay that a manifest accepts, report, plots
  out = tune.write_outputs(res, tmp_path / 'out')
  for f in ('overlay.yaml', 'report.txt', 'report.json', 'loss_curve.png',
            'heldout_traces.png'):
    assert (out / f).is_file(), f
  ov = yaml.safe_load((out / 'overlay.yaml').read_text())
  assert ov['fibril_overlay'] == 1 and ov['provenance']['train_loss'] == res.train_loss
  sim = fibril_mjx.load(prob.spec.manifest, overrides={'mjcf': ov['mjcf'],
                                                       'components': ov['components']})
  assert abs(float(sim.mj_model.dof_damping[0]) - res.estimate[0]) < 1e-6 * res.estimate[0]
  bias = sim.components['imu'].get_param(sim.default_params(), 'angular_velocity_bias')
  np.testing.assert_allclose(np.asarray(bias), res.estimate[2:], rtol=1e-6)
  assert 'joint:hinge.damping' in (out / 'report.txt').read_text()


def test_static_field_is_rejected_with_reason(pendulum):
  tmp, path, _ = pendulum
  raw = yaml.safe_load(path.read_text())
  raw['parameters'].append({'component': 'imu', 'field': 'latency_s', 'bounds': [0, 0.1]})
  with pytest.raises(ConfigError, match=r'static field \(timing'):
    tune.Problem(tune.tune_spec_from_dict(raw, path), progress=False)


def test_missing_loss_field_names_file_and_key(pendulum):
  tmp, path, _ = pendulum
  raw = yaml.safe_load(path.read_text())
  raw['loss'] = [{'component': 'imu', 'field': 'magnetic_field'}]
  with pytest.raises(ConfigError, match=r'train.npz: sensor/imu/magnetic_field: missing'):
    tune.Problem(tune.tune_spec_from_dict(raw, path), progress=False)


def test_straight_through_quantize_and_saturate():
  f = lambda x: signal.quantize(x, 0.1) + signal.saturate(3 * x, 0.5)[0]
  assert jax.grad(f)(0.33) == 0.0            # exact: rounding and clipping flat here
  with signal.straight_through():
    g = jax.grad(f)(0.33)
    v = f(0.33)
  assert g == pytest.approx(4.0)
  assert v == pytest.approx(0.3 + 0.5)       # same forward values
  assert not signal.straight_through_active()
