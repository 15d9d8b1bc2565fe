"""Host-side analysis of `fibril_sim/imu` runs: per-world error metrics and the plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common, plotting, stats
from fibril_mjx.core import registry


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS angular-velocity and specific-force errors of delivered samples vs truth
  at their sample tick, and the delivered count (`common.rate_error_metrics`)."""
  return common.rate_error_metrics(sensor, truth)


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Truth vs delivered samples for one world, the Allan deviation of its gyro error, and the
  error distribution across worlds."""
  plt = plotting.pyplot()

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
registry.add('fibril_sim/imu', metrics=host_metrics, plot=plot)
