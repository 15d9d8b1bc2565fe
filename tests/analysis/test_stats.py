"""Tests for fibril_mjx.analysis.stats against allantools and independent NumPy references.

Statistical tolerances come from the sample sizes: the relative standard deviation of an
Allan deviation estimate is ≈ 1/√(2·edf) (NIST SP1065 edf for the overlapping estimator),
of a Welch PSD bin ≈ 1/√(number of segments), of a sample autocorrelation the Bartlett
formula. Seeds are fixed; bounds are 4–5σ.
"""

import math

import allantools
import numpy as np
import pytest

from fibril_mjx.analysis import stats

RATE_HZ = 100.0


def _rng(seed):
  return np.random.default_rng(seed)


def _slope_and_tolerance(taus, adev, sigma_rel, k_sigma=3.0):
  """Least-squares log-log slope and a bound for its error.

  slope = Σ w_i log(adev_i); the bound assumes fully correlated errors (Allan estimates at
  neighbouring τ share data): |δslope| ≤ k·Σ|w_i|·σ_i with σ_i the relative std of adev_i.
  """
  x = np.log(taus)
  w = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
  return float(np.sum(w * np.log(adev))), k_sigma * float(np.sum(np.abs(w) * sigma_rel))


# ------------------------------------------------------------------------- Allan


def test_allan_matches_allantools_oadev():
  rng = _rng(0)
  n = 20000
  x = 0.3 + 0.01 * np.sqrt(RATE_HZ) * rng.standard_normal(n) + np.cumsum(
      1e-3 * rng.standard_normal(n))
  taus, adev = stats.allan_deviation(x, RATE_HZ)
  ref_taus, ref_adev, _, _ = allantools.oadev(x, rate=RATE_HZ, data_type='freq', taus=taus)
  np.testing.assert_allclose(ref_taus, taus, rtol=1e-12)
  np.testing.assert_allclose(adev, ref_adev, rtol=1e-9)
  # Explicit taus, rounded to whole samples the same way.
  req = np.array([0.01, 0.05, 0.123, 1.0, 10.0, 99.0])
  taus, adev = stats.allan_deviation(x, RATE_HZ, taus=req)
  ref_taus, ref_adev, _, _ = allantools.oadev(x, rate=RATE_HZ, data_type='freq', taus=req)
  np.testing.assert_allclose(taus, ref_taus, rtol=1e-12)
  np.testing.assert_allclose(adev, ref_adev, rtol=1e-9)


def test_allan_white_noise_level_and_slope():
  noise_density = 0.01  # rad/s/√Hz
  n = 2 ** 17
  x = noise_density * np.sqrt(RATE_HZ) * _rng(1).standard_normal(n)
  taus, adev = stats.allan_deviation(x, RATE_HZ)
  m = np.round(taus * RATE_HZ)
  sigma_rel = 1.0 / np.sqrt(2.0 * stats.allan_edf(n, m, 'white'))
  ratio = adev / stats.allan_white_level(noise_density, taus)
  print(f'white: adev/(N/√τ) at τ={taus[0]:.2f}s {ratio[0]:.4f}, τ=1s '
        f'{ratio[np.argmin(abs(taus - 1))]:.4f}, τ={taus[-1]:.0f}s {ratio[-1]:.3f}; '
        f'max |ratio−1|/σ = {np.max(np.abs(ratio - 1) / sigma_rel):.2f}')
  assert np.all(np.abs(ratio - 1) < 4 * sigma_rel)
  fit = m <= n // 100  # ≥ 100 clusters
  slope, tol = _slope_and_tolerance(taus[fit], adev[fit], sigma_rel[fit])
  print(f'white: slope {slope:.4f} (−0.5 ± {tol:.4f})')
  assert abs(slope + 0.5) < tol
  assert tol < 0.03  # the bound is informative


