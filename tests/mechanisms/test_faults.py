"""Faults and health (`fibril_mjx.mechanisms.faults`): the health state machine's transition table, each
fault type as a consumer of the delivered output sees it, per-world fault windows, validation
messages, and the example manifest (`manifests/survey_quad.yaml`: every guide sensor with the
attitude EKF, faults included) run end to end.

The carrier is a `fibril_sim/magnetometer` with its noise off, turning about z so that every
sample differs; the delivered output (`Delivered`) is what a driver or an estimator reads.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nav_helpers as nh
from fibril_mjx.mechanisms import faults
from fibril_mjx.components import base
from fibril_mjx.components.sensors import magnetometer

H, D, I, R = faults.HEALTHY, faults.DEGRADED, faults.INVALID, faults.RECOVERING
OK, WEAK, MISSED, BAD = faults.OK, faults.WEAK, faults.MISSED, faults.BAD
PERIOD = 0.01
STEP = 5
T = 400                       # ticks: 80 samples, 0.8 s
FIELD = [10.0, 20.0, -40.0]


def make(faults_list=(), **cfg):
  ctx, cat = nh.context()
  raw = {'site': 's', 'period_s': PERIOD, 'earth_field_ut': FIELD,
         'faults': list(faults_list), **cfg}
  return magnetometer.build('mag', raw, ctx, cat)


def turning(n=T):
  """Site attitude turning about z at 1 rad/s: every sample differs."""
  return nh.data_seq(n, xmat=np.stack([nh.rot_z(k * nh.DT) for k in range(n)]))


def ideal(n=T):
  return np.stack([nh.rot_z(k * nh.DT).T @ np.array(FIELD) for k in range(n)])


def run(fl=(), **cfg):
  c = make(fl, **cfg)
  s, out, health, truth = nh.drive(c, turning())
  return c, s, out, health


def sample_ticks(out):
  return np.nonzero(out.new_data)[0]


# ------------------------------------------------------------------ health state machine

TABLE = [
    # (health, streak, condition) -> (health, streak), with invalid_after 3, recovery 2
    ((H, 0, OK), (H, 0)), ((H, 0, WEAK), (D, 0)), ((H, 0, MISSED), (D, 1)), ((H, 0, BAD), (I, 0)),
    ((D, 1, OK), (H, 0)), ((D, 0, WEAK), (D, 0)), ((D, 1, MISSED), (D, 2)),
    ((D, 2, MISSED), (I, 3)), ((D, 1, BAD), (I, 0)),
    ((I, 0, OK), (R, 1)), ((I, 0, WEAK), (I, 0)), ((I, 0, MISSED), (I, 0)), ((I, 0, BAD), (I, 0)),
    ((R, 1, OK), (H, 0)), ((R, 1, WEAK), (I, 0)), ((R, 1, MISSED), (I, 0)), ((R, 1, BAD), (I, 0)),
]


@pytest.mark.parametrize('before, after', TABLE, ids=[
    f'{faults.HEALTH_NAMES[b[0]]}-{["ok", "weak", "missed", "bad"][b[2]]}-{b[1]}'
    for b, _ in TABLE])
def test_transition_table(before, after):
  h, s, c = before
  got = faults.transition(jnp.int32(h), jnp.int32(s), jnp.int32(c), 3, 2)
  assert (int(got[0]), int(got[1])) == after


def test_recovery_zero_returns_to_healthy_at_once():
  assert int(faults.transition(jnp.int32(I), jnp.int32(0), jnp.int32(OK), 3, 0)[0]) == H
  assert int(faults.transition(jnp.int32(I), jnp.int32(0), jnp.int32(OK), 3, 1)[0]) == H


def test_full_sequence_healthy_degraded_invalid_recovering_healthy():
  """A 50 ms dropout (5 missed samples) then good data: the guide's sequence, with the health
  carried by the first samples after the gap."""
  c, s, out, health = run([{'type': 'dropout', 'start_s': 0.2, 'end_s': 0.25}],
                          health_invalid_after_missed=3, health_recovery_samples=4)
  acq = health[::STEP]                     # state after each acquisition instant
  seq = [int(h) for h in acq]
  assert seq[:20] == [H] * 20
  assert seq[20:25] == [D, D, I, I, I]     # misses 1, 2, then invalid at the 3rd
  assert seq[25:29] == [R, R, R, H]        # 3 recovering samples, healthy at the 4th good one
  assert all(h == H for h in seq[29:])
  # what a reader sees: no sample during the gap, then RECOVERING samples, then HEALTHY
  got = out.sample.health[out.new_data]
  seqn = out.sequence[out.new_data]
  assert list(seqn[19:22]) == [19, 25, 26]
  assert list(got[20:24]) == [R, R, R, H]
  assert int(s.faults.dropped) == 5 and int(s.queue.lost) == 0


# ------------------------------------------------------------------ each fault type

def test_dropout_no_packet_sequence_gap():
  c, s, out, health = run([{'type': 'dropout', 'start_s': 0.1, 'end_s': 0.15}])
  t = sample_ticks(out)
  assert not np.any((t >= 50) & (t < 75))            # nothing arrives in the window
  seq = out.sequence[out.new_data]
  assert list(seq[9:12]) == [9, 15, 16]              # the gap is visible in the sequence
  # the held output keeps the last sample (sequence 9) through the gap, new_data false
  assert np.all(out.sequence[50:75] == 9) and not out.new_data[50:75].any()


@pytest.mark.parametrize('kind', ['stale_new_timestamp', 'stale_old_timestamp'])
def test_stale_value(kind):
  c, s, out, health = run([{'type': kind, 'start_s': 0.1, 'end_s': 0.15}])
  nd = out.new_data
  vals = out.sample.magnetic_field_ut[nd]
  seq, stamp = out.sequence[nd], out.sample_tick[nd]
  np.testing.assert_allclose(vals[10:15], np.broadcast_to(vals[9], (5, 3)))   # repeated value
  np.testing.assert_allclose(vals[9], ideal()[45], atol=1e-5)
  assert np.all(out.sample.health[nd] == H)          # silent: the device says healthy
  if kind == 'stale_new_timestamp':
    assert list(seq[9:16]) == list(range(9, 16))     # new sequence numbers and ticks
    assert list(stamp[10:15]) == [50, 55, 60, 65, 70]
  else:
    assert list(seq[9:16]) == [9, 9, 9, 9, 9, 9, 15]   # the old packet again
    assert list(stamp[10:15]) == [45] * 5
  np.testing.assert_allclose(vals[15], ideal()[75], atol=1e-5)   # fresh after the window


@pytest.mark.parametrize('kind, value', [('nan', None), ('sentinel', -1.0)])
def test_nan_and_sentinel(kind, value):
  spec = {'type': kind, 'start_s': 0.1, 'end_s': 0.12}
  if value is not None:
    spec['value'] = value
  c, s, out, health = run([spec])
  v = out.sample.magnetic_field_ut[out.new_data]
  if kind == 'nan':
    assert np.all(np.isnan(v[10:12])) and np.all(np.isfinite(np.delete(v, [10, 11], 0)))
  else:
    assert np.all(v[10:12] == -1.0)
  assert np.all(out.sample.health[out.new_data] == H)   # status untouched: driver must check


def test_invalid_status_with_numeric_data():
  c, s, out, health = run([{'type': 'invalid_status', 'start_s': 0.1, 'end_s': 0.13}],
                          health_recovery_samples=2)
  nd = out.new_data
  v, h = out.sample.magnetic_field_ut[nd], out.sample.health[nd]
  np.testing.assert_allclose(v, ideal()[::STEP], atol=1e-5)    # numbers as usual
  assert list(h[9:16]) == [H, I, I, I, R, H, H]


def test_bias_step_and_ramp():
  step = [1.0, -2.0, 3.0]
  c, s, out, health = run([{'type': 'bias_step', 'start_s': 0.1, 'value': step},
                           {'type': 'bias_ramp', 'start_s': 0.2, 'end_s': 0.3, 'value': 10.0}])
  v = out.sample.magnetic_field_ut[out.new_data]
  ref = ideal()[::STEP].copy()
  t = np.arange(len(ref)) * PERIOD
  ref[t >= 0.1 - 1e-9] += step
  on = (t >= 0.2 - 1e-9) & (t < 0.3 - 1e-9)
  ref[on] += 10.0 * (t[on] - 0.2)[:, None]
  np.testing.assert_allclose(v, ref, atol=1e-4)


def test_stuck_frozen_and_at_value():
  c, s, out, health = run([{'type': 'stuck', 'start_s': 0.1, 'end_s': 0.2},
                           {'type': 'stuck', 'start_s': 0.4, 'end_s': 0.45, 'value': 7.0,
                            'fields': ['magnetic_field_ut']}])
  v = out.sample.magnetic_field_ut[out.new_data]
  np.testing.assert_allclose(v[10:20], np.broadcast_to(v[9], (10, 3)))   # frozen at the last
  assert list(out.sequence[out.new_data][10:20]) == list(range(10, 20))  # packets keep coming
  assert np.all(v[40:45] == 7.0)
  np.testing.assert_allclose(v[20], ideal()[100], atol=1e-5)


def test_reset_redraws_turn_on_bias_with_warmup():
  sig = [2.0, 2.0, 2.0]
  c, s, out, health = run([{'type': 'reset', 'start_s': 0.2, 'end_s': 0.25, 'warmup_s': 0.05}],
                          bias_turn_on_stddev_ut=sig, health_recovery_samples=3)
  nd = out.new_data
  v, h, seq = out.sample.magnetic_field_ut[nd], out.sample.health[nd], out.sequence[nd]
  bias = v - ideal()[::STEP][seq]
  z = nh.normals(nh.WK, 'mag', 'bias_turn_on', 2, 3)
  np.testing.assert_allclose(bias[:20], np.broadcast_to(2.0 * z[0], (20, 3)), atol=1e-4)
  np.testing.assert_allclose(bias[20:], np.broadcast_to(2.0 * z[1], bias[20:].shape), atol=1e-4)
  assert list(seq[19:21]) == [19, 25]                   # off the bus for 50 ms
  assert list(h[19:29]) == [H, I, I, I, I, I, R, R, H, H]   # warm-up invalid, then recovering
  assert int(s.faults.resets) == 1


def test_fault_windows_are_per_world_params():
  c = make([{'type': 'dropout', 'start_s': 0.1, 'end_s': 0.15}])
  p = jax.tree.map(lambda x: jnp.broadcast_to(x, (2,) + jnp.shape(x)), c.default_params())
  fp = p.faults[0]
  p = p._replace(faults=(fp._replace(start_s=jnp.array([0.1, 0.3], jnp.float32),
                                     end_s=jnp.array([0.15, 0.32], jnp.float32)),))
  s, out, health, _ = nh.drive_worlds(c, turning(), 2, params=p)
  assert list(s.faults.dropped) == [5, 2]


def test_no_faults_no_extra_work():
  c = make()
  assert not c.fault_plan.active
  _, out, _, _ = nh.drive(c, turning())
  np.testing.assert_allclose(out.sample.magnetic_field_ut[out.new_data], ideal()[::STEP],
                             atol=1e-5)


def test_window_bounds_round_up_to_ticks():
  fp = faults.FaultParams(jnp.float32(0.0105), jnp.float32(0.1), jnp.float32(0))
  on = [bool(faults.window(fp, k, 0.002)) for k in range(4, 52)]
  assert on.index(True) == 6 - 4 and on[::-1].index(True) == 51 - 49   # ticks 6 … 49
  fp = faults.FaultParams(jnp.float32(1.0), jnp.float32(np.inf), jnp.float32(0))
  assert not bool(faults.window(fp, 499, 0.002)) and bool(faults.window(fp, 500, 0.002))
  assert bool(faults.window(fp, 10 ** 7, 0.002))


def test_batch_equals_single_worlds_jit_equals_eager():
  """Faulted output of a world does not depend on the batch; jitted equals eager."""
  fl = [{'type': 'dropout', 'start_s': 0.1, 'end_s': 0.15},
        {'type': 'bias_ramp', 'start_s': 0.2, 'value': 3.0}]
  c = make(fl, noise_stddev_ut=[0.3, 0.3, 0.3])
  data = turning(200)
  _, out, health, _ = nh.drive_worlds(c, data, 3)
  for w in range(3):
    wk = jax.random.fold_in(jax.random.PRNGKey(0), w)
    _, one, h1, _ = nh.drive(c, data, wk=wk)
    np.testing.assert_array_equal(one.sample.magnetic_field_ut, out.sample.magnetic_field_ut[w])
    np.testing.assert_array_equal(h1, health[w])
  due, idx = nh.dues(c, 60)
  d60 = jax.tree.map(lambda x: x[:60], data)
  eager = nh._drive(c, c.default_params(), d60, due, idx, {}, nh.WK)
  jitted = nh._DRIVE(c, c.default_params(), d60, due, idx, {}, nh.WK)
  np.testing.assert_allclose(eager[1][0].sample.magnetic_field_ut,
                             jitted[1][0].sample.magnetic_field_ut, atol=1e-5)


# ------------------------------------------------------------------ the EKF as the consumer

class ImuSample(NamedTuple):
  angular_velocity: jax.Array
  linear_acceleration: jax.Array
  health: jax.Array


class ToyState(NamedTuple):
  streams: dict
  queue: object
  held: object
  faults: object


@dataclasses.dataclass(frozen=True)
class ToyImu(base.SensorBase):
  """A still, level IMU turning at 0.2 rad/s about z: gyro (0, 0, 0.2), specific force +g."""
  type = 'test/imu'
  sample_type = 'test/imu_sample'
  fault_fields = ('angular_velocity', 'linear_acceleration')

  def default_params(self):
    return Toy(faults.default_params(self.cfg))

  def init(self, p, wk):
    streams = faults.stream_keys(wk, self.id, ('delivery_jitter', 'delivery_loss'))
    z3 = jnp.zeros(3, jnp.float32)
    return ToyState(streams, *self.init_transport(ImuSample(z3, z3, jnp.int32(0))))

  def acquire(self, p, s, data, tick, n):
    return s, ImuSample(jnp.array([0.0, 0.0, 0.2], jnp.float32),
                        jnp.array([0.0, 0.0, 9.81], jnp.float32), jnp.int32(0))


class Toy(NamedTuple):
  faults: tuple


def ekf_view(fl):
  """Runs the toy IMU with faults `fl` into the attitude EKF; returns per-tick EKF yaw, its
  update count and the IMU's delivered output."""
  from fibril_mjx.components.estimators import attitude_ekf
  from fibril_mjx.mechanisms.schedule import Schedule
  from fibril_mjx.mechanisms import transport as tp
  ctx, cat = nh.context()
  cfg = faults.DeviceConfig(period_s=PERIOD, faults=fl)
  origin = lambda f: ('test.yaml', f)  # noqa: E731
  imu = ToyImu(id='imu', cfg=cfg,
               schedule=Schedule.build(PERIOD, 0.0, nh.DT, 'next_boundary', origin=origin),
               transport=tp.Transport.build(0.0, 0.0, 0.0, PERIOD, nh.DT, 'next_boundary',
                                            origin=origin),
               fault_plan=faults.build_plan(cfg, ImuSample(jnp.zeros(3), jnp.zeros(3),
                                                           jnp.int32(0)),
                                            ToyImu.fault_fields, origin=origin), dt=nh.DT)
  ekf = attitude_ekf.build_with_imu('ekf', {'imu': 'imu', 'initial_attitude': 'fixed'}, ctx,
                                    cat, imu)
  due, idx = nh.dues(imu, T)
  pi, pe = imu.default_params(), ekf.default_params()

  def body(c, xs):
    si, se = c
    d, n, tick = xs
    si = imu.sense(pi, si, None, tick, {'acquisition': (d, n)}, {})
    se = ekf.update(pe, se, imu.output(si), tick)
    q = se.held.sample.orientation
    yaw = jnp.arctan2(2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] ** 2 + q[3] ** 2))
    return (si, se), (yaw, se.updates, imu.output(si))
  c0 = (imu.init(pi, nh.WK), ekf.init(pe, nh.WK))
  _, out = jax.lax.scan(body, c0, (due, idx, jnp.arange(T, dtype=jnp.int32)))
  return jax.tree.map(np.asarray, out)


