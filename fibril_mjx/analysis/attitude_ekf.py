"""Host-side analysis of `fibril_mjx/attitude_ekf` runs: float64 attitude and tilt errors,
per-world metrics and the plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common, plotting
from fibril_mjx.core import registry


def attitude_error_rad(q_est, q_true):
  """Rotation angle between attitudes `(..., 4)` → `(...)` rad in [0, π], float64."""
  return common.angle_rad(q_true, q_est)


def tilt_error_rad(q_est, q_true):
  """Angle between the estimated and true gravity directions in the IMU frame (roll/pitch
  error independent of yaw) `(...)` rad, float64."""
  def up_in_body(q):
    q = np.asarray(q, np.float64)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z],
                    -1)
  u, v = up_in_body(q_est), up_in_body(q_true)
  return np.arctan2(np.linalg.norm(np.cross(u, v), axis=-1), np.sum(u * v, axis=-1))


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per-world attitude error of the estimate vs the true site attitude at each update's
  sample tick (NumPy, float64).

  Over delivered, finite estimates (`common.usable`); NaN for a world with none.

  Returns:
    `{metric: (nworld,)}`: RMS and final attitude error (deg, includes yaw drift), RMS and
    final tilt error (deg, roll/pitch only), number of updates.
  """
  new = sensor['new_data'].astype(bool)
  st = np.clip(sensor['sample_tick'], 0, None)
  q = np.asarray(sensor['orientation'], np.float64)
  q_true = np.take_along_axis(truth['orientation'], st[..., None], axis=1)
  att = np.degrees(attitude_error_rad(q, q_true))
  tilt = np.degrees(tilt_error_rad(q, q_true))
  ok = common.usable(sensor, q)
  idx = np.arange(new.shape[1])
  last = np.max(np.where(ok, idx, 0), axis=1)   # last usable update
  pick = lambda a: np.where(ok.any(axis=1),   # noqa: E731
                            np.take_along_axis(a, last[:, None], axis=1)[:, 0], np.nan)
  return {
      'attitude_error_rms_deg': common.masked_rms(att ** 2, ok),
      'attitude_error_final_deg': pick(att),
      'tilt_error_rms_deg': common.masked_rms(tilt ** 2, ok),
      'tilt_error_final_deg': pick(tilt),
      'updates': new.sum(axis=1),
  }


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Truth vs estimate (roll/pitch/yaw) for one world, the attitude error over time of the
  traced worlds with world `world`'s 3σ bound, and the error distribution across worlds."""
  plt = plotting.pyplot()

  new_all = sensor['new_data'].astype(bool)
  st_all = np.clip(sensor['sample_tick'], 0, None)
  fig, axes = plt.subplots(3, 2, figsize=(13, 10))
  new = new_all[world]
  t_s = time_s[st_all[world]][new]
  common.plot_rpy(axes, time_s, truth['orientation'][world], t_s,
                  common.rpy_deg(sensor['orientation'][world])[new],
                  truth_label='truth (IMU site)', label=f'{cid} estimate',
                  title=f'world {world}: attitude, truth vs estimate', ls='-', lw=0.8)

  ax = axes[0, 1]
  for w in range(new_all.shape[0]):
    nw = new_all[w]
    qt = np.take_along_axis(truth['orientation'][w], st_all[w][:, None], axis=0)
    err = np.degrees(attitude_error_rad(sensor['orientation'][w], qt))[nw]
    ax.plot(time_s[st_all[w]][nw], err, '-', lw=0.6, alpha=0.8 if w == world else 0.35,
            color='tab:red' if w == world else 'tab:gray')
  ax.set_yscale('log')
  ax.set_ylabel('attitude error [deg]')
  ax.set_title(f'attitude error of {new_all.shape[0]} traced worlds (red: world {world})')
  ax = axes[1, 1]
  qt = np.take_along_axis(truth['orientation'][world], st_all[world][:, None], axis=0)
  ax.plot(t_s, np.degrees(tilt_error_rad(sensor['orientation'][world], qt))[new], '-',
          color='tab:blue', lw=0.8, label='tilt (roll/pitch)')
  ax.plot(t_s, np.degrees(attitude_error_rad(sensor['orientation'][world], qt))[new], '-',
          color='tab:red', lw=0.8, label='full (incl. yaw)')
  # first two error-state axes: world x/y rotation (quaternion EKF) or roll/pitch (RPY EKF)
  cov = sensor['covariance'][world][new]
  ax.plot(t_s, 3 * np.degrees(np.sqrt(np.clip(cov[:, 0, 0] + cov[:, 1, 1], 0, None))), 'k--',
          lw=0.8, label='filter 3σ tilt, 3·√(P₀₀ + P₁₁)')
  ax.set_ylim(0, None)
  ax.set_ylabel('error [deg]')
  ax.set_xlabel('time [s]')
  ax.set_title(f'world {world}: tilt vs full attitude error')
  ax.legend(fontsize=8)
  ax = axes[2, 1]
  rms, tilt = metrics['attitude_error_rms_deg'], metrics['tilt_error_rms_deg']
  bins = min(40, max(5, len(rms) // 4))
  ax.hist(rms, bins=bins, color='tab:red', alpha=0.6, label='attitude (incl. yaw)')
  ax.hist(tilt, bins=bins, color='tab:blue', alpha=0.6, label='tilt')
  ax.set_xlabel('RMS error per world [deg]')
  ax.set_ylabel('worlds')
  ax.set_title(f'error distribution across {len(rms)} worlds')
  ax.legend(fontsize=8)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_mjx/attitude_ekf', metrics=host_metrics, plot=plot)
