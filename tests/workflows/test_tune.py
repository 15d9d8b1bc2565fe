"""fibril_mjx.workflows.tune: forward-mode Jacobians through MJX's constraint solver vs central finite
differences (an active joint limit; contacts), the sensitivity check, rejection of a static
field, straight-through quantization, and recovery of known parameters from noisy recordings.

Tiny rigs, few ticks, few parameters. One compiled `Problem` per rig (module fixtures); every
evaluation of the pendulum uses two starts, the shape its fit compiles, so its programs are
compiled once for the whole file.
"""

from __future__ import annotations

import copy
import math

import jax
import mujoco
import numpy as np
import pytest
import yaml

import fibril_mjx
from fibril_mjx.io import recording
from fibril_mjx.mechanisms import signal
from fibril_mjx.workflows import tune
from fibril_mjx.errors import ConfigError, FibrilError

# A hanging arm with a joint limit at −25°. Released at rest from 45° (the recordings to
# fit) it swings freely for 0.44 s; thrown from −10° at −5 rad/s (the derivative check) it
# hits the limit after ~0.05 s (MJX's constraint solver active: a `lax.while_loop`).
PENDULUM = """\
<mujoco model="limit_pendulum">
  <option timestep="0.004" integrator="implicitfast"/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" range="-25 80" damping="0.02"
             armature="0.004"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.15" size="0.015" mass="0.5"
            contype="0" conaffinity="0"/>
      <site name="imu" pos="0 0 -0.12"/>
    </body>
  </worldbody>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""

# A ball resting on a floor, launched at 0.3 m/s: it slides for a few ticks, then rolls, in
# contact every tick (launched at 1 m/s the pyramidal soft contact kicks it off the floor:
# contact on/off events). The ball's friction is below the floor's, so the contact uses the
# floor's (MuJoCo takes the max).
BALL = """\
<mujoco model="sliding_ball">
  <option timestep="0.004"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" friction="0.6"/>
    <body name="ball" pos="0 0 0.05">
      <freejoint name="ball"/>
      <geom name="ball" type="sphere" size="0.05" mass="0.3" friction="0.3"/>
      <site name="imu"/>
    </body>
  </worldbody>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""

BALL_V0 = 0.3       # m/s
PERIOD = 0.008
# White noise of these densities: per-sample σ = N/√Δ (Δ = the 8 ms sample period).
GYRO_N, ACCEL_N = 2e-4, 2e-3
GYRO_SIGMA, ACCEL_SIGMA = GYRO_N / math.sqrt(PERIOD), ACCEL_N / math.sqrt(PERIOD)
NOISE = {'angular_velocity_noise_density': [GYRO_N] * 3,
         'linear_acceleration_noise_density': [ACCEL_N] * 3}
TRUTH = {'damping': 0.02, 'armature': 0.004, 'bias_y': -0.02}
Q0_DEG = 45.0
THROW_DEG, THROW_RAD_S = -10.0, -5.0
DURATION_S = 0.44


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
                          'value': [0.0, TRUTH['bias_y'], 0.0]}]}


