"""Bounded nonlinear least squares for `tune` and `tune_fleet`: SciPy's trust-region
reflective `least_squares` (`method='trf'`, bounds, `x_scale='jac'`) from every start, fed by
the problem's residuals and forward-mode Jacobians.

Each start (or fleet unit) is its own `least_squares` run — its own trust region, its own
accepted steps and its own termination — on a thread of its own; the runs' evaluation
requests are gathered into one batched call of the problem (`_Batch`), so multi-start and a
fleet step every start together (one MJX program for the batch, one `mujoco.rollout` call on
the thread pool).

Norms (`optimizer.norm`) map to SciPy's `loss`:
  - `l2` → `'linear'`: the sum of squared weighted residuals.
  - `l1` → `'soft_l1'` with `f_scale = L1_SCALE`: ρ(r) = 2·c²·(√(1 + (r/c)²) − 1), which is
    2·c·|r| once |r| ≫ c — the mean absolute error — and quadratic within c of zero, so its
    derivative is continuous where |r| has a kink (why not `'huber'`, `'cauchy'` or
    `'arctan'`: docs/internals/tuning.md, "The l1 norm").
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from scipy.optimize import least_squares

LOSSES = {'l2': 'linear', 'l1': 'soft_l1'}

# `norm: l1`: SciPy's soft_l1 scale c, and the ε of the reported loss Σ(|r| + ε) and of its
# Gauss–Newton covariance (`transform`). In weighted-residual units — loss weights are meant as
# 1 / noise σ, so 0.05 σ: small against a typical residual, large enough to keep the loss
# smooth (and the transformed Jacobian J / (2√(|r| + ε)) bounded) at r = 0.
L1_SCALE = 0.05

# The trust-region steps: SciPy's `tr_solver='lsmr'` — the Gauss–Newton direction by LSMR
# (products with J and Jᵀ; at most P iterations, so with these tolerances it is the direct
# solution to rounding) and the trust-region problem on the 2-D subspace it spans with the
# gradient — in place of `'exact'`, which factors the (N + P) × P scaled Jacobian by an SVD
# at every iteration: a LAPACK factorization of a matrix with one row per recorded sample,
# where the rest of an iteration is products with it.
LSMR_TOL = 1e-12

CONVERGED = 1e-6   # `ftol`: a relative decrease of the cost below which a start has converged
# A start also ends at a rejected trial step where the undamped Gauss–Newton step is within
# this many standard errors of every parameter (covariance H⁻¹·rᵀr/(N − P)): it has
# converged to within what the data resolve — the loss is not smooth at that scale
# (quantized outputs, schedules, float32 device pipeline), and shrinking the trust region
# would only chase its roughness. 1 σ rather than 0.5 σ: on quantized linear fits with a
# Jacobian 60 % off (`tests/workflows/test_tune_fd.py`) the mean squared error against the
# truth is within 5 % of never stopping early, with fewer evaluations.
STEP_SIGMA = 1.0

# scipy `status` → what to try when a start did not move
_ADVICE = {
    -1: 'the residuals are not finite at the start: check the bounds, the start values and '
        'the recordings',
    0: 'raise optimizer.iterations',
    1: 'the loss does not change near the start: check that the loss terms see the '
       'parameters (weights, recordings) or move init away from a flat region',
    2: 'the loss does not decrease from the start: move init away from the bounds, try '
       'optimizer.starts > 1, or check the weights and recordings',
    3: 'the trust region shrank to nothing at the start: the loss may be rough there (a '
       'quantized output, an event); try another init or optimizer.starts > 1',
    4: 'the start already satisfies the tolerances: if it is not the optimum, check that the '
       'loss terms see the parameters',
    5: 'the start is already within a standard error of where the data put the parameters: '
       'if that is not expected, check the recordings and the loss weights',
}
RESOLVED = 5       # `Run.status` of a start ended by the `STEP_SIGMA` rule (not a SciPy status)


def transform(r: np.ndarray, J: np.ndarray | None, norm: str):
  """The residuals (and Jacobian) whose squares sum to the reported loss and whose
  Gauss–Newton covariance is the ±: the weighted residuals (`l2`), or sign(r)·√(|r| + ε) with
  ε = `L1_SCALE` (`l1`: their squares sum to Σ(|r| + ε); Gauss–Newton on them is iteratively
  reweighted least squares). Works on `(N,)` or `(S, N)` rows."""
  if norm == 'l2':
    return r, J
  root = np.sqrt(np.abs(r) + L1_SCALE)
  return np.sign(r) * root, None if J is None else J / (2.0 * root)[..., None]


def loss_sum(r: np.ndarray, norm: str) -> np.ndarray:
  """Σ of the transformed residuals' squares over the last axis (the reported loss × N)."""
  return np.sum(transform(r, None, norm)[0] ** 2, axis=-1)


