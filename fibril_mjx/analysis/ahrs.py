"""Host-side analysis of `fibril_sim/ahrs` runs: per-world error metrics and the plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common, plotting
from fibril_mjx.core import registry


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS orientation error (deg) of delivered, healthy, finite samples vs truth at
  their sample tick (NaN for a world with none), and the rate errors of
  `common.rate_error_metrics`."""
  q = np.asarray(sensor['orientation'], np.float64)
  ang = np.degrees(common.angle_rad(q, common.at_sample_tick(sensor, truth['orientation'])))
  return {'orientation_error_rms_deg': common.masked_rms(ang ** 2, common.usable(sensor, q)),
          **common.rate_error_metrics(sensor, truth)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Truth vs delivered samples for one world and the error distribution across worlds."""
  _plot(path, cid, time_s, sensor, truth, world,
                   metrics['orientation_error_rms_deg'], title)


def _plot(path, cid: str, time_s, sensor: dict, truth: dict, world: int,
          per_world_err: np.ndarray, title: str):
  """Truth vs AHRS (roll/pitch/yaw and rates) for one world; error distribution across worlds."""
  plt = plotting.pyplot()

  new = sensor['new_data'][world].astype(bool)
  t_s = time_s[np.clip(sensor['sample_tick'][world], 0, None)][new]
  fig, axes = plt.subplots(3, 2, figsize=(13, 9))
  common.plot_rpy(axes, time_s, truth['orientation'][world], t_s,
                  common.rpy_deg(sensor['orientation'][world])[new],
                  truth_label='truth (device convention)', label=f'{cid} sample',
                  title=f'world {world}: orientation, truth vs delivered samples',
                  ls='none', marker='.', ms=2)
  ax = axes[0, 1]
  for i, c in enumerate(('tab:red', 'tab:green', 'tab:blue')):
    ax.plot(time_s, truth['angular_velocity'][world][:, i], '-', color='k', lw=0.8)
    ax.plot(t_s, sensor['angular_velocity'][world][new][:, i], '.', ms=2, color=c,
            label='xyz'[i])
  ax.set_ylabel('angular velocity [rad/s]')
  ax.set_title('angular velocity (black: truth)')
  ax.legend(fontsize=8)
  ax = axes[1, 1]
  for i, c in enumerate(('tab:red', 'tab:green', 'tab:blue')):
    ax.plot(time_s, truth['linear_acceleration'][world][:, i], '-', color='k', lw=0.8)
    ax.plot(t_s, sensor['linear_acceleration'][world][new][:, i], '.', ms=2, color=c)
  ax.set_ylabel('specific force [m/s²]')
  ax.set_xlabel('time [s]')
  common.hist_across_worlds(axes[2, 1], per_world_err, 'orientation error RMS per world [deg]')
  common.save(fig, path, title)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/ahrs', metrics=host_metrics, plot=plot)