def test_ekf_sees_dropout_as_a_longer_step():
  yaw, updates, out = ekf_view([{'type': 'dropout', 'start_s': 0.2, 'end_s': 0.4}])
  assert updates[-1] == 80 - 20                       # 20 samples never reached it
  np.testing.assert_allclose(yaw[-1], 0.2 * 79 * PERIOD, atol=2e-3)   # dt spans the gap


def test_ekf_sees_stale_old_timestamp_as_zero_steps():
  yaw, updates, out = ekf_view([{'type': 'stale_old_timestamp', 'start_s': 0.2, 'end_s': 0.4}])
  assert updates[-1] == 80                            # it processed every repeat ...
  k = int(0.35 / nh.DT)
  np.testing.assert_allclose(yaw[k], 0.2 * 19 * PERIOD, atol=2e-3)   # ... with dt = 0
  np.testing.assert_allclose(yaw[-1], 0.2 * 79 * PERIOD, atol=2e-3)


def test_ekf_discards_nan_samples_and_ignores_invalid_status():
  """Invalid status with finite numbers: processed. NaN samples: discarded as a driver would
  (counted), the estimate stays finite and the next step spans the gap."""
  yaw, updates, out = ekf_view([{'type': 'invalid_status', 'start_s': 0.1, 'end_s': 0.2}])
  assert np.any(out.sample.health == faults.INVALID)
  np.testing.assert_allclose(yaw[-1], 0.2 * 79 * PERIOD, atol=2e-3)  # numbers were fine
  assert updates[-1] == 80
  yaw, updates, out = ekf_view([{'type': 'nan', 'start_s': 0.2, 'end_s': 0.21,
                                 'fields': ['angular_velocity']}])
  n_nan = int(np.sum(out.new_data & np.any(np.isnan(out.sample.angular_velocity), axis=-1)))
  assert n_nan >= 1                                   # the consumer did see NaN samples ...
  assert np.all(np.isfinite(yaw))                     # ... and was not poisoned by them
  assert updates[-1] == 80 - n_nan
  np.testing.assert_allclose(yaw[-1], 0.2 * 79 * PERIOD, atol=2e-3)  # dt spans the gap


