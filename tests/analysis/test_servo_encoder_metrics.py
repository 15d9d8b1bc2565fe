"""Host metrics of the encoder and the position servo on hand-made traces (closed forms)."""

import numpy as np

from fibril_mjx.analysis import encoder, position_servo


def _delivered(T, every, values):
  new = np.zeros((1, T), bool)
  new[0, ::every] = True
  tick = np.where(new, np.arange(T)[None], -1)
  tick = np.maximum.accumulate(tick, axis=1)
  return {'new_data': new, 'sample_tick': tick, 'position': values}


def test_encoder_error_is_the_offset_at_the_sample_tick():
  T = 40
  q = np.linspace(0.0, 1.0, T)[None]
  # each sample held until the next: delivered − truth at its own tick is the 0.01 offset
  held = np.repeat(q[:, ::4] + 0.01, 4, axis=1)[:, :T]
  s = _delivered(T, 4, held)
  s['health'] = np.zeros((1, T), np.int32)
  m = encoder.host_metrics(s, {'position': q})
  np.testing.assert_allclose(m['position_error_rms'], [0.01], rtol=1e-9)
  assert m['delivered'].tolist() == [10]


def test_servo_torque_rms_and_full_duty_fraction_over_active_ticks():
  T = 8
  active = np.array([[0, 1, 1, 1, 1, 0, 1, 1]], bool)
  duty = np.array([[0.9, 1.0, -1.0, 0.5, 0.2, 1.0, -1.0, 0.0]])
  motor = np.array([[5.0, 1.0, -1.0, 1.0, -1.0, 9.0, 1.0, -1.0]])
  s = _delivered(T, 1, np.zeros((1, T)))
  truth = {'position': np.zeros((1, T)), 'active': active, 'duty': duty,
           'motor_torque': motor, 'friction_torque': 0.5 * motor}
  m = position_servo.host_metrics(s, truth)
  np.testing.assert_allclose(m['motor_torque_rms'], [1.0])       # ±1 on the active ticks
  np.testing.assert_allclose(m['friction_torque_rms'], [0.5])
  np.testing.assert_allclose(m['full_duty_fraction'], [3 / 6])   # |duty| = 1 on 3 of 6
  np.testing.assert_allclose(m['feedback_position_error_rms'], [0.0])
