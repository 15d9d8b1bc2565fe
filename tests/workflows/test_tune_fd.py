"""`tune` with `gradients: fd` (MuJoCo C rollouts, exact device derivatives) on recordings the
project did not make: MuJoCo C with `mj_forward` at each stamp, the sensor model in NumPy here.

- the Jacobian against central differences of this file's own MuJoCo C loop (physics) and the
  closed form of a bias column (device);
- a fitted latency, host-stamped log: the search lands on the true tick (and needs the
  delivery timing to get there: the values tie over an output period);
- a fleet fitted in one batch against the same units fitted one by one;
- the dcmotor whose voltage saturates: resistance and motor constant flagged, their ratio
  reported with a ± that covers the truth;
- the rules a latency parameter obeys, each by its message; no retrace on a second fit.
"""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np
import pytest
import yaml

from fibril_mjx.errors import ConfigError
from fibril_mjx.io import recording
from fibril_mjx.workflows import tune
from fibril_mjx.workflows.tune import lsq, rollouts, timing
from ref_helpers import c_imu_samples, imu_recording

DT, PERIOD, DURATION_S = 0.004, 0.008, 0.8
GYRO_SIGMA, ACCEL_SIGMA = 2e-3, 2e-2
START_DAMPING = 0.06

PENDULUM = """\
<mujoco model="pendulum">
  <option timestep="{dt}" integrator="implicitfast"/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="swing" type="hinge" axis="0 1 0" damping="{damping}" armature="0.002"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.015" mass="0.4" contype="0"
            conaffinity="0"/>
      <site name="imu" pos="0.01 0 -0.18"/>
    </body>
  </worldbody>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""
Q0 = 1.0


def c_samples(damping: float, *, model=PENDULUM, q0=Q0, dt=DT, period=PERIOD,
              duration=DURATION_S, ctrl=None):
  """MuJoCo C at `damping`: `(acquisition ticks, gyro (S, 3), accel (S, 3))`, `mj_forward` at
  each stamp (every `period`), no noise."""
  m = mujoco.MjModel.from_xml_string(model.format(dt=dt, damping=START_DAMPING))
  m.dof_damping[0] = damping
  d = mujoco.MjData(m)
  d.qpos[0] = q0
  return c_imu_samples(m, d, every=int(round(period / dt)), n_ticks=int(round(duration / dt)),
                       ctrl=ctrl)


def c_recording(damping, bias, seed, *, latency_ticks=0, host_stamped=False):
  """A recording of the unit `(damping, gyro bias)`: NumPy noise on MuJoCo C's sensors; each
  sample arrives `latency_ticks` after its acquisition (kept if it arrives in the log), and a
  host-stamped log knows only the arrival."""
  ticks, gyro, accel = c_samples(damping)
  rng = np.random.default_rng(seed)
  gyro = gyro + np.asarray(bias) + GYRO_SIGMA * rng.standard_normal(gyro.shape)
  accel = accel + ACCEL_SIGMA * rng.standard_normal(accel.shape)
  arrive = ticks + latency_ticks
  keep = arrive <= int(round(DURATION_S / DT))
  t_arr = arrive[keep] * DT
  t_acq = t_arr if host_stamped else ticks[keep] * DT
  return imu_recording(gyro[keep], accel[keep], t_acq, t_arr,
                       {'qpos': np.array([Q0]), 'qvel': np.zeros(1)})


def write_problem(tmp, recs, *, latency=None, time='sample', gradients='fd', extra=(),
                  iterations=15):
  (tmp / 'pendulum.xml').write_text(PENDULUM.format(dt=DT, damping=START_DAMPING))
  config = {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel', 'period_s': PERIOD}
  man = {'fibril_manifest': 1, 'model': 'pendulum.xml',
         'components': [{'id': 'imu', 'type': 'fibril_sim/imu', 'config': config}]}
  (tmp / 'm.yaml').write_text(yaml.safe_dump(man))
  names = []
  for i, rec in enumerate(recs):
    recording.write_recording(tmp / f'rec_{i}.npz', rec)
    names.append(f'rec_{i}.npz')
  params = [{'mjcf': 'joint:swing.damping', 'bounds': [0.005, 0.5], 'log': True,
             'init': START_DAMPING},
            {'component': 'imu', 'field': 'angular_velocity_bias', 'bounds': [-0.1, 0.1],
             'init': 0.0}, *extra]
  if latency is not None:
    params.append(latency)
  spec = {'fibril_tune': 1, 'manifest': 'm.yaml', 'train': names, 'parameters': params,
          'loss': [{'component': 'imu', 'field': 'angular_velocity', 'weight': 1 / GYRO_SIGMA,
                    'time': time},
                   {'component': 'imu', 'field': 'linear_acceleration',
                    'weight': 1 / ACCEL_SIGMA, 'time': time}],
          'optimizer': {'method': 'gauss_newton', 'iterations': iterations,
                        'gradients': gradients}}
  (tmp / 'tune.yaml').write_text(yaml.safe_dump(spec))
  return tmp / 'tune.yaml'


TRUTH = (0.045, (0.004, -0.003, 0.002))
CHI2_999 = {4: 18.47, 5: 20.52}   # 99.9 % quantiles of χ² with P degrees of freedom


def distance2(est, sigma, corr, truth) -> float:
  """Squared Mahalanobis distance of the truth from the estimate under the fit's covariance
  (χ² with P degrees of freedom when the ± is right)."""
  z = (np.asarray(est) - truth) / sigma
  return float(z @ np.linalg.solve(corr, z))


@pytest.fixture(scope='module')
def problem(tmp_path_factory):
  path = write_problem(tmp_path_factory.mktemp('tune_fd'), [c_recording(*TRUTH, seed=1)])
  return tune.make_problem(tune.read_tune_file(path), progress=False)


def test_auto_picks_rollouts_on_this_cpu(problem):
  spec = dataclasses.replace(problem.spec, gradients='auto')
  prob = tune.make_problem(spec, progress=False)
  assert isinstance(prob, tune.RolloutProblem)
  assert prob.gradients_why.startswith('auto: open loop on a CPU host')


def test_jacobian_against_mujoco_c_differences_and_the_bias_closed_form(problem):
  """Column 0 (log damping) against central differences of this file's MuJoCo C loop; the
  bias columns are the weight on their own axis of the gyro term, 0 elsewhere."""
  u = problem.u0()
  r, _, J = problem.evaluate(u[None], problem.train, jacobian=True)
  J = J[0]
  h = 1e-4
  _, g_hi, a_hi = c_samples(START_DAMPING * math.exp(h))
  _, g_lo, a_lo = c_samples(START_DAMPING * math.exp(-h))
  ref, bias_ref = [], {k: [] for k in range(3)}
  deriv = {'angular_velocity': (g_hi - g_lo) / (2 * h),
           'linear_acceleration': (a_hi - a_lo) / (2 * h)}
  for t in problem.spec.loss:
    idx, y, w, ts = problem.train.maps[0][t]
    k = np.rint(np.nan_to_num(ts, nan=0.0) / PERIOD).astype(int)   # sample index at its stamp
    ref.append(deriv[t.field][k] * w)
    for ax in range(3):
      col = np.zeros_like(w)
      if t.field == 'angular_velocity':
        col[:, ax] = w[:, ax]
      bias_ref[ax].append(col)
  ref = np.concatenate([x.reshape(-1) for x in ref])
  assert np.count_nonzero(ref) > 100
  np.testing.assert_allclose(J[:, 0], ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())
  for ax in range(3):
    np.testing.assert_allclose(J[:, 1 + ax],
                               np.concatenate([x.reshape(-1) for x in bias_ref[ax]]),
                               rtol=1e-5, atol=1e-3)


def test_fit_reaches_the_noise_floor_and_covers_the_truth(problem):
  """Weights 1/σ: the train loss is 1 within 3·√(2/N); the truth lies within the fit's
  covariance (χ², 99.9 %: this recording's z noise alone averages −3.2 σ of the mean, so a
  per-parameter 2σ test would fail on a correct fit); the bias on the axis the pendulum does
  not turn about is the recorded mean exactly (its model value is 0)."""
  res = tune.tune(None, problem=problem)
  N = problem.n_residuals(problem.train)
  assert abs(res.train_loss - 1) < 3 * math.sqrt(2 / N), res.train_loss
  truth = np.array([TRUTH[0], *TRUTH[1]])
  assert distance2(res.estimate, res.sigma, res.correlation, truth) < CHI2_999[4]
  _, y, w, _ = problem.train.maps[0][problem.spec.loss[0]]     # the samples in the loss
  assert res.estimate[3] == pytest.approx(float(np.mean(y[w[:, 2] != 0, 2])), abs=2e-6)
  assert res.sigma[0] < 0.05 * TRUTH[0]


def test_rollouts_are_reused_only_for_the_same_recording(problem):
  """A Jacobian reuses the rollouts of the residuals just before it, but another data set's
  recording 0 (here released from another angle) is not the training one."""
  other = c_recording(*TRUTH, seed=2)
  other.initial['qpos'] = np.array([0.5])
  recording.write_recording(problem.spec.path.rsplit('/', 1)[0] + '/other.npz', other)
  ds = problem.dataset([problem.spec.path.rsplit('/', 1)[0] + '/other.npz'])
  U = problem.u0()[None]
  problem.evaluate(U, problem.train)
  r_after_train, _, _ = problem.evaluate(U, ds)
  problem._last = {}
  r_fresh, _, _ = problem.evaluate(U, ds)
  r_train, _, _ = problem.evaluate(U, problem.train)
  np.testing.assert_array_equal(r_after_train, r_fresh)
  assert np.abs(r_train - r_fresh).max() > 10


def test_second_fit_traces_nothing_new(problem):
  tune.tune(None, problem=problem)
  sizes = (problem._fields._cache_size(), problem._jacobian._cache_size())
  tune.tune(None, problem=problem)
  assert (problem._fields._cache_size(), problem._jacobian._cache_size()) == sizes == (1, 1)


def test_a_trial_step_carries_its_jacobian_where_the_threads_would_idle(problem, monkeypatch):
  """One start, one physical column: the trial world and its perturbed copy fill one round of
  two or more rollout threads, where apart they take two (`RolloutProblem.speculate`); the fit
  is bitwise the one that rolls the copy out after the step is accepted, in fewer rounds."""
  assert problem.speculate(1) and not problem.speculate(2)
  runner = problem.runner
  rounds = []

  def counted(models, state0, ctrl):
    rounds.append(-(-len(state0) // runner.threads))
    return runner(models, state0, ctrl)
  counted.threads = runner.threads
  monkeypatch.setattr(problem, 'runner', counted)
  problem._kept.clear()   # each fit from scratch (no frames kept from an earlier fit)
  ahead = tune.tune(None, problem=problem)
  n_ahead, rounds[:] = sum(rounds), []
  monkeypatch.setattr(tune.RolloutProblem, 'speculate', lambda self, rows: False)
  problem._kept.clear()
  apart = tune.tune(None, problem=problem)
  np.testing.assert_array_equal(ahead.estimate, apart.estimate)
  np.testing.assert_array_equal(ahead.sigma, apart.sigma)
  np.testing.assert_array_equal(ahead.loss_curve, apart.loss_curve)
  assert n_ahead < sum(rounds), (n_ahead, rounds)


def test_the_reports_before_and_after_roll_nothing_out_again(problem, monkeypatch):
  """The start and the optimum were rolled out during the fit: their frames are kept, so the
  report's before / after RMS on the training data costs no rollout; with only the last
  call's frames kept (the budget at 0) the start is rolled out again, and the optimum too
  where the fit's last call was a rejected trial step. Same report bitwise."""
  runner = problem.runner
  worlds = []

  def counted(models, state0, ctrl):
    worlds.append(len(state0))
    return runner(models, state0, ctrl)
  counted.threads = runner.threads
  monkeypatch.setattr(problem, 'runner', counted)
  problem._kept.clear()
  kept = tune.tune(None, problem=problem)
  n_kept, worlds[:] = sum(worlds), []
  monkeypatch.setattr(rollouts, 'KEPT_FRAME_BYTES', 0)
  problem._kept.clear()
  last = tune.tune(None, problem=problem)
  for a, b in ((kept.train_rms_before, last.train_rms_before),
               (kept.train_rms_after, last.train_rms_after),
               (kept.heldout_rms_after, last.heldout_rms_after)):
    assert a == b
  np.testing.assert_array_equal(kept.estimate, last.estimate)
  assert sum(worlds) - n_kept in (1, 2), (n_kept, worlds)   # the start (and the optimum)