def test_ekf_sees_bias_step_as_yaw_drift():
  yaw, updates, out = ekf_view([{'type': 'bias_step', 'start_s': 0.4, 'value': [0.0, 0.0, 0.1],
                                 'fields': ['angular_velocity']}])
  np.testing.assert_allclose(yaw[-1], 0.2 * 79 * PERIOD + 0.1 * 39 * PERIOD, atol=3e-3)


# ------------------------------------------------------------------ validation

MAG = {'site': 's', 'period_s': 0.01, 'earth_field_ut': FIELD}
FAULT_CASES = {
    'end_before_start': ({'type': 'dropout', 'start_s': 0.5, 'end_s': 0.2}, 'faults[0]',
                         'end_s must be > start_s = 0.5'),
    'sentinel_no_value': ({'type': 'sentinel', 'start_s': 0.1}, 'faults[0]',
                          'a sentinel fault needs a value'),
    'dropout_value': ({'type': 'dropout', 'start_s': 0.1, 'value': 1.0}, 'faults[0]',
                      'a dropout fault takes no value'),
    'reset_open': ({'type': 'reset', 'start_s': 0.1}, 'faults[0]',
                   'a reset fault needs end_s (when the device is back on the bus)'),
    'warmup_not_reset': ({'type': 'dropout', 'start_s': 0.1, 'end_s': 0.2, 'warmup_s': 1.0},
                         'faults[0]', 'warmup_s is a reset field'),
    'unknown_type': ({'type': 'glitch', 'start_s': 0.1}, 'faults[0].type',
                     "input should be 'dropout', 'stale_new_timestamp'"),
    'negative_start': ({'type': 'dropout', 'start_s': -1.0}, 'faults[0].start_s',
                       'input should be greater than or equal to 0'),
    'unknown_field': ({'type': 'nan', 'start_s': 0.1, 'fields': ['field']},
                      'faults[0].fields[0]', 'not a data field of the sample; fields: '
                      'magnetic_field_ut, variance, saturated'),
    'value_size': ({'type': 'bias_step', 'start_s': 0.1, 'value': [1.0, 2.0]}, 'faults[0].value',
                   "must be a scalar or have 3 values (field 'magnetic_field_ut')"),
    'nan_on_bool': ({'type': 'nan', 'start_s': 0.1, 'fields': ['saturated']},
                    'faults[0].fields[0]', "a nan fault needs a floating-point field; "
                    "'saturated' is bool (use sentinel or stuck)"),
    'fields_on_packet_fault': ({'type': 'dropout', 'start_s': 0.1, 'fields': ['variance']},
                               'faults[0]', 'a dropout fault acts on the whole packet; fields '
                               'are not used'),
    'unknown_key': ({'type': 'dropout', 'start_s': 0.1, 'stop_s': 1.0}, 'faults[0].stop_s',
                    'unknown field'),
}


