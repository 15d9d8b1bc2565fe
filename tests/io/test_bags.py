"""ROS bags as recordings (fibril_mjx.io.bags) and every sensor type out as its ROS 2 message.

- Round trip per sensor type: a synthetic run directory (arrays written here, no simulation)
  exported with `export-mcap` and read back as a recording gives the delivered samples
  (`new_data & valid`) and their stamps (`sample_tick · dt`, `arrival_tick · dt`).
- Bags written by rosbags' own writer (never by fibril_mjx): three static-IMU ROS 2 bags
  (MCAP storage) of white noise of a chosen density drive `fit-profile --topics`, which must
  give what the same samples give as NPZ recordings and the chosen density within 4 σ of
  the closed-form standard error of an Allan estimate of white noise for the sample size
  (and a reported standard error near it); a rosbag2 SQLite bag and an MCAP bag as the train / held-out
  entries of a tiny tune file (a hanging arm at rest: its gyro reads its bias, which the tune
  must recover); a ROS 1 bag.
- The one-line errors (missing topic, unknown type, unsorted stamps, wrong unit).
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest
import yaml
from mcap.reader import make_reader
from rosbags.rosbag2 import StoragePlugin, Writer as Writer2
from rosbags.typesys import Stores, get_typestore

from fibril_mjx.io import bags, mcap_export
from fibril_mjx import cli
from fibril_mjx.io import recording as rc
from fibril_mjx.errors import ConfigError, FibrilError

pytestmark = pytest.mark.usefixtures('plain_messages')

TS2 = get_typestore(Stores.ROS2_HUMBLE)   # a different distro's store than the exporter's
DT, DT_NS = 0.002, 2_000_000
EPOCH_NS = 1_717_000_000_123_456_789      # header stamps of "real" bags: Unix time


# ------------------------------------------------------------------ a synthetic run


def _delivery(rng, K, T, period, latency, loss):
  new = np.zeros((K, T), bool)
  seq = np.full((K, T), -1, np.int32)
  st = np.zeros((K, T), np.int32)
  at = np.zeros((K, T), np.int32)
  for w in range(K):
    for n, k in enumerate(range(0, T, period)):
      arrive = k + latency
      if arrive < T and (n == 0 or rng.random() >= loss):
        new[w, arrive] = True
        seq[w, arrive:], st[w, arrive:], at[w, arrive:] = n, k, arrive
  return new, seq >= 0, seq, st, at


# component id: (type, period, latency, fields carried by the ROS 2 messages)
CARRIED = {
    'imu': ('fibril_sim/imu', 1, 1, {'angular_velocity', 'linear_acceleration',
                                     'angular_velocity_variance',
                                     'linear_acceleration_variance'}),
    'ahrs': ('fibril_sim/ahrs', 5, 3, {'orientation', 'orientation_variance', 'angular_velocity',
                                       'linear_acceleration', 'angular_velocity_variance',
                                       'linear_acceleration_variance'}),
    'mag': ('fibril_sim/magnetometer', 4, 1, {'magnetic_field_ut', 'variance'}),
    'baro': ('fibril_sim/barometer', 5, 2, {'pressure_pa', 'temperature_k', 'variance'}),
    'pitot': ('fibril_sim/airspeed', 5, 0, {'differential_pressure_pa', 'variance'}),
    'gnss': ('fibril_sim/gnss', 10, 4, {'latitude_e7', 'longitude_e7', 'height_m', 'fix_type',
                                        'horizontal_accuracy_m', 'vertical_accuracy_m',
                                        'velocity_enu_m_s', 'speed_accuracy_m_s'}),
    'lidar': ('fibril_sim/rangefinder', 3, 1, {'distance_m', 'in_range', 'variance'}),
    'rotor': ('fibril_sim/motor', 2, 0, {'position', 'velocity', 'applied_effort'}),
    'ekf': ('fibril_mjx/attitude_ekf', 1, 0, {'orientation', 'gyro_bias'}),
}
TOPICS = {'imu': ['imu'], 'ahrs': ['imu'], 'mag': ['magnetic_field'],
          'baro': ['pressure', 'temperature'], 'pitot': ['differential_pressure'],
          'gnss': ['fix', 'velocity'], 'lidar': ['range'], 'rotor': ['joint_states'],
          'ekf': ['orientation', 'gyro_bias']}
MIN_RANGE, MAX_RANGE = 0.1, 12.0


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  rng = np.random.default_rng(3)
  d = tmp_path_factory.mktemp('run')
  K, T = 2, 80
  f32 = lambda *s, loc=0.0, scale=1.0: (loc + scale * rng.normal(size=(K, T) + s)).astype(
      np.float32)
  pos = lambda *s, loc=1.0: np.abs(f32(*s, loc=loc, scale=0.3)) + np.float32(0.01)
  quat = lambda: (lambda q: (q / np.linalg.norm(q, axis=-1, keepdims=True)).astype(
      np.float32))(f32(4))
  dist = f32(loc=3.0)
  dist[:, ::7] = np.inf
  dist[:, 3::11] = -np.inf
  fix = np.where(rng.random((K, T)) < 0.3, 0, 3).astype(np.int32)
  samples = {
      'imu': {'angular_velocity': f32(3), 'linear_acceleration': f32(3, loc=3.0, scale=2.0),
              'angular_velocity_variance': pos(3), 'linear_acceleration_variance': pos(3),
              'angular_velocity_clip_count': np.zeros((K, T, 3), np.int32)},
      'ahrs': {'orientation': quat(), 'orientation_variance': pos(3), 'angular_velocity': f32(3),
               'linear_acceleration': f32(3, loc=5.0), 'angular_velocity_variance': pos(3),
               'linear_acceleration_variance': pos(3)},
      'mag': {'magnetic_field_ut': f32(3, scale=40.0), 'variance': pos(3),
              'saturated': np.zeros((K, T, 3), bool), 'health': np.zeros((K, T), np.int32)},
      'baro': {'pressure_pa': f32(loc=99_000.0, scale=300.0), 'temperature_k': f32(loc=293.0),
               'variance': pos(), 'saturated': np.zeros((K, T), bool),
               'health': np.zeros((K, T), np.int32)},
      'pitot': {'differential_pressure_pa': f32(scale=40.0), 'variance': pos(),
                'saturated': np.zeros((K, T), bool), 'health': np.zeros((K, T), np.int32)},
      'gnss': {'latitude_e7': (522_297_000 + rng.integers(-5000, 5000, (K, T))).astype(np.int32),
               'longitude_e7': (210_122_000 + rng.integers(-5000, 5000, (K, T))).astype(
                   np.int32),
               'height_m': f32(loc=150.0), 'velocity_enu_m_s': f32(3),
               'horizontal_accuracy_m': pos(loc=2.0), 'vertical_accuracy_m': pos(loc=3.0),
               'speed_accuracy_m_s': pos(loc=0.05), 'fix_type': fix,
               'satellites': np.full((K, T), 12, np.int32), 'hdop': pos(), 'vdop': pos(),
               'health': np.zeros((K, T), np.int32)},
      'lidar': {'distance_m': dist, 'in_range': np.isfinite(dist), 'variance': pos(loc=0.01),
                'health': np.zeros((K, T), np.int32)},
      'rotor': {'position': f32(), 'velocity': f32(), 'applied_effort': f32(), 'current': f32(),
                'normalized_output': f32()},
      'ekf': {'orientation': quat(), 'gyro_bias': f32(3, scale=0.01), 'covariance': f32(6, 6)},
      'other': {'reading': f32()},     # a type with no mapping: named in a warning
  }
  z = {'time_s': np.arange(T) * DT, 'world_index': np.array([4, 9])}
  comps = {}
  for cid, s in samples.items():
    typ, period, latency, _ = CARRIED.get(cid, ('x/other', 1, 0, set()))
    new, valid, seq, st, at = _delivery(rng, K, T, period, latency, 0.15)
    z.update({f'sensor/{cid}/{k}': v for k, v in s.items()})
    z.update({f'sensor/{cid}/new_data': new, f'sensor/{cid}/valid': valid,
              f'sensor/{cid}/sequence': seq, f'sensor/{cid}/sample_tick': st,
              f'sensor/{cid}/arrival_tick': at})
    comps[cid] = {'type': typ, 'fields': {}}
  comps['lidar']['fields'] = {'min_range_m': {'value': MIN_RANGE},
                              'max_range_m': {'value': MAX_RANGE}}
  comps['gnss']['fields'] = {'vertical_velocity_noise_stddev_m_s': {'value': 0.07}}
  z['truth/imu/angular_velocity'] = f32(3)          # tick 0 of the export: the bag's first
  z['truth/imu/linear_acceleration'] = f32(3)       # message, so the clock starts at 0
  np.savez(d / 'trace.npz', **z)
  (d / 'meta.json').write_text(json.dumps({'dt_s': DT, 'seed': 0, 'worlds': 10,
                                           'ticks': T - 1, 'components': comps}))
  out = d / 'run.mcap'
  with pytest.warns(mcap_export.UnmappedComponentWarning, match="component 'other'"):
    counts = mcap_export.export_mcap(d, out)
  return d, z, out, counts


def _mapping(cid, world):
  return {cid: [f'/world_{world:04d}/{cid}/{t}' for t in TOPICS[cid]]}


@pytest.mark.parametrize('cid', sorted(CARRIED))
def test_round_trip_per_sensor_type(run, cid):
  d, z, out, _ = run
  typ, _, _, carried = CARRIED[cid]
  for row, world in enumerate(z['world_index']):
    rec = rc.read_recording(out, topics=_mapping(cid, int(world)), types={cid: typ})
    got = rec.sensor(cid)
    ok = z[f'sensor/{cid}/new_data'][row] & z[f'sensor/{cid}/valid'][row]
    assert set(got) == carried | {'sample_time_s', 'arrival_time_s'}
    for f in carried:
      ref = z[f'sensor/{cid}/{f}'][row][ok]
      np.testing.assert_array_equal(np.asarray(got[f]).astype(ref.dtype), ref, err_msg=f)
    # stamps: ticks · dt (the float64 seconds of integer nanoseconds)
    for f, tick in (('sample_time_s', 'sample_tick'), ('arrival_time_s', 'arrival_tick')):
      want = z[f'sensor/{cid}/{tick}'][row][ok].astype(np.int64) * DT_NS * 1e-9
      np.testing.assert_allclose(got[f], want, rtol=0, atol=1e-12)


def test_cli_names_the_unmapped_component(run, tmp_path, capsys):
  d, _, _, _ = run
  assert cli.main(['export-mcap', str(d), '--worlds', '9', '--out', str(tmp_path / 'x.mcap')]) == 0
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith('warning: ') and "component 'other'" in err[0]


def test_export_has_every_sensor_message(run):
  _, _, out, counts = run
  with open(out, 'rb') as f:
    reader = make_reader(f)
    summary = reader.get_summary()
    assert reader.get_header().profile == 'ros2'
  schemas = {s.id: s for s in summary.schemas.values()}
  by_topic = {c.topic: (schemas[c.schema_id].name, schemas[c.schema_id].encoding,
                        c.message_encoding) for c in summary.channels.values()}
  want = {'magnetic_field': 'sensor_msgs/msg/MagneticField',
          'pressure': 'sensor_msgs/msg/FluidPressure', 'temperature': 'sensor_msgs/msg/Temperature',
          'differential_pressure': 'sensor_msgs/msg/FluidPressure',
          'fix': 'sensor_msgs/msg/NavSatFix',
          'velocity': 'geometry_msgs/msg/TwistWithCovarianceStamped',
          'range': 'sensor_msgs/msg/Range', 'imu': 'sensor_msgs/msg/Imu',
          'joint_states': 'sensor_msgs/msg/JointState'}
  for topic, (name, enc, menc) in by_topic.items():
    assert (enc, menc) == ('ros2msg', 'cdr')
    suffix = topic.rsplit('/', 1)[-1]
    if suffix in want:
      assert name == want[suffix], topic
  assert not any('/other/' in t for t in counts)


def test_range_and_gnss_conventions(run):
  """REP 117 ±inf, the configured limits, NavSatFix status/covariance: decoded by rosbags'
  reader from the export."""
  from rosbags.highlevel import AnyReader
  _, z, out, _ = run
  with AnyReader([out]) as r:
    conns = [c for c in r.connections if c.topic in ('/world_0004/lidar/range',
                                                     '/world_0004/gnss/fix')]
    msgs = {}
    for c, _, raw in r.messages(connections=conns):
      msgs.setdefault(c.topic, []).append(r.deserialize(raw, c.msgtype))
  ranges = msgs['/world_0004/lidar/range']
  assert {m.min_range for m in ranges} == {np.float32(MIN_RANGE)}
  assert {m.max_range for m in ranges} == {MAX_RANGE}
  vals = np.array([m.range for m in ranges])
  assert np.isposinf(vals).any() and np.isneginf(vals).any()
  fixes = msgs['/world_0004/gnss/fix']
  ok = z['sensor/gnss/new_data'][0] & z['sensor/gnss/valid'][0]
  for m, ft, h in zip(fixes, z['sensor/gnss/fix_type'][0][ok],
                      z['sensor/gnss/horizontal_accuracy_m'][0][ok]):
    assert m.status.status == (0 if ft == 3 else -1)
    assert m.position_covariance_type == 2
    assert m.position_covariance[0] == m.position_covariance[4] == np.float64(h) ** 2


# ------------------------------------------------------------------ bags by rosbags itself


def _header(ts, ns, frame='imu'):
  return ts.types['std_msgs/msg/Header'](
      stamp=ts.types['builtin_interfaces/msg/Time'](sec=ns // 10**9, nanosec=ns % 10**9),
      frame_id=frame)


def _imu_msg(ts, ns, w, a):
  T = ts.types
  v3 = lambda v: T['geometry_msgs/msg/Vector3'](x=float(v[0]), y=float(v[1]), z=float(v[2]))
  cov = np.zeros(9)
  ocov = cov.copy()
  ocov[0] = -1.0
  return T['sensor_msgs/msg/Imu'](
      header=_header(ts, ns), orientation=T['geometry_msgs/msg/Quaternion'](x=0, y=0, z=0, w=1),
      orientation_covariance=ocov, angular_velocity=v3(w), angular_velocity_covariance=cov,
      linear_acceleration=v3(a), linear_acceleration_covariance=cov)


def write_ros2(path, topics, storage=StoragePlugin.MCAP):
  """`topics`: `{topic: (msgtype, [(receive ns, message), ...])}`; rosbags' own writer."""
  with Writer2(path, version=9, storage_plugin=storage) as w:
    for topic, (msgtype, msgs) in topics.items():
      conn = w.add_connection(topic, msgtype, typestore=TS2)
      for t, m in msgs:
        w.write(conn, t, TS2.serialize_cdr(m, msgtype))
  return path