@pytest.fixture(scope='module')
def pendulum(tmp_path_factory):
  """The pendulum unit recorded twice (noise on, one batched run: train and held-out), its
  tune problem started 30 % off (damping +30 %, armature −30 %, bias 0), and `limit.npz`:
  the thrown arm on the same sample grid (values unused: it is for derivatives).

  The recordings' physics is MuJoCo C (float64, `physics='c'`), outside the MJX model the fit
  differentiates (float32; the two agree far below the sensor noise), and it compiles no MJX
  program of its own."""
  tmp = tmp_path_factory.mktemp('pend')
  man = _manifest(tmp, 'pend', PENDULUM, NOISE)
  train, heldout = tune.simulate_recordings(man, overrides=_pendulum_truth(), seed=1,
                                            duration_s=DURATION_S,
                                            qpos0=[math.radians(Q0_DEG)], worlds=(0, 1),
                                            physics='c')
  recording.write_recording(tmp / 'train.npz', train)
  recording.write_recording(tmp / 'heldout.npz', heldout)
  thrown = recording.Recording(
      {'imu': {k: (np.zeros_like(v) if k in ('angular_velocity', 'linear_acceleration') else v)
               for k, v in train.sensors['imu'].items()}},
      initial={'qpos': np.array([math.radians(THROW_DEG)]), 'qvel': np.array([THROW_RAD_S])})
  recording.write_recording(tmp / 'limit.npz', thrown)
  spec = {
      'fibril_tune': 1, 'manifest': 'pend.yaml', 'train': ['train.npz'],
      'heldout': ['heldout.npz'],
      'parameters': [
          {'mjcf': 'joint:hinge.damping', 'bounds': [0.002, 0.2], 'log': True,
           'init': TRUTH['damping'] * 1.3},
          {'mjcf': 'joint:hinge.armature', 'bounds': [0.0005, 0.05], 'log': True,
           'init': TRUTH['armature'] * 0.7},
          {'component': 'imu', 'field': 'angular_velocity_bias', 'index': 1,
           'bounds': [-0.1, 0.1], 'init': 0.0}],
      # weights 1/σ: the true model's weighted residuals are unit white noise
      'loss': [{'component': 'imu', 'field': 'angular_velocity', 'weight': 1 / GYRO_SIGMA},
               {'component': 'imu', 'field': 'linear_acceleration',
                'weight': 1 / ACCEL_SIGMA}],
      'optimizer': {'method': 'gauss_newton', 'iterations': 12, 'starts': 2, 'seed': 0}}
  path = tmp / 'tune.yaml'
  path.write_text(yaml.safe_dump(spec))
  prob = tune.Problem.from_file(path, progress=False)
  return tmp, path, prob


def _settled_ball():
  """The ball at rest on the floor (MuJoCo C, 1 s), penetration settled."""
  m = mujoco.MjModel.from_xml_string(BALL)
  d = mujoco.MjData(m)
  for _ in range(250):
    mujoco.mj_step(m, d)
  return np.array(d.qpos, np.float64)


@pytest.fixture(scope='module')
def ball(tmp_path_factory):
  """The ball's tune problem: friction, mass, damping and a gyro bias the accelerometer-only
  loss cannot see. The recorded values do not enter a derivative, so the recording is a
  sample grid of zeros (no simulation to compile)."""
  tmp = tmp_path_factory.mktemp('ball')
  _manifest(tmp, 'ball', BALL, {})
  t = np.arange(26) * PERIOD               # 0.2 s
  rec = recording.Recording(
      {'imu': {'linear_acceleration': np.zeros((t.size, 3)),
               'angular_velocity': np.zeros((t.size, 3)),
               'sample_time_s': t, 'arrival_time_s': t}},
      initial={'qpos': _settled_ball(), 'qvel': np.array([BALL_V0, 0, 0, 0, 0, 0])})
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


def _fd_check(prob, u0, cols, rows, *, starts, ds=None, h=3e-3, rtol=0.03):
  """Forward-mode Jacobian vs central differences of the residuals `rows`.

  `h` is small because a constraint's onset is a per-tick event: a large step moves it to
  another tick and the difference quotient jumps (the derivative itself is exact).
  """
  ds = prob.train if ds is None else ds
  U = np.tile(u0, (starts, 1))
  _, _, J = prob.evaluate(U, ds, jacobian=True)
  J = J[0][rows]
  for p in cols:
    up, um = u0.copy(), u0.copy()
    up[p] += h
    um[p] -= h
    if starts == 2:
      r2 = prob.evaluate(np.stack([up, um]), ds)[0]
      rp, rm = r2[0], r2[1]
    else:
      rp = prob.evaluate(up[None], ds)[0][0]
      rm = prob.evaluate(um[None], ds)[0][0]
    fd = (rp[rows] - rm[rows]) / (2 * h)
    assert np.linalg.norm(fd) > 0, prob.params[p].name
    err = np.linalg.norm(J[:, p] - fd) / np.linalg.norm(fd)
    assert err < rtol, (prob.params[p].name, err)
  return J