def _resolved(r, J, norm, N, step_sigma) -> bool:
  """Whether the undamped Gauss–Newton step at `(r, J)` is within `step_sigma` standard
  errors of every parameter (see `STEP_SIGMA`)."""
  t, Jt = transform(r, J, norm)
  H = Jt.T @ Jt
  Hi = np.linalg.pinv(H)
  s2 = float(t @ t) / max(N - J.shape[1], 1)
  sigma = np.sqrt(np.maximum(np.diag(Hi), 0.0) * s2)
  return bool(np.all(np.abs(Hi @ (Jt.T @ t)) <= step_sigma * sigma))


class _Batch:
  """Gathers the evaluation requests of the starts' `least_squares` threads into batched
  calls: a round runs once every start still running has asked (or left)."""

  def __init__(self, evaluate, speculate, S: int, bar):
    self.evaluate, self.speculate, self.bar = evaluate, speculate, bar
    self.cond = threading.Condition()
    self.active = set(range(S))
    self.pending: dict = {}
    self.results: dict = {}
    self.error: BaseException | None = None

  def request(self, s: int, u: np.ndarray, jacobian: bool):
    """`(r (N,), J (N, P) or None)` of start `s` at `u` (J where asked, or where `speculate`
    says a Jacobian costs no more)."""
    with self.cond:
      if self.error is not None:
        raise self.error
      self.pending[s] = (u, jacobian)
      self._run_if_ready()
      while s not in self.results and self.error is None:
        self.cond.wait()
      if self.error is not None:
        raise self.error
      return self.results.pop(s)

  def leave(self, s: int) -> None:
    with self.cond:
      self.active.discard(s)
      self._run_if_ready()

  def _run_if_ready(self) -> None:
    if self.results or not self.pending or set(self.pending) != self.active:
      return
    rows = np.array(sorted(self.pending))
    U = np.stack([self.pending[s][0] for s in rows])
    want = np.array([self.pending[s][1] for s in rows])
    self.pending = {}
    try:
      if self.speculate is not None and self.speculate(len(rows)):
        want[:] = True
      for flag in (True, False):
        sel = want == flag
        if sel.any():
          r, J = self.evaluate(U[sel], flag, rows[sel])
          for k, s in enumerate(rows[sel]):
            self.results[int(s)] = (r[k], None if J is None else J[k])
    except BaseException as e:     # every waiting start raises it
      self.error = e
    self.bar.update(1)
    self.cond.notify_all()


@dataclasses.dataclass
class Run:
  """One start's `least_squares` run: its final point, the raw residuals and Jacobian there,
  the loss (`loss_sum`) at each accepted point, SciPy's status and message (or `RESOLVED`:
  ended by the `STEP_SIGMA` rule), and whether it moved from its start."""
  u: np.ndarray
  r: np.ndarray
  J: np.ndarray
  curve: list
  status: int
  message: str
  moved: bool


@dataclasses.dataclass(frozen=True)
class Settings:
  """How `solve` runs: `N` the residual count(s) that normalize the loss (a scalar or `(S,)`:
  the σ of the `step_sigma` rule), `max_nfev` residual evaluations per start (the start's
  included), the `norm` (`LOSSES`) and the `STEP_SIGMA` rule's σ (0: off)."""
  N: Any
  max_nfev: int
  norm: str = 'l2'
  step_sigma: float = STEP_SIGMA


