"""The fit: multi-start Gauss–Newton / Adam / L-BFGS, the sensitivity check and the
uncertainty at the optimum (`tune`, `TuneResult`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.workflows.tune import identifiability, timing
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


def _rms(per):
  out = {}
  for t, items in per.items():
    num = sum(np.sum(((p - y) ** 2) * (w != 0), axis=1) for p, y, w, _ in items)  # (S, D)
    den = sum(np.sum(w != 0, axis=0) for p, y, w, _ in items)
    out[f'{t.component}.{t.field}'] = np.sqrt(num / np.maximum(den, 1))
  return out


CONVERGED = 1e-6   # predicted decrease of rᵀr, relative, below which a start has converged
# A step is rejected although the linear model predicts a decrease: where the undamped
# Gauss–Newton step is within this many standard errors of every parameter (covariance
# H⁻¹·rᵀr/(N − P)), the start has converged to within what the data resolve — the loss
# is not smooth at that scale (quantized outputs, schedules, float32 device pipeline), and
# raising the damping would only chase its roughness. 1 σ rather than 0.5 σ: on quantized
# linear fits with a Jacobian 60 % off (`tests/workflows/test_tune_fd.py`) the mean squared
# error against the truth is within 3 % of never stopping early, with half the evaluations;
# at 2 σ it is 3–8 % worse.
STEP_SIGMA = 1.0


# `norm: l1`: the fit minimises Σ(|r| + ε) through residuals sign(r)·√(|r| + ε) (whose squares
# sum to it; Gauss–Newton on them is iteratively reweighted least squares). ε in weighted-
# residual units — loss weights are meant as 1 / noise σ, so 0.05 σ: small against a typical
# residual, large enough to keep the Jacobian J / (2√(|r| + ε)) bounded at r = 0.
L1_EPSILON = 0.05


def fit_residuals(prob: Problem, U, jacobian: bool):
  """The training residuals `(S, N)` (and Jacobians `(S, N, P)`, or None) the fit minimises
  the sum of squares of: the weighted residuals (`norm: l2`), or their `L1_EPSILON` square-root
  transform (`norm: l1`)."""
  r, _, J = prob.evaluate(U, prob.train, jacobian=jacobian)
  if getattr(prob.spec, 'norm', 'l2') == 'l2':
    return r, J
  root = np.sqrt(np.abs(r) + L1_EPSILON)
  return np.sign(r) * root, None if J is None else J / (2.0 * root)[..., None]


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


def gauss_newton(evaluate, U, r, J, lo, hi, bar, N, speculate=None):
  """Levenberg–Marquardt of independent problems in one batch (one per row of `U (S, P)`):
  each has its own damping, a step is kept where its problem's cost decreased, and a problem
  that has converged (no decrease left to gain: `CONVERGED` of its cost; or a rejected step
  where the Gauss–Newton step is within `STEP_SIGMA` standard errors) or whose damping ran
  away is no longer evaluated while the others go on.

  A trial step is evaluated without its Jacobian, which is computed where the step is
  accepted — unless `speculate(k)` says that `k` trial rows cost no more with it (MuJoCo C
  rollouts whose perturbed copies fill idle threads: `RolloutProblem.speculate`); the
  result is the same either way.

  Args:
    evaluate: `(U_rows, jacobian, rows) -> (r (k, R), J (k, R, P) or None)` for the problems
      `rows` (indices into the batch) at their coordinates `U_rows (k, P)`.
    r, J: at `U`; lo, hi: bounds of the fitted coordinates; bar: the iterations (a tqdm);
    N: residual count(s) that normalize the reported loss (a scalar or `(S,)`).

  Returns:
    `(U, r, J, cost (S,), [cost / N after each iteration])`.
  """
  U, r, J = U.copy(), r.copy(), J.copy()
  S = U.shape[0]
  cost = np.sum(r ** 2, axis=1)
  curve = []
  lam = np.full(S, 1e-3)
  active = np.ones(S, bool)
  for _ in bar:
    g = np.einsum('snp,sn->sp', J, r)
    H = np.einsum('snp,snq->spq', J, J)
    D = np.einsum('spp->sp', H) + 1e-12
    Hi = np.linalg.pinv(H)
    sigma = np.sqrt(np.maximum(np.einsum('spp->sp', Hi), 0.0)
                    * (cost / np.maximum(N - U.shape[1], 1))[:, None])
    resolved = np.all(np.abs(np.einsum('spq,sq->sp', Hi, g)) <= STEP_SIGMA * sigma, axis=1)
    step = np.stack([-np.linalg.solve(H[s] + lam[s] * np.diag(D[s]), g[s]) for s in range(S)])
    Un = np.clip(U + step, lo, hi)
    du = Un - U
    # decrease of rᵀr the linear model predicts for the (projected) step
    pred = -(2 * np.einsum('sp,sp->s', g, du) + np.einsum('sp,spq,sq->s', du, H, du))
    active &= pred > CONVERGED * cost
    if not active.any():
      break                     # converged: no problem can decrease its loss any more
    idx = np.flatnonzero(active)
    # residuals first; the Jacobian only where a step is accepted (or with them: speculate)
    ahead = bool(speculate and speculate(len(idx)))
    rn, Jn = evaluate(Un[idx], ahead, idx)
    cn = np.sum(rn ** 2, axis=1)
    ok = cn < cost[idx]
    if ok.any():
      acc = idx[ok]
      ra, Ja = (rn[ok], Jn[ok]) if ahead else evaluate(Un[acc], True, acc)
      U[acc], r[acc], J[acc], cost[acc] = Un[acc], ra, Ja, cn[ok]
    lam[idx] = np.where(ok, np.maximum(lam[idx] / 3, 1e-9), np.minimum(lam[idx] * 4, 1e9))
    active[idx[~ok & resolved[idx]]] = False
    active &= lam < 1e9
    curve.append(cost / N)
    bar.set_postfix(loss=f'{np.min(cost / N):.4g}')
    if not active.any():
      break
  return U, r, J, cost, curve


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


def _fit_gauss_newton(prob: Problem, U, r, J, lo, hi, bar, N: int, found: list):
  """Levenberg–Marquardt from every start (`gauss_newton`); with fitted latencies the timing
  search again at the optimum, and a refit when a latency moved.

  Returns:
    `(U, r, J, cost, curve, found)`: the final rows, residuals, Jacobians and costs `(S,)`,
    the training loss per iteration (a list of `(S,)`) and the latencies' search evidence.
  """
  S = U.shape[0]

  def evaluate(Uc, jacobian, rows=None):
    if rows is not None and prob.gradients != 'fd' and len(rows) != S:
      # MJX's programs are compiled for the whole batch of starts: fill the other rows
      full = np.repeat(Uc[:1], S, axis=0)
      full[rows] = Uc
      rr, JJ = fit_residuals(prob, full, jacobian)
      return rr[rows], None if JJ is None else JJ[rows]
    rr, JJ = fit_residuals(prob, Uc, jacobian)   # starts are independent
    return rr, JJ

  U, r, J, cost, curve = gauss_newton(evaluate, U, r, J, lo, hi, bar, N, prob.speculate)
  if prob.timing:   # the search again at the optimum; a moved latency refits the rest
    again = timing.search(prob, U[int(np.argmin(cost))])
    if any(a['best_s'] != b['best_s'] for a, b in zip(found, again)):
      r, J = evaluate(U, True)
      U, r, J, cost, more = gauss_newton(evaluate, U, r, J, lo, hi, bar, N, prob.speculate)
      curve += more
    found = again
  return U, r, J, cost, curve, found


def _fit_optax(prob: Problem, method: str, learning_rate: float, U, r, J, cost, lo, hi, bar,
               N: int):
  """Adam, or L-BFGS with a backtracking line search per start, on all starts in one batch
  (one iteration per step of `bar`); a start keeps its point where a step raised its cost.

  Returns:
    `(U, r, J, cost, curve)`: the final rows, residuals, Jacobians and costs `(S,)`, and the
    training loss per iteration (a list of `(S,)`).
  """
  import optax
  S = U.shape[0]
  if method == 'adam':
    opt = optax.adam(learning_rate)
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
  r, J = fit_residuals(prob, U, True)
  collinear, groups = identifiability.sensitivity(prob, J[0][:, :P])
  N = prob.n_residuals(prob.train)     # recorded samples × axes (window padding excluded)
  cost = np.sum(r ** 2, axis=1)
  curve = [cost / N]

  from tqdm import tqdm
  bar = tqdm(range(spec.iterations), desc=f'tune ({spec.method}, {S} start(s))',
             disable=not prob.progress, leave=False)
  if spec.method == 'gauss_newton':
    U, r, J, cost, more, found = _fit_gauss_newton(prob, U, r, J, lo, hi, bar, N, found)
  else:
    U, r, J, cost, more = _fit_optax(prob, spec.method, spec.learning_rate, U, r, J, cost, lo,
                                     hi, bar, N)
  bar.close()
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
      problem=prob, timing=found, fixed=fixed)