@pytest.mark.parametrize('case', sorted(FAULT_CASES))
def test_fault_config_rule(tmp_path, case):
  spec, path, rule = FAULT_CASES[case]
  comp = {'id': 'mag', 'type': 'fibril_sim/magnetometer', 'config': {**MAG, 'faults': [spec]}}
  _, msg = nh.config_error(tmp_path, [comp])
  assert f'components[0].config.{path}' in msg and rule in msg, msg


def test_health_threshold_rule(tmp_path):
  comp = {'id': 'mag', 'type': 'fibril_sim/magnetometer',
          'config': {**MAG, 'health_invalid_after_missed': 0}}
  nh.assert_rule(tmp_path, [comp], 'components[0].config.health_invalid_after_missed', '0',
                 'input should be greater than or equal to 1')


# ------------------------------------------------------------------ the example manifest

@pytest.fixture(scope='module')
def example():
  import fibril_mjx
  sim = fibril_mjx.load(str(pathlib.Path(__file__).resolve().parents[2] / 'manifests' /
                            'survey_quad.yaml'))
  n = 8000   # 16 s: covers the faults and the GNSS outage
  _, tr, _ = sim.rollout(sim.default_params(2), fibril_mjx.world_keys(0, 2), n)
  return sim, jax.tree.map(np.asarray, tr)


