"""The Allan variance model of white noise + AR(1) terms + random walk, the N/B/K extraction, and
the AR(1) fit."""

from __future__ import annotations

import numpy as np
from fibril_mjx.analysis.stats.allan import allan_cluster_sizes, allan_deviation, allan_edf
from fibril_mjx.analysis.stats.common import check_rate


# ------------------------------------------------------- Allan model and N/B/K extraction

#: Allan deviation of flicker (bias-instability) noise on its flat floor is `B·√(2 ln 2 / π)`
#: (IEEE-952 Annex C); `B = floor / 0.664`.
BIAS_INSTABILITY_FACTOR = float(np.sqrt(2.0 * np.log(2.0) / np.pi))


def allan_variance_model(m, rate_hz, white_sigma=0.0, ar1=(), random_walk=0.0):
  """Exact expected overlapping Allan variance of a discrete error model (closed forms).

  The model is the one the simulator runs per acquisition (SPEC §5.1/§5.2), `Δ = 1/rate_hz`:

  - white noise of per-sample std `σ_w` (`σ_w = N/√Δ` for a noise density N; add the
    quantization variance `q²/12` here): `AVAR = σ_w²/m`;
  - stationary AR(1) / first-order Gauss–Markov terms `(σ, φ)`, `x[k] = φx[k−1] + σ√(1−φ²)ξ`
    (`φ = exp(−Δ/τ_c)` for a correlation time τ_c): with `S = Σ_{j=1}^{m−1}(m−j)φ^j
    = (mφ(1−φ) − φ(1−φ^m))/(1−φ)²`, `AVAR = σ²/m²·(m + 2S − φ(1−φ^m)²/(1−φ)²)`
    (variance of an m-average minus the covariance of adjacent ones);
  - a random walk `b += K√Δ·ξ`: `AVAR = K²τ/3·(1 + 1/(2m²))`, τ = mΔ.

  Independent terms add in variance.

  Args:
    m: cluster size(s) in samples, int or `(k,)`.
    rate_hz: sample rate in Hz.
    white_sigma: per-sample std of the white part (units of the signal).
    ar1: sequence of `(sigma, phi)` pairs.
    random_walk: K in units/√s.

  Returns:
    `(k,)` Allan variance in units² (take `np.sqrt` for the deviation).
  """
  m = np.atleast_1d(np.asarray(m, np.float64))
  dt = 1.0 / check_rate(rate_hz)
  avar = float(white_sigma) ** 2 / m
  for sigma, phi in ar1:
    sigma, phi = float(sigma), float(phi)
    if sigma == 0.0:
      continue
    if not 0.0 <= abs(phi) < 1.0:
      raise ValueError(f'AR(1) coefficient must satisfy |phi| < 1, got {phi}')
    cov = phi * (1.0 - phi ** m) ** 2 / (1.0 - phi) ** 2
    avar = avar + sigma * sigma * (ar1_var_of_mean(phi, m) - cov / (m * m))
  k = float(random_walk)
  if k:
    avar = avar + k * k * (m * dt) / 3.0 * (1.0 + 1.0 / (2.0 * m * m))
  return avar


def allan_relative_sigma(n_samples, m, realizations=1):
  """Relative standard deviation of an overlapping Allan deviation estimate.

  `1/√(2·edf)` with the smaller of the white and random-walk edf of `allan_edf` (the
  conservative one for a mixture; AR(1) terms behave like a random walk below their
  correlation time and like white noise above it), times `1/√realizations` when the Allan
  *variances* of that many independent equal-length records are averaged.

  Args:
    n_samples: samples per record.
    m: cluster size(s).
    realizations: number of independent records averaged.

  Returns:
    relative std of the deviation, shape of `m`.
  """
  edf = np.minimum(allan_edf(n_samples, m, 'white'), allan_edf(n_samples, m, 'random_walk'))
  return 1.0 / np.sqrt(2.0 * np.maximum(edf, 1e-12) * float(realizations))


def _local_slopes(taus, adev):
  x, y = np.log(taus), np.log(adev)
  if x.size < 3:
    return np.full(x.size, np.nan)
  return np.gradient(y, x)


def allan_nbk(taus, adev, rel_sigma=None, slope_tolerance=0.1):
  """White noise N, bias instability B and random walk K by the standard slope fits.

  IEEE-952 / Kalibr reading of an Allan deviation plot: where the local log-log slope is
  −1/2 the curve is white rate noise and the line `N/√τ` through it gives N (its value at
  τ = 1 s); where it is +1/2 the line `K·√(τ/3)` gives K (its value at τ = 3 s); where it
  is 0 (the flat floor) `B = floor / √(2 ln 2/π) = floor/0.664`. Each line is fitted as the
  mean of `log(adev) − slope·log(τ)`, weighted by `1/rel_sigma²`, over the points whose local
  slope lies within `slope_tolerance` of the target (the floor takes the minimum over its
  points). The reported relative standard error is the same weighted mean of `rel_sigma`
  (an upper bound whatever the correlation between neighbouring τ). A term
  without such points is reported unresolved (value None) — e.g. a Gauss–Markov bias whose
  correlation time is longer than a tenth of the record shows no floor.

  Args:
    taus: `(k,)` averaging times (s), increasing.
    adev: `(k,)` Allan deviation.
    rel_sigma: `(k,)` relative std of each point (`allan_relative_sigma`), or None (equal
      weights, no standard error).
    slope_tolerance: half-width of the accepted slope band.

  Returns:
    `{'N': {...}, 'B': {...}, 'K': {...}}`, each `{'value': float | None, 'taus': (lo, hi)
    of the points used | None, 'points': int, 'rel_sigma': float | None}`; also `'slopes'`:
    `(k,)` local slopes.
  """
  taus = np.asarray(taus, np.float64)
  adev = np.asarray(adev, np.float64)
  rs = None if rel_sigma is None else np.asarray(rel_sigma, np.float64)
  if taus.shape != adev.shape or taus.ndim != 1:
    raise ValueError('taus and adev must be 1-D of equal length')
  ok = adev > 0
  slopes = np.full(taus.size, np.nan)
  slopes[ok] = _local_slopes(taus[ok], adev[ok])
  out = {'slopes': slopes}
  for name, target in (('N', -0.5), ('B', 0.0), ('K', 0.5)):
    sel = ok & (np.abs(slopes - target) <= slope_tolerance)
    if not np.any(sel):
      out[name] = {'value': None, 'taus': None, 'points': 0, 'rel_sigma': None}
      continue
    lt, la = np.log(taus[sel]), np.log(adev[sel])
    w = np.ones(lt.size) if rs is None else 1.0 / rs[sel] ** 2
    if name == 'N':
      value = float(np.exp(np.average(la + 0.5 * lt, weights=w)))
    elif name == 'K':
      value = float(np.exp(np.average(la - 0.5 * lt, weights=w)) * np.sqrt(3.0))
    else:
      value = float(np.exp(la.min()) / BIAS_INSTABILITY_FACTOR)
    err = None
    if rs is not None:
      err = float(rs[sel][np.argmin(la)]) if name == 'B' else float(np.average(rs[sel],
                                                                               weights=w))
    out[name] = {'value': value, 'taus': (float(taus[sel].min()), float(taus[sel].max())),
                 'points': int(np.count_nonzero(sel)), 'rel_sigma': err}
  return out


