"""Host-side analysis of `fibril_sim/motion_motor` runs: per-world metrics and the plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.core import registry
from fibril_mjx.mechanisms.faults import actuator as actuator_faults


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS position tracking error while active, RMS of applied − commanded effort
  (the actuatorfrcrange clamp shows here), delivered feedback count, mean |current| of
  delivered, finite feedback. NaN for a world with no active tick / no usable sample."""
  active = truth['active'].astype(bool)
  track = np.asarray(truth['tracking_error'], np.float64)
  # tick k's applied effort is MuJoCo's at x_k with the controls the law wrote at tick k
  eff = (np.asarray(truth['applied_effort'], np.float64)
         - np.asarray(truth['commanded_effort'], np.float64))
  cur = np.asarray(sensor['current'], np.float64)
  new = sensor['new_data'].astype(bool)
  return {'tracking_error_rms': common.masked_rms(track ** 2, active & np.isfinite(track)),
          'effort_minus_command_rms': common.masked_rms(eff ** 2, active & np.isfinite(eff)),
          'feedback_delivered': new.sum(axis=1),
          'current_mean_abs': common.masked_mean(np.abs(cur), common.usable(sensor, cur)),
          **actuator_faults.host_metrics(truth)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Reference vs joint position, commanded vs applied effort, delivered feedback."""
  new = sensor['new_data'][world].astype(bool)
  t_fb = time_s[np.clip(sensor['sample_tick'][world], 0, None)][new]
  common.plot_lines(path, time_s, title, [
      (f'{cid}: position (world {world})', 'joint position',
       [('reference p*', truth['reference'][world], 'k--'),
        ('joint (truth)', truth['position'][world], 'tab:blue')]),
      ('effort', 'joint effort', [('commanded kp(p*-q)+kd(v*-qd)+ff',
                                   truth['commanded_effort'][world], 'k--'),
                                  ('applied qfrc_actuator', truth['applied_effort'][world],
                                   'tab:red')]),
  ], hist=('position tracking error RMS per world', metrics['tracking_error_rms']),
      points={0: [('delivered feedback', t_fb, sensor['position'][world][new], 'tab:orange')],
              1: [('feedback applied_effort', t_fb, sensor['applied_effort'][world][new],
                   'tab:orange')]})


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/motion_motor', metrics=host_metrics, plot=plot)
