"""`tune` (SciPy's bounded `least_squares`, `workflows/tune/lsq.py`) from a start on the
bounds: a simulated position servo (`fibril_sim/position_servo`, the XL330 manifest driven by
the commands of a real log) whose friction terms start at their lower bound 0 moves and
recovers the values it was simulated with; a fit that ends where it started says so and the
CLI exits 1; the runs of several starts are batched and independent."""

from __future__ import annotations

import pathlib

import jax
import numpy as np
import pytest
import yaml
from scipy.optimize import least_squares

from fibril_mjx import cli
from fibril_mjx.workflows import tune
from fibril_mjx.workflows.tune import lsq

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOG = ROOT / 'tests' / 'data' / 'servo_xl330' / 'kp100_sin_sin.npz'
DURATION_S = 2.0
NOISE_RAD = 0.005                 # the simulated angle's noise; the loss weight is 1 / it
# (field, lower, upper, start, truth): the friction terms start on their lower bound 0 (the
# other fields at the manifest's values, which the simulation uses too)
FIT = [('friction_coulomb', 0.0, 0.05, 0.0, 0.009),
       ('friction_viscous', 0.0, 0.02, 0.0, 0.0046)]
# Recovery tolerance in Cramér–Rao standard errors: σ from (JᵀJ)⁻¹ at the truth with unit noise
# (the weights are 1/σ of the noise the test adds); 4σ per parameter leaves ~1e-4 for two
# parameters of Gaussian noise.
K_SIGMA = 4.0


@pytest.fixture(scope='module')
def servo(tmp_path_factory):
  """`(problem with the simulated recording as its training data, truth (P,))`: one compiled
  problem serves the simulation (evaluated at the truth) and the fit."""
  tmp = tmp_path_factory.mktemp('servo')
  with np.load(LOG) as z:
    n = int(round(DURATION_S / 0.005)) + 1
    arrays = {k: (z[k][:n] if z[k].ndim else z[k]) for k in z.files}
  np.savez(tmp / 'commands.npz', **arrays)
  raw = {'fibril_tune': 1, 'manifest': str(ROOT / 'manifests' / 'tuning' / 'servo_xl330.yaml'),
         'train': [str(tmp / 'commands.npz')],
         'parameters': [{'component': 'servo', 'field': f, 'bounds': [lo, hi], 'init': start}
                        for f, lo, hi, start, _ in FIT],
         'loss': [{'component': 'servo', 'field': 'position', 'weight': 1 / NOISE_RAD}],
         'optimizer': {'method': 'gauss_newton', 'iterations': 30, 'gradients': 'exact'}}
  (tmp / 'tune.yaml').write_text(yaml.safe_dump(raw))
  prob = tune.make_problem(tune.read_tune_file(tmp / 'tune.yaml'), progress=False)
  truth = np.array([t for *_, t in FIT])
  _, per, _ = prob.evaluate(truth[None], prob.train)
  pred, _, w, ts = per[prob.spec.loss[0]][0]
  ok = w[:, 0] != 0
  angle = pred[0, ok, 0] + np.random.default_rng(0).normal(0.0, NOISE_RAD, ok.sum())
  arrays.update({'sensor/servo/position': angle, 'sensor/servo/sample_time_s': ts[ok],
                 'sensor/servo/arrival_time_s': ts[ok]})
  np.savez(tmp / 'simulated.npz', **arrays)
  prob.train = prob.dataset([str(tmp / 'simulated.npz')])   # same grid: same programs
  return prob, truth


def test_a_fit_started_on_its_bounds_moves_and_recovers_the_truth(servo):
  prob, truth = servo
  start = prob.u0()
  assert np.all(start == 0.0)                            # on the bounds
  res = tune.tune(None, problem=prob)
  assert res.moved and res.iterations > 0, res.stop
  _, _, J = prob.evaluate(truth[None], prob.train, jacobian=True)
  sigma = np.sqrt(np.diag(np.linalg.inv(J[0].T @ J[0])))      # unit noise (weights 1/σ)
  assert np.all(np.abs(res.estimate - truth) <= K_SIGMA * sigma), (res.estimate, truth, sigma)
  assert 0.5 < res.train_loss < 1.5, res.train_loss          # down to the noise (loss ≈ 1)


def test_a_second_fit_traces_and_compiles_nothing(servo):
  """The fit reuses the problem's compiled residual and Jacobian programs: after one fit,
  another fit of the same problem (every iteration, and the report's evaluations) traces
  and compiles nothing (JAX's tracing / lowering / compile events)."""
  prob, _ = servo
  tune.tune(None, problem=prob)
  events = []

  def listen(event, secs, **kw):
    if 'compile' in event:
      events.append(event)
  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    res = tune.tune(None, problem=prob)
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)
  assert res.iterations > 1
  assert events == [], sorted(set(events))


