"""Host-side analysis of `fibril_sim/imu` runs: per-world error metrics and the plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common, plotting, stats
from fibril_mjx.core import registry


# An integrating IMU's (`integration: average | delta`) truth of its rate fields: the window
# means of the MuJoCo signal (`delta_imu.TRUTH_FIELDS`), not the point values.
WINDOW_MEANS = {'angular_velocity': 'angular_velocity_window_mean',
                'linear_acceleration': 'linear_acceleration_window_mean'}
# Per-world RMS metrics of the increments (`integration: delta`) against the ideal ones.
DELTA_METRICS = {'delta_angle': 'delta_angle_error_rms_rad',
                 'delta_velocity': 'delta_velocity_error_rms_m_s'}


def rate_truth(truth: dict) -> dict:
  """The truth the delivered rate fields are compared with: the window means for an
  integrating IMU, else the point values (like with like)."""
  return truth | {f: truth[m] for f, m in WINDOW_MEANS.items() if m in truth}


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS angular-velocity and specific-force errors of delivered samples vs truth
  at their sample tick (`rate_truth`), the delivered count (`common.rate_error_metrics`), and
  with `integration: delta` the RMS errors (per axis) of `delta_angle` (rad) and
  `delta_velocity` (m/s) vs the ideal increments of their windows."""
  out = common.rate_error_metrics(sensor, rate_truth(truth))
  for f, name in DELTA_METRICS.items():
    if f in sensor and f in truth:
      x = sensor[f].astype(np.float64)
      e = np.sum((x - common.at_sample_tick(sensor, truth[f])) ** 2, axis=-1) / 3
      out[name] = common.masked_rms(e, common.usable(sensor, x))
  return out


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Truth vs delivered samples for one world, the Allan deviation of its gyro error, and the
  error distribution across worlds."""
  plt = plotting.pyplot()

  truth = rate_truth(truth)
  new = sensor['new_data'][world].astype(bool)
  st = np.clip(sensor['sample_tick'][world], 0, None)[new]
  t_s = time_s[st]
  fig, axes = plt.subplots(2, 2, figsize=(13, 8))
  colors = ('tab:red', 'tab:green', 'tab:blue')
  for ax, f, unit in ((axes[0, 0], 'angular_velocity', 'rad/s'),
                      (axes[1, 0], 'linear_acceleration', 'm/s²')):
    for i, c in enumerate(colors):
      ax.plot(time_s, truth[f][world][:, i], '-', color='k', lw=0.8)
      ax.plot(t_s, sensor[f][world][new][:, i], '.', ms=1.5, color=c, label='xyz'[i])
    ax.set_ylabel(f'{f.replace("_", " ")} [{unit}]')
    ax.legend(fontsize=8, loc='upper right')
  axes[0, 0].set_title(f'world {world}: delivered samples (dots) vs truth (black)')
  axes[1, 0].set_xlabel('time [s]')
  ax = axes[0, 1]
  if st.size >= 2 * 9:
    rate = 1.0 / np.median(np.diff(t_s)) if st.size > 1 else 1.0
    for i, c in enumerate(colors):
      err = sensor['angular_velocity'][world][new][:, i] - truth['angular_velocity'][world][st, i]
      try:
        taus, adev = stats.allan_deviation(err, rate)
      except ValueError:
        continue
      ax.loglog(taus, adev, '-', color=c, label=f'gyro {"xyz"[i]} error')
    ax.set_xlabel('τ [s]')
    ax.set_ylabel('Allan deviation [rad/s]')
    ax.set_title(f'world {world}: Allan deviation of sample − truth')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8)
  common.hist_across_worlds(axes[1, 1], metrics['angular_velocity_error_rms_rad_s'],
                            'angular velocity error RMS per world [rad/s]')
  common.save(fig, path, title)



# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/imu', metrics=host_metrics, plot=plot)
