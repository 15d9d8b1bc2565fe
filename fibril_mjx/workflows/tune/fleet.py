"""A fleet: many units of one model, each with its own recording and its own parameters,
fitted in one batch (`tune_fleet`).

Unit k is start k paired with training recording k (`RolloutProblem(paired=True)`): one
`mujoco.rollout` call steps every unit (and every unit's finite-difference copies) on the
thread pool, one device program serves all of them, and Levenberg–Marquardt runs per unit
(its own damping, its own accepted steps) in the same loop. Each unit's ± is its own
Gauss–Newton covariance, as `tune` gives one unit's.
"""

from __future__ import annotations

import dataclasses
import time
import types

import numpy as np
from tqdm import tqdm

from fibril_mjx.workflows.tune.optimise import (_correlation_inflation, _sensitivity,
                                                gauss_newton)
from fibril_mjx.workflows.tune.rollouts import RolloutProblem
from fibril_mjx.workflows.tune.spec import TuneSpec, read_tune_file


@dataclasses.dataclass
class FleetResult:
  """What `tune_fleet` returns.

  Attributes:
    names: fitted parameters; units: the training recordings (one per unit).
    estimate, sigma (1σ): `(K, P)` natural units; start: `(P,)`.
    losses: `(K,)` final mean squared weighted residual per unit; iterations, wall_s.
    latency: the fitted latencies (shared by the fleet), `{name: seconds}`.
  """
  names: list
  units: list
  estimate: np.ndarray
  sigma: np.ndarray
  start: np.ndarray
  losses: np.ndarray
  iterations: int
  wall_s: float
  collinear: list
  problem: RolloutProblem


def tune_fleet(spec_or_path, *, progress: bool | None = None,
               problem: RolloutProblem | None = None) -> FleetResult:
  """Fits every training recording of the tune file as its own unit (see the module
  docstring); `optimizer.starts` and `heldout` do not apply (one start per unit)."""
  t0 = time.perf_counter()
  if problem is None:
    spec = spec_or_path if isinstance(spec_or_path, TuneSpec) else read_tune_file(spec_or_path)
    problem = RolloutProblem(dataclasses.replace(spec, heldout=[]), progress=progress,
                             paired=True)
  prob, spec = problem, problem.spec
  K = len(prob.train.recordings)
  lo, hi = prob.bounds_u()
  U = np.tile(np.clip(prob.u0(), lo, hi), (K, 1))
  r, _, J = prob.evaluate(U, prob.train, jacobian=True)
  collinear = _sensitivity(prob, J[0])
  N = np.array([sum(np.count_nonzero(mp[t][2]) for t in spec.loss) for mp in prob.train.maps])
  bar = tqdm(range(spec.iterations), desc=f'tune fleet ({K} units)', disable=not prob.progress,
             leave=False)

  def evaluate(Uc, jacobian, rows):
    rr, _, JJ = prob.evaluate(Uc, prob.train, jacobian=jacobian, units=rows)
    return rr, JJ
  U, r, J, cost, curve = gauss_newton(evaluate, U, r, J, lo, hi, bar, N)
  bar.close()
  P = U.shape[1]
  logm = np.array([p.log for p in prob.params])
  x = prob.natural(U)
  sigma = np.zeros_like(x)
  for k in range(K):   # unit k's covariance, inflated for its own serial correlation
    infl = _correlation_inflation(prob, types.SimpleNamespace(maps=[prob.train.maps[k]]), r[k])
    s2 = float(r[k] @ r[k]) / max(int(N[k]) - P, 1) * infl
    su = np.sqrt(np.maximum(np.diag(s2 * np.linalg.pinv(J[k].T @ J[k])), 0))
    sigma[k] = np.where(logm, x[k] * su, su)
  return FleetResult(
      names=[p.name for p in prob.params], units=[getattr(rc, 'path', str(i)) for i, rc in
                                                   enumerate(prob.train.recordings)],
      estimate=x, sigma=sigma, start=prob.natural(prob.u0()), losses=cost / N,
      iterations=len(curve), wall_s=time.perf_counter() - t0, collinear=collinear,
      problem=prob)
