"""Host-side analysis of `fibril_sim/position_servo` runs: per-world metrics and the plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.core import registry
from fibril_mjx.mechanisms.faults import actuator as actuator_faults


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS of the delivered feedback position − the true joint position at its sample
  tick (the feedback path), RMS motor and friction torque while active (N·m, joint side),
  the fraction of active ticks at full duty (|duty| at its largest value in the world:
  PWM saturation), and the delivered feedback count. NaN where a world has no such tick."""
  pos = np.asarray(sensor['position'], np.float64)
  ref = common.at_sample_tick(sensor, np.asarray(truth['position'], np.float64))
  ok = common.usable(sensor, pos) & np.isfinite(ref)
  active = truth['active'].astype(bool)
  duty = np.abs(np.asarray(truth['duty'], np.float64))
  top = np.max(np.where(active, duty, 0.0), axis=1, keepdims=True)
  full = active & (duty >= 0.999 * top) & (top > 0)
  return {'feedback_position_error_rms': common.masked_rms((pos - ref) ** 2, ok),
          'motor_torque_rms': common.masked_rms(
              np.asarray(truth['motor_torque'], np.float64) ** 2, active),
          'friction_torque_rms': common.masked_rms(
              np.asarray(truth['friction_torque'], np.float64) ** 2, active),
          'full_duty_fraction': common.fraction(full, active),
          'feedback_delivered': sensor['new_data'].astype(bool).sum(axis=1),
          **actuator_faults.host_metrics(truth)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Joint position (truth and delivered feedback) and the torques of the law."""
  new = sensor['new_data'][world].astype(bool)
  t_fb = time_s[np.clip(sensor['sample_tick'][world], 0, None)][new]
  common.plot_lines(path, time_s, title, [
      (f'{cid}: position (world {world})', 'joint position',
       [('joint (truth)', truth['position'][world], 'tab:blue')]),
      ('torques', 'N·m', [('motor', truth['motor_torque'][world], 'tab:red'),
                          ('friction', truth['friction_torque'][world], 'tab:green'),
                          ('applied qfrc_actuator', truth['applied_effort'][world], 'k--')]),
  ], hist=('feedback position error RMS per world', metrics['feedback_position_error_rms']),
      points={0: [('delivered feedback', t_fb, sensor['position'][world][new], 'tab:orange')]})


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/position_servo', metrics=host_metrics, plot=plot)
