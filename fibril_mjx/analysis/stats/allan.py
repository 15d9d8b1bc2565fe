"""Allan deviation (overlapping, cluster sizes, closed-form levels of white noise and random walk,
equivalent degrees of freedom)."""

from __future__ import annotations

import numpy as np
from fibril_mjx.analysis.stats.common import as_signal, check_rate


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
  x = as_signal(x)
  rate_hz = check_rate(rate_hz)
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
  """Allan deviation `N/√τ` of white rate noise of density `N = noise_density` (units/√Hz,
  e.g. rad/s/√Hz; IEEE-952 / Kalibr) at averaging time(s) `tau` (s): in the signal's units,
  the inputs (scalars or arrays) broadcast."""
  return np.asarray(noise_density, dtype=np.float64) / np.sqrt(np.asarray(tau, np.float64))


def allan_random_walk_level(random_walk, tau):
  """Allan deviation `K·√(τ/3)` of a rate random walk `b += K√Δ·ξ`, `K = random_walk`
  (units/√s, e.g. rad/s/√s), at averaging time(s) `tau` (s): as `allan_white_level`."""
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
