"""`fibril-mjx fit-profile`: an empirical profile estimated from recordings of a real unit.

Inputs are recordings (`fibril_mjx.io.recording`: `.npz` / `.parquet`, CSV with a column
mapping, or ROS bags with `--topics ID=TOPIC`, `fibril_mjx.io.bags`) of one `fibril_sim/imu` or `fibril_sim/ahrs` component, by role:

- **static** logs (unit at rest): noise terms. IMU: white noise density N, random walk K and
  an optional first-order Gauss–Markov bias (σ, τ_c) from a weighted least-squares fit of the
  exact Allan variance model (`stats.allan_variance_model`, linear in N², K², σ² for each τ_c
  on a grid; the Gauss–Markov term is kept only when it lowers χ² by more than 10); with ≥ 3
  logs the turn-on bias dispersion. AHRS: residual std and AR(1) ρ per axis (rates and
  orientation), and with ≥ 3 logs the yaw-rate bias dispersion.
- **six-orientation** logs (the unit resting on each face): accelerometer gain matrix and
  bias, gyro bias (calibration of this unit: reported in the evidence and `fit.json`, not
  written to the reusable profile).
- **timing** logs: sample period, latency (arrival − sample), jitter and loss (sequence gaps,
  or gaps in the sample times) → a transport profile beside the empirical one.
- **thermal** logs (IMU, one log per soaked chamber set-point, unit at rest, with the sample
  field `temperature_c`): the log means of each axis fitted by weighted least squares to
  `c0 + k1 (T − T_ref) + k2 (T − T_ref)²` at the log's mean temperature (≥ 3 logs; 2 fit k1
  only) → `*_bias_temperature_k1/_k2` with standard errors from batch means of each log.

Data are split into a fitting and a held-out part (the last ~30 % of the logs when there are
≥ 3, else the last 30 % of each log in time); the evidence markdown reports the fitted values
with standard errors and the agreement on the held-out part.
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import yaml

from fibril_mjx.io import bags, outdir
from fibril_mjx.io import recording as rc
from fibril_mjx.analysis import plotting, stats
from fibril_mjx.errors import ConfigError, FibrilError

G = 9.80665
TYPES = ('fibril_sim/imu', 'fibril_sim/ahrs')
CHANNELS = ('angular_velocity', 'linear_acceleration')
HELDOUT = 0.3
K_SIGMA = 4.0


def load(path, csv_map=None, topics=None, component_type=None, component=None):
  """A recording from `.npz` / `.parquet`, `.csv` with a column mapping (dict), or a ROS bag
  with a topic mapping (`fibril_mjx.io.bags`)."""
  path = pathlib.Path(path)
  if bags.is_bag(path):
    if topics is None:
      raise FibrilError(f'{path}: a ROS bag needs --topics ID=TOPIC[,ID=TOPIC] (e.g. '
                        'imu=/imu/data)')
    types = {component: component_type} if component else None
    return rc.read_recording(path, topics=topics, types=types)
  if path.suffix == '.csv':
    if csv_map is None:
      raise FibrilError(f'{path}: a CSV recording needs --csv-map (column mapping YAML)')
    return rc.read_csv(path, csv_map[0], mapping_file=csv_map[1])
  return rc.read_recording(path)


def _uniform(fields, field):
  """Delivered samples in order (lost ones dropped, not filled: a repeated white sample would
  bias the white level; the τ axis stretches by 1/(1 − loss)) and the rate in Hz."""
  t = np.asarray(fields[rc.SAMPLE_TIME], np.float64)
  x = np.asarray(fields[field], np.float64)
  period = float(np.median(np.diff(t)))
  return x, 1.0 / period
  idx = np.round((t - t[0]) / period).astype(np.int64)
  out = np.full((idx[-1] + 1,) + x.shape[1:], np.nan)
  out[idx] = x
  bad = np.isnan(out[:, 0]) if out.ndim > 1 else np.isnan(out)
  if bad.any():
    fill = np.maximum.accumulate(np.where(bad, 0, np.arange(bad.size)))
    out = out[fill]
  return out, 1.0 / period


def _split(records):
  """`(fit, heldout, how)`: whole logs when ≥ 3, else each log split in time."""
  if len(records) >= 3:
    k = max(1, int(round(HELDOUT * len(records))))
    return records[:-k], records[-k:], f'last {k} of {len(records)} logs held out'
  fit, held = [], []
  for r in records:
    n = r.shape[0]
    cut = int(round((1 - HELDOUT) * n))
    fit.append(r[:cut])
    held.append(r[cut:])
  return fit, held, f'last {int(HELDOUT * 100)} % of each log (in time) held out'


def _pool_allan(recs, rate):
  n = min(r.shape[0] for r in recs)
  x = np.stack([r[:n] - r[:n].mean() for r in recs])
  m = stats.allan_cluster_sizes(n)
  taus, adev, rel = stats.allan_deviation_pooled(x, rate, m)
  return m, taus, adev, rel, n


def fit_allan(recs, rate):
  """Weighted least squares of the exact AVAR model to pooled Allan deviations.

  Returns:
    dict with N, K (and gm_sigma, gm_tau_s when selected), their standard errors, chi2.
  """
  from scipy import optimize
  m, taus, adev, rel, n = _pool_allan(recs, rate)
  avar = adev ** 2
  s_var = 2 * rel * avar          # std of the Allan variance estimate
  dt = 1.0 / rate
  base = [1.0 / m, (m * dt) / 3.0 * (1 + 1 / (2 * m * m))]

  def solve(cols):
    a = np.stack(cols, -1) / s_var[:, None]
    b = avar / s_var
    coef, _ = optimize.nnls(a, b)
    chi2 = float(np.sum((a @ coef - b) ** 2))
    cov = np.linalg.pinv(a.T @ a)
    return coef, chi2, cov

  best = solve(base) + (None,)
  t_max = n * dt / 3
  for tau_c in np.logspace(np.log10(10 * dt), np.log10(max(t_max, 20 * dt)), 25):
    phi = math.exp(-dt / tau_c)
    col = stats.allan_variance_model(m, rate, ar1=[(1.0, phi)])
    res = solve(base + [col]) + (tau_c,)
    if res[0][2] > 0 and res[1] < best[1] - 10.0:
      best = res if best[3] is None or res[1] < best[1] else best
  coef, chi2, cov, tau_c = best
  # Neighbouring τ share data: scale the independent-point errors by √(points per octave).
  se = np.sqrt(np.maximum(np.diag(cov), 0)) * math.sqrt(max(1.0, taus.size / max(
      np.log2(taus[-1] / taus[0]), 1.0)))
  white_var, k2 = coef[0], coef[1]
  out = {'N': math.sqrt(white_var * dt), 'N_se': 0.5 * se[0] / max(white_var, 1e-300)
         * math.sqrt(white_var * dt), 'K': math.sqrt(k2),
         'K_se': 0.5 * se[1] / math.sqrt(k2) if k2 > 0 else math.sqrt(se[1]),
         'chi2': chi2, 'dof': int(taus.size - len(coef)), 'taus': (taus, adev, rel)}
  if tau_c is not None:
    out.update(gm_sigma=math.sqrt(coef[2]), gm_sigma_se=0.5 * se[2] / math.sqrt(coef[2]),
               gm_tau_s=float(tau_c))
  return out


def _model_adev(fit, m, rate):
  ar1 = [(fit['gm_sigma'], math.exp(-1 / (rate * fit['gm_tau_s'])))] if 'gm_sigma' in fit else []
  return np.sqrt(stats.allan_variance_model(m, rate, white_sigma=fit['N'] * math.sqrt(rate),
                                            ar1=ar1, random_walk=fit['K']))


def _heldout_allan(held, rate, fit):
  m, taus, adev, rel, _ = _pool_allan(held, rate)
  model = _model_adev(fit, m, rate)
  z = np.abs(adev / model - 1) / rel
  return {'max_dev_sigma': float(z.max()), 'within': bool(np.all(z < K_SIGMA)),
          'curve': (taus, adev, model, rel)}


def _episode_dispersion(means, var_noise):
  if len(means) < 3:
    return None, None
  s = float(np.std(means, ddof=1))
  v = max(s * s - var_noise, 0.0)
  return math.sqrt(v), math.sqrt(v + var_noise) / math.sqrt(2 * (len(means) - 1))


# ------------------------------------------------------------------------- static


def fit_static(ctype, cid, recs, fig_dir):
  values, rows, plots = {}, [], []
  held_rows = []
  for ch in CHANNELS:
    data = [_uniform(r.sensor(cid), ch) for r in recs if ch in r.sensor(cid)]
    if not data:
      continue
    rate = data[0][1]
    arrs = [d[0] for d in data]
    fit_recs, held_recs, how = _split(arrs)
    if ctype == 'fibril_sim/imu':
      nd, kk, gms, gmt = [], [], [], []
      fig = []
      for i in range(3):
        f = fit_allan([r[:, i] for r in fit_recs], rate)
        h = _heldout_allan([r[:, i] for r in held_recs], rate, f)
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
        s, se = _episode_dispersion(means[:, i], var_noise)
        if s is not None:
          disp.append(s)
          rows.append((f'{ch}_bias_turn_on_stddev[{i}]', s, se, f'std of {len(arrs)} log means'))
      if len(disp) == 3:
        values[f'{ch}_bias_turn_on_stddev'] = disp
      plots.append(_plot_allan(fig_dir, ch, fig))
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
        s, se = _episode_dispersion(means, var_noise)
        if s is not None:
          values['yaw_rate_bias_stddev_rad_s'] = s
          rows.append(('yaw_rate_bias_stddev_rad_s', s, se, f'std of {len(arrs)} log means of '
                       'gyro z'))
  if ctype == 'fibril_sim/ahrs':
    qs = [_uniform(r.sensor(cid), 'orientation')[0] for r in recs
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
      fit_recs, held_recs, how = _split(res)
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


# ----------------------------------------------------------------- six orientations


def fit_six(cid, recs):
  """Accelerometer gain matrix / bias and gyro bias from logs covering the six poses."""
  acc = np.concatenate([np.asarray(r.sensor(cid)['linear_acceleration'], np.float64)
                        for r in recs])
  gyr = [np.asarray(r.sensor(cid)['angular_velocity'], np.float64) for r in recs
         if 'angular_velocity' in r.sensor(cid)]
  mag = np.abs(acc)
  dom = np.argmax(mag, 1)
  steady = (mag[np.arange(len(acc)), dom] > 0.8 * G) & (
      np.sort(mag, 1)[:, 1] < 0.3 * G)
  groups = {}
  for a in range(3):
    for sgn in (1, -1):
      sel = steady & (dom == a) & (np.sign(acc[:, a]) == sgn)
      groups[(a, sgn)] = acc[sel]
  missing = [f'{"+" if s > 0 else "-"}{"xyz"[a]}' for (a, s), v in groups.items() if len(v) < 10]
  if missing:
    raise ConfigError(str(recs[0].path), f'sensor/{cid}/linear_acceleration',
                      f'six-orientation logs must hold every pose at rest; missing {missing}')

  def est(part):
    means = {k: (v[:int(len(v) * (1 - HELDOUT))] if part == 'fit' else
                 v[int(len(v) * (1 - HELDOUT)):]).mean(0) for k, v in groups.items()}
    gain = np.stack([(means[(a, 1)] - means[(a, -1)]) / (2 * G) for a in range(3)], -1)
    bias = np.mean([(means[(a, 1)] + means[(a, -1)]) / 2 for a in range(3)], 0)
    return gain, bias, means
  gain, bias, _ = est('fit')
  hgain, hbias, hmeans = est('held')
  se_mean = {k: v.std(0, ddof=1) / math.sqrt(len(v) * (1 - HELDOUT)) for k, v in groups.items()}
  g_se = np.stack([np.sqrt(se_mean[(a, 1)] ** 2 + se_mean[(a, -1)] ** 2) / (2 * G)
                   for a in range(3)], -1)
  pred_err = [float(np.linalg.norm(gain @ (s * G * np.eye(3)[a]) + bias - hmeans[(a, s)]))
              for (a, s) in groups]
  out = {'linear_acceleration_gain': gain, 'linear_acceleration_gain_se': g_se,
         'linear_acceleration_scale': np.diag(gain).tolist(),
         'linear_acceleration_misalignment': (gain - np.diag(np.diag(gain))).tolist(),
         'linear_acceleration_bias': bias.tolist(),
         'heldout_gain': hgain, 'heldout_bias': hbias.tolist(),
         'heldout_pose_error_rms_m_s2': float(np.sqrt(np.mean(np.square(pred_err))))}
  if gyr:
    g = np.concatenate(gyr)
    out['angular_velocity_bias'] = g.mean(0).tolist()
  return out


# --------------------------------------------------------------------------- timing


def fit_timing(cid, recs):
  per, lat, lost, total = [], [], 0, 0
  for r in recs:
    f = r.sensor(cid)
    ts, ta = np.asarray(f[rc.SAMPLE_TIME]), np.asarray(f[rc.ARRIVAL_TIME])
    period = float(np.median(np.diff(ts)))
    if 'sequence' in f:
      seq = np.asarray(f['sequence'], np.int64)
      steps = np.diff(seq)
    else:
      steps = np.maximum(np.round(np.diff(ts) / period).astype(np.int64), 1)
    per.append(np.diff(ts) / steps)
    lat.append(ta - ts)
    lost += int(np.sum(steps - 1))
    total += int(np.sum(steps)) + 1
  per, lat = np.concatenate(per), np.concatenate(lat)
  cut = int(len(lat) * (1 - HELDOUT))
  fit_l, held_l = lat[:cut], lat[cut:]
  p = lost / max(total, 1)
  return {'period_s': float(np.median(per)), 'period_std_s': float(per.std()),
          'latency_s': float(fit_l.mean()), 'latency_se': float(fit_l.std() / math.sqrt(cut)),
          'jitter_s': float(fit_l.std()), 'jitter_se': float(fit_l.std() / math.sqrt(2 * cut)),
          'loss_probability': p, 'loss_se': math.sqrt(max(p * (1 - p), 1e-12) / max(total, 1)),
          'heldout_latency_s': float(held_l.mean()), 'heldout_jitter_s': float(held_l.std()),
          'samples': int(lat.size), 'latencies': lat, 'periods': per}


# ---------------------------------------------------------------------------- plots


def _plot_allan(fig_dir, ch, rows):
  plt = plotting.pyplot()
  fig, ax = plt.subplots(figsize=(7, 5))
  for (axname, (taus, adev, rel), (ht, hadev, hmodel, hrel)), c in zip(
      rows, ('tab:red', 'tab:green', 'tab:blue')):
    ax.loglog(taus, adev, '.', color=c, label=f'{axname} fitting logs')
    ax.loglog(ht, hadev, 'x', color=c, ms=4, label=f'{axname} held-out logs')
    ax.loglog(ht, hmodel, '-', color=c, lw=0.8, label=f'{axname} fitted model')
  ax.set_xlabel('τ [s]')
  ax.set_ylabel('Allan deviation')
  ax.grid(True, which='both', alpha=0.3)
  ax.legend(fontsize=6)
  ax.set_title(f'{ch}: Allan deviation, fitted model and held-out logs')
  path = fig_dir / f'fit_allan_{ch}.png'
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path.name


def _plot_timing(fig_dir, t):
  plt = plotting.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  axes[0].hist(t['periods'] * 1e3, bins=50)
  axes[0].set_xlabel('sample period [ms]')
  axes[1].hist(t['latencies'] * 1e3, bins=50)
  axes[1].set_xlabel('latency arrival − sample [ms]')
  path = fig_dir / 'fit_timing.png'
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path.name


# ---------------------------------------------------------------------------- driver


def fit_thermal(cid, recs, t_ref: float):
  """`(values, rows)`: bias temperature coefficients from soaked logs at rest (module
  docstring). Rows are `(field[axis], value, se, method)`."""
  temps, means, ses = [], {ch: [] for ch in CHANNELS}, {ch: [] for ch in CHANNELS}
  for r in recs:
    f = r.sensor(cid)
    if 'temperature_c' not in f:
      raise FibrilError(f'{r.path}: thermal logs need the sample field temperature_c '
                        '(temperature_output: true, or a temperature column)')
    temps.append(float(np.mean(np.asarray(f['temperature_c'], np.float64))))
    for ch in CHANNELS:
      x = np.asarray(f[ch], np.float64)
      nb = 10 if x.shape[0] >= 100 else max(2, x.shape[0] // 10)
      batches = np.stack([b.mean(0) for b in np.array_split(x, nb)])
      means[ch].append(x.mean(0))
      ses[ch].append(batches.std(0, ddof=1) / math.sqrt(nb))
  if len(recs) < 2:
    raise FibrilError('fit-profile --thermal: give at least 2 logs at different set-points '
                      '(3 or more to fit k2)')
  dT = np.asarray(temps) - t_ref
  order = 2 if len(recs) >= 3 else 1
  X = np.stack([dT ** j for j in range(order + 1)], -1)
  values, rows = {}, []
  for ch in CHANNELS:
    y, se = np.stack(means[ch]), np.maximum(np.stack(ses[ch]), 1e-30)
    k = {1: np.zeros(3), 2: np.zeros(3)}
    k_se = {1: np.zeros(3), 2: np.zeros(3)}
    for a in range(3):
      w = 1.0 / se[:, a] ** 2
      cov = np.linalg.inv(X.T @ (w[:, None] * X))
      beta = cov @ X.T @ (w * y[:, a])
      for j in range(1, order + 1):
        k[j][a], k_se[j][a] = beta[j], math.sqrt(cov[j, j])
    for j in range(1, order + 1):
      name = f'{ch}_bias_temperature_k{j}'
      values[name] = k[j].tolist()
      for a in range(3):
        rows.append((f'{name}[{a}]', float(k[j][a]), float(k_se[j][a]),
                     f'thermal: {len(recs)} soaked logs, T_ref {t_ref:g} °C'
                     + (' (at rest: includes ks·g on the axis holding g)'
                        if ch == 'linear_acceleration' and j == 1 else '')))
  values['reference_temperature_c'] = float(t_ref)
  return values, rows


def _round(v):
  if isinstance(v, (list, tuple, np.ndarray)):
    return [_round(x) for x in np.asarray(v).tolist()]
  return float(f'{float(v):.6g}')


def fit_profile(*, component_type: str, component: str, out, profile_id: str | None = None,
                static=(), six=(), timing=(), csv_map=None, topics=None,
                overwrite=False, thermal=(), reference_temperature_c: float = 25.0) -> dict:
  """Fits and writes `out` (profile YAML), `<stem>_transport.yaml` (with timing logs),
  `<stem>_evidence.md`, `<stem>_fit.json` and plots beside it.

  Args:
    component_type: `fibril_sim/imu` or `fibril_sim/ahrs`.
    component: component id of the samples in the recordings.
    static, six, timing, thermal: recording paths by role (thermal: IMU, one soaked log per
      set-point, `reference_temperature_c` the T_ref of the fitted polynomial).
    csv_map: `(mapping dict, mapping file name)` for CSV inputs.
    topics: topic mapping for ROS bag inputs (`'imu=/imu/data'`, `fibril_mjx.io.bags`).

  Returns:
    `fit.json` content.
  """
  if component_type not in TYPES:
    raise ConfigError('--type', 'type', f'fit-profile supports {", ".join(TYPES)}',
                      component_type)
  if not (static or six or timing or thermal):
    raise FibrilError('fit-profile: give at least one of --static, --six-orientation, --timing, '
                      '--thermal')
  if thermal and component_type != 'fibril_sim/imu':
    raise ConfigError('--type', 'type', '--thermal logs fit the fibril_sim/imu thermal model',
                      component_type)
  out = pathlib.Path(out)
  if out.suffix not in ('.yaml', '.yml'):
    raise ConfigError('--out', 'out', 'must be a .yaml file path', str(out))
  stem = out.with_suffix('')
  pid = profile_id or stem.name
  files = [out, stem.parent / f'{stem.name}_transport.yaml', stem.parent /
           f'{stem.name}_evidence.md', stem.parent / f'{stem.name}_fit.json']
  for f in files:
    outdir.claim_file(f, overwrite=overwrite)
  out.parent.mkdir(parents=True, exist_ok=True)
  recs = {role: [load(p, csv_map, topics, component_type, component) for p in paths]
          for role, paths in (('static', static), ('six', six), ('timing', timing),
                              ('thermal', thermal))}
  for role, lst in recs.items():
    for r in lst:
      r.sensor(component)
  fig_dir = out.parent
  result = {'profile_id': pid, 'component_type': component_type, 'component': component,
            'recordings': {role: [r.path for r in lst] for role, lst in recs.items()}}
  values, rows, held_rows, plots, how = {}, [], [], [], ''
  if recs['static']:
    values, rows, held_rows, plots, how = fit_static(component_type, component, recs['static'],
                                                     fig_dir)
  if recs['thermal']:
    t_values, t_rows = fit_thermal(component, recs['thermal'], reference_temperature_c)
    values = {**values, **t_values}
    rows = list(rows) + t_rows
  six_fit = fit_six(component, recs['six']) if recs['six'] else None
  tim = fit_timing(component, recs['timing']) if recs['timing'] else None
  result['fields'] = {k: _round(v) for k, v in values.items()}
  result['uncertainty'] = [{'field': f, 'value': v, 'se': se, 'method': m}
                           for f, v, se, m in rows]
  result['heldout'] = [{'what': w, 'result': r, 'agrees': ok} for w, r, ok in held_rows]
  if six_fit:
    result['calibration'] = {k: _round(v) for k, v in six_fit.items()}
  if tim:
    result['timing'] = {k: v for k, v in tim.items() if k not in ('latencies', 'periods')}
    plots.append(_plot_timing(fig_dir, tim))
  srcs = ', '.join(pathlib.Path(p).name for lst in result['recordings'].values() for p in lst)
  prov_fields = {f.split('[')[0]: f'FITTED by fibril-mjx fit-profile ({m}); see evidence'
                 for f, _, _, m in rows}
  profile = {'id': pid, 'kind': 'empirical', 'component_types': [component_type],
             'provenance': {'source': f'fibril-mjx fit-profile from recordings: {srcs}',
                            'evidence': f'{stem.name}_evidence.md',
                            'recordings': [str(p) for lst in result['recordings'].values()
                                           for p in lst],
                            'fields': prov_fields},
             'fields': result['fields']}
  if not result['fields']:
    profile['fields'] = {}
  outdir.write_file(out, yaml.safe_dump(profile, sort_keys=False, allow_unicode=True).encode())
  if tim:
    tprof = {'id': f'{pid}_transport', 'kind': 'transport', 'component_types': [component_type],
             'provenance': {'source': f'fibril-mjx fit-profile timing logs: {srcs}',
                            'evidence': f'{stem.name}_evidence.md'},
             'fields': {'latency_s': _round(tim['latency_s']),
                        'jitter_s': _round(tim['jitter_s']),
                        'loss_probability': _round(tim['loss_probability'])}}
    outdir.write_file(files[1], yaml.safe_dump(tprof, sort_keys=False).encode())
  outdir.write_file(files[2], _evidence(result, recs, how, six_fit, tim, plots,
                                        component).encode())
  outdir.write_file(files[3], json.dumps(result, indent=1, default=_json).encode())
  return result


def _json(o):
  if isinstance(o, np.ndarray):
    return o.tolist()
  if isinstance(o, np.generic):
    return o.item()
  return str(o)


def _evidence(result, recs, how, six_fit, tim, plots, cid) -> str:
  L = [f"# Evidence for `{result['profile_id']}`", '',
       f"Fitted by `fibril-mjx fit-profile` for component `{cid}` "
       f"(`{result['component_type']}`).", '', '## Data used', '']
  for role, lst in recs.items():
    for r in lst:
      f = r.sensor(cid)
      t = np.asarray(f[rc.SAMPLE_TIME])
      L.append(f"- {role}: `{r.path}` — {t.size} samples, {t[-1] - t[0]:.4g} s, "
               f"source: {r.meta.get('source', 'unknown')}")
  L += ['', '## Method', '',
        '- Static logs: each log\'s mean is removed (a constant is bias, not noise); lost samples '
        'are dropped (not filled), so τ is stretched by 1/(1 − loss).',
        '- IMU noise: overlapping Allan deviation pooled over logs, fitted by weighted least '
        'squares with the exact discrete model (white N²/τ + random walk K²τ/3 + optional '
        'Gauss–Markov σ², τ_c on a grid, kept when χ² drops by > 10); weights from the '
        'overlapping-estimator edf; standard errors scaled by √(τ points per octave) because '
        'neighbouring τ share data. The white term includes the output LSB noise q²/12.',
        '- AHRS noise: stationary std and lag-1 autocorrelation per axis (AR(1)); orientation '
        'from the right error rotation about the log\'s mean attitude, linear drift removed.',
        '- Per-episode dispersions (turn-on bias, yaw-rate bias): std across logs of the log '
        'means, minus the noise variance of a mean; needs ≥ 3 logs.',
        '- Six-orientation: poses found by the axis holding ~1 g; gain column a = '
        '(mean(+a up) − mean(−a up))/2g, bias = mean of the pose pairs.',
        '- Timing: period = median sample spacing, latency = mean(arrival − sample), jitter = '
        'its std, loss = missing sequence numbers (or sample-time gaps) / acquisitions.',
        *(['- Thermal: one soaked log per set-point at rest; per axis, the log means are '
           'fitted by weighted least squares to c0 + k1·ΔT + k2·ΔT² at the log\'s mean '
           'temperature_c (ΔT = T − T_ref), weights from batch means (10 per log); at rest the '
           'linear term of the axis holding g also holds ks·g.'] if recs.get('thermal') else []),
        f'- Held out: {how or "last 30 % of each timing / pose segment"}.', '',
        '## Fitted values', '', '| field | value | std error | method |', '| --- | --- | --- | --- |']
  for u in result['uncertainty']:
    se = '—' if u['se'] is None else f"{u['se']:.3g}"
    L.append(f"| `{u['field']}` | {u['value']:.6g} | {se} | {u['method']} |")
  if tim:
    for k in ('latency_s', 'jitter_s', 'loss_probability'):
      se = tim[{'latency_s': 'latency_se', 'jitter_s': 'jitter_se',
                'loss_probability': 'loss_se'}[k]]
      L.append(f"| `{k}` (transport profile) | {tim[k]:.6g} | {se:.3g} | timing logs |")
    L.append(f"| period (for the device profile) | {tim['period_s']:.6g} | "
             f"{tim['period_std_s']:.3g} (spread) | median spacing |")
  if six_fit:
    L += ['', 'Calibration of this unit (not written to the reusable profile; put it in an '
          'overlay or the instance config):', '',
          f"- accelerometer gain matrix (columns per axis): {np.round(six_fit['linear_acceleration_gain'], 6).tolist()}"
          f" ± {np.round(six_fit['linear_acceleration_gain_se'], 6).tolist()}",
          f"- accelerometer bias [m/s²]: {_round(six_fit['linear_acceleration_bias'])}"]
    if 'angular_velocity_bias' in six_fit:
      L.append(f"- gyro bias [rad/s]: {_round(six_fit['angular_velocity_bias'])}")
  L += ['', '## Held-out agreement', '']
  for h in result['heldout']:
    L.append(f"- {h['what']}: {h['result']} — {'agrees' if h['agrees'] else 'DISAGREES'} "
             f"(within {K_SIGMA:g} standard errors)")
  if six_fit:
    L.append(f"- six-orientation: held-out pose means predicted by the fitted gain and bias "
             f"with RMS error {six_fit['heldout_pose_error_rms_m_s2']:.4g} m/s²")
  if tim:
    L.append(f"- timing: held-out latency {tim['heldout_latency_s']:.6g} s, jitter "
             f"{tim['heldout_jitter_s']:.6g} s")
  L += ['', '## Plots', ''] + [f'- `{p}`' for p in plots] + [
      '', 'Check the result with `fibril-mjx validate` on a manifest using this profile.', '']
  return '\n'.join(L)