def test_allan_random_walk_level_and_slope():
  random_walk = 1e-3  # rad/s/√s
  n = 2 ** 17
  dt = 1.0 / RATE_HZ
  x = np.cumsum(random_walk * np.sqrt(dt) * _rng(2).standard_normal(n))
  m = stats.allan_cluster_sizes(n)
  m = m[m >= 10]
  taus, adev = stats.allan_deviation(x, RATE_HZ, taus=m / RATE_HZ)
  # Exact for the discrete walk: AVAR = K²τ/3 · (1 + 1/(2m²)).
  level = stats.allan_random_walk_level(random_walk, taus) * np.sqrt(1 + 0.5 / m ** 2)
  sigma_rel = 1.0 / np.sqrt(2.0 * stats.allan_edf(n, m, 'random_walk'))
  ratio = adev / level
  print(f'random walk: adev/(K√(τ/3)) at τ={taus[0]:.1f}s {ratio[0]:.4f}, '
        f'τ={taus[-1]:.0f}s {ratio[-1]:.3f}; '
        f'max |ratio−1|/σ = {np.max(np.abs(ratio - 1) / sigma_rel):.2f}')
  assert np.all(np.abs(ratio - 1) < 4 * sigma_rel)
  slope, tol = _slope_and_tolerance(taus, adev, sigma_rel)
  print(f'random walk: slope {slope:.4f} (+0.5 ± {tol:.4f})')
  assert abs(slope - 0.5) < tol
  assert tol < 0.15


def test_allan_rejects_bad_taus():
  x = np.zeros(100)
  x[::2] = 1.0
  with pytest.raises(ValueError):
    stats.allan_deviation(x, RATE_HZ, taus=[0.001])  # < half a sample
  with pytest.raises(ValueError):
    stats.allan_deviation(x, RATE_HZ, taus=[0.6])  # 2m > n
  with pytest.raises(ValueError):
    stats.allan_deviation(np.ones((10, 2)), RATE_HZ)


def test_allan_helpers():
  np.testing.assert_allclose(stats.allan_white_level(0.02, 4.0), 0.01)
  np.testing.assert_allclose(stats.allan_random_walk_level(0.3, 3.0), 0.3)
  np.testing.assert_allclose(stats.white_psd_level(0.1), 0.02)


# -------------------------------------------------------------- autocorrelation


def test_autocorrelation_matches_direct_sum():
  x = _rng(3).standard_normal(257) + 2.0
  rho = stats.autocorrelation(x, 40)
  xc = x - x.mean()
  ref = np.array([np.sum(xc[:x.size - k] * xc[k:]) for k in range(41)]) / np.sum(xc * xc)
  np.testing.assert_allclose(rho, ref, atol=1e-12)
  assert rho[0] == pytest.approx(1.0)


def test_autocorrelation_of_ar1():
  phi, n, max_lag = 0.9, 2 ** 16, 40
  e = _rng(4).standard_normal(n)
  x = np.empty(n)
  x[0] = e[0] / np.sqrt(1 - phi ** 2)  # stationary start
  for k in range(1, n):
    x[k] = phi * x[k - 1] + e[k]
  rho = stats.autocorrelation(x, max_lag)
  k = np.arange(max_lag + 1)
  expected = phi ** k
  # Bartlett's variance of r_k for an AR(1).
  var = ((1 + phi ** 2) * (1 - phi ** (2 * k)) / (1 - phi ** 2) - 2 * k * phi ** (2 * k)) / n
  sigma = np.sqrt(np.maximum(var, 1.0 / n ** 2))
  print(f'AR(1) φ=0.9: max |ρ_k − φ^k|/σ = {np.max(np.abs(rho - expected)[1:] / sigma[1:]):.2f}'
        f', max |ρ_k − φ^k| = {np.max(np.abs(rho - expected)):.4f}')
  assert np.all(np.abs(rho - expected)[1:] < 4 * sigma[1:])


def test_autocorrelation_rejects_bad_lag():
  with pytest.raises(ValueError):
    stats.autocorrelation(np.arange(10.0), 10)


# -------------------------------------------------------------------------- PSD


