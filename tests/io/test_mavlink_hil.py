"""MAVLink HIL export: decode the .tlog with pymavlink and compare with trace.npz.

The expected messages are computed here from the trace arrays with float64 NumPy (delivered =
`new_data & valid`, stamp = `sample_tick · dt`, log time = `arrival_tick · dt`, FLU → FRD,
µT → gauss, Pa → hPa, the ISA pressure altitude in its barometric-formula form, ENU → NED
velocities in cm/s), with the bitmask values written out from the MAVLink common message set
(`HIL_SENSOR_UPDATED_FLAGS`: XACC 1 … TEMPERATURE 4096) — not with the exporter's helpers. A
synthetic run directory covers rates, holds, a dropped sample and unit edge cases; one real
`fibril-mjx run` of `manifests/hil_quad.yaml` checks the CLI path, and one `rollout` checks the
streaming function.
"""

from __future__ import annotations

import errno
import json
import pathlib

import numpy as np
import pytest
from pymavlink import mavutil

from fibril_mjx import cli
from fibril_mjx.io import mavlink_hil
from fibril_mjx.errors import FibrilError
from error_helpers import assert_space_and_write_errors

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = REPO / 'manifests' / 'hil_quad.yaml'
DT = 0.002
# HIL_SENSOR_UPDATED_FLAGS (MAVLink common.xml): acc x,y,z 1,2,4; gyro 8,16,32; mag 64,128,256;
# abs_pressure 512; diff_pressure 1024; pressure_alt 2048; temperature 4096.
BITS_IMU, BITS_MAG = 1 + 2 + 4 + 8 + 16 + 32, 64 + 128 + 256
BITS_BARO, BITS_AIRSPEED = 512 + 2048 + 4096, 1024


def read_tlog(path) -> list:
  """Every message of a .tlog, decoded by pymavlink, in file order."""
  conn = mavutil.mavlink_connection(str(path))
  out = []
  while True:
    m = conn.recv_match()
    if m is None:
      return out
    assert m.get_type() != 'BAD_DATA', m
    out.append(m)


def isa_altitude_m(p_pa):
  """Barometric formula, troposphere: h = (T0/L)·(1 − (p/p0)^(R·L/(g·M)))."""
  t0, lapse, g, r_univ, molar = 288.15, 0.0065, 9.80665, 8.314462618, 0.0289644
  return t0 / lapse * (1.0 - (np.asarray(p_pa, np.float64) / 101325.0)
                       ** (r_univ * lapse / (g * molar)))