LATENCY_TICKS = 5   # 20 ms; the IMU's output period is 2 ticks


def test_latency_search_finds_the_tick_by_its_deliveries(tmp_path):
  """Host-stamped log, latency 5 ticks: the held values tie over an output period below the
  truth (4 and 5 ticks give the same loss), the model's deliveries coincide with the recorded
  arrivals only at 5; the fit writes 0.02 s to the overlay and reports its evidence."""
  recs = [c_recording(*TRUTH, seed=3, latency_ticks=LATENCY_TICKS, host_stamped=True)]
  lat = {'component': 'imu', 'field': 'latency_s', 'bounds': [0.0, 0.04]}
  path = write_problem(tmp_path, recs, latency=lat, time='arrival')
  res = tune.tune(path, progress=False)
  found = res.timing[0]
  cand = np.round(np.asarray(found['candidates_s']) / DT).astype(int)
  assert list(cand) == list(range(11))
  assert found['best_s'] == pytest.approx(LATENCY_TICKS * DT)
  loss, hit = np.asarray(found['losses']), np.asarray(found['coincidence'])
  assert hit[LATENCY_TICKS] == 1.0 and hit[LATENCY_TICKS - 1] == 0.0
  assert loss[LATENCY_TICKS - 1] <= loss[LATENCY_TICKS] * (1 + timing.TIE)   # the tie
  assert loss[LATENCY_TICKS + 1] > 2 * loss[LATENCY_TICKS]
  truth = np.array([TRUTH[0], *TRUTH[1]])
  assert distance2(res.estimate, res.sigma, res.correlation, truth) < CHI2_999[4]
  out = tune.write_outputs(res, tmp_path / 'out')
  ov = yaml.safe_load((out / 'overlay.yaml').read_text())
  assert {'component': 'imu', 'field': 'latency_s', 'value': pytest.approx(0.02)} in \
      ov['components']
  text = (out / 'report.txt').read_text()
  assert 'imu.latency_s = 20 ms (5 ticks)' in text and 'gradients: MuJoCo C rollouts' in text


