"""GNSS (`fibril_sim/gnss`; docs/guides/sensors.md) in `fibril-mjx validate`: the static rig
with two receivers (one with the rig's own outage):

| check | rig | compares |
| --- | --- | --- |
| `position_noise.<h/v>` (GNSS) | static antenna, two receivers (one with the rig's outage) | position error std vs √(σ² + σ_cm²), std error of the correlated mean square |
| `position_correlation.<h/v>` (GNSS) | the same | lag autocorrelation at τ/4, τ/2, τ vs exp(−LΔ/τ), ratio-estimator std error |
| `velocity_noise.*` (GNSS) | the same | velocity error std, whiteness, independence of the position error |
| `accuracy_reported`, `accuracy_consistency.*` (GNSS) | the same | reported 1σ vs configured; fraction of errors within it vs 68.3 % (binomial, effective N) |
| `fix_consistency` (GNSS) | the receiver with the outage | no fix / held position / no-fix quality until reacquisition, 3D fix elsewhere |
| `timing.*` (GNSS) | the same | as for the IMU / AHRS (`common.timing_checks`) |
"""

from __future__ import annotations

import math
import time

import numpy as np

from fibril_mjx.workflows.validate.common import (rig_simulation, segments, K_SIGMA, fmt_any,
                                                  finish, staged_output, timing_checks, write_rig,
                                                  bench_xml, as_rig, Bench, Check, Request)
from fibril_mjx.core import registry
from fibril_mjx.mechanisms import geodesy
from fibril_mjx.mechanisms.rng import world_keys

GNSS_TYPE = 'fibril_sim/gnss'
GNSS_SUBSTEPS = (4, 40)  # physics ticks per solution period in the rig: the fewest in this
                         # range that make latency_s a whole number of ticks (else 20)
GNSS_DROP = ('outage_start_s', 'outage_end_s', 'faults', 'angular_velocity_sensor',
             'velocity_sensor')
E7_STEP_M = 0.0112      # 1e-7 degree of latitude, m (the geodetic output's resolution)
P_ONE_SIGMA = math.erf(1 / math.sqrt(2))   # P(|x| ≤ σ) of a normal error, 0.6827
NO_FIX_DOP = 99.99


def gnss_outage_window(period: float) -> tuple[float, float]:
  """The rig's own outage `(start, end)` s: half a period off the solution grid, ten
  solutions long (the user's outage times are a scenario, not a device property)."""
  return 10.5 * period, 20.5 * period


def gnss_substeps(period: float, latency: float) -> int:
  """Physics ticks per solution period: the fewest in `GNSS_SUBSTEPS` that resolve the
  configured latency exactly (20 when none does)."""
  lo, hi = GNSS_SUBSTEPS
  for k in range(lo, hi + 1):
    x = latency * k / period
    if abs(x - round(x)) < 1e-9:
      return k
  return 20


def gnss_rig(cfg: dict, overrides: dict) -> tuple[str, dict]:
  """Static GNSS rig: the antenna site at rest 1 m above the origin on a bench (hinge about
  the vertical through its centre of mass), timestep = solution period / `gnss_substeps`.

  Two copies of the device: `dut` with no outage (position / velocity noise, accuracy,
  timing) and `dut_outage` with the rig's outage window (fix / no-fix behaviour). Faults, the
  user's outages and the lever arm are removed (the antenna is the site)."""
  period = float(cfg['period_s'])
  dt = period / gnss_substeps(period, float(cfg.get('latency_s', 0.0)))
  xml = bench_xml('fibril_validate_gnss', dt, '<site name="s_nav"/>', bench=Bench('0 0 1'),
                  sensors='<velocimeter name="nav_vel" site="s_nav"/>')
  c = {k: v for k, v in dict(cfg, **overrides).items() if k not in GNSS_DROP}
  c['velocity_sensor'] = 'nav_vel'
  c['lever_arm_m'] = [0.0, 0.0, 0.0]
  start, end = gnss_outage_window(period)
  comps = [{'id': 'dut', 'type': GNSS_TYPE, 'config': dict(c)},
           {'id': 'dut_outage', 'type': GNSS_TYPE,
            'config': dict(c, outage_start_s=[start], outage_end_s=[end])}]
  return xml, {'fibril_manifest': 1, 'model': 'static.xml', 'components': comps}