def test_welch_psd_of_white_noise():
  noise_density = 0.01
  n, nperseg = 2 ** 17, 1024
  x = noise_density * np.sqrt(RATE_HZ) * _rng(5).standard_normal(n)
  f, psd = stats.welch_psd(x, RATE_HZ, nperseg=nperseg)
  assert f.shape == (nperseg // 2 + 1,) and f[-1] == RATE_HZ / 2
  level = stats.white_psd_level(noise_density)  # 2N² one-sided
  inner = psd[1:-1] / level
  n_seg = 2 * n // nperseg - 1  # 50 % overlap
  # Hann at 50 % overlap: variance factor 1 + 2·0.167² ≈ 1.06 over independent segments.
  sigma_bin = np.sqrt(1.06 / n_seg)
  sigma_mean = sigma_bin / np.sqrt(inner.size)
  print(f'Welch white: mean level/2N² = {inner.mean():.4f} (σ {sigma_mean:.4f}), '
        f'max bin dev {np.max(np.abs(inner - 1)) / sigma_bin:.2f}σ')
  assert abs(inner.mean() - 1) < 4 * sigma_mean
  assert np.all(np.abs(inner - 1) < 5 * sigma_bin)


# ------------------------------------------------------------ frequency response


def first_order_filter(x, f_c_hz, rate_hz):
  """NumPy reference of the SPEC filter `y += α(x − y)`, α = 1 − exp(−2π f_c Δ), y₀ = x₀."""
  alpha = 1.0 - np.exp(-2.0 * np.pi * f_c_hz / rate_hz)
  y = np.empty_like(x)
  acc = x[0]
  for k in range(x.size):
    acc += alpha * (x[k] - acc)
    y[k] = acc
  return y


def test_first_order_response_matches_analytic():
  rate, f_c = 1000.0, 40.0
  u = _rng(6).standard_normal(2 ** 16)
  y = first_order_filter(u, f_c, rate)
  freqs = np.array([5.0, 20.0, 40.0, 100.0, 300.0])
  f, gain, phase = stats.first_order_response(u, y, rate, freqs=freqs)
  alpha = 1 - np.exp(-2 * np.pi * f_c / rate)
  h = alpha / (1 - (1 - alpha) * np.exp(-2j * np.pi * freqs / rate))
  np.testing.assert_allclose(f, freqs)
  np.testing.assert_allclose(gain, np.abs(h), rtol=1e-2)
  np.testing.assert_allclose(phase, np.angle(h), atol=1e-2)
  np.testing.assert_allclose(stats.first_order_gain(freqs, f_c, rate), np.abs(h), rtol=1e-12)
  # Default grid: DC excluded.
  f, gain, _ = stats.first_order_response(u, y, rate, nperseg=256)
  assert f[0] == rate / 256 and gain.shape == f.shape


@pytest.mark.parametrize('f_c', [5.0, 40.0, 150.0])
def test_fit_first_order_bandwidth_recovers_cutoff(f_c):
  rate = 1000.0
  rng = _rng(7)
  u = rng.standard_normal(2 ** 16)
  y = first_order_filter(u, f_c, rate) + 0.05 * rng.standard_normal(u.size)  # sensor noise
  fit = stats.fit_first_order_bandwidth(u, y, rate)
  print(f'f_c {f_c} Hz → fitted {fit:.3f} Hz ({(fit / f_c - 1) * 100:+.2f} %)')
  assert abs(fit / f_c - 1) < 0.02
  # A pure delay does not bias the (gain-only) fit.
  y_late = np.concatenate([np.zeros(3), y[:-3]])
  assert abs(stats.fit_first_order_bandwidth(u, y_late, rate) / f_c - 1) < 0.02
  if f_c <= 5.0:  # far below Nyquist the continuous model agrees with the discrete filter
    print('continuous model:', stats.fit_first_order_bandwidth(u, y, rate, model='continuous'))
    assert abs(stats.fit_first_order_bandwidth(u, y, rate, model='continuous') / f_c - 1) < 0.05


# ------------------------------------------------- Allan model, N/B/K extraction (issue 12)


def _avar_reference(m, acov):
  """AVAR of a stationary sequence from its autocovariance `acov(lag)` (float64, direct).

  The difference of adjacent m-averages is Σ h_i x_i with h = (−1/m)·1_m ⧺ (1/m)·1_m, so
  AVAR = ½ Σ_j a_h(j) R(j) with a_h the autocorrelation of h.
  """
  h = np.concatenate([-np.ones(m), np.ones(m)]) / m
  a = np.correlate(h, h, 'full')
  lags = np.arange(-(2 * m - 1), 2 * m)
  return 0.5 * float(np.sum(a * acov(np.abs(lags))))


@pytest.mark.parametrize('phi', [0.0, 0.5, 0.97, 0.9995])
def test_allan_variance_model_matches_direct_sum(phi):
  sigma, sw = 0.3, 0.1
  m = np.array([1, 2, 3, 7, 40, 333])
  model = stats.allan_variance_model(m, RATE_HZ, white_sigma=sw, ar1=[(sigma, phi)])
  ref = [_avar_reference(int(mi), lambda j: sigma ** 2 * phi ** j + sw ** 2 * (j == 0))
         for mi in m]
  # Closed form vs direct sum; the closed form cancels terms of size σ²/(1−φ)² (float64).
  np.testing.assert_allclose(model, ref, rtol=1e-7)


def test_allan_variance_model_random_walk_matches_simulation():
  k = 2e-3
  m = np.array([10, 100, 1000])
  x = np.cumsum(k * np.sqrt(1 / RATE_HZ) * _rng(11).standard_normal((64, 20000)), axis=1)
  taus, adev, rel = stats.allan_deviation_pooled(x, RATE_HZ, m)
  model = np.sqrt(stats.allan_variance_model(m, RATE_HZ, random_walk=k))
  assert np.all(np.abs(adev / model - 1) < 4 * rel)


def _nbk_tolerance(res, taus, rel):
  return 4.0 * res['rel_sigma']


def test_nbk_white_noise_recovers_n():
  n_density = 0.02
  x = n_density * np.sqrt(RATE_HZ) * _rng(12).standard_normal((8, 2 ** 15))
  taus, adev, rel = stats.allan_deviation_pooled(x, RATE_HZ)
  res = stats.allan_nbk(taus, adev, rel)
  tol = _nbk_tolerance(res['N'], taus, rel)
  print(f"white: N {res['N']['value']:.5g} vs {n_density} (±{tol:.3f} rel)")
  assert abs(res['N']['value'] / n_density - 1) < tol
  assert res['K']['value'] is None and res['B']['value'] is None
  assert np.nanmedian(res['slopes']) == pytest.approx(-0.5, abs=0.05)


def test_nbk_random_walk_recovers_k():
  k = 5e-3
  x = np.cumsum(k * np.sqrt(1 / RATE_HZ) * _rng(13).standard_normal((16, 2 ** 14)), axis=1)
  taus, adev, rel = stats.allan_deviation_pooled(x, RATE_HZ)
  sel = taus >= 0.1
  res = stats.allan_nbk(taus[sel], adev[sel], rel[sel])
  tol = _nbk_tolerance(res['K'], taus, rel)
  print(f"random walk: K {res['K']['value']:.5g} vs {k} (±{tol:.3f} rel)")
  assert abs(res['K']['value'] / k - 1) < tol
  assert res['N']['value'] is None


def test_nbk_gauss_markov_floor_matches_closed_form():
  """White + first-order Gauss–Markov: a flat floor near 1.89 τ_c at ≈ 0.62 σ."""
  sigma, tau_c, sw = 0.01, 2.0, 0.005
  phi = np.exp(-1 / (RATE_HZ * tau_c))
  r, n = 32, 2 ** 14
  g = _rng(14)
  x = np.empty((r, n))
  b = sigma * g.standard_normal(r)
  z = g.standard_normal((r, n))
  for i in range(n):
    b = phi * b + sigma * np.sqrt(1 - phi ** 2) * z[:, i]
    x[:, i] = b
  x += sw * g.standard_normal((r, n))
  taus, adev, rel = stats.allan_deviation_pooled(x, RATE_HZ)
  model = np.sqrt(stats.allan_variance_model(np.round(taus * RATE_HZ), RATE_HZ, white_sigma=sw,
                                             ar1=[(sigma, phi)]))
  assert np.all(np.abs(adev / model - 1) < 4 * rel)
  res, ref = stats.allan_nbk(taus, adev, rel), stats.allan_nbk(taus, model)
  tol = _nbk_tolerance(res['B'], taus, rel)
  print(f"GM floor: B {res['B']['value']:.5g} vs closed form {ref['B']['value']:.5g} "
        f"(±{tol:.3f} rel), at τ {res['B']['taus']}")
  assert abs(res['B']['value'] / ref['B']['value'] - 1) < tol
  # The floor of a first-order Gauss–Markov process: peak ≈ 0.62σ near τ ≈ 1.9 τ_c.
  peak = np.sqrt(stats.allan_variance_model(np.arange(1, 4000), RATE_HZ, ar1=[(sigma, phi)]))
  assert peak.max() / sigma == pytest.approx(0.62, abs=0.01)
  assert np.argmax(peak) / RATE_HZ / tau_c == pytest.approx(1.89, abs=0.1)


def test_ar1_residual_var_factor_is_the_trace_and_the_monte_carlo_mean():
  """The share of an AR(1) record's variance left after removing its mean (and slope): equal
  to the dense `tr((I − H) R) / n` written here, and to the mean over simulated records (a
  slow process over a short record: ρ 0.98, 200 samples, where the share is far from 1)."""
  for rho, n, trend in ((0.98, 1000, True), (0.98, 1000, False), (0.5, 37, True), (0.0, 10, False)):
    i = np.arange(n)
    r = rho ** np.abs(i[:, None] - i[None])
    x = np.stack([np.ones(n), i - i.mean()], 1)[:, :1 + trend]
    h = x @ np.linalg.solve(x.T @ x, x.T)
    assert stats.ar1_residual_var_factor(rho, n, trend) == pytest.approx(
        np.trace((np.eye(n) - h) @ r) / n, rel=1e-10, abs=1e-12)
  rho, n, recs = 0.98, 200, 4000
  g = _rng(31)
  x = np.empty((recs, n))
  x[:, 0] = g.standard_normal(recs)
  for k in range(1, n):
    x[:, k] = rho * x[:, k - 1] + math.sqrt(1 - rho ** 2) * g.standard_normal(recs)
  t = np.arange(n) - (n - 1) / 2
  res = x - x.mean(1, keepdims=True)
  res -= np.outer(res @ t / (t @ t), t)
  per = np.mean(res * res, axis=1)           # one record's mean square, recs of them
  want = stats.ar1_residual_var_factor(rho, n, True)
  assert want < 0.6                          # far from the un-detrended 1
  assert abs(per.mean() - want) < 4 * per.std(ddof=1) / math.sqrt(recs)


def test_ar1_fit_recovers_sigma_and_rho():
  sigma, rho = 0.2, 0.8
  r, n = 16, 20000
  g = _rng(15)
  x = np.empty((r, n))
  x[:, 0] = sigma * g.standard_normal(r)
  z = g.standard_normal((r, n))
  for i in range(1, n):
    x[:, i] = rho * x[:, i - 1] + sigma * np.sqrt(1 - rho ** 2) * z[:, i]
  s, p, s_rel, p_se = stats.ar1_fit(x)
  # tolerances from the true ρ and the sample size (large-sample AR(1): var(ρ̂) = (1−ρ²)/N,
  # var(σ̂)/σ² = (1+ρ²)/(1−ρ²)/(2N), N = r·n), not from the fit's reported errors ...
  s_rel_true = math.sqrt((1 + rho ** 2) / (1 - rho ** 2) / (2 * r * n))
  p_se_true = math.sqrt((1 - rho ** 2) / (r * n))
  assert abs(s / sigma - 1) < 4 * s_rel_true
  assert abs(p - rho) < 4 * p_se_true + 1.0 / n  # + the O(1/n) bias of the lag-1 estimator
  # ... and the reported errors are those closed forms at the estimated ρ
  assert s_rel == pytest.approx(math.sqrt((1 + p ** 2) / (1 - p ** 2) / (2 * r * n)), rel=1e-9)
  assert p_se == pytest.approx(math.sqrt((1 - p ** 2) / (r * n)), rel=1e-9)
  assert 0.9 < s_rel / s_rel_true < 1.1 and 0.9 < p_se / p_se_true < 1.1
