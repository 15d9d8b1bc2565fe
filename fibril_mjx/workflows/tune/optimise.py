"""The fit: multi-start bounded least squares (SciPy's trust-region reflective
`least_squares`, `lsq`; the `gauss_newton` method) / Adam / L-BFGS, the sensitivity check and
the uncertainty at the optimum (`tune`, `TuneResult`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from fibril_mjx.workflows.tune import identifiability, lsq, timing
from fibril_mjx.workflows.tune.problem import DataSet, Problem
from fibril_mjx.workflows.tune.choose import make_problem
from fibril_mjx.workflows.tune.spec import TuneSpec, read_tune_file


@dataclasses.dataclass
class TuneResult:
  """What `tune` returns (and `write_outputs` writes).

  Attributes:
    names, estimate, sigma (1σ, natural units), start, lower, upper: per parameter.
    starts: `(S, P)` starting values; finals `(S, P)`; final_losses `(S,)`; best: index.
    spread: `(P,)` standard deviation of the converged starts' estimates.
    loss_curve: `(iterations + 1, S)` training loss per start.
    train_rms_before / after, heldout_rms_before / after: `{term: (D,)}` residual RMS in the
      sensor's units (unweighted).
    train_loss, heldout_loss: final mean squared weighted residual.
    unidentifiable_combinations: near-collinear parameter groups at the start (names).
    correlation: `(P, P)` at the optimum.
    traces: held-out traces for the plot.
    fixed: for each poorly identifiable group, the combinations the data fixes, with ± 2σ
      (`identifiability.fixed_combinations`).
    timing: per fitted latency the search stage's evidence (`timing.search`, at the
      optimum).
    moved: whether the best start moved from its start; stop: why its run ended (SciPy's
      message); advice: what to try where it did not move.
  """
  names: list
  estimate: np.ndarray
  sigma: np.ndarray
  start: np.ndarray
  lower: np.ndarray
  upper: np.ndarray
  starts: np.ndarray
  finals: np.ndarray
  final_losses: np.ndarray
  best: int
  spread: np.ndarray
  loss_curve: np.ndarray
  train_rms_before: dict
  train_rms_after: dict
  heldout_rms_before: dict | None
  heldout_rms_after: dict | None
  train_loss: float
  heldout_loss: float | None
  correlation: np.ndarray
  collinear: list
  method: str
  wall_s: float
  iterations: int
  traces: dict | None = None
  problem: Any = None
  timing: list = dataclasses.field(default_factory=list)
  fixed: list = dataclasses.field(default_factory=list)
  moved: bool = True
  stop: str = ''
  advice: str = ''


def _rms(per):
  out = {}
  for t, items in per.items():
    num = sum(np.sum(((p - y) ** 2) * (w != 0), axis=1) for p, y, w, _ in items)  # (S, D)
    den = sum(np.sum(w != 0, axis=0) for p, y, w, _ in items)
    out[f'{t.component}.{t.field}'] = np.sqrt(num / np.maximum(den, 1))
  return out


def fit_residuals(prob: Problem, U, jacobian: bool):
  """The training residuals `(S, N)` (and Jacobians `(S, N, P)`, or None) whose squares sum to
  the reported loss: the weighted residuals (`norm: l2`), or their √(|r| + ε) transform
  (`norm: l1`, `lsq.transform`)."""
  r, _, J = prob.evaluate(U, prob.train, jacobian=jacobian)
  return lsq.transform(r, J, _norm(prob))


def _norm(prob: Problem) -> str:
  return getattr(prob.spec, 'norm', 'l2')


def _pick(d, s):
  return None if d is None else {k: v[s].tolist() for k, v in d.items()}


def _lag1(r):
  r = r[np.isfinite(r)]
  if r.size < 3 or np.var(r) == 0:
    return 0.0
  return float(np.corrcoef(r[:-1], r[1:])[0, 1])


def correlation_inflation(prob: Problem, ds: DataSet, r: np.ndarray) -> float:
  """Variance inflation `(1+ρ)/(1−ρ)` of serially correlated residuals (AR(1)), ρ the lag-1
  autocorrelation per loss term and axis over consecutive samples, averaged over series."""
  series: dict = {}
  k = 0
  for mp in ds.maps:
    for t in prob.spec.loss:
      idx, y, w, ts = mp[t]
      n = y.size
      block = r[k:k + n].reshape(y.shape)
      k += n
      for d in range(y.shape[1]):
        ok = w[:, d] != 0
        series.setdefault((t, d), []).append(block[ok, d])
  factors = []
  for parts in series.values():
    rho = np.clip(_lag1(np.concatenate(parts)), 0.0, 0.95)
    factors.append((1 + rho) / (1 - rho))
  return float(np.mean(factors)) if factors else 1.0


def _starts(prob: Problem, spec: TuneSpec, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
  """`(S, P)` starting points in the fitted coordinates: the tune file's start (clipped to the
  bounds `lo`, `hi`), then `starts − 1` drawn uniformly within `start_spread` of it."""
  P, S = len(prob.params), max(1, spec.starts)
  u0 = np.clip(prob.u0(), lo, hi)
  rng = np.random.default_rng(spec.seed)
  U = np.tile(u0, (S, 1))
  if S > 1:
    width = np.where([p.log for p in prob.params], np.log1p(spec.start_spread),
                     spec.start_spread * np.maximum(np.abs(u0), 1e-3))
    U[1:] = np.clip(u0 + rng.uniform(-1, 1, (S - 1, P)) * width, lo, hi)
  return U


def _fit_least_squares(prob: Problem, U, r, J, lo, hi, bar, N: int, found: list):
  """`lsq.solve` from every start on the raw weighted residuals; with fitted latencies the
  timing search again at the optimum, and a refit when a latency moved.

  Returns:
    `(U, r, J, runs, found)`: the final rows, raw residuals and Jacobians, the `lsq.Run` of
    each start (of the refit, where there was one; its curve continues the first's) and the
    latencies' search evidence.
  """
  S = U.shape[0]

  def evaluate(Uc, jacobian, rows):
    if prob.gradients != 'fd' and len(rows) != S:
      # MJX's programs are compiled for the whole batch of starts: fill the other rows
      full = np.repeat(Uc[:1], S, axis=0)
      full[rows] = Uc
      rr, _, JJ = prob.evaluate(full, prob.train, jacobian=jacobian)
      return rr[rows], None if JJ is None else JJ[rows]
    rr, _, JJ = prob.evaluate(Uc, prob.train, jacobian=jacobian)   # starts are independent
    return rr, JJ

  settings = lsq.Settings(N=N, max_nfev=prob.spec.iterations + 1, norm=_norm(prob))

  def run(U, r, J):
    return lsq.solve(evaluate, (U, r, J), (lo, hi), settings, speculate=prob.speculate, bar=bar)

  runs = run(U, r, J)
  if prob.timing:   # the search again at the optimum; a moved latency refits the rest
    best = int(np.argmin([lsq.loss_sum(x.r, _norm(prob)) for x in runs]))
    again = timing.search(prob, runs[best].u)
    if any(a['best_s'] != b['best_s'] for a, b in zip(found, again)):
      U2 = np.stack([x.u for x in runs])
      r2, _, J2 = prob.evaluate(U2, prob.train, jacobian=True)
      more = run(U2, r2, J2)
      runs = [dataclasses.replace(m, curve=x.curve + m.curve[1:], moved=x.moved or m.moved)
              for x, m in zip(runs, more)]
    found = again
  return (np.stack([x.u for x in runs]), np.stack([x.r for x in runs]),
          np.stack([x.J for x in runs]), runs, found)


def _fit_optax(prob: Problem, U, r, J, lo, hi, bar, N: int):
  """The tune file's `method`: Adam (at its `learning_rate`), or L-BFGS with a backtracking
  line search per start, on all starts in one batch from the rows `U` (transformed residuals
  `r`, Jacobians `J`; one iteration per step of `bar`); a start keeps its point where a step
  raised its cost.

  Returns:
    `(U, r, J, cost, curve)`: the final rows, residuals, Jacobians and costs `(S,)`, and the
    training loss per iteration (a list of `(S,)`).
  """
  import optax
  S, method = U.shape[0], prob.spec.method
  cost = np.sum(r ** 2, axis=1)
  if method == 'adam':
    opt = optax.adam(prob.spec.learning_rate)
  else:
    opt = optax.lbfgs(learning_rate=1.0, linesearch=None)
  state = jax.vmap(opt.init)(jnp.asarray(U))
  upd = jax.jit(jax.vmap(lambda g, s, u: opt.update(g, s, u)))
  curve = []
  for _ in bar:
    g = 2.0 * np.einsum('snp,sn->sp', J, r) / N
    updates, state = upd(jnp.asarray(g), state, jnp.asarray(U))
    step = np.asarray(updates, np.float64)
    if method == 'lbfgs':
      scale = np.ones(S)
      for _ls in range(8):      # backtracking per start, all starts in one batch
        Un = np.clip(U + scale[:, None] * step, lo, hi)
        rn, Jn = fit_residuals(prob, Un, True)
        cn = np.sum(rn ** 2, axis=1)
        bad = cn > cost
        if not bad.any():
          break
        scale = np.where(bad, scale * 0.3, scale)
      ok = cn <= cost
    else:
      Un = np.clip(U + step, lo, hi)
      rn, Jn = fit_residuals(prob, Un, True)
      cn = np.sum(rn ** 2, axis=1)
      ok = np.ones(S, bool)
    U = np.where(ok[:, None], Un, U)
    r = np.where(ok[:, None], rn, r)
    J = np.where(ok[:, None, None], Jn, J)
    cost = np.where(ok, cn, cost)
    curve.append(cost / N)
    bar.set_postfix(loss=f'{cost.min() / N:.4g}')
  return U, r, J, cost, curve


def _fit(prob: Problem, U, r, J, lo, hi, N: int, found: list):
  """The fit from the starts `U` (raw residuals `r` and Jacobians `J` there) by the tune
  file's method: `least_squares` (`gauss_newton`) or optax.

  Returns:
    `(U, r, J, cost, curve, runs, found)`: the final rows, the transformed residuals and
    Jacobians (`fit_residuals`), their costs `(S,)`, the training loss after each iteration
    (a list of `(S,)`), an `lsq.Run` per start and the latencies' search evidence.
  """
  spec, S = prob.spec, U.shape[0]
  if spec.method == 'gauss_newton':
    bar = tqdm(total=spec.iterations, desc=f'tune (least squares, {S} start(s))',
               disable=not prob.progress, leave=False)
    U, r, J, runs, found = _fit_least_squares(prob, U, r, J, lo, hi, bar, N, found)
    r, J = lsq.transform(r, J, _norm(prob))
    length = max(len(x.curve) for x in runs)
    curve = [np.array([x.curve[min(i, len(x.curve) - 1)] for x in runs]) / N
             for i in range(1, length)]
  else:
    bar = tqdm(range(spec.iterations), desc=f'tune ({spec.method}, {S} start(s))',
               disable=not prob.progress, leave=False)
    U0 = U
    r, J = lsq.transform(r, J, _norm(prob))
    U, r, J, _, curve = _fit_optax(prob, U, r, J, lo, hi, bar, N)
    moved = np.any(U != U0, axis=1)
    runs = [lsq.Run(U[s], r[s], J[s], [], 0 if moved[s] else 2,
                    f'{spec.method}: {spec.iterations} iterations', bool(moved[s]))
            for s in range(S)]
  bar.close()
  return U, r, J, np.sum(r ** 2, axis=1), curve, runs, found


def _uncertainty(prob: Problem, rb: np.ndarray, Jb: np.ndarray, ub: np.ndarray, N: int,
                 groups):
  """The estimate and its uncertainty at the optimum `ub` of the best start, from its
  residuals `rb` and Jacobian `Jb` (with free window starts: the parameters' block of the
  full covariance; the defects' residuals carry no data), inflated for correlated residuals.

  Returns:
    `(x, sigma, correlation, fixed)`: the estimate and its 1σ `(P,)` in natural units, the
    `(P, P)` correlation and the combinations the data fix (`fixed_combinations`).
  """
  P = len(prob.params)
  dof = max(N - P, 1)
  s2 = float(rb @ rb) / dof
  infl = correlation_inflation(prob, prob.train, rb[:rb.size - getattr(prob, 'n_defects', 0)])
  H = Jb.T @ Jb
  cov_u = (s2 * infl * np.linalg.pinv(H))[:P, :P]
  ub, Jb = ub[:P], Jb[:, :P]
  x = prob.natural(ub)
  logm = np.array([p.log for p in prob.params])
  sig_u = np.sqrt(np.maximum(np.diag(cov_u), 0))
  sigma = np.where(logm, x * sig_u, sig_u)
  dn = np.where(sig_u > 0, sig_u, 1.0)
  corr = cov_u / np.outer(dn, dn)
  fixed = identifiability.fixed_combinations(prob, Jb, cov_u, ub, groups)
  return x, sigma, corr, fixed


def _before_after(prob: Problem, u_start: np.ndarray, u_best: np.ndarray):
  """Residual RMS at the starting point and at the optimum, on the training and the held-out
  data (`_rms`, per term `(2, D)`), the held-out loss at the optimum and its traces (None
  without held-out data)."""
  UU = np.stack([u_start, u_best])
  _, per_t, _ = prob.evaluate(UU, prob.train)
  rms_t = _rms(per_t)
  rms_h, h_loss, traces = None, None, None
  if prob.heldout is not None:
    rh, per_h, _ = prob.evaluate(UU, prob.heldout)
    rms_h = _rms(per_h)
    h_loss = float(np.sum(rh[1] ** 2) / prob.n_residuals(prob.heldout))
    traces = {f'{t.component}.{t.field}': per_h[t] for t in prob.spec.loss}
  return rms_t, rms_h, h_loss, traces


def tune(spec_or_path, *, progress: bool | None = None, problem: Problem | None = None
         ) -> TuneResult:
  """Fits the tune file's parameters; see the module docstring.

  Args:
    spec_or_path: a tune file path or a `TuneSpec`.
    problem: a prepared `Problem` (reuses its compiled programs).

  Returns:
    a `TuneResult`.
  """
  t_start = time.perf_counter()
  if problem is None:
    spec = spec_or_path if isinstance(spec_or_path, TuneSpec) else read_tune_file(spec_or_path)
    problem = make_problem(spec, progress=progress)
  prob, spec = problem, problem.spec
  P, S = len(prob.params), max(1, spec.starts)
  lo, hi = prob.bounds_u()
  U = _starts(prob, spec, lo, hi)
  starts = U.copy()

  found = timing.search(prob, starts[0]) if prob.timing else []   # whole-tick latencies first
  NZ = getattr(prob, 'n_nuisance', 0)   # free window starts (multiple shooting), not reported
  if NZ:
    U = np.concatenate([U, prob.nuisance0(U)], axis=1)
    lo, hi = np.concatenate([lo, np.full(NZ, -np.inf)]), np.concatenate([hi, np.full(NZ, np.inf)])
  r_raw, _, J_raw = prob.evaluate(U, prob.train, jacobian=True)
  J = lsq.transform(r_raw, J_raw, _norm(prob))[1]
  collinear, groups = identifiability.sensitivity(prob, J[0][:, :P])
  N = prob.n_residuals(prob.train)     # recorded samples × axes (window padding excluded)
  curve = [lsq.loss_sum(r_raw, _norm(prob)) / N]
  U, r, J, cost, more, runs, found = _fit(prob, U, r_raw, J_raw, lo, hi, N, found)
  curve += more
  best = int(np.argmin(cost))
  x, sigma, corr, fixed = _uncertainty(prob, r[best], J[best], U[best], N, groups)
  U = U[:, :P]
  conv = cost <= 1.1 * cost[best]
  spread = np.std(prob.natural(U[conv]), axis=0) if conv.sum() > 1 else np.zeros(P)
  rms_t, rms_h, h_loss, traces = _before_after(prob, starts[0], U[best])
  return TuneResult(
      names=[p.name for p in prob.params], estimate=x, sigma=sigma,
      start=prob.natural(starts[0]), lower=np.array([p.lower for p in prob.params]),
      upper=np.array([p.upper for p in prob.params]), starts=prob.natural(starts),
      finals=prob.natural(U), final_losses=cost / N, best=best, spread=spread,
      loss_curve=np.array(curve), train_rms_before=_pick(rms_t, 0),
      train_rms_after=_pick(rms_t, 1), heldout_rms_before=_pick(rms_h, 0),
      heldout_rms_after=_pick(rms_h, 1), train_loss=float(cost[best] / N), heldout_loss=h_loss,
      correlation=corr, collinear=collinear, method=spec.method,
      wall_s=time.perf_counter() - t_start, iterations=len(curve) - 1, traces=traces,
      problem=prob, timing=found, fixed=fixed, moved=runs[best].moved,
      stop=runs[best].message, advice='' if runs[best].moved else lsq.advice(runs[best]))
