"""Spectral lines of a log at rest: Welch PSD against a robust floor, the narrowband process
(`error_models.narrowband`: a second-order resonant Gauss–Markov) fitted to each line, and its
exact Allan variance (from the autocovariance) for the Allan fit."""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage, optimize, signal, stats as sps

from fibril_mjx.workflows.fit_profile import session

#: a line is a run of PSD bins this many times above the floor (and significant for the
#: Welch estimate's χ² spread at a false-alarm rate of `FALSE_ALARM` over all bins)
LINE_RATIO = 4.0
FALSE_ALARM = 1e-3
#: the floor: a running median over this fraction of the bins (an odd count ≥ 9)
FLOOR_FRACTION = 0.08


def welch(records, rate):
  """Welch PSD (Hann, 50 % overlap) averaged over records of one axis, weighted by their
  segment counts. Segments hold ≈ a tenth of the shortest record (≥ 64 samples, a power of
  two), so a 3 Hz line is resolved at 100 Hz from 10 s.

  Args:
    records: `(n_i,)` samples of each record (mean removed here).
    rate: sample rate in Hz.

  Returns:
    `(f (k,), psd (k,) one-sided units²/Hz, segments)`: `segments` the effective number of
    independent averages (the χ² degrees of freedom of each bin are `2·segments`).
  """
  n_min = min(len(r) for r in records)
  nper = int(2 ** max(6, math.floor(math.log2(max(n_min / 8, 64)))))
  nper = min(nper, n_min)
  acc, segs, f = 0.0, 0.0, None
  for r in records:
    r = np.asarray(r, np.float64)
    f, p = signal.welch(r - r.mean(), fs=rate, nperseg=nper, noverlap=nper // 2,
                        detrend='linear')
    k = max(1, (len(r) - nper) // (nper // 2) + 1)
    acc, segs = acc + k * p, segs + k
  # 50 % overlapped Hann segments: ≈ 0.95 of the dof of as many independent ones (k large)
  return f, acc / segs, 0.95 * segs


def floor(psd):
  """The robust floor of a PSD: a running median over `FLOOR_FRACTION` of the bins."""
  size = max(9, int(FLOOR_FRACTION * psd.size) // 2 * 2 + 1)
  return ndimage.median_filter(psd, size=size, mode='nearest')


def find_lines(records, rate):
  """Spectral lines of one axis: runs of bins whose PSD exceeds `LINE_RATIO` × the robust
  floor and the χ² quantile of the Welch estimate (false-alarm `FALSE_ALARM` over the bins).

  Returns:
    list of dicts `{'f0': peak frequency Hz, 'ratio': peak PSD / floor, 'lo', 'hi': the run's
    edges Hz, 'threshold': ratio used}`, strongest first; and `(f, psd, floor, segments)`.
  """
  f, p, segs = welch(records, rate)
  fl = floor(p)
  dof = 2 * segs
  q = sps.chi2.ppf(1 - FALSE_ALARM / max(p.size, 1), dof) / dof
  thr = max(LINE_RATIO, float(q))
  over = (p > thr * fl) & (f > 0)
  over[0] = False
  lines = []
  for i, j in session.true_runs(over):
    k = i + int(np.argmax(p[i:j + 1] / fl[i:j + 1]))
    lines.append({'f0': float(f[k]), 'ratio': float(p[k] / fl[k]), 'lo': float(f[i]),
                  'hi': float(f[j]), 'threshold': thr})
  lines.sort(key=lambda d: -d['ratio'])
  return lines, (f, p, fl, segs)


def coefficients(f0, bw, dt):
  """AR(2) coefficients `(a1, a2)` of the narrowband process (`em.narrowband`)."""
  r = math.exp(-math.pi * bw * dt)
  return 2.0 * r * math.cos(2.0 * math.pi * f0 * dt), -r * r


def narrowband_psd(f, sigma, f0, bw, dt):
  """One-sided PSD (units²/Hz) of the narrowband process of std σ (closed form)."""
  a1, a2 = coefficients(f0, bw, dt)
  c2 = sigma ** 2 * (1 + a2) * ((1 - a2) ** 2 - a1 ** 2) / (1 - a2)
  z = np.exp(-2j * np.pi * np.asarray(f, np.float64) * dt)
  return 2.0 * c2 * dt / np.abs(1 - a1 * z - a2 * z * z) ** 2


def autocovariance(f0, bw, dt, lags, sigma=1.0):
  """Stationary autocovariance `γ[0..lags]` of the narrowband process (Yule–Walker)."""
  a1, a2 = coefficients(f0, bw, dt)
  g = np.empty(lags + 1)
  g[0] = sigma * sigma
  if lags >= 1:
    g[1] = a1 / (1 - a2) * g[0]
  for k in range(2, lags + 1):
    g[k] = a1 * g[k - 1] + a2 * g[k - 2]
  return g


def allan_variance_of(gamma, m):
  """Exact overlapping Allan variance of a stationary process of autocovariance `gamma`
  (`γ[0..2·max(m)]`) at cluster sizes `m`: `(Var S_m − Cov(S_m, S'_m))/m²` with `S_m` the sum
  of m samples and `S'_m` the next m (`Var S_m = mγ0 + 2Σ_{d<m}(m−d)γd`, `Cov = Σ_{d<2m}
  min(d, 2m−d)γd`)."""
  m = np.atleast_1d(np.asarray(m, np.int64))
  out = np.empty(m.size)
  for i, mi in enumerate(m):
    d = np.arange(1, 2 * mi)
    var = mi * gamma[0] + 2.0 * np.sum((mi - d[:mi - 1]) * gamma[1:mi])
    cov = np.sum(np.minimum(d, 2 * mi - d) * gamma[1:2 * mi])
    out[i] = (var - cov) / (mi * mi)
  return out


def narrowband_avar(m, rate, f0, bw):
  """Allan variance at cluster sizes `m` of the unit-variance narrowband process."""
  m = np.atleast_1d(np.asarray(m, np.int64))
  return allan_variance_of(autocovariance(f0, bw, 1.0 / rate, 2 * int(m.max())), m)


def _hann_kernel(nper, sub):
  """The Hann window's spectral kernel |W|² on a grid of 1/`sub` bins, ±4 bins, unit sum."""
  w = np.hanning(nper + 1)[:-1] if nper > 1 else np.ones(1)
  k = np.abs(np.fft.fft(w, nper * sub)) ** 2
  k = np.concatenate([k[-4 * sub:], k[:4 * sub + 1]])
  return k / k.sum(), np.arange(-4 * sub, 4 * sub + 1) / sub


def fit_line(spec, line, rate):
  """Centre frequency, bandwidth and std of one line, with standard errors: least squares of
  the log Welch PSD around the line to `log(c + (S_nb ∗ |W|²)(f))`, the narrowband process's
  closed-form PSD (`narrowband_psd`) seen through the Hann window's kernel (so a line narrower
  than a bin keeps its power and centre). Each log-bin has variance ≈ 1/segments; Hann
  neighbours are correlated, so the errors are scaled by √1.5. B is bounded below by a
  twentieth of a bin: a line narrower than the resolution is reported with `resolved` False.

  Returns:
    dict `f0, f0_se, bandwidth_hz, bandwidth_se, sigma, sigma_se, resolution_hz, resolved`,
    or None when the fit fails.
  """
  f, p, fl, segs = spec
  dt, df = 1.0 / rate, float(f[1] - f[0])
  nper = int(round(rate / df))
  kern, offs = _hann_kernel(nper, 8)
  half = max(10 * df, 3 * (line['hi'] - line['lo']) + 6 * df)
  sel = (f >= max(line['lo'] - half, df)) & (f <= min(line['hi'] + half, 0.5 * rate - df))
  fs, ps = f[sel], p[sel]
  c0 = float(np.median(fl[sel]))
  area = float(np.sum(np.maximum(ps - c0, 0.0)) * df)
  b0 = max(line['hi'] - line['lo'], 0.5 * df)
  grid = fs[:, None] + offs[None, :] * df

  def model(x, ls2, f0, lb, lc):
    s = narrowband_psd(grid, math.exp(0.5 * ls2), f0, math.exp(lb), dt) @ kern
    return np.log(np.exp(lc) + s)
  lb_min = math.log(0.05 * df)
  try:
    popt, pcov = optimize.curve_fit(
        model, fs, np.log(ps),
        p0=(math.log(max(area, 1e-30)), line['f0'], max(math.log(b0), lb_min + 0.1),
            math.log(max(c0, 1e-300))),
        bounds=([-np.inf, fs[0], lb_min, -np.inf], [np.inf, fs[-1], math.log(0.25 * rate),
                                                    np.inf]),
        sigma=np.full(fs.size, math.sqrt(1.5 / segs)), absolute_sigma=True, max_nfev=4000)
  except (RuntimeError, ValueError):
    return None
  se = np.sqrt(np.maximum(np.diag(pcov), 0.0))
  sigma, bw = math.exp(0.5 * popt[0]), math.exp(popt[2])
  if not np.all(np.isfinite(se[:2])):
    return None
  return {'f0': float(popt[1]), 'f0_se': float(se[1]), 'bandwidth_hz': bw,
          'bandwidth_se': bw * float(se[2]), 'sigma': sigma,
          'sigma_se': 0.5 * sigma * float(se[0]), 'resolution_hz': df,
          'resolved': bool(bw > 0.5 * df and se[2] < 1.0)}
