"""Per-world headline metrics against an independent NumPy computation (README: metrics are
"over delivered, healthy, finite samples; NaN for a world with none").

Synthetic traces of three worlds, no simulation: world 0 normal, world 1 with no delivered
sample, world 2 faulted (some samples unhealthy, one NaN sample, one out-of-order value). The
expected values are written here sample by sample with plain loops, in float64.
"""

import math

import numpy as np
import pytest

from fibril_mjx.analysis import ahrs, attitude_ekf, imu, motor

W, T = 3, 40
HEALTHY, DEGRADED = 0, 1


def _quat(axis_angle):
  a = np.asarray(axis_angle, np.float64)
  th = np.linalg.norm(a)
  if th == 0:
    return np.array([1.0, 0, 0, 0])
  return np.concatenate([[math.cos(th / 2)], math.sin(th / 2) * a / th])


def _rot(q):
  w, x, y, z = q
  return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                   [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                   [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def _angle(p, q):
  """Rotation angle between two (float32-stored, so renormalized) unit quaternions."""
  p, q = p / np.linalg.norm(p), q / np.linalg.norm(q)
  return 2 * math.acos(min(1.0, abs(float(np.dot(p, q)))))


@pytest.fixture(scope='module')
def traces():
  rng = np.random.default_rng(3)
  truth_q = np.array([[_quat(rng.normal(0, 0.5, 3)) for _ in range(T)] for _ in range(W)])
  truth_w = rng.normal(0, 1, (W, T, 3))
  truth_a = rng.normal(0, 9.8, (W, T, 3))
  new = np.zeros((W, T), bool)
  new[0, ::3] = True
  new[2, ::2] = True
  sample_tick = np.where(new, np.arange(T)[None, :] - 1, -1).clip(0)   # acquired a tick earlier
  health = np.zeros((W, T), np.int32)
  health[2, 10:20] = DEGRADED
  q = np.array([[_quat(rng.normal(0, 0.05, 3)) for _ in range(T)] for _ in range(W)])
  st = sample_tick
  q = np.array([[_rot_compose(truth_q[w, st[w, k]], q[w, k]) for k in range(T)]
                for w in range(W)])
  wv = truth_w[np.arange(W)[:, None], st] + rng.normal(0, 0.01, (W, T, 3))
  av = truth_a[np.arange(W)[:, None], st] + rng.normal(0, 0.1, (W, T, 3))
  q[2, 30] = np.nan         # a `nan` fault: delivered, but not finite
  wv[2, 30] = np.nan
  av[2, 30] = np.nan
  sensor = {'orientation': q.astype(np.float32), 'angular_velocity': wv.astype(np.float32),
            'linear_acceleration': av.astype(np.float32), 'new_data': new,
            'sample_tick': st, 'health': health}
  truth = {'orientation': truth_q.astype(np.float32), 'angular_velocity': truth_w,
           'linear_acceleration': truth_a}
  return sensor, truth


def _rot_compose(a, b):
  w1, x1, y1, z1 = a
  w2, x2, y2, z2 = b
  return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                   w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def _usable(sensor, w, k, *fields):
  if not sensor['new_data'][w, k]:
    return False
  if 'health' in sensor and sensor['health'][w, k] != HEALTHY:
    return False
  return all(np.all(np.isfinite(np.asarray(sensor[f][w, k], np.float64))) for f in fields)


def _rms(values):
  return math.sqrt(sum(values) / len(values)) if values else math.nan


def _expect_rates(sensor, truth):
  out = {'angular_velocity_error_rms_rad_s': [], 'linear_acceleration_error_rms_m_s2': []}
  for f, name in (('angular_velocity', 'angular_velocity_error_rms_rad_s'),
                  ('linear_acceleration', 'linear_acceleration_error_rms_m_s2')):
    for w in range(W):
      e = [float(np.mean((np.asarray(sensor[f][w, k], np.float64)
                          - truth[f][w, sensor['sample_tick'][w, k]]) ** 2))
           for k in range(T) if _usable(sensor, w, k, f)]
      out[name].append(_rms(e))
  return out


def _check(got, want):
  for name, values in want.items():
    np.testing.assert_allclose(np.asarray(got[name], np.float64), values, rtol=1e-6,
                               equal_nan=True, err_msg=name)


def test_imu_rate_errors(traces):
  sensor, truth = traces
  got = imu.host_metrics({k: v for k, v in sensor.items() if k != 'orientation'}, truth)
  _check(got, _expect_rates(sensor, truth))
  assert math.isnan(got['angular_velocity_error_rms_rad_s'][1])   # no sample: NaN, not 0
  np.testing.assert_array_equal(got['delivered'], sensor['new_data'].sum(1))


def test_ahrs_orientation_error(traces):
  sensor, truth = traces
  got = ahrs.host_metrics(sensor, truth)
  want = _expect_rates(sensor, truth)
  want['orientation_error_rms_deg'] = []
  for w in range(W):
    e = [math.degrees(_angle(np.asarray(sensor['orientation'][w, k], np.float64),
                             np.asarray(truth['orientation'][w, sensor['sample_tick'][w, k]],
                                        np.float64))) ** 2
         for k in range(T) if _usable(sensor, w, k, 'orientation')]
    want['orientation_error_rms_deg'].append(_rms(e))
  _check(got, want)
  assert np.isfinite(got['orientation_error_rms_deg'][2])   # the NaN sample is left out


def test_attitude_ekf_tilt_and_attitude(traces):
  sensor, truth = traces
  s = {k: sensor[k] for k in ('orientation', 'new_data', 'sample_tick')}   # no health field
  got = attitude_ekf.host_metrics(s, truth)
  att, tilt, att_f, tilt_f = [], [], [], []
  for w in range(W):
    a, t, last = [], [], None
    for k in range(T):
      if not _usable(s, w, k, 'orientation'):
        continue
      qe = np.asarray(s['orientation'][w, k], np.float64)
      qt = np.asarray(truth['orientation'][w, s['sample_tick'][w, k]], np.float64)
      up_e, up_t = _rot(qe).T @ [0, 0, 1], _rot(qt).T @ [0, 0, 1]
      ang_t = math.degrees(math.acos(np.clip(np.dot(up_e, up_t) / np.linalg.norm(up_e)
                                             / np.linalg.norm(up_t), -1, 1)))
      a.append(math.degrees(_angle(qe, qt)) ** 2)
      t.append(ang_t ** 2)
      last = (math.sqrt(a[-1]), ang_t)
    att.append(_rms(a))
    tilt.append(_rms(t))
    att_f.append(last[0] if last else math.nan)
    tilt_f.append(last[1] if last else math.nan)
  np.testing.assert_allclose(got['attitude_error_rms_deg'], att, rtol=1e-6, equal_nan=True)
  np.testing.assert_allclose(got['tilt_error_rms_deg'], tilt, rtol=1e-5, atol=1e-6,
                             equal_nan=True)
  np.testing.assert_allclose(got['attitude_error_final_deg'], att_f, rtol=1e-6, equal_nan=True)
  np.testing.assert_allclose(got['tilt_error_final_deg'], tilt_f, rtol=1e-5, atol=1e-6,
                             equal_nan=True)


def test_motor_tracking_and_feedback(traces):
  sensor, _ = traces
  rng = np.random.default_rng(5)
  pos_t = rng.normal(0, 1, (W, T))
  track = rng.normal(0, 0.1, (W, T))
  track[2, 5] = np.nan
  fb_pos = pos_t[np.arange(W)[:, None], sensor['sample_tick']] + rng.normal(0, 0.01, (W, T))
  fb_pos[2, 30] = np.nan
  cur = rng.normal(0, 2, (W, T))
  s = {'position': fb_pos, 'current': cur, 'new_data': sensor['new_data'],
       'sample_tick': sensor['sample_tick']}
  got = motor.host_metrics(s, {'position': pos_t, 'tracking_error': track})
  want = {'tracking_error_rms': [], 'feedback_position_error_rms': [], 'current_mean_abs': []}
  for w in range(W):
    want['tracking_error_rms'].append(_rms([track[w, k] ** 2 for k in range(T)
                                            if np.isfinite(track[w, k])]))
    e = [(fb_pos[w, k] - pos_t[w, s['sample_tick'][w, k]]) ** 2 for k in range(T)
         if _usable(s, w, k, 'position')]
    want['feedback_position_error_rms'].append(_rms(e))
    c = [abs(cur[w, k]) for k in range(T) if _usable(s, w, k, 'current')]
    want['current_mean_abs'].append(sum(c) / len(c) if c else math.nan)
  _check(got, want)
  assert math.isnan(got['feedback_position_error_rms'][1])