def gnss_terms(cfg: dict, axis: str) -> list[tuple[float, float]]:
  """Configured Gauss–Markov terms `[(σ, τ), ...]` of one position error component
  (`axis` 'horizontal' or 'vertical'): the receiver's own error and the common mode."""
  terms = [(float(cfg.get(f'{axis}_error_stddev_m', 0.0)),
            float(cfg.get(f'{axis}_correlation_time_s', 0.0))),
           (float(cfg.get(f'common_mode_{axis}_stddev_m', 0.0)),
            float(cfg.get('common_mode_correlation_time_s', 0.0)))]
  return [(s, t) for s, t in terms if s > 0 and t > 0]


def gm_autocov(terms, lags_s) -> np.ndarray:
  """Autocovariance Σ σ²·exp(−|lag|/τ) of a sum of independent Gauss–Markov terms, m²."""
  lags = np.abs(np.asarray(lags_s, np.float64))
  return sum((s * s * np.exp(-lags / t) for s, t in terms), np.zeros_like(lags))


def _mean_var_of_correlated(cov_k: np.ndarray, n: int) -> float:
  """Variance of the mean of `n` samples of a stationary series with autocovariance
  `cov_k[k]`, k = 0 … n−1: (1/n²)·Σ_{i,j} cov(|i−j|)."""
  k = np.arange(n)
  w = np.where(k == 0, n, 2.0 * (n - k))
  return float(np.sum(w * cov_k[:n]) / n ** 2)


def _sq_error_se(terms, period, n, m) -> float:
  """Standard error of the mean squared error over `n` samples × `m` independent series of a
  zero-mean Gaussian process: Cov(e_t², e_s²) = 2·C(t − s)²."""
  c = gm_autocov(terms, np.arange(n) * period)
  return math.sqrt(_mean_var_of_correlated(2.0 * c ** 2, n) / max(m, 1))


def _series(e: np.ndarray) -> np.ndarray:
  """`(W, n, A)` → `(W·A, n)`: one independent series per world and axis."""
  return np.moveaxis(e, -1, 1).reshape(-1, e.shape[1])


def gnss_position_noise_check(axis: str, e: np.ndarray, cfg: dict, period: float) -> Check:
  """Std (about the known zero mean) of the position error `e` `(W, n, A)` vs the configured
  √(σ² + σ_cm² + q²/12); tolerance K standard errors of the pooled mean square of the
  correlated Gauss–Markov samples (`fibril_sim/gnss`'s docstring), via the delta method."""
  terms = gnss_terms(cfg, axis)
  q2 = E7_STEP_M ** 2 / 12.0 if axis == 'horizontal' else 0.0
  series = _series(e)
  n_ok = np.isfinite(series)
  meas = float(np.sqrt(np.nanmean(series ** 2)))
  expected = math.sqrt(sum(s * s for s, _ in terms) + q2)
  n = int(series.shape[1])
  if terms:
    se = _sq_error_se(terms, period, n, series.shape[0]) / (2 * expected)
    tol = K_SIGMA * se + E7_STEP_M
  else:
    tol = E7_STEP_M
  return Check(f'position_noise.{axis}', f'{axis} position error std (reported − truth, '
               f'{series.shape[0]} series of {n} solutions, static rig)', meas,
               {'stddev_m': [s for s, _ in terms], 'correlation_time_s': [t for _, t in terms],
                'sqrt(Σσ²+q²/12)': expected}, tol,
               f'{K_SIGMA:g}× std error of the pooled mean square of a Gauss–Markov process '
               f'(2·C(k)² summed over lags, {n_ok.sum()} samples) + the 1e-7° output step',
               abs(meas - expected) <= tol)


