"""The static-rig checks: Allan deviation and N/B/K, AR(1), six-orientation gains and biases,
orientation noise, geometry under gravity."""

from __future__ import annotations

import math

import numpy as np

from fibril_mjx.analysis import stats
from fibril_mjx.workflows.validate.common import G, K_SIGMA, Check, axis_name, by_sequence, fmt
from fibril_mjx.workflows.validate.inertial.device import Channel, Device, POSES, UNITS
from fibril_mjx.workflows.validate.inertial.plots import plot_allan
from fibril_mjx.workflows.validate.inertial.signals import fill_gaps, quat_err_vec


# ----------------------------------------------------------------------- the static rig


def static_checks(dev: Device, data, n_acq, plots, fig_dir) -> list[Check]:
  """The checks of the static poses: Allan deviation per channel and axis (AR(1) noise for
  an AHRS), six-orientation gains and biases, orientation noise and geometry under gravity
  (`data`: collected samples per pose, `n_acq` acquisitions)."""
  checks = []
  fs = 1.0 / dev.period_s
  for ch_name, ch in dev.channels.items():
    units = UNITS[ch_name]
    x = np.stack([fill_gaps(by_sequence(data[n], ch_name, n_acq)) for n in POSES], 1)
    w_, u_, n_, _ = x.shape                      # worlds, poses, samples, axes
    rec = x.reshape(w_ * u_, n_, 3)
    q = ch.resolution
    # --- Allan deviation per axis vs the exact curve of the configured model.
    fig_rows = []
    allan_ok, worst, nbk_rows = True, 0.0, []
    for i in range(3):
      r = rec[:, :, i] - rec[:, :, i].mean(axis=1, keepdims=True)
      noise_var = ch.white_sigma[i] ** 2 + sum(s * s for s, _ in ch.ar1[i])
      qv = q * q / 12.0 if q > 0 and noise_var > (q / 2) ** 2 else 0.0
      if noise_var + ch.random_walk[i] ** 2 == 0 or np.all(r == 0):
        std = float(np.std(r))
        bound = q / math.sqrt(12) + 1e-6 * G if noise_var == 0 else None
        ok = (std <= bound) if bound is not None else False
        checks.append(Check(f'static_allan.{ch_name}.{axis_name(i)}', f'residual std [{units}]',
                            std, 0.0, bound, 'no noise configured: at most the LSB '
                            'quantization std q/√12 + float32 rounding', ok))
        allan_ok &= ok
        continue
      m = stats.allan_cluster_sizes(n_, min_clusters=9)
      taus, adev, rel = stats.allan_deviation_pooled(r, fs, m)
      model = np.sqrt(stats.allan_variance_model(m, fs, white_sigma=math.sqrt(
          ch.white_sigma[i] ** 2 + qv), ar1=ch.ar1[i], random_walk=ch.random_walk[i]))
      dev_sig = np.abs(adev / model - 1) / rel
      ok = bool(np.all(dev_sig < K_SIGMA))
      worst = max(worst, float(dev_sig.max()))
      allan_ok &= ok
      fig_rows.append((i, taus, adev, model, rel))
      meas, ref = stats.allan_nbk(taus, adev, rel), stats.allan_nbk(taus, model)
      configured = {'N': None if ch.noise_density is None else ch.noise_density[i],
                    'B': None if ch.gm_sigma is None else ch.gm_sigma[i],
                    'K': ch.random_walk[i] if dev.rig.random_walk else None}
      for term in ('N', 'B', 'K'):
        mv, rv = meas[term]['value'], ref[term]['value']
        if mv is None or rv is None:
          checks.append(Check(
              f'static_allan.{ch_name}.{term}.{axis_name(i)}', _TERM[term], mv,
              configured[term], None, f'{term} not resolvable in a {n_ / fs:g} s record '
              '(no Allan slope of ' + {'N': '−1/2', 'B': '0', 'K': '+1/2'}[term]
              + ' in the measured or the configured curve)', None,
              note=f'expected from the configured model: {fmt(rv)}'))
          continue
        tol = K_SIGMA * meas[term]['rel_sigma']
        if term == 'N' and qv > 0:
          # Uniform-quantization-noise approximation (q²/12, white): allow 10 % of its share.
          tol += 0.1 * 0.5 * qv / (ch.white_sigma[i] ** 2 + qv)
        ok_t = abs(mv / rv - 1) <= tol
        allan_ok &= ok_t
        nbk_rows.append((term, i, mv, rv))
        checks.append(Check(
            f'static_allan.{ch_name}.{term}.{axis_name(i)}', _TERM[term], mv, configured[term],
            f'±{100 * tol:.1f} %', f'relative to {fmt(rv)} = the same slope fit on the '
            f'exact Allan curve of the configured model (incl. LSB q²/12 as white noise); '
            f'{K_SIGMA:g}× the edf-based std (+ 10 % of the LSB share of N) of the fitted τ range {meas[term]["taus"]} s, '
            f'{w_ * u_} records of {n_ / fs:g} s', ok_t))
    plot = plot_allan(fig_dir, ch_name, units, fig_rows) if fig_rows else ''
    checks.append(Check(f'static_allan.{ch_name}', 'Allan deviation vs configured model',
                        f'max |dev|/σ = {worst:.2f}', 'exact closed-form curve', f'{K_SIGMA:g} σ',
                        f'every τ (9+ clusters): relative σ from the overlapping-estimator edf '
                        f'pooled over {w_ * u_} records of {n_ / fs:g} s', allan_ok, plot))
    if dev.rig.orientation:
      checks += _ar1_checks(f'static_noise.{ch_name}', rec, [c[0] if c else (0.0, 0.0)
                                                             for c in ch.ar1], q, units)
    # --- six orientations: per-unit means.
    means = np.nanmean(x, axis=2)                  # (W, 6, 3)
    checks += _six_orientation(dev, ch, means, n_, fig_dir)
  # --- AHRS orientation residual and yaw-rate bias dispersion.
  if dev.rig.orientation:
    checks += _orientation_static(dev, data, n_acq)
  checks += _geometry_gravity(dev, data, n_acq)
  return checks