def test_scipy_from_a_zero_bound_without_the_offset_ends_at_its_start(servo):
  """Why `lsq._offset` exists: SciPy's trf, `x_scale='jac'`, started on a bound at 0, sets its
  first trust radius ∝ |x0| ≈ 1e-10 and ends at its start (`xtol`) on this problem."""
  prob, _ = servo
  lo, hi = prob.bounds_u()
  x0 = prob.u0()

  def fun(u):
    return prob.evaluate(u[None], prob.train)[0][0]

  def jac(u):
    return prob.evaluate(u[None], prob.train, jacobian=True)[2][0]
  res = least_squares(fun, x0, jac=jac, bounds=(lo, hi), method='trf', x_scale='jac',
                      max_nfev=8)
  assert np.allclose(res.x, x0, rtol=0, atol=1e-9), res.x


def _line(A, y):
  def evaluate(U, jacobian, rows):
    return U @ A.T - y, (np.broadcast_to(A, (len(U),) + A.shape) if jacobian else None)
  return evaluate


def test_starts_run_independently_in_batched_evaluations():
  """Three starts of a bounded linear problem (closed form: NumPy's least squares) reach the
  solution alone and together, and together each evaluation is one batched call."""
  rng = np.random.default_rng(1)
  A = rng.normal(size=(50, 2))
  x = np.array([0.5, 2.0])
  y = A @ x
  calls = []
  base = _line(A, y)

  def evaluate(U, jacobian, rows):
    calls.append(len(rows))
    return base(U, jacobian, rows)
  U0 = np.array([[0.0, 0.0], [1.0, 3.0], [0.2, 0.1]])   # the first on the lower bounds
  r0, J0 = evaluate(U0, True, np.arange(3))
  calls.clear()
  bounds = (np.zeros(2), np.full(2, 5.0))
  runs = lsq.solve(evaluate, (U0, r0, J0), bounds, lsq.Settings(N=50, max_nfev=30))
  for run in runs:
    np.testing.assert_allclose(run.u, x, atol=1e-6)
    assert run.moved
  assert max(calls) == 3 and len(calls) < 3 * 30
  alone = lsq.solve(base, (U0[:1], r0[:1], J0[:1]), bounds,
                    lsq.Settings(N=50, max_nfev=30))[0]
  np.testing.assert_array_equal(alone.u, runs[0].u)


def test_l1_maps_to_scipys_soft_l1_and_resists_outliers():
  """`norm: l1` is SciPy's `soft_l1` at scale `L1_SCALE`: on a line with 10 % gross outliers
  it recovers the line (the median-like fit), where least squares is pulled off."""
  assert lsq.LOSSES == {'l2': 'linear', 'l1': 'soft_l1'}
  rng = np.random.default_rng(2)
  A = np.stack([np.ones(200), np.linspace(-1, 1, 200)], axis=1)
  x = np.array([1.0, -0.5])
  y = A @ x + rng.normal(0, 0.01, 200)
  y[::10] += 5.0                                     # outliers, far beyond the noise
  ev = _line(A, y)
  U0 = np.zeros((1, 2))
  r0, J0 = ev(U0, True, [0])
  lo, hi = np.full(2, -10.0), np.full(2, 10.0)
  l1, l2 = (lsq.solve(ev, (U0, r0, J0), (lo, hi), lsq.Settings(200, 100, norm, 0.0))[0]
            for norm in ('l1', 'l2'))
  assert np.all(np.abs(l1.u - x) < 0.01), l1.u       # the noise σ / √N ≪ 0.01
  assert np.abs(l2.u[0] - x[0]) > 0.4, l2.u          # least squares: + 5 × 10 % = + 0.5


def test_a_fit_that_does_not_move_says_so_and_the_cli_exits_1(monkeypatch, tmp_path, capsys):
  """A start that is already the solution (a linear problem, closed form) does not move: the
  run says why (SciPy's message) and what to try; `fibril-mjx tune` then exits 1."""
  A = np.eye(2)
  ev = _line(A, np.array([1.0, 2.0]))
  U0 = np.array([[1.0, 2.0]])
  r0, J0 = ev(U0, True, [0])
  run, = lsq.solve(ev, (U0, r0, J0), (np.zeros(2), np.full(2, 5.0)), lsq.Settings(2, 10))
  assert not run.moved and run.message and lsq.advice(run)

  class Result:
    moved, stop, advice = False, run.message, lsq.advice(run)
  monkeypatch.setattr(tune, 'run_cli', lambda *a, **k: Result())
  monkeypatch.setattr(tune, 'render_report', lambda res: 'report\n')
  assert cli.main(['tune', 'any.yaml', '--out', str(tmp_path / 'out')]) == 1
  err = capsys.readouterr().err
  assert 'did not move from its start' in err and run.message in err, err