@pytest.mark.parametrize('change, line', [
    ({'time': 'sample'}, r"tune\.yaml: parameters\[2\]\.field = 'latency_s': a latency is "
     r"invisible to samples matched at their sample time: give the loss terms of 'imu' time: "
     r"arrival"),
    ({'gradients': 'exact'}, r"tune\.yaml: optimizer\.gradients = 'exact': a fitted latency "
     r"needs gradients fd \(MuJoCo C rollouts; the exact path compiles one latency in\)"),
    ({'bounds': [0.001, 0.003]}, r"tune\.yaml: parameters\[2\]\.bounds = \[0\.001, 0\.003\]: a "
     r"latency needs bounds >= 0 s spanning at least one whole tick \(dt = 0\.004 s\)"),
    ({'log': True, 'bounds': [0.004, 0.04]}, r"tune\.yaml: parameters\[2\]\.log = True: a latency is searched over "
     r"whole ticks, not in log"),
])
def test_latency_parameter_rules(tmp_path, change, line):
  lat = {'component': 'imu', 'field': 'latency_s', 'bounds': [0.0, 0.04]}
  kw = {'time': change.get('time', 'arrival'), 'gradients': change.get('gradients', 'fd')}
  lat.update({k: v for k, v in change.items() if k in ('bounds', 'log')})
  path = write_problem(tmp_path, [c_recording(*TRUTH, seed=1)], latency=lat, **kw)
  with pytest.raises(ConfigError, match=line):
    tune.make_problem(tune.read_tune_file(path), progress=False)