_TERM = {'N': 'white noise N [units/√Hz]', 'B': 'bias instability B [units]',
         'K': 'random walk K [units/√s]'}


def _ar1_checks(name, rec, sig_rho, q, units, trend=False):
  """Stationary std and lag-1 ρ of AR(1) residual records `rec (records, samples, 3)` whose
  mean (and, with `trend`, slope) each record lost: the expected std is the configured σ
  (+ the LSB's white q²/12) times the share of the variance such a record keeps."""
  out = []
  n = rec.shape[1]
  for i in range(3):
    s_c, r_c = sig_rho[i]
    s, r, s_rel, r_se = stats.ar1_fit(rec[:, :, i])
    keep = stats.ar1_residual_var_factor(r_c, n, trend)
    lsb = q * q / 12 if s_c > q / 2 else 0.0
    s_exp = math.sqrt(s_c ** 2 * keep + lsb * (1 - (1 + trend) / n))
    if s_c == 0:
      ok = s <= q / math.sqrt(12) + 1e-6 * G
      out.append(Check(f'{name}.std.{axis_name(i)}', f'residual std [{units}]', s, 0.0,
                       q / math.sqrt(12), 'no noise configured: ≤ LSB quantization std', ok))
      continue
    tol = K_SIGMA * s_rel * s_exp + (q * q / 12) / (2 * s_exp)
    out.append(Check(f'{name}.std.{axis_name(i)}', f'stationary std [{units}]', s, s_c,
                     tol, f'{K_SIGMA:g}× AR(1) sampling std of the std '
                     f'({rec.shape[0]}×{n} samples) + half the q²/12 LSB term; expected '
                     f'√(σ²·{keep:.4f} + q²/12) = {s_exp:.5g}, {keep:.4f} the share of an AR(1) '
                     f'variance a record keeps when its mean{" and slope are" if trend else " is"}'
                     ' removed', abs(s - s_exp) <= tol))
    tol_r = K_SIGMA * r_se + 2.0 / n + (q * q / 12) / s_exp ** 2
    r_exp = r_c * s_c ** 2 / (s_c ** 2 + lsb)
    out.append(Check(f'{name}.rho.{axis_name(i)}', 'AR(1) lag-1 correlation', r, r_c, tol_r,
                     f'{K_SIGMA:g}× large-sample std of ρ̂ + O(1/n) estimator bias + LSB share; '
                     f'expected {r_exp:.4f} after the white LSB term', abs(r - r_exp) <= tol_r))
  return out