def test_jacobian_matches_fd_through_joint_limit(pendulum):
  """Through the constraint solver (joint limit active), forward mode = finite differences.

  The thrown arm's recording has the training grid, so the fit's compiled programs serve.
  """
  tmp, _, prob = pendulum
  u0 = prob.u0()
  # the limit engages (MuJoCo C, same model, start values)
  m = copy.copy(prob.sim.mj_model)
  m.dof_damping[0], m.dof_armature[0] = prob.natural(u0)[:2]
  d = mujoco.MjData(m)
  d.qpos[0], d.qvel[0] = math.radians(THROW_DEG), THROW_RAD_S
  active = []
  for _ in range(prob.L):
    mujoco.mj_step(m, d)
    active.append(bool(np.any(d.efc_type[:d.nefc] == mujoco.mjtConstraint.mjCNSTR_LIMIT_JOINT)))
  assert not active[0] and sum(active) > 10, 'the limit must engage'
  ds = prob.dataset([str(tmp / 'limit.npz')])
  r = prob.evaluate(np.tile(u0, (2, 1)), ds)[0]
  _fd_check(prob, u0, cols=[0, 1, 2], rows=np.arange(r.shape[1]), starts=2, ds=ds)


def test_jacobian_matches_fd_with_contacts_and_flags_unidentifiable(ball):
  """Through contacts (sliding, then rolling), forward mode = finite differences; a
  parameter the loss cannot see is reported by name."""
  _, _, prob = ball
  # in contact every tick, sliding at first (MuJoCo C, same model and initial state)
  m = prob.sim.mj_model
  d = mujoco.MjData(m)
  d.qpos[:], d.qvel[0] = _settled_ball(), BALL_V0
  ncon, slip = [], []
  for _ in range(prob.L):
    mujoco.mj_step(m, d)
    ncon.append(d.ncon)
    slip.append(d.qvel[0] - 0.05 * d.qvel[4])
  assert min(ncon) > 0 and slip[0] > 0.1, (ncon, slip[:3])
  u0 = prob.u0()
  r = prob.evaluate(u0[None], prob.train)[0][0]
  J = _fd_check(prob, u0, cols=[0, 1, 2], rows=np.arange(r.size), starts=1, rtol=0.05)
  assert np.all(J[:, 3] == 0)
  with pytest.raises(FibrilError,
                     match=r'unidentifiable parameter\(s\) imu\.angular_velocity_bias\[1\]: '):
    tune.tune(None, problem=prob)


def test_recovers_known_parameters_from_noisy_recordings(pendulum, tmp_path):
  """Fit from 30 % off, recordings with white sensor noise on.

  The tolerance the noise implies: with weights 1/σ the true model's weighted residuals are
  unit white noise, so the estimate's covariance is (JᵀJ)⁻¹ (J: the weighted Jacobian at the
  optimum; here about 0.1 % of damping and armature and 6e-4 rad/s on the bias, which
  trades off against damping). Asserted: every error within 3 of those σ; the reported ± (2σ,
  from the residuals) covers the truth and agrees with the noise-implied σ within 30 %; the
  train loss ≈ 1 (the residuals are the noise: |loss − 1| < 3·√(2/N), N residuals) and the
  held-out loss ≈ the train loss (ratio within 1 ± 3·√(4/N)).
  """
  _, _, prob = pendulum
  res = tune.tune(None, problem=prob)
  truth = np.array([TRUTH['damping'], TRUTH['armature'], TRUTH['bias_y']])
  err = res.estimate - truth
  ub = np.array([p.to_u(x) for p, x in zip(prob.params, res.estimate)])
  _, _, J = prob.evaluate(np.stack([ub, ub]), prob.train, jacobian=True)
  sig_u = np.sqrt(np.diag(np.linalg.inv(J[0].T @ J[0])))
  logm = np.array([p.log for p in prob.params])
  sigma_noise = np.where(logm, res.estimate * sig_u, sig_u)
  assert np.all(sigma_noise[:2] < 0.01 * truth[:2]) and sigma_noise[2] < 2e-3, sigma_noise
  assert np.all(np.abs(err) <= 3 * sigma_noise), (res.names, err, sigma_noise)
  assert np.all(np.abs(err) <= 2 * res.sigma), (res.names, err, res.sigma)
  np.testing.assert_allclose(res.sigma, sigma_noise, rtol=0.3)
  N = sum(prob.train.maps[w][t][2].astype(bool).sum() for w in range(len(prob.train.maps))
          for t in prob.spec.loss)
  assert abs(res.train_loss - 1) < 3 * math.sqrt(2 / N), res.train_loss
  assert abs(res.heldout_loss / res.train_loss - 1) < 3 * math.sqrt(4 / N), (res.heldout_loss,
                                                                           res.train_loss)
  assert res.loss_curve[0, 0] > 10 * res.train_loss
  for k, v in res.train_rms_after.items():
    assert np.all(np.asarray(v) <= np.asarray(res.train_rms_before[k])), k
  # outputs: an overlay a manifest accepts, the report, the plots
  out = tune.write_outputs(res, tmp_path / 'out')
  for f in ('overlay.yaml', 'report.txt', 'report.json', 'loss_curve.png',
            'heldout_traces.png'):
    assert (out / f).is_file(), f
  ov = yaml.safe_load((out / 'overlay.yaml').read_text())
  assert ov['fibril_overlay'] == 1 and ov['provenance']['train_loss'] == res.train_loss
  sim = fibril_mjx.load(prob.spec.manifest, overrides={'mjcf': ov['mjcf'],
                                                       'components': ov['components']})
  np.testing.assert_allclose(float(sim.mj_model.dof_damping[0]), res.estimate[0], rtol=1e-6)
  np.testing.assert_allclose(float(sim.mj_model.dof_armature[0]), res.estimate[1], rtol=1e-6)
  bias = sim.components['imu'].get_param(sim.default_params()['imu'], 'angular_velocity_bias')
  np.testing.assert_allclose(np.asarray(bias)[1], res.estimate[2], rtol=1e-6)
  assert 'joint:hinge.damping' in (out / 'report.txt').read_text()