def expected_messages(z, row, dt, ids):
  """`(HIL_SENSOR dicts, HIL_GPS dicts)` from trace arrays, float64."""
  get = lambda cid, k: np.asarray(z[f'sensor/{cid}/{k}'][row])   # noqa: E731
  new = {s: get(cid, 'new_data') & get(cid, 'valid') for s, cid in ids.items()}
  n = len(z['time_s'])
  flu = np.array([1.0, -1.0, -1.0])
  hold = {'acc': np.zeros(3), 'gyro': np.zeros(3), 'mag': np.zeros(3), 'abs': 0.0,
          'diff': 0.0, 'alt': 0.0, 'temp': 0.0}
  sensors, gps = [], []
  for t in range(n):
    srcs = [s for s in ('imu', 'mag', 'baro', 'airspeed') if s in ids and new[s][t]]
    if srcs:
      bits = 0
      if 'imu' in srcs:
        hold['acc'] = get(ids['imu'], 'linear_acceleration')[t].astype(np.float64) * flu
        hold['gyro'] = get(ids['imu'], 'angular_velocity')[t].astype(np.float64) * flu
        bits |= BITS_IMU
      if 'mag' in srcs:
        hold['mag'] = get(ids['mag'], 'magnetic_field_ut')[t].astype(np.float64) * flu * 0.01
        bits |= BITS_MAG
      if 'baro' in srcs:
        p = float(get(ids['baro'], 'pressure_pa')[t])
        hold['abs'], hold['alt'] = p * 0.01, float(isa_altitude_m(p))
        hold['temp'] = float(get(ids['baro'], 'temperature_k')[t]) - 273.15
        bits |= BITS_BARO
      if 'airspeed' in srcs:
        hold['diff'] = float(get(ids['airspeed'], 'differential_pressure_pa')[t]) * 0.01
        bits |= BITS_AIRSPEED
      stamp_src = 'imu' if 'imu' in srcs else max(
          srcs, key=lambda s: int(get(ids[s], 'sample_tick')[t]))
      sensors.append({
          'log_s': t * dt, 'time_usec': round(int(get(ids[stamp_src], 'sample_tick')[t])
                                              * dt * 1e6),
          'acc': hold['acc'].copy(), 'gyro': hold['gyro'].copy(), 'mag': hold['mag'].copy(),
          'abs_pressure': hold['abs'], 'diff_pressure': hold['diff'],
          'pressure_alt': hold['alt'], 'temperature': hold['temp'], 'fields_updated': bits})
    if 'gps' in ids and new['gps'][t]:
      c = ids['gps']
      ve, vn, vu = get(c, 'velocity_enu_m_s')[t].astype(np.float64)
      speed = np.hypot(ve, vn) * 100
      gps.append({'log_s': t * dt,
                  'time_usec': round(int(get(c, 'sample_tick')[t]) * dt * 1e6),
                  'fix_type': int(get(c, 'fix_type')[t]), 'lat': int(get(c, 'latitude_e7')[t]),
                  'lon': int(get(c, 'longitude_e7')[t]),
                  'alt': round(float(get(c, 'height_m')[t]) * 1000),
                  'eph': round(float(get(c, 'hdop')[t]) * 100),
                  'epv': round(float(get(c, 'vdop')[t]) * 100), 'vel': round(speed),
                  'vn': round(vn * 100), 've': round(ve * 100), 'vd': round(-vu * 100),
                  'cog': (round(np.degrees(np.arctan2(ve, vn)) * 100) % 36000
                          if round(speed) > 0 else 65535),
                  'satellites_visible': int(get(c, 'satellites')[t])})
  return sensors, gps


def check_tlog(path, z, row, dt, ids):
  msgs = read_tlog(path)
  got_s = [m for m in msgs if m.get_type() == 'HIL_SENSOR']
  got_g = [m for m in msgs if m.get_type() == 'HIL_GPS']
  assert len(got_s) + len(got_g) == len(msgs)
  want_s, want_g = expected_messages(z, row, dt, ids)
  assert len(got_s) == len(want_s) and len(got_g) == len(want_g)
  f32 = lambda v: np.asarray(v, np.float64).astype(np.float32)   # noqa: E731  (wire type)
  stamps = [m._timestamp for m in msgs]
  assert stamps == sorted(stamps)
  for m, w in zip(got_s, want_s):
    assert m._timestamp == pytest.approx(w['log_s'], abs=1e-6)
    assert m.time_usec == w['time_usec'] and m.fields_updated == w['fields_updated']
    assert m.id == 0
    np.testing.assert_array_equal(f32([m.xacc, m.yacc, m.zacc]), f32(w['acc']))
    np.testing.assert_array_equal(f32([m.xgyro, m.ygyro, m.zgyro]), f32(w['gyro']))
    np.testing.assert_allclose([m.xmag, m.ymag, m.zmag], w['mag'], rtol=1e-6, atol=1e-9)
    for k in ('abs_pressure', 'diff_pressure', 'temperature'):
      assert getattr(m, k) == pytest.approx(w[k], rel=1e-6, abs=1e-5), k
    # float32 altitude; the ISA exponent's constants agree to ~1e-6 relative
    assert m.pressure_alt == pytest.approx(w['pressure_alt'], abs=0.05)
  for m, w in zip(got_g, want_g):
    assert m._timestamp == pytest.approx(w['log_s'], abs=1e-6)
    for k in ('time_usec', 'fix_type', 'lat', 'lon', 'alt', 'eph', 'epv', 'vel', 'vn', 've',
              'vd', 'cog', 'satellites_visible'):
      assert getattr(m, k) == w[k], (k, getattr(m, k), w[k])
  return got_s, got_g