def _one(s: int, batch: _Batch, start, bounds, settings: Settings) -> Run:
  """Start `s`'s `least_squares` run from `start = (u0, r0, J0)` within `bounds = (lo, hi)`
  (a thread's work; leaves `batch` when done). It works in the coordinates z = u + `_offset`
  (the points below are z)."""
  u0, r0, J0 = start
  lo, hi = bounds
  norm, N, step_sigma = settings.norm, int(settings.N), settings.step_sigma
  shift = _offset(lo, hi)
  lo, hi = lo + shift, hi + shift
  z0 = _inside(u0 + shift, lo, hi)   # where SciPy's trf would move it: its residuals are r0's
  memo = {z0.tobytes(): (r0, J0)}           # point → (r, J or None); the start is known
  at = {'u': z0, 'r': r0, 'J': J0}           # the current (last accepted) point
  curve = [float(loss_sum(r0, norm))]

  class Resolved(Exception):
    pass

  def fun(u):
    key = u.tobytes()
    if key not in memo:
      memo.clear()
      memo[at['u'].tobytes()] = (at['r'], at['J'])
      memo[key] = batch.request(s, u - shift, False)
      r = memo[key][0]
      if (np.all(np.isfinite(r)) and loss_sum(r, norm) >= loss_sum(at['r'], norm)
          and step_sigma > 0 and _resolved(at['r'], at['J'], norm, N, step_sigma)):
        raise Resolved
    return memo[key][0]

  def jac(u):
    key = u.tobytes()
    r, J = memo.get(key, (None, None))
    if J is None:
      r, J = batch.request(s, u - shift, True)
      memo[key] = (r, J)
    if key != at['u'].tobytes():
      at.update(u=u.copy(), r=r, J=J)
      curve.append(float(loss_sum(r, norm)))
    return J

  try:
    res = least_squares(fun, z0, jac=jac, bounds=(lo, hi), method='trf', x_scale='jac',
                        loss=LOSSES[norm], f_scale=L1_SCALE, ftol=CONVERGED,
                        max_nfev=settings.max_nfev, tr_solver='lsmr',
                        tr_options={'atol': LSMR_TOL, 'btol': LSMR_TOL})
    status, message = int(res.status), str(res.message)
    if not np.array_equal(res.x, at['u']):
      jac(res.x)
  except Resolved:
    status, message = RESOLVED, (f'stopped at a rejected step: the Gauss–Newton step is '
                                 f'within {step_sigma:g} standard error(s) of every parameter')
  finally:
    batch.leave(s)
  moved = not np.array_equal(at['u'], z0)
  return Run(at['u'] - shift, at['r'], at['J'], curve, status, message, moved)


def _offset(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
  """The shift z = u + offset that puts each bounded coordinate at least its bound range away
  from zero ([w, 2w] for bounds w apart; [1, ∞) or (−∞, −1] for one bound; unbounded ones as
  they are). SciPy's trf starts with a trust radius ∝ |x0| in its scaled coordinates (and its
  `xtol` is relative to |x|): from a start at a bound at 0 that radius is ~1e-10 — steps too
  small for a float32 residual to resolve, and the run ends at its start (`xtol`)."""
  with np.errstate(invalid='ignore'):
    return np.where(np.isfinite(lo) & np.isfinite(hi), (hi - lo) - lo,
                    np.where(np.isfinite(lo), 1.0 - lo, np.where(np.isfinite(hi), -1.0 - hi, 0.0)))


def _inside(u, lo, hi, rstep=1e-10):
  """`u` moved off an active bound by `rstep` (relative, at least absolute), bitwise as SciPy's
  trf does it to its `x0` (`make_strictly_feasible`), so that its first evaluation is the
  start's, already known."""
  u = u.copy()
  with np.errstate(invalid='ignore'):
    low = np.isfinite(lo) & (u - lo <= np.minimum(hi - u, rstep * np.maximum(1, np.abs(lo))))
    high = np.isfinite(hi) & (hi - u <= np.minimum(u - lo, rstep * np.maximum(1, np.abs(hi))))
  u[low] = lo[low] + rstep * np.maximum(1, np.abs(lo[low]))
  u[high] = hi[high] - rstep * np.maximum(1, np.abs(hi[high]))
  return u


def solve(evaluate, start, bounds, settings: Settings, *, speculate=None, bar=None) -> list:
  """`least_squares` from each start (see the module docstring).

  Args:
    evaluate: `(U_rows (k, P), jacobian, rows) -> (r (k, N), J (k, N, P) or None)` for the
      starts `rows` (indices into the batch).
    start: `(U0 (S, P), residuals (S, N), Jacobians (S, N, P))`; bounds: `(lo, hi)`, `(P,)`.
    settings: a `Settings`.
    speculate: `k -> bool`, whether `k` trial rows cost no more with their Jacobians.
    bar: a tqdm (updated once per batched evaluation) or None.

  Returns:
    a `Run` per start.
  """
  U0, R0, J0 = start
  S = U0.shape[0]
  Ns = np.broadcast_to(np.asarray(settings.N), (S,))
  batch = _Batch(evaluate, speculate, S, bar if bar is not None else _NoBar())
  jobs = [(s, batch, (np.asarray(U0[s], np.float64).copy(), R0[s], J0[s]), bounds,
           dataclasses.replace(settings, N=int(Ns[s]))) for s in range(S)]
  if S == 1:
    return [_one(*jobs[0])]
  with ThreadPoolExecutor(S) as pool:
    return list(pool.map(lambda job: _one(*job), jobs))


class _NoBar:
  def update(self, n=1):
    pass


def advice(run: Run) -> str:
  """What to try after a start that did not move, by SciPy's status."""
  return _ADVICE.get(run.status, 'try another init or optimizer.starts > 1')