RATE, SECONDS = 200.0, 20.0
NOISE_DENSITY = [3e-4, 2e-4, 4e-4]      # rad/s/√Hz, white: per-sample σ = N·√rate
ACCEL_DENSITY = [2e-3, 2e-3, 3e-3]


@pytest.fixture(scope='module')
def static_bags(tmp_path_factory):
  """Three static-IMU ROS 2 MCAP bags (rosbags' writer; Unix-time stamps, 1.5 ms transport
  delay) and the same samples as NPZ recordings."""
  d = tmp_path_factory.mktemp('static')
  rng = np.random.default_rng(11)
  n = int(RATE * SECONDS)
  period_ns = int(1e9 / RATE)
  bag_paths, npz_paths = [], []
  for b in range(3):
    w = rng.normal(size=(n, 3)) * np.array(NOISE_DENSITY) * math.sqrt(RATE)
    a = rng.normal(size=(n, 3)) * np.array(ACCEL_DENSITY) * math.sqrt(RATE) + [0, 0, 9.80665]
    stamps = EPOCH_NS + b * 10**11 + np.arange(n, dtype=np.int64) * period_ns
    msgs = [(int(s) + 1_500_000, _imu_msg(TS2, int(s), w[i], a[i]))
            for i, s in enumerate(stamps)]
    bag_paths.append(write_ros2(d / f'b{b}', {'/imu/data': ('sensor_msgs/msg/Imu', msgs)}))
    t = (stamps - stamps[0]) * 1e-9
    npz_paths.append(rc.write_recording(d / f'b{b}.npz', rc.Recording(
        {'imu': {'angular_velocity': w, 'linear_acceleration': a, 'sample_time_s': t,
                 'arrival_time_s': t + 1.5e-3}}, meta={'source': 'test'})))
  return d, bag_paths, npz_paths