# ------------------------------------------------------------------ synthetic run directory

def synthetic_run(tmp_path) -> pathlib.Path:
  """Two traced worlds (global 0 and 5), 20 ticks: IMU every tick (one lost at tick 7), mag
  every 4th tick with one tick of latency, baro every 5th, pitot every 10th, GNSS at ticks 3
  and 13 (one at rest: cog unknown)."""
  rng = np.random.default_rng(3)
  n, w = 20, 2
  a = {'time_s': np.arange(n) * DT, 'world_index': np.array([0, 5])}

  def comp(cid, fields, every, lat=0, lost=()):
    new = np.zeros((w, n), bool)
    st = np.zeros((w, n), np.int32)
    for t in range(lat, n):
      if (t - lat) % every == 0 and t not in lost:
        new[:, t], st[:, t] = True, t - lat
    a[f'sensor/{cid}/new_data'] = new
    a[f'sensor/{cid}/valid'] = np.cumsum(new, axis=1) > 0
    a[f'sensor/{cid}/sample_tick'] = st
    a[f'sensor/{cid}/arrival_tick'] = np.where(new, np.arange(n), 0).astype(np.int32)
    a[f'sensor/{cid}/sequence'] = (np.cumsum(new, axis=1) - 1).astype(np.int32)
    a[f'sensor/{cid}/health'] = np.zeros((w, n), np.int32)
    for k, (shape, scale, off) in fields.items():
      a[f'sensor/{cid}/{k}'] = (off + scale * rng.standard_normal((w, n) + shape)
                                ).astype(np.float32)
  comp('imu', {'angular_velocity': ((3,), 0.3, 0.0),
               'linear_acceleration': ((3,), 1.0, np.array([0.0, 0.0, 9.8]))}, 1, lost=(7,))
  comp('compass', {'magnetic_field_ut': ((3,), 20.0, 0.0)}, 4, lat=1)
  comp('baro', {'pressure_pa': ((), 300.0, 99000.0), 'temperature_k': ((), 2.0, 290.0)}, 5)
  comp('pitot', {'differential_pressure_pa': ((), 20.0, 50.0)}, 10)
  comp('gnss', {'height_m': ((), 3.0, 150.0), 'velocity_enu_m_s': ((3,), 2.0, 0.0),
                'hdop': ((), 0.1, 0.9), 'vdop': ((), 0.1, 1.35)}, 10, lat=3)
  a['sensor/gnss/velocity_enu_m_s'][:, 3] = 0.0   # at rest: course over ground unknown
  a['sensor/gnss/latitude_e7'] = np.full((w, n), 522297000, np.int32) + np.arange(n)
  a['sensor/gnss/longitude_e7'] = np.full((w, n), -210122000, np.int32) - np.arange(n)
  a['sensor/gnss/fix_type'] = np.full((w, n), 3, np.int32)
  a['sensor/gnss/satellites'] = np.full((w, n), 11, np.int32)
  run = tmp_path / 'run'
  run.mkdir()
  np.savez(run / 'trace.npz', **a)
  types = {'imu': 'fibril_sim/imu', 'compass': 'fibril_sim/magnetometer',
           'baro': 'fibril_sim/barometer', 'pitot': 'fibril_sim/airspeed',
           'gnss': 'fibril_sim/gnss'}
  (run / 'meta.json').write_text(json.dumps(
      {'dt_s': DT, 'ticks': n - 1, 'components': {k: {'type': v} for k, v in types.items()}}))
  return run


IDS = {'imu': 'imu', 'mag': 'compass', 'baro': 'baro', 'airspeed': 'pitot', 'gps': 'gnss'}


