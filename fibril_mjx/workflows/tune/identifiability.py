"""What the data can and cannot pin down: the sensitivity check at the start of a fit and,
for the parameter groups it flags, the combinations the data does fix, with their ±.

A group is flagged when the Jacobian, its columns scaled to unit norm, has a singular value
below `COLLINEAR` of the largest: moving the group's parameters along that direction changes
the residuals by less than a thousandth of what the best-determined direction does. A motor
whose controller saturates its voltage is the classic case: the drive torque is `K/R · V`, so
resistance `R` and motor constant `K` move together and only their ratio is fixed by data
that sees the motion. For such a group of k parameters the report gives the k − 1
combinations the data fixes best (the leading right singular vectors of the Jacobian's
columns of the group, in the fitted coordinates), written as powers (`K^1 · R^-1`) when the
group is fitted in log, with the ± of the fit's covariance along them.
"""

from __future__ import annotations

import numpy as np

from fibril_mjx.errors import FibrilError

COLLINEAR = 1e-3   # singular value ratio below which a direction is reported


def right_svd(J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Singular values (descending) and right singular vectors (rows) of a tall `J` (residuals
  × parameters), from the eigendecomposition of its Gram matrix JᵀJ = V·Σ²·Vᵀ: one product
  with `J` and a P × P problem, where a QR or SVD of `J` factors a matrix with a row per
  residual. Squaring loses singular values below √ε ≈ 1e-8 of the largest (they come out
  as ~1e-8 or 0), far below the `COLLINEAR` ratio that flags a direction."""
  w, v = np.linalg.eigh(J.T @ J)
  order = np.argsort(w)[::-1]
  return np.sqrt(np.maximum(w[order], 0.0)), v[:, order].T


def sensitivity(prob, J0: np.ndarray) -> tuple[list[str], list[tuple[int, ...]]]:
  """The start's check: an error for a parameter with a zero Jacobian column; else the
  near-collinear directions as text, and the parameter groups they involve."""
  norms = np.linalg.norm(J0, axis=0)
  scale = max(float(norms.max()), 1e-300)
  dead = [p.name for p, n in zip(prob.params, norms) if not n > 1e-7 * scale]
  if dead:
    raise FibrilError(f'{prob.spec.path}: unidentifiable parameter(s) {", ".join(dead)}: the '
                      'loss does not change with them at the start (zero derivative) — add a '
                      'loss term on a sensor that sees them, or remove them')
  sv, vt = right_svd(J0 / norms)
  text, groups = [], []
  for k in range(len(sv)):
    if sv[k] < COLLINEAR * sv[0]:
      v = vt[k]
      big = [int(i) for i in np.argsort(-np.abs(v))[:3] if abs(v[i]) > 0.1]
      text.append(' + '.join(f'{v[i]:+.2f}·{prob.params[i].name}' for i in big)
                  + f' (singular value {sv[k] / sv[0]:.1e})')
      groups.append(tuple(sorted(big)))
  return text, groups


def _simple(a: np.ndarray) -> np.ndarray:
  """Exponents as written: a half-integer when within 0.05 of one (the ratio `K/R`, not
  `K^1.00 · R^-0.99`), else two decimals; the value and ± are those of what is written."""
  half = np.round(a * 2) / 2
  return np.where(np.abs(a - half) < 0.05, half, np.round(a, 2))


def fixed_combinations(prob, J: np.ndarray, cov_u: np.ndarray, u: np.ndarray,
                       groups) -> list[str]:
  """For each flagged group, the combinations its data fixes at the optimum `u` (one line
  each: the combination, its value and ± 2σ)."""
  out = []
  for g in dict.fromkeys(groups):
    if len(g) < 2:
      continue
    g = list(g)
    _, vt = right_svd(J[:, g])
    for a in vt[:len(g) - 1]:
      a = _simple(a / a[np.argmax(np.abs(a))])
      w = np.zeros(len(u))
      w[g] = a
      sd = float(np.sqrt(max(w @ cov_u @ w, 0.0)))
      names = [prob.params[i].name for i in g]
      if all(prob.params[i].log for i in g):
        value = float(np.exp(w @ u))
        expr = ' · '.join(f'{n}^{e:g}' for n, e in zip(names, a) if e != 0)
        out.append(f'{expr} = {value:.6g} ± {2 * sd * value:.3g} (2σ)')
      else:
        value = float(w @ u)
        expr = ' + '.join(f'{e:g}·{"log " if prob.params[i].log else ""}{n}'
                          for i, n, e in zip(g, names, a) if e != 0)
        out.append(f'{expr} = {value:.6g} ± {2 * sd:.3g} (2σ)')
  return out