def test_bag_reads_as_recording(static_bags):
  _, bag_paths, npz_paths = static_bags
  rec = rc.read_recording(bag_paths[1], topics='imu=/imu/data')
  ref = rc.read_recording(npz_paths[1])
  got, want = rec.sensor('imu'), ref.sensor('imu')
  assert set(got) == {'angular_velocity', 'linear_acceleration', 'sample_time_s',
                      'arrival_time_s'}   # no orientation (cov[0] = -1), unknown covariances
  for f in ('angular_velocity', 'linear_acceleration'):
    np.testing.assert_array_equal(got[f], want[f])
  np.testing.assert_allclose(got['sample_time_s'], want['sample_time_s'], rtol=0, atol=1e-12)
  np.testing.assert_allclose(got['arrival_time_s'], want['arrival_time_s'], rtol=0, atol=1e-12)
  assert rec.sensor('imu')['sample_time_s'][0] == 0.0
  assert rec.meta['time_origin_ns'] == EPOCH_NS + 10**11


def test_fit_profile_from_rosbags_bags(static_bags, tmp_path):
  d, bag_paths, npz_paths = static_bags
  out_bag, out_npz = tmp_path / 'bag' / 'unit.yaml', tmp_path / 'npz' / 'unit.yaml'
  assert cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'imu',
                   '--static', *map(str, bag_paths), '--topics', 'imu=/imu/data',
                   '--out', str(out_bag)]) == 0
  assert cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'imu',
                   '--static', *map(str, npz_paths), '--out', str(out_npz)]) == 0
  pb, pn = (yaml.safe_load(p.read_text()) for p in (out_bag, out_npz))
  assert pb['fields'] == pn['fields']                 # the same samples, the same fit
  res = json.loads((out_bag.parent / 'unit_fit.json').read_text())
  se = {u['field']: u['se'] for u in res['uncertainty']}
  # The bound, independent of the fit: the overlapping Allan variance at τ = 1/rate of n
  # white samples of σ² is the mean of ½(y[k+1] − y[k])²; each square has variance 2σ⁴ and
  # covariance σ⁴/2 with each neighbour (the differences are correlated −½), so the estimate's
  # relative standard deviation is √(3/n) and N = √(AVAR·Δ)'s is ½√(3/n). n: the samples of
  # the 2 logs the fit uses (of 3, the last is held out). The fit pools more cluster sizes
  # (measured: its standard error 0.81 % of N here, this bound 0.97 %).
  n_fit = 2 * int(RATE * SECONDS)
  rel_se = 0.5 * math.sqrt(3.0 / n_fit)
  for f, true in (('angular_velocity_noise_density', NOISE_DENSITY),
                  ('linear_acceleration_noise_density', ACCEL_DENSITY)):
    for i in range(3):
      bound = rel_se * true[i]
      assert abs(pb['fields'][f][i] - true[i]) <= 4 * bound, (f, i, pb['fields'][f][i])
      assert 0.5 * bound <= se[f'{f}[{i}]'] <= 2 * bound, (f, i, se[f'{f}[{i}]'], bound)