def test_example_runs_every_sensor_with_the_ekf(example):
  sim, tr = example
  s, t = tr['sensor'], tr['truth']
  assert {'imu', 'ekf', 'mag_left', 'mag_right', 'baro', 'pitot', 'gnss', 'lidar',
          'rotor'} <= set(s)
  for cid in ('mag_left', 'baro', 'pitot', 'gnss', 'lidar', 'ekf'):
    assert s[cid].new_data.sum() > 0, cid
  # the EKF tracks roll/pitch (the frame stays level: forces act through its centre of mass)
  q = s['ekf'].sample.orientation[:, -1]
  tilt = np.degrees(2 * np.arcsin(np.clip(np.linalg.norm(q[:, 1:3], axis=-1), 0, 1)))
  assert np.all(tilt < 3.0), tilt
  # the barometer reads ISA pressure at ~120 m + height; the rangefinder the height
  p = s['baro'].sample.pressure_pa[:, -1]
  assert np.all((p > 98000) & (p < 100500)), p
  d = s['lidar'].sample.distance_m[:, -1]
  h = t['gnss']['antenna_position_m'][:, -1, 2]     # antenna 0.12 m above the lidar site
  assert np.all(np.abs(d - (h - 0.151)) < 0.2), (d, h)


def test_example_consumer_view_of_faults_and_outage(example):
  sim, tr = example
  s = tr['sensor']
  dt = sim.dt
  # mag_left: dropout 4.0-5.0 s -> no delivery in the window, the right one keeps delivering
  ml, mr = s['mag_left'], s['mag_right']
  w = slice(int(4.05 / dt), int(4.95 / dt))
  assert not ml.new_data[:, w].any() and mr.new_data[:, w].any()
  # baro: stale 6.0-6.5 s -> the same pressure with increasing sequence numbers
  b = s['baro']
  k = np.nonzero(b.new_data[0, int(6.05 / dt):int(6.45 / dt)])[0] + int(6.05 / dt)
  assert len(set(b.sample.pressure_pa[0, k].tolist())) == 1 and len(set(b.sequence[0, k])) == len(k)
  # gnss: outage 8-10 s + 1 s reacquisition -> fix_type 0, accuracy >= 100 m, degraded
  g = s['gnss']
  nd = g.new_data[0]
  tt = np.arange(g.new_data.shape[1]) * dt
  nofix = nd & (tt > 8.1) & (tt < 10.9)
  assert nofix.any() and np.all(g.sample.fix_type[0, nofix] == 0)
  assert np.all(g.sample.horizontal_accuracy_m[0, nofix] >= 100)
  assert np.all(g.sample.health[0, nofix] == faults.DEGRADED)
  fix = nd & (tt > 11.2) & (tt < 13.9)
  assert np.all(g.sample.fix_type[0, fix] == 3) and np.all(g.sample.health[0, fix] == H)
  # gnss reset 14.0-14.5 s: off the bus, then warm-up invalid, then recovering
  assert not (nd & (tt > 14.06) & (tt < 14.45)).any()
  warm = nd & (tt > 14.56) & (tt < 15.45)
  assert warm.any() and np.all(g.sample.health[0, warm] == I)
  assert g.sample.health[0, nd & (tt > 15.56)][0] == R