def gnss_correlation_lags(terms, period: float, n: int) -> list[int]:
  """Lags (solutions) for the correlation-time check: τ/4, τ/2, τ of the slowest term,
  keeping those with at least half the record left."""
  if not terms:
    return []
  tau = max(t for _, t in terms)
  return sorted({L for L in (round(tau / (4 * period)), round(tau / (2 * period)),
                             round(tau / period)) if 1 <= L <= n // 2})


def lag_correlation(series: np.ndarray, lag: int) -> tuple[float, float]:
  """Pooled autocorrelation ρ̂(L) = Σ e[t]·e[t+L] / Σ e[t]² (known zero mean, same t range)
  over independent series `(m, n)`, and its ratio-estimator standard error across series."""
  a = np.nan_to_num(series[:, lag:] * series[:, :-lag])
  b = np.nan_to_num(series[:, :-lag] ** 2)
  a_s, b_s = a.mean(axis=1), b.mean(axis=1)
  rho = float(a_s.sum() / max(b_s.sum(), 1e-300))
  m = len(a_s)
  se = math.sqrt(np.sum((a_s - rho * b_s) ** 2) / max(m * (m - 1), 1)) / max(b_s.mean(), 1e-300)
  return rho, se


def gnss_correlation_check(axis: str, e: np.ndarray, cfg: dict, period: float) -> Check:
  """Lag autocorrelation of the position error vs exp(−LΔ/τ) (the variance-weighted sum for
  several terms) at lags τ/4, τ/2, τ; tolerance K ratio-estimator standard errors across the
  independent series (worlds × axes)."""
  terms = gnss_terms(cfg, axis)
  series = _series(e)
  lags = gnss_correlation_lags(terms, period, series.shape[1])
  name = f'position_correlation.{axis}'
  quantity = f'{axis} position error autocorrelation at lags L·Δ'
  if not lags:
    return Check(name, quantity, None, {'terms': terms}, None, 'needs a configured '
                 'Gauss–Markov term and a record of at least 2·τ/4', None,
                 note='not resolvable: no Gauss–Markov term or record too short')
  c0 = gm_autocov(terms, [0.0])[0]
  meas, exp_, tol, tau_hat, ok = {}, {}, {}, {}, True
  for L in lags:
    rho, se = lag_correlation(series, L)
    key = f'{L * period:g}s'
    meas[key], exp_[key] = rho, float(gm_autocov(terms, [L * period])[0] / c0)
    tol[key] = K_SIGMA * se
    tau_hat[key] = -L * period / math.log(rho) if 0 < rho < 1 else float('nan')
    ok &= abs(rho - exp_[key]) <= tol[key]
  return Check(name, quantity, meas, exp_, tol,
               f'ρ(L) = Σσ²·exp(−LΔ/τ)/Σσ² for {terms} (σ, τ s); {K_SIGMA:g}× ratio-estimator '
               f'std error over {series.shape[0]} independent series', ok,
               note=f'equivalent τ = −LΔ/ln ρ̂: {fmt_any(tau_hat)} s')


def gnss_velocity_checks(ev: np.ndarray, e: np.ndarray, cfg: dict) -> list[Check]:
  """Velocity error `ev` `(W, n, 3)`: std per horizontal / vertical vs the configured white
  σ (K·σ/√(2N)), lag-1 whiteness and independence of the position error `e` (correlation of
  the velocity error with the position error and with its increment, |r| ≤ K/√N): the
  receiver measures Doppler, not the derivative of its position (SPEC §5)."""
  checks = []
  for axis, sl, f in (('horizontal', slice(0, 2), 'horizontal_velocity_noise_stddev_m_s'),
                      ('vertical', slice(2, 3), 'vertical_velocity_noise_stddev_m_s')):
    sig = float(cfg.get(f, 0.0))
    x = ev[..., sl]
    n = int(np.isfinite(x).sum())
    meas = float(np.sqrt(np.nanmean(x ** 2)))
    tol = K_SIGMA * sig / math.sqrt(2.0 * max(n, 1)) + 1e-6
    checks.append(Check(f'velocity_noise.{axis}', f'{axis} velocity error std (static rig)',
                        meas, sig, tol, f'{K_SIGMA:g}·σ/√(2N), N = {n} (white, known zero '
                        'mean) + 1e-6 m/s float rounding', abs(meas - sig) <= tol))
  s = _series(ev)
  n = int(np.isfinite(s).sum())
  on = any(float(cfg.get(f, 0.0)) > 0 for f in ('horizontal_velocity_noise_stddev_m_s',
                                                 'vertical_velocity_noise_stddev_m_s'))
  tol_r = K_SIGMA / math.sqrt(max(n, 1))
  rho1, _ = lag_correlation(s, 1)
  p = _series(e)
  dp = np.diff(p, axis=1)
  r_pos = _corr(s, p)
  r_inc = _corr(s[:, 1:], dp)
  checks.append(Check('velocity_noise.whiteness', 'lag-1 autocorrelation of the velocity error',
                      rho1, 0.0, tol_r, f'white: |ρ₁| ≤ {K_SIGMA:g}/√N, N = {n}',
                      abs(rho1) <= tol_r if on else None,
                      note='' if on else 'no velocity noise configured'))
  checks.append(Check('velocity_noise.independence', 'correlation of the velocity error with '
                      'the position error and with its increment (same axis)',
                      {'position_error': r_pos, 'position_increment': r_inc}, 0.0, tol_r,
                      f'independent: |r| ≤ {K_SIGMA:g}/√N, N = {n}',
                      max(abs(r_pos), abs(r_inc)) <= tol_r if on else None,
                      note='' if on else 'no velocity noise configured'))
  return checks


def _corr(a: np.ndarray, b: np.ndarray) -> float:
  """Correlation Σab / √(Σa²·Σb²) over finite pairs (zero-mean series)."""
  ok = np.isfinite(a) & np.isfinite(b)
  a, b = np.where(ok, a, 0.0), np.where(ok, b, 0.0)
  return float(np.sum(a * b) / max(math.sqrt(np.sum(a * a) * np.sum(b * b)), 1e-300))


def indicator_cov(r: np.ndarray, p: float = P_ONE_SIGMA) -> np.ndarray:
  """Cov(1{|X| ≤ 1}, 1{|Y| ≤ 1}) of standard normals with correlation `r` (Gauss–Legendre
  quadrature of P(|X| ≤ 1, |Y| ≤ 1) = ∫₋₁¹ φ(x)·[Φ((1 − r·x)/s) − Φ((−1 − r·x)/s)] dx,
  s = √(1 − r²))."""
  from scipy.special import ndtr
  x, w = np.polynomial.legendre.leggauss(64)
  r = np.asarray(r, np.float64)[..., None]
  s = np.sqrt(np.maximum(1 - r * r, 1e-24))
  phi = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
  both = np.sum(w * phi * (ndtr((1 - r * x) / s) - ndtr((-1 - r * x) / s)), axis=-1)
  return both - p * p


def fraction_tolerance(rho_k: np.ndarray, n: int, m: int) -> tuple[float, float]:
  """`(tolerance, N_eff)` of the fraction of errors within their 1σ: K binomial standard
  errors √(p(1−p)/N_eff), with N_eff of `m` independent series of `n` samples whose
  correlation at lag k is `rho_k[k]` (N_eff = m·n for white errors)."""
  p = P_ONE_SIGMA
  var = _mean_var_of_correlated(indicator_cov(rho_k[:n]), n) / max(m, 1)
  n_eff = p * (1 - p) / max(var, 1e-300)
  return K_SIGMA * math.sqrt(p * (1 - p) / n_eff), n_eff


def gnss_accuracy_checks(sol: dict, cfg: dict, period: float) -> list[Check]:
  """Reported quality with a fix (`fibril_sim/gnss`'s docstring): the reported 1σ
  equal to the configured √(σ² + σ_cm²) (σ_vh for speed), and the fraction of error components
  within the reported 1σ ≈ 68.3 % within K binomial standard errors of the effective sample
  size (the Gauss–Markov samples are correlated; the velocity errors are white)."""
  fixed = sol['fix_type'] == 3
  conf = {'horizontal': math.sqrt(sum(s * s for s, _ in gnss_terms(cfg, 'horizontal'))),
          'vertical': math.sqrt(sum(s * s for s, _ in gnss_terms(cfg, 'vertical'))),
          'speed': float(cfg.get('horizontal_velocity_noise_stddev_m_s', 0.0))}
  reported = {k: sol[f] for k, f in (('horizontal', 'horizontal_accuracy_m'),
                                    ('vertical', 'vertical_accuracy_m'),
                                    ('speed', 'speed_accuracy_m_s'))}
  rep_vals = {k: np.unique(v[fixed]).tolist()[:5] for k, v in reported.items()}
  ok_rep = all(np.all(np.abs(v[fixed] - conf[k]) <= 1e-6 * max(conf[k], 1.0))
               for k, v in reported.items())
  checks = [Check('accuracy_reported', 'reported 1σ with a fix (distinct values)', rep_vals,
                  conf, '1e-6 relative (float32)', 'horizontal/vertical = √(σ² + σ_cm²) per '
                  'component, speed = σ_vh per horizontal component', ok_rep)]
  n = sol['fix_type'].shape[1]
  parts = (('horizontal', sol['position_error_m'][..., :2], reported['horizontal'][..., None]),
           ('vertical', sol['position_error_m'][..., 2:], reported['vertical'][..., None]),
           ('speed', sol['velocity_error_m_s'][..., :2], reported['speed'][..., None]))
  for axis, err, acc in parts:
    ok = np.isfinite(err) & fixed[..., None] & (acc > 0)
    inside = np.abs(err) <= acc
    frac = float(np.sum(inside & ok) / max(ok.sum(), 1))
    m = err.shape[0] * err.shape[2]
    if axis == 'speed':
      rho_k = np.r_[1.0, np.zeros(n - 1)]
    else:
      terms = gnss_terms(cfg, axis)
      c = gm_autocov(terms, np.arange(n) * period)
      rho_k = c / c[0] if terms else np.r_[1.0, np.zeros(n - 1)]
    tol, n_eff = fraction_tolerance(rho_k, n, m)
    resolvable = conf[axis] > 0 and ok.sum() > 0
    checks.append(Check(f'accuracy_consistency.{axis}', f'fraction of {axis} error components '
                        'within the reported 1σ', frac, P_ONE_SIGMA, tol,
                        f'{K_SIGMA:g}× binomial std error, effective N = {n_eff:.0f} of '
                        f'{int(ok.sum())} correlated samples ({m} independent series)',
                        abs(frac - P_ONE_SIGMA) <= tol if resolvable else None,
                        note='' if resolvable else 'no error term configured'))
  return checks


def gnss_fix_check(sol_noise: dict, sol: dict, cfg: dict, dt: float) -> Check:
  """Fix / no-fix consistency: with the rig's outage [a, b) and `reacquisition_s` r, a
  solution sampled in [a, b + r) has `fix_type` 0, the last fixed position and velocity,
  `satellites_no_fix`, DOP 99.99 and every accuracy `no_fix_accuracy_m`; every other solution
  (and every solution of the outage-free copy) is a 3D fix with the configured satellites and
  DOP. Solutions within half a tick of a window edge are not judged."""
  a, b = gnss_outage_window(float(cfg['period_s']))
  r = float(cfg.get('reacquisition_s', 0.0))
  t = sol['sample_tick'] * dt
  got = np.isfinite(t)
  edge = (np.abs(t - a) <= 0.5 * dt) | (np.abs(t - (b + r)) <= 0.5 * dt)
  want_none = got & ~edge & (t >= a) & (t < b + r)
  want_fix = got & ~edge & ~want_none
  fix_ok = (sol['fix_type'] == 3) & (sol['satellites'] == int(cfg.get('satellites', 12))) & \
      np.isclose(sol['hdop'], float(cfg.get('hdop', 0.9)), rtol=1e-6) & \
      np.isclose(sol['vdop'], float(cfg.get('vdop', 1.3)), rtol=1e-6)
  big = float(cfg.get('no_fix_accuracy_m', 9999.0))
  held = _held_last_fix(sol)
  none_ok = (sol['fix_type'] == 0) & (sol['satellites'] == int(cfg.get('satellites_no_fix', 0))) \
      & np.isclose(sol['hdop'], NO_FIX_DOP) & np.isclose(sol['vdop'], NO_FIX_DOP) & held
  for f in ('horizontal_accuracy_m', 'vertical_accuracy_m', 'speed_accuracy_m_s'):
    none_ok &= np.isclose(sol[f], big, rtol=1e-6)
  noise_fixed = np.isfinite(sol_noise['fix_type'])
  noise_ok = int(np.sum(sol_noise['fix_type'][noise_fixed] == 3))
  bad_fix = int(np.sum(want_fix & ~fix_ok))
  bad_none = int(np.sum(want_none & ~none_ok))
  bad_noise = int(noise_fixed.sum()) - noise_ok
  first = t[got & (sol['fix_type'] == 3) & (t >= b)]
  measured = {'fixed as expected': f'{int(np.sum(want_fix & fix_ok))}/{int(want_fix.sum())}',
              'no-fix as expected': f'{int(np.sum(want_none & none_ok))}/{int(want_none.sum())}',
              'outage-free copy fixed': f'{noise_ok}/{int(noise_fixed.sum())}',
              'first fix after the outage end [s]': float(first.min()) if first.size else None}
  return Check('fix_consistency', 'fix type, satellites, DOP, accuracy and held position in '
               'and out of an outage', measured,
               {'outage (rig)': [a, b], 'reacquisition_s': r, 'no_fix_accuracy_m': big,
                'satellites / no fix': [int(cfg.get('satellites', 12)),
                                        int(cfg.get('satellites_no_fix', 0))]},
               'every solution', f'no fix for samples in [{a:g}, {b + r:g}) s (outage end + '
               'reacquisition), a 3D fix elsewhere; never a no-fix with a fix accuracy',
               bad_fix == 0 and bad_none == 0 and bad_noise == 0 and want_none.sum() > 0)


def _held_last_fix(sol: dict) -> np.ndarray:
  """`(W, n)` bool: each solution's position / velocity equals the last fixed solution's
  before it (True where there is none before it)."""
  fields = ('latitude_e7', 'longitude_e7', 'height_m', 'velocity_enu_m_s')
  fixed = sol['fix_type'] == 3
  n = fixed.shape[1]
  idx = np.where(fixed, np.arange(n), -1)
  last = np.maximum.accumulate(np.concatenate([np.full((fixed.shape[0], 1), -1),
                                               idx[:, :-1]], axis=1), axis=1)
  ok = np.ones(fixed.shape, bool)
  pick = np.clip(last, 0, None)
  for f in fields:
    v = sol[f]
    prev = np.take_along_axis(v, pick.reshape(pick.shape + (1,) * (v.ndim - 2)), axis=1)
    same = np.all((v == prev).reshape(v.shape[:2] + (-1,)), axis=-1)
    ok &= same | (last < 0)
  return ok


def _gnss_collect(sim, params, keys, n_ticks, seg, n_acq, origin) -> dict:
  """Runs the rig in segments; per component `{field: (W, n_acq, ...)}` float64 of the
  delivered solutions by sequence number (NaN where not delivered), with `sample_tick`,
  `arrival_tick`, the ENU position error (geodetic output converted back on the host,
  `fibril_mjx.mechanisms.geodesy`, minus the true antenna) and the velocity error."""
  out = {}

  def take(sensor, truth):
    for cid, d in sensor.items():
      new = np.asarray(d.new_data).astype(bool)
      seq = np.asarray(d.sequence)
      w, t = np.nonzero(new & (seq >= 0) & (seq < n_acq))
      rows = {f: np.asarray(v) for f, v in d.sample._asdict().items()}
      rows['sample_tick'] = np.asarray(d.sample_tick)
      rows['arrival_tick'] = np.asarray(d.arrival_tick)
      for f in ('antenna_position_m', 'antenna_velocity_m_s'):
        rows[f] = np.asarray(truth[cid][f])
      c = out.setdefault(cid, {f: np.full((new.shape[0], n_acq) + v.shape[2:], np.nan)
                               for f, v in rows.items()})
      for f, v in rows.items():
        c[f][w, seq[w, t]] = v[w, t]

  first, rest = segments(sim, params, keys, n_ticks, seg, observe_truth=True)
  take(first['sensor'], first['truth'])
  for outs in rest:
    take(outs['sensor'], outs['truth'])
  for c in out.values():
    enu = geodesy.geodetic_e7_to_enu(origin, c['latitude_e7'], c['longitude_e7'], c['height_m'])
    c['position_error_m'] = enu - c['antenna_position_m']
    c['velocity_error_m_s'] = c['velocity_enu_m_s'] - c['antenna_velocity_m_s']
  return out


def _timing_view(sol: dict):
  """A Delivered-like view `(W, n_acq)` of collected solutions for `timing_checks`."""
  import types
  got = np.isfinite(sol['sample_tick'])
  as_int = lambda a: np.where(got, a, -1).astype(np.int64)  # noqa: E731
  return types.SimpleNamespace(new_data=got, sample_tick=as_int(sol['sample_tick']),
                               arrival_tick=as_int(sol['arrival_tick']),
                               sequence=np.broadcast_to(np.arange(got.shape[1]), got.shape))


def gnss_checks(noise: dict, outage: dict, cfg: dict, dt: float, fig_dir) -> list[Check]:
  """Every GNSS check from the collected solutions of the two rig copies."""
  import types
  period = float(cfg['period_s'])
  e = noise['position_error_m']
  checks = [gnss_position_noise_check('horizontal', e[..., :2], cfg, period),
            gnss_position_noise_check('vertical', e[..., 2:], cfg, period),
            gnss_correlation_check('horizontal', e[..., :2], cfg, period),
            gnss_correlation_check('vertical', e[..., 2:], cfg, period)]
  checks += gnss_velocity_checks(noise['velocity_error_m_s'], e, cfg)
  checks += gnss_accuracy_checks(noise, cfg, period)
  checks.append(gnss_fix_check(noise, outage, cfg, dt))
  dev = types.SimpleNamespace(period_s=period, phase_s=float(cfg.get('phase_s', 0.0)),
                              latency_s=float(cfg.get('latency_s', 0.0)),
                              jitter_s=float(cfg.get('jitter_s', 0.0)),
                              loss_probability=float(cfg.get('loss_probability', 0.0)))
  views = {'dut': _timing_view(noise), 'dut_outage': _timing_view(outage)}
  checks += timing_checks(dev, dt, views, fig_dir)
  return checks


def run_gnss(req: Request) -> dict:
  """`validate` for `fibril_sim/gnss`: the static GNSS rig (`gnss_rig`, `gnss_checks`)."""
  cfg, worlds = req.cfg, req.worlds
  with staged_output(req.out) as tmp:
    rigs = tmp / 'rigs'
    xml, doc = gnss_rig(cfg, req.perturb)
    sim = rig_simulation(write_rig(rigs, 'static', xml, doc))
    period = float(cfg['period_s'])
    dt = sim.dt
    n_acq = int(round(req.static_duration_s / period))
    lat_ticks = int(math.ceil((float(cfg.get('latency_s', 0.0)) + 6 * float(
        cfg.get('jitter_s', 0.0))) / dt)) + 1
    k = int(round(period / dt))
    n_ticks = (n_acq + 1) * k + lat_ticks
    n_seg = int(math.ceil(n_ticks / 5000))
    seg = int(math.ceil(n_ticks / n_seg))
    req.progress(f'static GNSS rig: 2 receivers x {worlds} worlds x {n_seg * seg} ticks '
             f'(dt {dt:g} s, {n_acq} solutions)')
    origin = geodesy.Origin.build(float(cfg['origin_latitude_deg']),
                                  float(cfg['origin_longitude_deg']),
                                  float(cfg.get('origin_height_m', 0.0)))
    sols = _gnss_collect(sim, sim.default_params(worlds), world_keys(req.seed, worlds),
                         n_seg * seg, seg, n_acq, origin)
    req.progress(f'  simulated ({time.time() - req.t0:.0f} s); analysing')
    return finish(tmp, req, gnss_checks(sols['dut'], sols['dut_outage'], cfg, dt, tmp))


# The rig of this type (validate finds this module by walking its package).
registry.register(GNSS_TYPE, validation_rig=as_rig(run_gnss))