def _episode_var_of_mean(ch: Channel, i, n):
  """Variance of the record mean of the noise processes of axis i over n samples."""
  v = ch.white_sigma[i] ** 2 / n
  for s, phi in ch.ar1[i]:
    v += s * s * stats.ar1_var_of_mean(phi, n)
  return v


def _unit_std(dev, ch: Channel, n_) -> np.ndarray:
  """The configured std `(3,)` of one unit's record mean over `n_` samples: turn-on (+ yaw-rate)
  bias, the noise processes averaged and the random walk's wander."""
  return np.sqrt(ch.episode_stddev ** 2 + np.array(
      [_episode_var_of_mean(ch, i, n_) + ch.random_walk[i] ** 2 * dev.period_s
       * (n_ - 1) * (2 * n_ - 1) / (6 * n_) for i in range(3)]))


def _six_orientation(dev, ch: Channel, means, n_, fig_dir) -> list[Check]:
  """Gain (accelerometer), bias and unit-to-unit dispersion from the six poses' record means
  `means (W, 6, 3)`. Each pose of each world is a separate unit whose record mean scatters by
  the configured `_unit_std`, so the gain and bias tolerances are `K_SIGMA` standard errors of
  that stated std (not of the sample std of a few worlds, whose normal quantile understates
  the tail: 4 sample-σ at 8 worlds fail 0.5 % of nominal devices per axis)."""
  checks = []
  units = UNITS[ch.name]
  w_ = means.shape[0]
  q = ch.resolution
  names = list(POSES)
  up = [names.index(f'p{a}') for a in 'xyz']
  dn = [names.index(f'm{a}') for a in 'xyz']
  s_pred = _unit_std(dev, ch, n_)
  if ch.name == 'linear_acceleration':
    # Pose p{a} holds +g along axis a: reading = G·(±g e_a) + bias.
    gain = np.stack([(means[:, up[a]] - means[:, dn[a]]) / (2 * G) for a in range(3)], -1)
    bias = np.mean([(means[:, up[a]] + means[:, dn[a]]) / 2 for a in range(3)], axis=0)
    # row j of the gain: (up − down)/2g of two units of axis j's scatter
    g_se = np.repeat(s_pred[:, None], 3, 1) * math.sqrt(2) / (2 * G) / math.sqrt(w_)
    g_mean = gain.mean(0)
    tol_g = K_SIGMA * g_se + q / (2 * G) + 2e-6
    ok = bool(np.all(np.abs(g_mean - ch.gain) <= tol_g))
    checks.append(Check(f'six_orientation.{ch.name}.gain', 'gain matrix I + diag(scale−1) + M '
                        '(column a = reading per g along axis a)', g_mean, ch.gain, tol_g,
                        f'{K_SIGMA:g}× the configured std error over {w_} worlds (each pose a '
                        'separate unit: √2·s/(2g√W), s the configured unit std '
                        f'{fmt(s_pred)}) + LSB/2g + float32', ok))
  else:
    bias = means.mean(axis=1)                       # gyro at rest reads its bias
  b_mean = bias.mean(0)
  tol_b = K_SIGMA * s_pred / math.sqrt(6 * w_) + q / 2 + 2e-6 * G
  ok = bool(np.all(np.abs(b_mean - ch.bias) <= tol_b))
  checks.append(Check(f'six_orientation.{ch.name}.bias', f'bias [{units}]', b_mean, ch.bias,
                      tol_b, f'{K_SIGMA:g}× the configured std error of the mean of 6 poses × '
                      f'{w_} worlds (s/√(6W), s the configured unit std {fmt(s_pred)}) + LSB/2',
                      ok))
  # Unit-to-unit dispersion of the per-record means: turn-on (+ yaw-rate) bias and noise.
  per_unit = means.reshape(-1, 3)
  s_meas = per_unit.std(0, ddof=1)
  n_u = per_unit.shape[0]
  if ch.name == 'linear_acceleration':
    # poses differ in the axis holding g: compare the spread of the axes at ~0 g only
    zero = np.ones((6, 3), bool)
    for p_i, (_, a, _) in enumerate(POSES.values()):
      zero[p_i, a] = False
    vals = [means[:, zero[:, i], i].ravel() for i in range(3)]
    s_meas = np.array([v.std(ddof=1) for v in vals])
    n_u = vals[0].size
  rel = 1.0 / math.sqrt(2 * (n_u - 1))
  tol = K_SIGMA * rel * s_pred + q / math.sqrt(12) + 2e-6 * G
  ok = bool(np.all(np.abs(s_meas - s_pred) <= tol))
  checks.append(Check(f'six_orientation.{ch.name}.unit_dispersion',
                      f'std across units of the record mean [{units}]', s_meas, s_pred, tol,
                      f'predicted from turn-on / yaw-rate bias std and the noise processes '
                      f'averaged over {n_} samples; {K_SIGMA:g}× the χ std 1/√(2(n−1)) of '
                      f'{n_u} units + LSB', ok))
  return checks