def test_static_field_is_rejected_with_reason(pendulum):
  _, path, _ = pendulum
  raw = yaml.safe_load(path.read_text())
  raw['parameters'].append({'component': 'imu', 'field': 'period_s', 'bounds': [0.001, 0.1]})
  with pytest.raises(ConfigError, match=r'parameters\[3\]\.field.*static field \(timing'):
    tune.Problem(tune.tune_spec_from_dict(raw, path), progress=False)


def test_missing_loss_field_names_file_and_key(pendulum):
  _, path, _ = pendulum
  raw = yaml.safe_load(path.read_text())
  raw['loss'] = [{'component': 'imu', 'field': 'magnetic_field'}]
  with pytest.raises(ConfigError, match=r'train\.npz: sensor/imu/magnetic_field: missing'):
    tune.Problem(tune.tune_spec_from_dict(raw, path), progress=False)


def test_straight_through_quantize_and_saturate():
  """Exact derivatives outside the switch (0: rounding and clipping are flat); inside it the
  same forward values with derivative 1 — also for a function jitted inside."""
  f = lambda x: signal.quantize(x, 0.1) + signal.saturate(3 * x, 0.5)[0]
  assert jax.grad(f)(0.33) == 0.0
  with signal.straight_through():
    g = jax.grad(f)(0.33)
    gj = jax.jit(jax.grad(f))(0.33)
    v = f(0.33)
  assert g == pytest.approx(4.0) and gj == pytest.approx(4.0)
  assert v == pytest.approx(0.3 + 0.5)
  assert not signal.straight_through_active()
  assert jax.grad(f)(0.33) == 0.0


def test_tune_file_rules_beyond_its_model(tmp_path):
  """What `fibril_mjx.config.tune.TuneModel` leaves to the reader: a file that is no mapping,
  a bag's topics (parsed as `--topics` is), a tune file that is not there; the model's own
  rules are in tests/config/test_file_formats.py."""
  path = tmp_path / 'tune.yaml'
  with pytest.raises(FibrilError, match=r'tune\.yaml: a tune file is a mapping$'):
    tune.tune_spec_from_dict([1], path)
  raw = {'fibril_tune': 1, 'manifest': 'm.yaml', 'train': [{'bag': 'b', 'topics': 'imu'}],
         'parameters': [{'component': 'imu', 'field': 'f', 'bounds': [0, 1]}],
         'loss': [{'component': 'imu', 'field': 'f'}]}
  with pytest.raises(ConfigError, match=r"tune\.yaml: train\[0\]\.topics = 'imu': expected "
                     r'ID=TOPIC\[,ID=TOPIC\]'):
    tune.tune_spec_from_dict(raw, path)
  raw['train'] = ['train.npz']
  spec = tune.tune_spec_from_dict(raw, path)
  assert spec.train == [str(tmp_path / 'train.npz')] and spec.method == 'gauss_newton'
  with pytest.raises(FibrilError, match=r'nope\.yaml: tune file not found'):
    tune.read_tune_file(tmp_path / 'nope.yaml')