def test_synthetic_round_trip(tmp_path):
  run = synthetic_run(tmp_path)
  out = tmp_path / 'w5.tlog'
  r = mavlink_hil.export_tlog(run, out, world=5)
  assert r['sources'] == IDS
  with np.load(run / 'trace.npz') as z:
    s, g = check_tlog(out, z, 1, DT, IDS)
  # the lost IMU sample: no message at tick 7 (no other source delivered then) ...
  assert all(m.time_usec != 7 * 2000 for m in s)
  # ... the magnetometer sample of tick 8, delivered at 9, is stamped by the IMU's tick 9
  m9 = [m for m in s if m._timestamp == pytest.approx(9 * DT)][0]
  assert m9.fields_updated == BITS_IMU | BITS_MAG and m9.time_usec == 9 * 2000
  assert g[0].cog == 65535 and g[0].vel == 0 and g[0].time_usec == 0


def test_synthetic_without_imu_stamps_by_newest(tmp_path):
  """With the IMU left out, a message carries the newest delivered source's stamp."""
  run = synthetic_run(tmp_path)
  out = tmp_path / 'noimu.tlog'
  mavlink_hil.export_tlog(run, out, chosen={'imu': ''})
  ids = {k: v for k, v in IDS.items() if k != 'imu'}
  with np.load(run / 'trace.npz') as z:
    s, _ = check_tlog(out, z, 0, DT, ids)
  assert all(m.fields_updated & BITS_IMU == 0 for m in s)
  # tick 10: baro (stamp 10) and pitot (stamp 10) — tick 9: mag stamped 8
  assert [m.time_usec for m in s if m._timestamp == pytest.approx(9 * DT)] == [8 * 2000]


def test_frd_and_geoid(tmp_path):
  run = synthetic_run(tmp_path)
  out = tmp_path / 'frd.tlog'
  mavlink_hil.export_tlog(run, out, body_axes='frd', geoid_separation_m=30.0)
  with np.load(run / 'trace.npz') as z:
    acc = z['sensor/imu/linear_acceleration'][0, 0].astype(np.float64)
    h = float(z['sensor/gnss/height_m'][0, 3])
  msgs = read_tlog(out)
  m0 = msgs[0]
  np.testing.assert_array_equal(np.float32([m0.xacc, m0.yacc, m0.zacc]), np.float32(acc))
  gps0 = [m for m in msgs if m.get_type() == 'HIL_GPS'][0]
  assert gps0.alt == round((h - 30.0) * 1000)


def test_errors(tmp_path):
  run = synthetic_run(tmp_path)
  with pytest.raises(FibrilError, match='world 3 is not in trace.npz'):
    mavlink_hil.export_tlog(run, tmp_path / 'x.tlog', world=3)
  with pytest.raises(FibrilError, match='--mag nope: no such component'):
    mavlink_hil.export_tlog(run, tmp_path / 'x.tlog', chosen={'mag': 'nope'})
  with pytest.raises(FibrilError, match='--gps baro: its samples lack'):
    mavlink_hil.export_tlog(run, tmp_path / 'x.tlog', chosen={'gps': 'baro'})
  (tmp_path / 'y.tlog').write_bytes(b'')
  assert cli.main(['export-mavlink', str(run), '--out', str(tmp_path / 'y.tlog')]) == 2


# ------------------------------------------------------------------ the real path

@pytest.fixture(scope='module')
def real_run(tmp_path_factory):
  out = tmp_path_factory.mktemp('hil') / 'run'
  assert cli.main(['run', str(MANIFEST), '--worlds', '1', '--duration', '0.5',
                   '--trace-worlds', '1', '--out', str(out)]) == 0
  return out


def test_cli_export_of_example_manifest(real_run, capsys):
  tlog = real_run.parent / 'hil.tlog'
  assert cli.main(['export-mavlink', str(real_run), '--out', str(tlog)]) == 0
  assert 'HIL_SENSOR' in capsys.readouterr().out
  dt = json.loads((real_run / 'meta.json').read_text())['dt_s']
  ids = {'imu': 'imu', 'mag': 'mag', 'baro': 'baro', 'airspeed': 'pitot', 'gps': 'gnss'}
  with np.load(real_run / 'trace.npz') as z:
    s, g = check_tlog(tlog, z, 0, dt, ids)
    n_gps = int((z['sensor/gnss/new_data'][0] & z['sensor/gnss/valid'][0]).sum())
  assert len(g) == n_gps >= 2
  # a hovering frame: FRD specific force reads about −g on z once the sensor sees the state
  assert np.median([m.zacc for m in s[5:]]) == pytest.approx(-9.8, abs=0.5)


