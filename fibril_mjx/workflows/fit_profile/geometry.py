"""Six-orientation gains and biases, and the transport timing, from the recordings."""

from __future__ import annotations

import math

import numpy as np

from fibril_mjx.io import recording as rc
from fibril_mjx.errors import ConfigError
from fibril_mjx.workflows.fit_profile.allan import G, HELDOUT


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
