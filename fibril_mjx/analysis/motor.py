"""Host-side analysis of `fibril_sim/motor` runs: per-world tracking metrics and the plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.core import registry
from fibril_mjx.mechanisms.faults import actuator as actuator_faults


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS tracking error of the bound input's semantic (setpoint − truth, logical
  units), RMS error of delivered feedback position vs truth at its sample tick, delivered
  feedback count, mean |current| of delivered feedback. Feedback statistics are over
  delivered samples with a finite value (`common.usable`; NaN for a world with none); the
  tracking error over the ticks where it is finite."""
  new = sensor['new_data'].astype(bool)
  st = np.clip(sensor['sample_tick'], 0, None)
  pos = np.asarray(sensor['position'], np.float64)
  cur = np.asarray(sensor['current'], np.float64)
  pos_truth = np.take_along_axis(np.asarray(truth['position'], np.float64), st, axis=1)
  track = np.asarray(truth['tracking_error'], np.float64)
  return {'tracking_error_rms': common.masked_rms(track ** 2, np.isfinite(track)),
          'feedback_position_error_rms': common.masked_rms((pos - pos_truth) ** 2,
                                                           common.usable(sensor, pos)),
          'feedback_delivered': new.sum(axis=1),
          'current_mean_abs': common.masked_mean(np.abs(cur), common.usable(sensor, cur)),
          **actuator_faults.host_metrics(truth)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Setpoint vs truth of the bound semantic, feedback samples, applied effort and current."""
  new = sensor['new_data'][world].astype(bool)
  t_fb = time_s[np.clip(sensor['sample_tick'][world], 0, None)][new]
  sp, err = truth['setpoint'][world], truth['tracking_error'][world]
  tracked = sp - err
  common.plot_lines(path, time_s, title, [
      (f'{cid}: applied setpoint vs truth (world {world}, logical units)', 'setpoint',
       [('applied setpoint', sp, 'k--'), ('truth', tracked, 'tab:blue')]),
      ('logical position', 'position', [('truth', truth['position'][world], 'tab:blue')]),
      ('effort and current', 'logical effort / A',
       [('applied effort (truth, qfrc)', truth['applied_effort'][world], 'tab:red')]),
  ], hist=('tracking error RMS per world', metrics['tracking_error_rms']),
      points={1: [('delivered feedback', t_fb, sensor['position'][world][new], 'tab:orange')],
              2: [('feedback current', t_fb, sensor['current'][world][new], 'tab:green')]})


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/motor', metrics=host_metrics, plot=plot)