def test_stream_rollout_matches_trace():
  import jax
  from fibril_mjx import load, world_keys
  from fibril_mjx.analysis.common import flatten
  sim = load(MANIFEST)
  n = 60
  _, trace, _ = sim.rollout(sim.default_params(1), world_keys(0, 1), n)
  packets = list(mavlink_hil.stream_rollout(sim, trace, world=0))
  flat = flatten(jax.device_get(trace))
  flat['time_s'] = np.arange(n + 1) * sim.dt
  ids = {'imu': 'imu', 'mag': 'mag', 'baro': 'baro', 'airspeed': 'pitot', 'gps': 'gnss'}
  want_s, want_g = expected_messages(flat, 0, sim.dt, ids)
  got_s = [p.message for p in packets if p.message.get_type() == 'HIL_SENSOR']
  assert len(got_s) == len(want_s) == n + 1 and len(packets) == len(want_s) + len(want_g)
  for p, w in zip([p for p in packets if p.message.get_type() == 'HIL_SENSOR'], want_s):
    assert p.log_time_us == round(w['log_s'] * 1e6)
    assert p.message.time_usec == w['time_usec']
    assert p.message.fields_updated == w['fields_updated']
    np.testing.assert_allclose([p.message.xgyro, p.message.ygyro, p.message.zgyro],
                               w['gyro'], rtol=1e-6, atol=1e-9)
  # the bytes are valid MAVLink 2: pymavlink's parser decodes them back, sequence numbers run
  from pymavlink.dialects.v20 import common
  parser = common.MAVLink(None)
  decoded = [parser.parse_char(p.buf) for p in packets]
  assert [d.get_type() for d in decoded] == [p.message.get_type() for p in packets]
  assert [d.get_seq() for d in decoded] == [i % 256 for i in range(len(packets))]


def test_push_from_step_outputs():
  """`HilEncoder.push` reads one world row of `Simulation.outputs(state)` (leaves `(nworld, ...)`)."""
  from typing import NamedTuple

  from fibril_mjx.mechanisms.transport import Delivered

  class ImuSample(NamedTuple):
    angular_velocity: np.ndarray
    linear_acceleration: np.ndarray

  def delivered(tick, new):
    s = ImuSample(np.array([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]]),
                  np.array([[0.0, 0.0, 9.8], [0.5, -0.5, 9.0]]))
    b = lambda v: np.array([v, v])   # noqa: E731
    return Delivered(s, b(new), b(tick), b(tick - 1), b(tick), b(True))

  enc = mavlink_hil.HilEncoder({'imu': 'imu'}, 0.002)
  assert enc.push({'sensor': {'imu': delivered(5, False)}}, 5, world=1) == []
  (p,) = enc.push({'sensor': {'imu': delivered(6, True)}}, 6, world=1)
  m = p.message
  assert p.log_time_us == 12000 and m.time_usec == 10000 and m.fields_updated == BITS_IMU
  np.testing.assert_allclose([m.xgyro, m.ygyro, m.zgyro], [1.0, -2.0, -3.0], rtol=1e-7)
  np.testing.assert_allclose([m.xacc, m.yacc, m.zacc], [0.5, 0.5, -9.0], rtol=1e-7)


def test_space_and_write_errors_are_one_line_and_leave_no_file(tmp_path, monkeypatch):
  run = synthetic_run(tmp_path)
  assert_space_and_write_errors(
      lambda: mavlink_hil.export_tlog(run, tmp_path / 'full.tlog'), tmp_path / 'full.tlog',
      'the .tlog file', monkeypatch,
      lambda mp, f: mp.setattr(mavlink_hil, 'open', f, raising=False), errno.EROFS)