UNITS = [(0.03, (0.004, 0.0, -0.002)), (0.05, (-0.003, 0.002, 0.001)),
         (0.08, (0.001, -0.004, 0.003))]


def test_fleet_in_one_batch_equals_the_units_fitted_alone(tmp_path):
  recs = [c_recording(d, b, seed=10 + k) for k, (d, b) in enumerate(UNITS)]
  path = write_problem(tmp_path, recs)
  fleet = tune.tune_fleet(path, progress=False)
  truth = np.array([[d, *b] for d, b in UNITS])
  assert fleet.estimate.shape == truth.shape
  z = np.abs(fleet.estimate - truth) / fleet.sigma
  assert np.all(z < 3.5), z   # 12 estimates, P(any |z| > 3.5) < 0.6 %
  assert np.all(np.abs(fleet.losses - 1) < 3 * math.sqrt(2 / 600))
  out = tune.write_fleet(fleet, tmp_path / 'fleet')
  rows = (out / 'units.csv').read_text().splitlines()
  assert len(rows) == 1 + len(UNITS) and rows[0].startswith('unit,recording,loss,joint:swing')
  assert float(rows[2].split(',')[3]) == pytest.approx(fleet.estimate[1, 0], rel=1e-8)
  spec = tune.read_tune_file(path)
  for k in (0, 2):
    alone = tune.tune(dataclasses.replace(spec, train=[spec.train[k]]), progress=False)
    np.testing.assert_allclose(alone.estimate, fleet.estimate[k], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(alone.sigma, fleet.sigma[k], rtol=1e-3)


DCMOTOR = """\
<mujoco model="dcmotor_arm">
  <option timestep="{dt}"/>
  <worldbody>
    <body name="arm">
      <joint name="hinge" type="hinge" axis="0 0 1" damping="{damping}" armature="0.005"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="1" contype="0"
            conaffinity="0"/>
      <site name="imu" pos="0.2 0 0"/>
    </body>
  </worldbody>
  <actuator>
    <dcmotor name="motor" joint="hinge" resistance="{r}" motorconst="{k}" input="pos"
             controller="8 0 0.4 0 0 6"/>
  </actuator>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""


def test_saturated_dcmotor_flags_resistance_and_motorconst_and_reports_their_ratio(tmp_path):
  """The controller's voltage limit (6 V) binds through the swing: the drive torque is
  K/R · V, so R and K are collinear; the report's K/R must cover the truth."""
  R, K, damping, dt = 2.0, 0.1, 0.02, 0.002
  xml = DCMOTOR.format(dt=dt, damping='{damping}', r=R, k=K)
  target = lambda t: 0.6 * math.sin(2 * math.pi * 0.9 * t)   # noqa: E731
  ticks, gyro, accel = c_samples(damping, model=xml, q0=0.0, dt=dt, period=0.004, duration=2.0,
                                 ctrl=lambda t: [target(t)])
  rng = np.random.default_rng(5)
  t = ticks * dt
  rec = recording.Recording({'imu': {
      'angular_velocity': (gyro + GYRO_SIGMA * rng.standard_normal(gyro.shape)).astype(
          np.float32),
      'linear_acceleration': (accel + ACCEL_SIGMA * rng.standard_normal(accel.shape)).astype(
          np.float32),
      'sample_time_s': t, 'arrival_time_s': t}})
  recording.write_recording(tmp_path / 'rec.npz', rec)
  (tmp_path / 'arm.xml').write_text(DCMOTOR.format(dt=dt, damping=damping, r=2.6, k=0.13))
  man = {'fibril_manifest': 1, 'model': 'arm.xml',
         'actuator_script': [{'actuator': 'motor', 'waveform': 'sine', 'amplitude': 0.6,
                              'frequency_hz': 0.9}],
         'components': [{'id': 'imu', 'type': 'fibril_sim/imu', 'config': {
             'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel', 'period_s': 0.004}}]}
  (tmp_path / 'm.yaml').write_text(yaml.safe_dump(man))
  spec = {'fibril_tune': 1, 'manifest': 'm.yaml', 'train': ['rec.npz'],
          'parameters': [{'mjcf': 'actuator:motor.resistance', 'bounds': [0.4, 10], 'log': True},
                         {'mjcf': 'actuator:motor.motorconst', 'bounds': [0.02, 0.5],
                          'log': True},
                         {'mjcf': 'joint:hinge.damping', 'bounds': [0.004, 0.1], 'log': True,
                          'init': 0.026}],
          'loss': [{'component': 'imu', 'field': 'angular_velocity', 'weight': 1 / GYRO_SIGMA},
                   {'component': 'imu', 'field': 'linear_acceleration',
                    'weight': 1 / ACCEL_SIGMA}],
          'optimizer': {'iterations': 20, 'gradients': 'fd'}}
  (tmp_path / 'tune.yaml').write_text(yaml.safe_dump(spec))
  res = tune.tune(tmp_path / 'tune.yaml', progress=False)
  assert len(res.collinear) == 1 and 'actuator:motor.resistance' in res.collinear[0] \
      and 'actuator:motor.motorconst' in res.collinear[0]
  (line,) = res.fixed
  expr, rest = line.split(' = ')
  value, pm = (float(x) for x in rest.replace(' (2σ)', '').split(' ± '))
  powers = dict(term.split('^') for term in expr.split(' · '))
  e_r, e_k = (float(powers[f'actuator:motor.{n}']) for n in ('resistance', 'motorconst'))
  assert set(powers) == {'actuator:motor.resistance', 'actuator:motor.motorconst'}
  assert abs(e_r) == abs(e_k) == 1 and e_r * e_k < 0, powers       # written as a ratio
  truth = R ** e_r * K ** e_k                          # the ratio K/R (or R/K)
  assert abs(value - truth) <= pm and pm < 0.02 * truth, (value, pm, truth)
  assert 'what the data does fix' in tune.render_report(res)


@pytest.fixture(scope='module')
def shooting(tmp_path_factory, problem):
  tmp = tmp_path_factory.mktemp('tune_shooting')
  path = write_problem(tmp, [c_recording(*TRUTH, seed=1)])
  raw = yaml.safe_load(path.read_text())
  raw['windows'] = {'length_s': 0.3, 'free_starts': True}
  path.write_text(yaml.safe_dump(raw))
  return tune.make_problem(tune.read_tune_file(path), progress=False)


def test_free_window_starts_on_the_single_shooting_trajectory_are_continuous(shooting, problem):
  """At window starts taken from the single-shooting trajectory the defects vanish and the
  data residuals are the single-shooting ones (a window's rollout resumes MuJoCo C's state)."""
  assert isinstance(shooting, tune.ShootingProblem) and shooting.W == 3
  u = problem.u0()[None]
  U = np.concatenate([u, shooting.nuisance0(u)], axis=1)
  assert U.shape == (1, 4 + 2 * 2)
  r, _, _ = shooting.evaluate(U, shooting.train)
  r_single, _, _ = problem.evaluate(u, problem.train)
  assert np.abs(r[0, -shooting.n_defects:]).max() < 1e-8
  np.testing.assert_allclose(r[0, :-shooting.n_defects], r_single[0], rtol=0, atol=1e-3)


def test_free_window_starts_jacobian_against_central_differences(shooting, problem):
  u = problem.u0()[None]
  U = np.concatenate([u, shooting.nuisance0(u)], axis=1)
  U[0, 4:] += 0.01    # off the trajectory: defects and their derivatives at work
  _, _, J = shooting.evaluate(U, shooting.train, jacobian=True)
  nd = shooting.n_defects
  for col, h in ((0, 1e-4), (4, 1e-4), (5, 1e-3), (7, 1e-3)):   # log damping, z_1 q, z_1 v, z_2 v
    Up, Um = U.copy(), U.copy()
    Up[0, col] += h
    Um[0, col] -= h
    ref = (shooting.evaluate(Up, shooting.train)[0][0] - shooting.evaluate(Um, shooting.train)[0][0]) / (2 * h)
    np.testing.assert_allclose(J[0, -nd:, col], ref[-nd:], rtol=1e-4, atol=1e-4 * np.abs(ref[-nd:]).max() + 1e-9)
    data = ref[:-nd]
    np.testing.assert_allclose(J[0, :-nd, col], data, rtol=2e-2, atol=2e-2 * np.abs(data).max())


def test_true_multiple_shooting_fit_agrees_with_single_shooting(shooting, problem):
  single = tune.tune(None, problem=problem)
  multi = tune.tune(None, problem=shooting)
  assert 'true multiple shooting (3 windows of 0.3 s' in tune.render_report(multi)
  N = problem.n_residuals(problem.train)
  assert abs(multi.train_loss - 1) < 3 * math.sqrt(2 / N), multi.train_loss
  truth = np.array([TRUTH[0], *TRUTH[1]])
  assert distance2(multi.estimate, multi.sigma, multi.correlation, truth) < CHI2_999[4]
  assert np.all(np.abs(multi.estimate - single.estimate) < 0.5 * single.sigma)
  # the ± is the marginal over the window starts' freedom (continuity is a weighted
  # residual, not an exact constraint): never narrower, here up to ~25 % wider
  ratio = multi.sigma / single.sigma
  assert np.all((ratio > 0.98) & (ratio < 1.5)), ratio


def test_free_window_starts_need_gradients_fd(tmp_path):
  path = write_problem(tmp_path, [c_recording(*TRUTH, seed=1)], gradients='exact')
  raw = yaml.safe_load(path.read_text())
  raw['windows'] = {'length_s': 0.3, 'free_starts': True}
  path.write_text(yaml.safe_dump(raw))
  with pytest.raises(ConfigError, match=r"tune\.yaml: windows\.free_starts = True: free window "
                     r"starts need gradients fd \(MuJoCo C rollouts\); here gradients are exact "
                     r"\(as asked\)"):
    tune.make_problem(tune.read_tune_file(path), progress=False)


# ------------------------------------------------------------------ compiled programs

def test_a_second_evaluation_runs_the_compiled_programs_again(problem):
  """The device programs are traced once per problem: another evaluation (other parameters,
  the Jacobian again) runs them without a new trace, and the same parameters give bitwise the
  same residuals and Jacobian."""
  U = problem.u0()[None]
  r1, _, J1 = problem.evaluate(U, problem.train, jacobian=True)
  sizes = (problem._fields._cache_size(), problem._jacobian._cache_size())
  problem.evaluate(U * 1.01, problem.train, jacobian=True)
  r2, _, J2 = problem.evaluate(U, problem.train, jacobian=True)
  assert (problem._fields._cache_size(), problem._jacobian._cache_size()) == sizes == (1, 1)
  np.testing.assert_array_equal(r1, r2)
  np.testing.assert_array_equal(J1, J2)


def _quantized_line_fit(step_sigma, *, seed=3, P=2, q=0.3, j_scale=1.0):
  """SciPy's least squares (`lsq.solve`) on a linear least-squares problem whose
  residuals are quantized to `q` (a rough loss, as a device's output resolution makes it),
  unit noise, started 5 σ off; its Jacobian is `j_scale` × the true one (an inexact
  Jacobian, as finite differences over a rough loss give). Returns `(estimate, truth,
  least-squares solution, σ, residual evaluations)`."""
  rng = np.random.default_rng(seed)
  A = rng.normal(size=(400, P))
  x = np.array([1.0, -2.0]) if P == 2 else rng.normal(size=P)
  y = A @ x + rng.normal(size=400)
  calls = []

  def evaluate(U, jacobian, rows=None):
    calls.append(len(U))
    r = q * np.round((U @ A.T - y) / q)                     # (S, N)
    return r, (np.broadcast_to(j_scale * A, (len(U),) + A.shape) if jacobian else None)

  cov = np.linalg.inv(A.T @ A)
  u_ls = cov @ A.T @ y
  sigma = np.sqrt(np.diag(cov))
  U0 = (x + 5 * sigma * rng.choice([-1.0, 1.0], P))[None]
  r0, J0 = evaluate(U0, True)
  calls.clear()
  run, = lsq.solve(evaluate, (U0, r0, J0), (np.full(P, -10.0), np.full(P, 10.0)),
                   lsq.Settings(N=400, max_nfev=41, step_sigma=step_sigma))
  return run.u, x, u_ls, sigma, len(calls)


# What "converged to within what the data resolve" must mean, set here and not read from the
# code: the fit ends within one standard error (σ from (AᵀA)⁻¹, unit noise: closed form) of
# the NumPy least-squares solution of the unquantized problem.
RESOLVED_SIGMA = 1.0


def test_a_rejected_step_within_step_sigma_standard_errors_ends_the_fit():
  """On a rough loss the fit stops at the first rejected step whose Gauss–Newton step is
  within `STEP_SIGMA` standard errors, within `RESOLVED_SIGMA` closed-form standard errors
  of the least-squares solution (NumPy, here); without the rule it goes on raising the
  damping to chase the roughness. The Jacobian is 60 % too large, so the steps fall short and
  where the fit stops matters (with an exact one the first step lands on the solution)."""
  u, _, u_ls, sigma, n = _quantized_line_fit(lsq.STEP_SIGMA, j_scale=1.6)
  assert np.all(np.abs(u - u_ls) <= RESOLVED_SIGMA * sigma), ((u - u_ls) / sigma)
  u0, _, _, _, n0 = _quantized_line_fit(0.0, j_scale=1.6)
  assert np.all(np.abs(u0 - u_ls) <= RESOLVED_SIGMA * sigma), ((u0 - u_ls) / sigma)
  assert n < n0, (n, n0)


def test_stopping_at_step_sigma_costs_no_accuracy_against_the_truth():
  """Over 200 quantized fits (q = 1 noise σ, 4 parameters, a Jacobian 60 % too large so that
  the steps fall short and where a fit stops matters) the mean squared error against the
  *truth*, in σ, of fits stopped by `STEP_SIGMA` is within 5 % of fits that never stop
  early (the issue's "no worse than × 1.05"), with at most 0.7 × their evaluations."""
  def campaign(step_sigma):
    fits = [_quantized_line_fit(step_sigma, seed=s, P=4, q=1.0, j_scale=1.6)
            for s in range(200)]
    err = np.mean([np.mean(((u - x) / sig) ** 2) for u, x, _, sig, _ in fits])
    return err, np.mean([n for *_, n in fits])
  err, n = campaign(lsq.STEP_SIGMA)
  err0, n0 = campaign(0.0)
  assert err <= 1.05 * err0, (err, err0)
  assert n <= 0.7 * n0, (n, n0)
