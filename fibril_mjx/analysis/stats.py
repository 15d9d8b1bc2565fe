"""Statistics for validating sensor models against their profiles (SPEC §12).

Host-side NumPy tools, float64 throughout: Allan deviation, autocorrelation, power spectral
density, frequency response and a first-order bandwidth fit. They take plain 1-D sample
sequences of one channel, uniformly sampled at `rate_hz`, and are meant for long logs from
the simulator or from a device (the `validate` command builds on them).

Noise-density convention (IEEE-952 / Kalibr, the one SPEC §5.2 uses): a white rate noise of
density `N` (e.g. rad/s/√Hz) is simulated with per-sample σ = `N·√(rate_hz)`; its Allan
deviation is `N/√τ` (`allan_white_level`) and its one-sided PSD is `2·N²`
(`white_psd_level`, i.e. `N²` two-sided). A rate random walk `K` (units/√s, `b += K√Δ·ξ`)
has Allan deviation `K·√(τ/3)` (`allan_random_walk_level`).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize
from scipy import signal


def _as_signal(x, name='x'):
  x = np.asarray(x, dtype=np.float64)
  if x.ndim != 1:
    raise ValueError(f'{name} must be 1-D (n_samples,), got shape {x.shape}')
  if x.size < 3:
    raise ValueError(f'{name} needs at least 3 samples, got {x.size}')
  if not np.all(np.isfinite(x)):
    raise ValueError(f'{name} contains non-finite values')
  return x


def _check_rate(rate_hz):
  rate_hz = float(rate_hz)
  if not rate_hz > 0:
    raise ValueError(f'rate_hz must be > 0, got {rate_hz}')
  return rate_hz


# ----------------------------------------------------------------------------- Allan


def allan_cluster_sizes(n_samples, points_per_decade=10, min_clusters=9):
  """Default Allan cluster sizes: log-spaced integers `m ≥ 1`.

  Args:
    n_samples: length of the rate signal.
    points_per_decade: density of the log grid before rounding to unique integers.
    min_clusters: the largest `m` keeps at least this many non-overlapping clusters
      (`m ≤ n_samples // min_clusters`), so the longest τ is still estimated from several
      independent averages.

  Returns:
    `(n_taus,)` int64, strictly increasing cluster sizes in samples (τ = m / rate_hz).
  """
  m_max = int(n_samples) // int(min_clusters)
  if m_max < 1:
    raise ValueError(f'{n_samples} samples are too few for {min_clusters} clusters')
  n_pts = max(int(np.ceil(np.log10(m_max) * points_per_decade)) + 1, 1)
  m = np.unique(np.round(np.logspace(0.0, np.log10(m_max), n_pts)).astype(np.int64))
  return m[(m >= 1) & (m <= m_max)]


def allan_deviation(x, rate_hz, taus=None):
  """Overlapping Allan deviation of a rate signal (IEEE-952, NIST SP1065 eq. 11).

  The signal is integrated, `θ[0] = 0`, `θ[k] = Σ_{i<k} x[i] / rate_hz` (the mean is
  removed first; it cancels in the second difference and only costs precision), and for
  each cluster size `m` (τ = m / rate_hz):

    AVAR(τ) = Σ_{k=0}^{n−2m} (θ[k+2m] − 2θ[k+m] + θ[k])² / (2 τ² (n + 1 − 2m))

  with `n + 1` integrated points. This is the standard overlapping estimator
  (`allantools.oadev(x, rate, data_type='freq')` computes the same numbers).

  Args:
    x: `(n,)` rate samples, e.g. gyro rad/s or accelerometer m/s², uniformly sampled.
    rate_hz: sample rate in Hz (Δ = 1/rate_hz).
    taus: `(k,)` averaging times in seconds, or None for `allan_cluster_sizes(n)` (log
      spaced, ~10 per decade, at least 9 clusters at the longest τ). Each τ is rounded to
      the nearest whole number of samples `m`; duplicates are merged. A τ shorter than half
      a sample or with `2m > n` raises ValueError.

  Returns:
    `(taus_s, adev)`: `(k,)` the averaging times actually used (m / rate_hz, seconds) and
    `(k,)` the Allan deviation in the units of `x` (e.g. rad/s). White rate noise of
    density N gives `N/√τ` (slope −1/2); a rate random walk K gives `K·√(τ/3)` (slope +1/2).
  """
  x = _as_signal(x)
  rate_hz = _check_rate(rate_hz)
  n = x.size
  if taus is None:
    m = allan_cluster_sizes(n)
  else:
    taus = np.atleast_1d(np.asarray(taus, dtype=np.float64))
    m = np.round(taus * rate_hz).astype(np.int64)
    if np.any(m < 1):
      raise ValueError(f'taus below half a sample period (1/{rate_hz} s): {taus[m < 1]}')
    if np.any(2 * m > n):
      raise ValueError(f'taus too long for {n} samples (need 2·τ·rate_hz ≤ n): '
                       f'{taus[2 * m > n]}')
    m = np.unique(m)
  theta = np.concatenate([[0.0], np.cumsum(x - x.mean())]) / rate_hz
  adev = np.empty(m.size)
  for i, mi in enumerate(m):
    d = theta[2 * mi:] - 2.0 * theta[mi:-mi] + theta[:-2 * mi]
    tau = mi / rate_hz
    adev[i] = np.sqrt(np.mean(d * d) / (2.0 * tau * tau))
  return m / rate_hz, adev


def allan_white_level(noise_density, tau):
  """Allan deviation `N/√τ` of white rate noise of density `N` (IEEE-952 / Kalibr).

  Args:
    noise_density: N in units/√Hz (e.g. rad/s/√Hz), scalar or array.
    tau: averaging time(s) in seconds.

  Returns:
    Allan deviation in the signal's units, broadcast shape of the inputs.
  """
  return np.asarray(noise_density, dtype=np.float64) / np.sqrt(np.asarray(tau, np.float64))


def allan_random_walk_level(random_walk, tau):
  """Allan deviation `K·√(τ/3)` of a rate random walk `b += K√Δ·ξ`.

  Args:
    random_walk: K in units/√s (e.g. rad/s/√s), scalar or array.
    tau: averaging time(s) in seconds.

  Returns:
    Allan deviation in the signal's units, broadcast shape of the inputs.
  """
  return np.asarray(random_walk, np.float64) * np.sqrt(np.asarray(tau, np.float64) / 3.0)


def allan_edf(n_samples, m, noise='white'):
  """Equivalent degrees of freedom of the overlapping Allan variance (NIST SP1065 §5.2).

  Used to size confidence intervals and test tolerances: the relative standard deviation
  of the estimated Allan *deviation* is about `1/√(2·edf)`.

  Args:
    n_samples: length `n` of the rate signal (the phase series has `n + 1` points).
    m: cluster size(s) in samples, int or `(k,)`.
    noise: 'white' (white rate noise, slope −1/2) or 'random_walk' (rate random walk,
      slope +1/2).

  Returns:
    `(k,)` (or scalar) equivalent degrees of freedom.
  """
  n_phase = float(n_samples) + 1.0
  m = np.asarray(m, dtype=np.float64)
  if noise == 'white':
    return (3.0 * (n_phase - 1.0) / (2.0 * m) - 2.0 * (n_phase - 2.0) / n_phase) * (
        4.0 * m * m / (4.0 * m * m + 5.0))
  if noise == 'random_walk':
    return ((n_phase - 2.0) / m) * ((n_phase - 1.0) ** 2 - 3.0 * m * (n_phase - 1.0)
                                    + 4.0 * m * m) / (n_phase - 3.0) ** 2
  raise ValueError(f"noise must be 'white' or 'random_walk', got {noise!r}")


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
  x = _as_signal(x)
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
  x = _as_signal(x)
  rate_hz = _check_rate(rate_hz)
  nperseg = int(min(int(nperseg), x.size))
  return signal.welch(x, fs=rate_hz, window='hann', nperseg=nperseg,
                      noverlap=nperseg // 2, detrend='constant', scaling='density',
                      return_onesided=True)


# ------------------------------------------------------------------ frequency response


def _cross_spectra(u, y, rate_hz, nperseg):
  u = _as_signal(u, 'u')
  y = _as_signal(y, 'y')
  if u.shape != y.shape:
    raise ValueError(f'u and y must have the same shape, got {u.shape} and {y.shape}')
  rate_hz = _check_rate(rate_hz)
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
  dt = 1.0 / _check_rate(rate_hz)
  avar = float(white_sigma) ** 2 / m
  for sigma, phi in ar1:
    sigma, phi = float(sigma), float(phi)
    if sigma == 0.0:
      continue
    if not 0.0 <= abs(phi) < 1.0:
      raise ValueError(f'AR(1) coefficient must satisfy |phi| < 1, got {phi}')
    pm = phi ** m
    s = (m * phi * (1.0 - phi) - phi * (1.0 - pm)) / (1.0 - phi) ** 2
    cov = phi * (1.0 - pm) ** 2 / (1.0 - phi) ** 2
    avar = avar + sigma * sigma / (m * m) * (m + 2.0 * s - cov)
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
