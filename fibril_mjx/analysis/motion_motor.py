"""Host-side analysis of `fibril_sim/motion_motor` runs: per-world metrics and the plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS position tracking error while active, RMS of applied − commanded effort
  (the actuatorfrcrange clamp shows here), delivered feedback count, mean |current|."""
  active = truth['active'].astype(bool)
  n = np.maximum(active.sum(axis=1), 1)
  track = np.sqrt((truth['tracking_error'] ** 2 * active).sum(axis=1) / n)
  # the effort applied during step k→k+1 is reported with state k+1; law is of tick k
  eff = truth['applied_effort'][:, 1:] - truth['commanded_effort'][:, :-1]
  act_e = active[:, :-1]
  n_e = np.maximum(act_e.sum(axis=1), 1)
  new = sensor['new_data'].astype(bool)
  return {'tracking_error_rms': track,
          'effort_minus_command_rms': np.sqrt((eff ** 2 * act_e).sum(axis=1) / n_e),
          'feedback_delivered': new.sum(axis=1),
          'current_mean_abs': (np.abs(sensor['current']) * new).sum(axis=1)
          / np.maximum(new.sum(axis=1), 1)}


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