def _orientation_static(dev: Device, data, n_acq) -> list[Check]:
  out = []
  recs = []
  for n in ('py', 'my', 'pz', 'mz'):     # no pitch ±90° poses (Euler resolution singular)
    q = by_sequence(data[n], 'orientation', n_acq)
    q = fill_gaps(q)
    q = q * np.sign(q[..., :1] + 1e-30)
    qm = q.mean(axis=1, keepdims=True)
    qm = qm / np.linalg.norm(qm, axis=-1, keepdims=True)
    e = quat_err_vec(q, qm)
    t = np.arange(e.shape[1]) * dev.period_s
    tc = t - t.mean()
    slope = np.sum(e * tc[None, :, None], axis=1) / np.sum(tc * tc)
    recs.append((e - slope[:, None, :] * tc[None, :, None], slope))
  res = np.concatenate([r for r, _ in recs], 0)
  q = dev.orientation_resolution
  out += _ar1_checks('orientation_noise', res, list(zip(dev.orientation_sigma,
                                                        dev.orientation_rho)), q, 'rad',
                     trend=True)
  # Yaw drift rate of the pz pose = sign·b_ψ: its dispersion is the yaw-rate bias std.
  slope_z = recs[2][1][:, 2]
  s_cfg = dev.channels['angular_velocity'].episode_stddev[2]
  s_meas = float(slope_z.std(ddof=1)) if slope_z.size > 1 else 0.0
  n_ = res.shape[1]
  t_len = n_ * dev.period_s
  noise_floor = 0.0
  if dev.orientation_sigma[2] > 0:
    s, rho = dev.orientation_sigma[2], dev.orientation_rho[2]
    noise_floor = s * math.sqrt(12 / n_ * (1 + rho) / (1 - rho)) / t_len
  s_pred = math.sqrt(s_cfg ** 2 + noise_floor ** 2)
  tol = K_SIGMA * s_pred / math.sqrt(2 * max(slope_z.size - 1, 1)) + q / t_len
  out.append(Check('orientation_noise.yaw_rate_bias_dispersion', 'std across units of the yaw '
                   'drift rate [rad/s]', s_meas, s_cfg, tol,
                   f'expected √(σ_ψ² + residual-noise slope variance) = {s_pred:.4g}; '
                   f'{K_SIGMA:g}× χ std of {slope_z.size} units + LSB/T',
                   abs(s_meas - s_pred) <= tol))
  return out


def _geometry_gravity(dev: Device, data, n_acq) -> list[Check]:
  rows, ok = [], True
  for n, (_, a, sign) in POSES.items():
    m = np.nanmean(by_sequence(data[n], 'linear_acceleration', n_acq), axis=(0, 1))
    good = (0.5 * G < sign * m[a] < 2 * G) and all(abs(m[j]) < 0.5 * G for j in range(3)
                                                   if j != a)
    ok &= good
    rows.append(f'{n}: {fmt(m)}')
  return [Check('geometry.gravity', 'specific force at rest, axis up reads +g', '; '.join(rows),
                f'+{G} on the up axis, ~0 elsewhere', 'sign, and 0.5 g < |up| < 2 g',
                'gross check of sign and unit (m/s², not g) per axis', ok)]
