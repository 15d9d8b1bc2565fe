"""Autocorrelation, power spectral density and frequency response (first-order gain and
bandwidth fit)."""

from __future__ import annotations

import numpy as np
from scipy import optimize
from scipy import signal
from fibril_mjx.analysis.stats.common import as_signal, check_rate


# ---------------------------------------------------------------- autocorrelation / PSD


def autocorrelation(x, max_lag):
  """Normalized autocorrelation, biased estimator, mean removed.

    rho[k] = Σ_{i=0}^{n−1−k} (x[i] − x̄)(x[i+k] − x̄) / Σ_i (x[i] − x̄)²

  (the common 1/n factor cancels; the biased form keeps the sequence positive semidefinite).
  For an AR(1) `x[k] = φ x[k−1] + e[k]`, rho[k] ≈ φ^k; for white noise rho[k>0] ≈ 0 with
  standard deviation ≈ 1/√n.

  Args:
    x: `(n,)` samples.
    max_lag: largest lag in samples, `0 ≤ max_lag < n`.

  Returns:
    `(max_lag + 1,)` rho[0..max_lag], rho[0] = 1.
  """
  x = as_signal(x)
  n = x.size
  max_lag = int(max_lag)
  if not 0 <= max_lag < n:
    raise ValueError(f'max_lag must be in [0, {n}), got {max_lag}')
  xc = x - x.mean()
  nfft = 1 << int(np.ceil(np.log2(2 * n - 1)))
  spec = np.fft.rfft(xc, nfft)
  acov = np.fft.irfft(spec * np.conj(spec), nfft)[:max_lag + 1]
  if acov[0] <= 0:
    raise ValueError('autocorrelation of a constant signal is undefined')
  return acov / acov[0]


def white_psd_level(noise_density):
  """One-sided PSD `2·N²` of white noise of density `N` (IEEE-952 / Kalibr convention).

  A density N simulated with per-sample σ = N·√rate_hz has total variance σ² spread over
  [0, rate_hz/2]: one-sided level 2σ²/rate_hz = 2N² (N² as a two-sided PSD). Compare with
  `welch_psd`.

  Args:
    noise_density: N in units/√Hz, scalar or array.

  Returns:
    One-sided PSD level in units²/Hz.
  """
  return 2.0 * np.asarray(noise_density, np.float64) ** 2


def welch_psd(x, rate_hz, nperseg=1024):
  """One-sided power spectral density by Welch's method (Hann window, 50 % overlap).

  Thin wrapper over `scipy.signal.welch(..., scaling='density', detrend='constant')`:
  `Σ psd · Δf ≈ var(x)`. White noise of density N (σ = N·√rate_hz) reads `2N²`
  (`white_psd_level`).

  Args:
    x: `(n,)` samples.
    rate_hz: sample rate in Hz.
    nperseg: segment length in samples (frequency resolution rate_hz / nperseg); clipped to
      `n`. Longer segments: finer resolution, fewer averages (relative σ per bin ≈
      1/√(number of segments)).

  Returns:
    `(freqs_hz, psd)`: `(nperseg//2 + 1,)` frequencies in Hz from 0 to rate_hz/2 and the
    one-sided PSD in units²/Hz.
  """
  x = as_signal(x)
  rate_hz = check_rate(rate_hz)
  nperseg = int(min(int(nperseg), x.size))
  return signal.welch(x, fs=rate_hz, window='hann', nperseg=nperseg,
                      noverlap=nperseg // 2, detrend='constant', scaling='density',
                      return_onesided=True)


# ------------------------------------------------------------------ frequency response


def _cross_spectra(u, y, rate_hz, nperseg):
  u = as_signal(u, 'u')
  y = as_signal(y, 'y')
  if u.shape != y.shape:
    raise ValueError(f'u and y must have the same shape, got {u.shape} and {y.shape}')
  rate_hz = check_rate(rate_hz)
  nperseg = int(min(int(nperseg), u.size))
  kw = dict(fs=rate_hz, window='hann', nperseg=nperseg, noverlap=nperseg // 2,
            detrend='constant', scaling='density', return_onesided=True)
  f, puu = signal.welch(u, **kw)
  _, pyy = signal.welch(y, **kw)
  _, pyu = signal.csd(u, y, **kw)  # conj(U)·Y
  return f, puu, pyy, pyu


