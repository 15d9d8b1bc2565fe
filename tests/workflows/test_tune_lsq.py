"""The linear algebra of `tune`'s fit against references outside it: the trust-region steps
(`lsq.solve`, SciPy's trf with `tr_solver='lsmr'`) reach the bounded linear least-squares
solution of `scipy.optimize.lsq_linear` (to what its `ftol` resolves) on well- and
ill-conditioned problems with a bound
active at the solution, and `identifiability.right_svd` (from the Gram matrix) gives NumPy's
SVD singular values and right vectors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import lsq_linear

from fibril_mjx.workflows.tune import identifiability, lsq


def _problem(cond: float, seed: int):
  """`(A (400, 5), y)` in weighted units (unit noise, as loss weights 1 / σ make them):
  columns with singular values from 1000 down to 1000 / cond, and data whose unconstrained
  solution puts x[0] below 0 (the bound)."""
  rng = np.random.default_rng(seed)
  U, _ = np.linalg.qr(rng.normal(size=(400, 5)))
  V, _ = np.linalg.qr(rng.normal(size=(5, 5)))
  A = U @ np.diag(np.geomspace(1e3, 1e3 / cond, 5)) @ V.T
  x = np.array([-0.3, 0.5, 1.0, -0.2, 0.8])
  return A, A @ x + rng.normal(0.0, 1.0, 400)


@pytest.mark.parametrize('cond', [10.0, 1e3])
def test_steps_reach_the_bounded_linear_solution(cond):
  A, y = _problem(cond, seed=int(cond))
  lo, hi = np.array([0.0, -5, -5, -5, -5]), np.full(5, 5.0)
  ref = lsq_linear(A, y, bounds=(lo, hi), method='bvls', tol=1e-14).x
  assert ref[0] == 0.0                                   # the bound is active at the solution

  def evaluate(U, jacobian, rows):
    return U @ A.T - y, (np.broadcast_to(A, (len(U),) + A.shape) if jacobian else None)
  U0 = np.full((1, 5), 1.0)
  r0, J0 = evaluate(U0, True, [0])
  run, = lsq.solve(evaluate, (U0, r0, J0), (lo, hi),
                   lsq.Settings(N=400, max_nfev=100, step_sigma=0.0))
  sigma = np.sqrt(np.diag(np.linalg.inv(A.T @ A)))      # each parameter's standard error
  # `ftol` (lsq.CONVERGED) lets a run stop once a step gains less than ftol·cost, cost =
  # ½Σr² ≈ N/2 in unit noise: within √(2·ftol·cost) ≈ 0.02 standard errors of the optimum
  tol = np.sqrt(2 * lsq.CONVERGED * 0.5 * np.sum((A @ ref - y) ** 2))
  assert np.all(np.abs(run.u - ref) <= tol * sigma), (run.u - ref) / sigma


def test_right_svd_is_numpys_svd():
  rng = np.random.default_rng(3)
  J = rng.normal(size=(2000, 6))
  J[:, 5] = 2.0 * J[:, 4] + 1e-4 * rng.normal(size=2000)   # a collinear pair (ratio ~1e-5)
  sv, vt = identifiability.right_svd(J)
  _, sv_ref, vt_ref = np.linalg.svd(J, full_matrices=False)
  np.testing.assert_allclose(sv, sv_ref, rtol=1e-6)
  np.testing.assert_allclose(np.abs(np.sum(vt * vt_ref, axis=1)), 1.0, atol=1e-9)
  assert sv[-1] / sv[0] < identifiability.COLLINEAR           # the pair is flagged