def allan_deviation_pooled(x, rate_hz, m=None):
  """Overlapping Allan deviation averaged (in variance) over independent records.

  Args:
    x: `(r, n)` r records of n samples each (e.g. worlds × samples of one axis).
    rate_hz: sample rate in Hz.
    m: cluster sizes, or None for `allan_cluster_sizes(n)`.

  Returns:
    `(taus_s, adev, rel_sigma)`: `(k,)` each; `rel_sigma` from `allan_relative_sigma` with
    `realizations = r`.
  """
  x = np.asarray(x, np.float64)
  if x.ndim != 2:
    raise ValueError(f'x must be 2-D (records, samples), got shape {x.shape}')
  r, n = x.shape
  if m is None:
    m = allan_cluster_sizes(n)
  taus = np.asarray(m, np.float64) / float(rate_hz)
  avar = np.zeros(taus.size)
  for row in x:
    _, a = allan_deviation(row, rate_hz, taus=taus)
    avar += a * a
  return taus, np.sqrt(avar / r), allan_relative_sigma(n, m, r)


def ar1_var_of_mean(phi, n):
  """Variance of the mean of `n` consecutive samples of a stationary AR(1) process of unit
  variance and lag-1 coefficient `phi` (`n` may be an array): `(n + 2·S) / n²`,
  `S = Σ_{k<n} (n−k)·φ^k = (nφ(1−φ) − φ(1−φⁿ)) / (1−φ)²`."""
  s = (n * phi * (1.0 - phi) - phi * (1.0 - phi ** n)) / (1.0 - phi) ** 2
  return (n + 2.0 * s) / (n * n)


def ar1_residual_var_factor(rho: float, n: int, trend: bool = False) -> float:
  """`E[mean of squared residuals] / σ²` of an AR(1) record (lag-1 coefficient `rho`,
  stationary variance σ²) of `n` samples after its mean (and, with `trend`, its least-squares
  slope) is removed: `1 − tr(H R) / n`, `R_ij = ρ^|i−j|`, `H` the projection on the removed
  basis. Close to `1 − (1+ρ)/(1−ρ)·(1 + trend)/n` for a record long against the correlation
  time; a slow process loses a sizeable share (ρ 0.98 over 1000 samples, mean and slope
  removed: 0.82)."""
  taken = float(ar1_var_of_mean(float(rho), n)) * n   # the mean's share: 1ᵀR1 / n
  if trend:   # the slope's: tᵀRt / tᵀt, t orthogonal to the constant; its lag sums by FFT
    t = np.arange(n) - (n - 1) / 2.0
    f = np.fft.rfft(t, 2 * n)
    acf = np.fft.irfft(f * np.conj(f), 2 * n)[:n]
    taken += float(acf[0] + 2 * np.sum(float(rho) ** np.arange(1, n) * acf[1:])) / float(t @ t)
  return 1.0 - taken / n


def ar1_fit(x):
  """Stationary std and lag-1 coefficient of an AR(1) residual, pooled over records.

  Args:
    x: `(r, n)` records (each record's mean is removed: a constant is bias, not noise).

  Returns:
    `(sigma, rho, sigma_rel_se, rho_se)`: sample std, lag-1 autocorrelation, the relative
    standard error of sigma `√((1+ρ²)/(1−ρ²)/(2·r·n))` and the standard error of ρ
    `√((1−ρ²)/(r·n))` (large-sample AR(1) results).
  """
  x = np.asarray(x, np.float64)
  if x.ndim == 1:
    x = x[None]
  xc = x - x.mean(axis=1, keepdims=True)
  r, n = xc.shape
  var = float(np.mean(xc * xc))
  if var <= 0:
    return 0.0, 0.0, 0.0, 0.0
  rho = float(np.sum(xc[:, 1:] * xc[:, :-1]) / np.sum(xc * xc))
  rho_c = min(abs(rho), 0.999)
  sig_rel = float(np.sqrt((1 + rho_c ** 2) / (1 - rho_c ** 2) / (2.0 * r * n)))
  return float(np.sqrt(var)), rho, sig_rel, float(np.sqrt((1 - rho_c ** 2) / (r * n)))