def first_order_response(u, y, rate_hz, freqs=None, nperseg=1024):
  """Frequency response `H = Pyu / Puu` (H1 estimator) from input `u` to output `y`.

  Works for any linear system (the name says what it is used for here: checking a
  sensor's first-order bandwidth). `u` should excite the band of interest (white noise, a
  chirp or a multisine); noise on `y` uncorrelated with `u` averages out, noise on `u`
  biases the gain low. A pure transport delay shows up as extra linear phase.

  Args:
    u: `(n,)` input (e.g. true angular velocity), uniformly sampled.
    y: `(n,)` output (e.g. the sensor's samples), same times as `u`.
    rate_hz: sample rate in Hz.
    freqs: optional `(k,)` frequencies in Hz at which to report H (real and imaginary parts
      linearly interpolated from the Welch grid); None for the grid itself without DC.
    nperseg: Welch segment length in samples.

  Returns:
    `(freqs_hz, gain, phase_rad)`: `(k,)` each; gain |H| (output units per input unit) and
    phase angle(H) in radians (negative = output lags).
  """
  f, puu, _, pyu = _cross_spectra(u, y, rate_hz, nperseg)
  h = pyu / puu
  if freqs is None:
    f, h = f[1:], h[1:]
  else:
    freqs = np.atleast_1d(np.asarray(freqs, dtype=np.float64))
    if np.any(freqs < 0) or np.any(freqs > f[-1]):
      raise ValueError(f'freqs must lie in [0, {f[-1]}] Hz')
    h = np.interp(freqs, f, h.real) + 1j * np.interp(freqs, f, h.imag)
    f = freqs
  return f, np.abs(h), np.angle(h)


def first_order_gain(freqs_hz, f_c_hz, rate_hz=None):
  """Gain of a first-order low-pass at `freqs_hz`.

  With `rate_hz` the discrete filter of SPEC §5.1/§5.2 (`y += α(x − y)`,
  `α = 1 − exp(−2π f_c / rate_hz)`): |α / (1 − (1 − α) e^{−jω/rate_hz})|. Without it the
  continuous `1/√(1 + (f/f_c)²)`.

  Args:
    freqs_hz: `(k,)` frequencies in Hz.
    f_c_hz: cut-off frequency in Hz.
    rate_hz: sample rate of the discrete filter, or None for the continuous one.

  Returns:
    `(k,)` gains.
  """
  freqs_hz = np.asarray(freqs_hz, np.float64)
  if rate_hz is None:
    return 1.0 / np.sqrt(1.0 + (freqs_hz / f_c_hz) ** 2)
  alpha = 1.0 - np.exp(-2.0 * np.pi * f_c_hz / rate_hz)
  z1 = np.exp(-2j * np.pi * freqs_hz / rate_hz)
  return np.abs(alpha / (1.0 - (1.0 - alpha) * z1))


def fit_first_order_bandwidth(u, y, rate_hz, model='discrete', nperseg=1024,
                              min_coherence=0.5):
  """Cut-off frequency of a first-order low-pass fitted to measured input/output.

  Estimates H = Pyu/Puu (`first_order_response`) and fits `first_order_gain` to |H| by
  coherence-weighted least squares on log-gain over the bins with coherence ≥
  `min_coherence` (DC excluded). Only the gain is fitted, so a transport delay does not
  bias f_c; a DC gain other than 1 does (scale errors should be removed first).

  Args:
    u: `(n,)` input (true signal), broadband in the band around f_c.
    y: `(n,)` output of the sensor/filter at the same sample times.
    rate_hz: sample rate in Hz.
    model: 'discrete' — the SPEC filter `y += α(x − y)`, α = 1 − exp(−2π f_c Δ) (exact for
      the simulator's filter); 'continuous' — `1/(1 + j f/f_c)`.
    nperseg: Welch segment length in samples.
    min_coherence: bins with lower magnitude-squared coherence are ignored.

  Returns:
    f_c in Hz (float).
  """
  if model not in ('discrete', 'continuous'):
    raise ValueError(f"model must be 'discrete' or 'continuous', got {model!r}")
  f, puu, pyy, pyu = _cross_spectra(u, y, rate_hz, nperseg)
  rate_hz = float(rate_hz)
  coh = np.abs(pyu) ** 2 / (puu * pyy)
  keep = (f > 0) & (coh >= min_coherence) & (puu > 0)
  if np.count_nonzero(keep) < 3:
    raise ValueError('fewer than 3 frequency bins with enough coherence; excite u more')
  f, w = f[keep], coh[keep]
  log_gain = np.log(np.abs(pyu[keep] / puu[keep]))
  dt_rate = rate_hz if model == 'discrete' else None

  def cost(log_fc):
    r = log_gain - np.log(first_order_gain(f, np.exp(log_fc), dt_rate))
    return np.sum(w * r * r)

  lo, hi = np.log(f[0] * 1e-3), np.log(rate_hz * 5.0)
  grid = np.linspace(lo, hi, 200)
  i = int(np.argmin([cost(g) for g in grid]))
  a, b = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
  res = optimize.minimize_scalar(cost, bounds=(a, b), method='bounded',
                                 options=dict(xatol=1e-10))
  return float(np.exp(res.x))