# ------------------------------------------------------------------ tune from bags

ARM = """\
<mujoco model="arm">
  <option timestep="0.004"/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.15" size="0.015" mass="0.5"
            contype="0" conaffinity="0"/>
      <site name="imu" pos="0 0 -0.12"/>
    </body>
  </worldbody>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""
BIAS_Y, ARM_PERIOD = -0.02, 0.008


def test_tune_from_bags(tmp_path):
  """The arm hangs at rest: its gyro reads exactly its bias (y = −0.02 rad/s, 0 elsewhere);
  the train bag (rosbag2, SQLite) and the held-out bag (MCAP) carry that; the tune must
  recover the bias from 0.03."""
  (tmp_path / 'arm.xml').write_text(ARM)
  (tmp_path / 'arm.yaml').write_text(yaml.safe_dump({
      'fibril_manifest': 1, 'model': 'arm.xml', 'components': [
          {'id': 'imu', 'type': 'fibril_sim/imu',
           'config': {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel',
                      'period_s': ARM_PERIOD}}]}))
  n = 13
  for name, storage in (('train', StoragePlugin.SQLITE3), ('heldout', StoragePlugin.MCAP)):
    msgs = [(int(round(k * ARM_PERIOD * 1e9)),
             _imu_msg(TS2, int(round(k * ARM_PERIOD * 1e9)), [0.0, BIAS_Y, 0.0],
                      [0.0, 0.0, 9.81])) for k in range(n)]
    write_ros2(tmp_path / name, {'/arm/imu': ('sensor_msgs/msg/Imu', msgs)}, storage)
  (tmp_path / 'tune.yaml').write_text(yaml.safe_dump({
      'fibril_tune': 1, 'manifest': 'arm.yaml',
      'train': [{'bag': 'train', 'topics': {'imu': '/arm/imu'}}],
      'heldout': [{'bag': 'heldout', 'topics': 'imu=/arm/imu'}],
      'parameters': [{'component': 'imu', 'field': 'angular_velocity_bias', 'index': 1,
                      'bounds': [-0.1, 0.1], 'init': 0.03}],
      'loss': [{'component': 'imu', 'field': 'angular_velocity', 'weight': 100.0}],
      # 8: SciPy's trust-region reflective least squares takes ~5 steps on this bounded linear
      # problem (its interior scaling near the bounds), where a plain Gauss–Newton step took 1
      'optimizer': {'method': 'gauss_newton', 'iterations': 8, 'starts': 1}}))
  out = tmp_path / 'out'
  assert cli.main(['tune', str(tmp_path / 'tune.yaml'), '--out', str(out)]) == 0
  overlay = yaml.safe_load((out / 'overlay.yaml').read_text())
  entry = overlay['components'][0]
  assert entry['field'] == 'angular_velocity_bias'
  assert entry['value'][1] == pytest.approx(BIAS_Y, abs=1e-5)
  rep = json.loads((out / 'report.json').read_text())
  assert rep['heldout_loss'] is not None and rep['heldout_loss'] < 1e-6


# ------------------------------------------------------------------ ROS 1, commands, errors


def test_ros1_bag_and_commands(tmp_path):
  from rosbags.rosbag1 import Writer as Writer1
  ts1 = get_typestore(Stores.ROS1_NOETIC)
  T = ts1.types
  path = tmp_path / 'old.bag'
  with Writer1(path) as w:
    c_mag = w.add_connection('/mag', 'sensor_msgs/msg/MagneticField', typestore=ts1)
    c_cmd = w.add_connection('/rotor/cmd', 'sensor_msgs/msg/JointState', typestore=ts1)
    c_arr = w.add_connection('/lift/cmd', 'std_msgs/msg/Float64MultiArray', typestore=ts1)
    layout = T['std_msgs/msg/MultiArrayLayout'](dim=[], data_offset=0)
    for k in range(5):
      t = EPOCH_NS + k * 10_000_000
      hdr = T['std_msgs/msg/Header'](seq=k, stamp=T['builtin_interfaces/msg/Time'](
          sec=t // 10**9, nanosec=t % 10**9), frame_id='mag')
      m = T['sensor_msgs/msg/MagneticField'](
          header=hdr, magnetic_field=T['geometry_msgs/msg/Vector3'](x=2e-5, y=k * 1e-6, z=-4e-5),
          magnetic_field_covariance=np.eye(3).reshape(-1) * 1e-14)
      w.write(c_mag, t + 1_000_000, ts1.serialize_ros1(m, 'sensor_msgs/msg/MagneticField'))
      j = T['sensor_msgs/msg/JointState'](header=hdr, name=['a', 'rotor_joint'],
                                          position=np.array([], np.float64),
                                          velocity=np.array([1.0, 10.0 + k]),
                                          effort=np.array([], np.float64))
      w.write(c_cmd, t + 2_000_000, ts1.serialize_ros1(j, 'sensor_msgs/msg/JointState'))
      a = T['std_msgs/msg/Float64MultiArray'](layout=layout, data=np.array([0.5 * k, 7.0]))
      w.write(c_arr, t + 3_000_000, ts1.serialize_ros1(a, 'std_msgs/msg/Float64MultiArray'))
  rec = rc.read_recording(path, topics='mag=/mag,command/rotor=/rotor/cmd#rotor_joint,'
                          'command/lift=/lift/cmd#1')
  mag = rec.sensor('mag')
  np.testing.assert_allclose(mag['magnetic_field_ut'][:, 1], np.arange(5), rtol=1e-12)
  np.testing.assert_allclose(mag['variance'], 0.01, rtol=1e-12)      # 1e-14 T² = 0.01 µT²
  np.testing.assert_allclose(mag['sample_time_s'], np.arange(5) * 0.01, atol=1e-12)
  np.testing.assert_allclose(mag['arrival_time_s'] - mag['sample_time_s'], 1e-3, atol=1e-12)
  from fibril_mjx.components.actuators.motor import KINDS
  assert list(rec.commands['rotor']['kind']) == [KINDS.index('velocity')] * 5
  np.testing.assert_array_equal(rec.commands['rotor']['value'], 10.0 + np.arange(5))
  np.testing.assert_array_equal(rec.commands['lift']['value'], [7.0] * 5)
  np.testing.assert_allclose(rec.commands['lift']['time_s'], np.arange(5) * 0.01 + 3e-3,
                             atol=1e-12)


def _mag_bag(path, values_t, stamps_ns, msgtype='sensor_msgs/msg/MagneticField'):
  T = TS2.types
  msgs = []
  rx0 = int(max(stamps_ns)) + 1000        # receive times increase, whatever the stamps do
  for i, (v, s) in enumerate(zip(values_t, stamps_ns)):
    if msgtype == 'std_msgs/msg/String':
      m = T[msgtype](data='x')
    else:
      m = T[msgtype](header=_header(TS2, int(s), 'mag'),
                     magnetic_field=T['geometry_msgs/msg/Vector3'](x=v, y=0.0, z=0.0),
                     magnetic_field_covariance=np.zeros(9))
    msgs.append((rx0 + 1000 * i, m))
  return write_ros2(path, {'/mag': (msgtype, msgs)})


def test_one_line_errors(tmp_path, capsys):
  good = _mag_bag(tmp_path / 'good', [2e-5] * 3, [EPOCH_NS, EPOCH_NS + 10, EPOCH_NS + 20])
  with pytest.raises(ConfigError, match=r"good: topic /mgn: not in the bag \(mapped to "
                     r"sensor/mag; topics: /mag\) \(did you mean '/mag'\?\)"):
    rc.read_recording(good, topics='mag=/mgn')
  with pytest.raises(ConfigError, match=r'unsorted: topic /mag field header.stamp \(message 2\) '
                     r'= 1e-08: must be strictly increasing in receive order'):
    rc.read_recording(_mag_bag(tmp_path / 'unsorted', [2e-5] * 3,
                               [EPOCH_NS, EPOCH_NS + 20, EPOCH_NS + 10]), topics='mag=/mag')
  with pytest.raises(ConfigError, match=r'microtesla: topic /mag field magnetic_field '
                     r'\(message 0\) = 20.0: must be in tesla'):
    rc.read_recording(_mag_bag(tmp_path / 'microtesla', [20.0] * 2, [EPOCH_NS, EPOCH_NS + 5]),
                      topics='mag=/mag')
  with pytest.raises(ConfigError, match=r'string: topic /mag: type std_msgs/msg/String has no '
                     r'mapping to sensor fields'):
    rc.read_recording(_mag_bag(tmp_path / 'string', [0, 0], [0, 1], 'std_msgs/msg/String'),
                      topics='mag=/mag')
  with pytest.raises(FibrilError, match=r'good: a ROS bag needs a topic mapping'):
    rc.read_recording(good)
  with pytest.raises(ConfigError, match=r"--topics = 'mag': expected ID=TOPIC"):
    bags.parse_topics('mag')
  # the command line: exit 2, one line
  assert cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'mag',
                   '--static', str(good), '--topics', 'imu=/imu/data',
                   '--out', str(tmp_path / 'u.yaml')]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith('error: ') and 'topic /imu/data' in err[0]
