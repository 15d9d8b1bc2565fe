"""The AHRS's static fit of each channel (noise, bias dispersion) from a unit at rest (the IMU's
is `imu_static`)."""

from __future__ import annotations

import math

import numpy as np

from fibril_mjx.analysis import stats
from fibril_mjx.workflows.fit_profile.allan import (CHANNELS, K_SIGMA, delivered_samples,
                                                    episode_dispersion, split_heldout)


# ------------------------------------------------------------------------- static


def fit_static(cid, recs, fig_dir):
  """The AR(1) static fit of the rates and, where recorded, the orientation (the AHRS's; the
  IMU's is `imu_static.fit_imu_static`): `(values, rows, held_rows, plots, how)`."""
  values, rows, plots = {}, [], []
  held_rows = []
  for ch in CHANNELS:
    data = [delivered_samples(r.sensor(cid), ch) for r in recs if ch in r.sensor(cid)]
    if not data:
      continue
    arrs = [d[0] for d in data]
    fit_recs, held_recs, how = split_heldout(arrs)
    fit_sig, fit_rho = [], []
    for i in range(3):
      s, rho, s_rel, r_se = stats.ar1_fit(np.stack([r[:, i] for r in _trim(fit_recs)]))
      hs, hr, hs_rel, hr_se = stats.ar1_fit(np.stack([r[:, i] for r in _trim(held_recs)]))
      fit_sig.append(s)
      fit_rho.append(rho)
      rows.append((f'{ch}_noise_stddev[{i}]', s, s * s_rel, 'sample std (log mean removed)'))
      rows.append((f'{ch}_noise_correlation[{i}]', rho, r_se, 'lag-1 autocorrelation'))
      ok = abs(hs - s) <= K_SIGMA * math.hypot(s * s_rel, hs * hs_rel) and \
          abs(hr - rho) <= K_SIGMA * math.hypot(r_se, hr_se) + 0.01
      held_rows.append((f'{ch} {"xyz"[i]}', f'held-out σ {hs:.4g}, ρ {hr:.4f}', ok))
    values[f'{ch}_noise_stddev'] = fit_sig
    values[f'{ch}_noise_correlation'] = fit_rho
    if ch == 'angular_velocity':
      means = np.array([r[:, 2].mean() for r in arrs])
      n = min(r.shape[0] for r in arrs)
      var_noise = fit_sig[2] ** 2 / n * (1 + fit_rho[2]) / (1 - fit_rho[2])
      s, se = episode_dispersion(means, var_noise)
      if s is not None:
        values['yaw_rate_bias_stddev_rad_s'] = s
        rows.append(('yaw_rate_bias_stddev_rad_s', s, se, f'std of {len(arrs)} log means of '
                     'gyro z'))
  qs = [delivered_samples(r.sensor(cid), 'orientation')[0] for r in recs
        if 'orientation' in r.sensor(cid)]
  if qs:
    res = []
    for q in qs:
      q = q * np.sign(q[:, :1] + 1e-30)
      qm = q.mean(0)
      qm = qm / np.linalg.norm(qm)
      e = _rotvec(q, qm)
      t = np.arange(e.shape[0], dtype=np.float64)
      t -= t.mean()
      e = e - np.outer(t, (e * t[:, None]).sum(0) / (t * t).sum())
      res.append(e)
    fit_recs, held_recs, how = split_heldout(res)
    sig, rho = [], []
    for i in range(3):
      s, r_, s_rel, r_se = stats.ar1_fit(np.stack([r[:, i] for r in _trim(fit_recs)]))
      sig.append(s)
      rho.append(r_)
      rows.append((f'orientation_noise_stddev_rad[{i}]', s, s * s_rel,
                   'std of the detrended right error rotation'))
      rows.append((f'orientation_noise_correlation[{i}]', r_, r_se, 'lag-1 autocorrelation'))
    values['orientation_noise_stddev_rad'] = sig
    values['orientation_noise_correlation'] = rho
  return values, rows, held_rows, plots, how if recs else ''


def _trim(recs):
  n = min(r.shape[0] for r in recs)
  return [r[:n] for r in recs]


def _rotvec(q, p):
  w = p[0] * q[:, 0] + q[:, 1:] @ p[1:]
  v = p[0] * q[:, 1:] - q[:, :1] * p[1:] - np.cross(p[1:], q[:, 1:])
  return 2.0 * v * np.sign(w + 1e-30)[:, None]
