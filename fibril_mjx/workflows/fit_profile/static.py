"""The static fit of each channel (noise, drift, bias, dispersion) from a unit at rest."""

from __future__ import annotations

import math

import numpy as np

from fibril_mjx.analysis import stats
from fibril_mjx.workflows.fit_profile.allan import (CHANNELS, K_SIGMA, delivered_samples,
                                                    episode_dispersion, fit_allan, heldout_allan,
                                                    split_heldout)
from fibril_mjx.workflows.fit_profile.plots import plot_allan


# ------------------------------------------------------------------------- static


def fit_static(ctype, cid, recs, fig_dir):
  values, rows, plots = {}, [], []
  held_rows = []
  for ch in CHANNELS:
    data = [delivered_samples(r.sensor(cid), ch) for r in recs if ch in r.sensor(cid)]
    if not data:
      continue
    rate = data[0][1]
    arrs = [d[0] for d in data]
    fit_recs, held_recs, how = split_heldout(arrs)
    if ctype == 'fibril_sim/imu':
      nd, kk, gms, gmt = [], [], [], []
      fig = []
      for i in range(3):
        f = fit_allan([r[:, i] for r in fit_recs], rate)
        h = heldout_allan([r[:, i] for r in held_recs], rate, f)
        nd.append(f['N'])
        kk.append(f['K'])
        gms.append(f.get('gm_sigma', 0.0))
        gmt.append(f.get('gm_tau_s', 0.0))
        ax = 'xyz'[i]
        rows.append((f'{ch}_noise_density[{i}]', f['N'], f['N_se'], 'Allan WLS'))
        rows.append((f'{ch}_random_walk[{i}]', f['K'], f['K_se'], 'Allan WLS'))
        if 'gm_sigma' in f:
          rows.append((f'{ch}_bias_instability_stddev[{i}]', f['gm_sigma'], f['gm_sigma_se'],
                       f'Allan WLS, τ_c grid → {f["gm_tau_s"]:.4g} s'))
        held_rows.append((f'{ch} {ax}', f'Allan deviation of held-out logs vs fitted model: '
                          f'max {h["max_dev_sigma"]:.2f} σ', h['within']))
        fig.append((ax, f['taus'], h['curve']))
      values[f'{ch}_noise_density'] = nd
      values[f'{ch}_random_walk'] = kk
      if any(gms):
        values[f'{ch}_bias_instability_stddev'] = gms
        values[f'{ch}_bias_correlation_time_s'] = [t if t > 0 else 1.0 for t in gmt]
      # turn-on dispersion across logs (noise contribution of each log mean subtracted)
      means = np.stack([r.mean(0) for r in arrs])
      n = min(r.shape[0] for r in arrs)
      disp = []
      for i in range(3):
        var_noise = (nd[i] ** 2 * rate) / n + kk[i] ** 2 * n / rate / 3
        s, se = episode_dispersion(means[:, i], var_noise)
        if s is not None:
          disp.append(s)
          rows.append((f'{ch}_bias_turn_on_stddev[{i}]', s, se, f'std of {len(arrs)} log means'))
      if len(disp) == 3:
        values[f'{ch}_bias_turn_on_stddev'] = disp
      plots.append(plot_allan(fig_dir, ch, fig))
    else:
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
  if ctype == 'fibril_sim/ahrs':
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
