"""A fleet: many units of one model, each with its own recording and its own parameters,
fitted in one batch (`tune_fleet`).

Unit k is start k paired with training recording k (`RolloutProblem(paired=True)`): one
`mujoco.rollout` call steps every unit (and every unit's finite-difference copies) on the
thread pool, one device program serves all of them, and SciPy's `least_squares` runs per unit
(its own trust region, its own accepted steps; `lsq.solve` gathers the units' evaluations
into those batched calls). Each unit's ± is its own
Gauss–Newton covariance, as `tune` gives one unit's.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import time
import types

import numpy as np
from tqdm import tqdm

from fibril_mjx.io import outdir
from fibril_mjx.workflows.tune import identifiability, lsq
from fibril_mjx.workflows.tune.optimise import correlation_inflation
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
  collinear = identifiability.sensitivity(prob, J[0])[0]
  N = np.array([sum(np.count_nonzero(mp[t][2]) for t in spec.loss) for mp in prob.train.maps])
  bar = tqdm(total=spec.iterations, desc=f'tune fleet ({K} units)', disable=not prob.progress,
             leave=False)

  def evaluate(Uc, jacobian, rows):
    rr, _, JJ = prob.evaluate(Uc, prob.train, jacobian=jacobian, units=rows)
    return rr, JJ
  runs = lsq.solve(evaluate, (U, r, J), (lo, hi), lsq.Settings(N, spec.iterations + 1),
                   speculate=prob.speculate, bar=bar)
  bar.close()
  U, r, J = (np.stack([getattr(x, k) for x in runs]) for k in 'urJ')
  cost = np.sum(r ** 2, axis=1)
  P = U.shape[1]
  logm = np.array([p.log for p in prob.params])
  x = prob.natural(U)
  sigma = np.zeros_like(x)
  for k in range(K):   # unit k's covariance, inflated for its own serial correlation
    infl = correlation_inflation(prob, types.SimpleNamespace(maps=[prob.train.maps[k]]), r[k])
    s2 = float(r[k] @ r[k]) / max(int(N[k]) - P, 1) * infl
    su = np.sqrt(np.maximum(np.diag(s2 * np.linalg.pinv(J[k].T @ J[k])), 0))
    sigma[k] = np.where(logm, x[k] * su, su)
  return FleetResult(
      names=[p.name for p in prob.params], units=[getattr(rc, 'path', str(i)) for i, rc in
                                                   enumerate(prob.train.recordings)],
      estimate=x, sigma=sigma, start=prob.natural(prob.u0()), losses=cost / N,
      iterations=max(len(x.curve) for x in runs) - 1, wall_s=time.perf_counter() - t0, collinear=collinear,
      problem=prob)


def render_fleet(res: FleetResult) -> str:
  """The text report of a fleet: per unit its recording, loss and every estimate ± 2σ."""
  lines = [f'tune fleet: {len(res.units)} units, {res.iterations} iterations, '
           f'{res.wall_s:.1f} s (MuJoCo C rollouts with exact device derivatives, one batch)',
           '']
  for k, unit in enumerate(res.units):
    lines.append(f'unit {k}: {unit}  (loss {res.losses[k]:.4g})')
    for n, x, sd in zip(res.names, res.estimate[k], res.sigma[k]):
      lines.append(f'  {n:40s} {x:12.6g} ± {2 * sd:.3g}')
  if res.collinear:
    lines += ['', 'poorly identifiable combinations at the start (unit 0):'] + [
        f'  {c}' for c in res.collinear]
  return '\n'.join(lines) + '\n'


def write_fleet(res: FleetResult, out, *, overwrite: bool = False):
  """Writes `units.csv` (one row per unit: recording, loss, estimate and 1σ of every
  parameter), `report.txt` and `report.json` to `out` (staged, renamed when complete)."""
  out = outdir.claim(out, overwrite=overwrite)
  with outdir.staged(out) as tmp:
    with open(tmp / 'units.csv', 'w', newline='') as fh:
      w = csv.writer(fh)
      w.writerow(['unit', 'recording', 'loss'] + [c for n in res.names
                                                  for c in (n, f'{n} sigma')])
      for k, unit in enumerate(res.units):
        w.writerow([k, unit, f'{res.losses[k]:.6g}'] + [
            f'{v:.9g}' for x, sd in zip(res.estimate[k], res.sigma[k]) for v in (x, sd)])
    (tmp / 'report.txt').write_text(render_fleet(res))
    (tmp / 'report.json').write_text(json.dumps({
        'names': res.names, 'units': res.units, 'estimate': res.estimate.tolist(),
        'sigma': res.sigma.tolist(), 'losses': res.losses.tolist(),
        'iterations': res.iterations, 'wall_s': res.wall_s, 'collinear': res.collinear},
        indent=2))
  return out
