"""Host-side analysis of `fibril_sim/scalar_actuator` runs: per-world metrics and the plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.core import registry
from fibril_mjx.mechanisms.faults import actuator as actuator_faults


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS of (value on ctrl − latest command) and the fraction of ticks timed out."""
  err = truth['applied'] - truth['command']
  return {'ctrl_minus_command_rms': np.sqrt(np.mean(err ** 2, axis=1)),
          'timed_out_fraction': np.mean(truth['timed_out'], axis=1),
          **actuator_faults.host_metrics(truth)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Command vs value written to ctrl for one world."""
  common.plot_lines(path, time_s, title, [
      (f'{cid}: command vs ctrl (world {world})', 'ctrl units',
       [('command', truth['command'][world], 'k-'),
        ('applied to ctrl', truth['applied'][world], 'tab:red')]),
  ], hist=('ctrl − command RMS per world', metrics['ctrl_minus_command_rms']))


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/scalar_actuator', metrics=host_metrics, plot=plot)
