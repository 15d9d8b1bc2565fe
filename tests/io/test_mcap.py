"""MCAP export (ROS 2 messages): read back with the mcap reader, decode every message with
mcap-ros2-support (an independent CDR decoder: the exporter encodes with rosbags), and compare
values and stamps with trace.npz. The other sensor types: tests/io/test_bags.py.

The expected messages are computed here from the arrays directly (delivered = `new_data`,
stamp = `sample_tick · dt`, log time = `arrival_tick · dt`, truth at every tick), not with the
exporter's helpers. A synthetic run directory covers every message kind, lost samples and
non-contiguous world indices; one real `fibril-mjx run` checks the whole path.
"""

from __future__ import annotations

import json
import pathlib
import warnings

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory

from fibril_mjx import cli
from fibril_mjx.io import mcap_export
from fibril_mjx.errors import FibrilError
from error_helpers import assert_space_and_write_errors

REPO = pathlib.Path(__file__).resolve().parents[2]
DT = 0.002
DT_NS = 2_000_000


def read_mcap(path) -> dict[str, list]:
  """`{topic: [(schema name, log_time, publish_time, sequence, decoded), ...]}` in file order."""
  out: dict[str, list] = {}
  with open(path, 'rb') as f:
    reader = make_reader(f, decoder_factories=[DecoderFactory()])
    for schema, channel, message, decoded in reader.iter_decoded_messages(log_time_order=True):
      assert channel.message_encoding == 'cdr'
      out.setdefault(channel.topic, []).append(
          (schema.name, message.log_time, message.publish_time, message.sequence, decoded))
  return out


def ns_of(stamp) -> int:
  return stamp.sec * 1_000_000_000 + stamp.nanosec


def wxyz(q) -> np.ndarray:
  return np.array([q.w, q.x, q.y, q.z])


def xyz(v) -> np.ndarray:
  return np.array([v.x, v.y, v.z])


def diag(var) -> np.ndarray:
  return np.diag(np.asarray(var, np.float64)).reshape(-1)


def check_export(path, z, worlds):
  """Every message of `path` equals what trace arrays `z` say, and nothing is missing."""
  got = read_mcap(path)
  index = [int(w) for w in z['world_index']]
  comps = sorted({k.split('/')[1] for k in z if k.startswith('sensor/')})
  truths = sorted({k.split('/')[1] for k in z if k.startswith('truth/')})
  expected_topics = set()
  n_ticks = z['time_s'].shape[0]
  for w in worlds:
    row, ns = index.index(w), f'/world_{w:04d}'
    for cid in comps:
      f = {k.split('/')[2]: z[k][row] for k in z if k.startswith(f'sensor/{cid}/')}
      ticks = np.flatnonzero(f['new_data'] & f['valid'])
      has_rates = 'angular_velocity' in f and 'linear_acceleration' in f
      kinds = []
      if has_rates:
        kinds.append('imu')
      elif 'orientation' in f:
        kinds.append('orientation')
      if {'position', 'velocity', 'applied_effort'} <= set(f):
        kinds.append('joint_states')
      if 'gyro_bias' in f:
        kinds.append('gyro_bias')
      for kind in kinds:
        topic = f'{ns}/{cid}/{kind}'
        expected_topics.add(topic)
        msgs = got[topic]
        assert len(msgs) == len(ticks), topic
        for t, (schema, log_t, pub_t, seq, m) in zip(ticks, msgs):
          assert ns_of(m.header.stamp) == int(f['sample_tick'][t]) * DT_NS
          assert log_t == pub_t == int(f['arrival_tick'][t]) * DT_NS
          assert seq == int(f['sequence'][t])
          if kind == 'imu':
            assert schema == 'sensor_msgs/msg/Imu'
            assert m.header.frame_id == f'world_{w:04d}/{cid}'
            np.testing.assert_array_equal(xyz(m.angular_velocity), f['angular_velocity'][t])
            np.testing.assert_array_equal(xyz(m.linear_acceleration),
                                          f['linear_acceleration'][t])
            np.testing.assert_array_equal(m.angular_velocity_covariance,
                                          diag(f['angular_velocity_variance'][t]))
            np.testing.assert_array_equal(m.linear_acceleration_covariance,
                                          diag(f['linear_acceleration_variance'][t]))
            if 'orientation' in f:
              np.testing.assert_array_equal(wxyz(m.orientation), f['orientation'][t])
              np.testing.assert_array_equal(m.orientation_covariance,
                                            diag(f['orientation_variance'][t]))
            else:
              assert m.orientation_covariance[0] == -1.0   # ROS 2: no orientation estimate
          elif kind == 'orientation':
            assert schema == 'geometry_msgs/msg/QuaternionStamped'
            np.testing.assert_array_equal(wxyz(m.quaternion), f['orientation'][t])
          elif kind == 'gyro_bias':
            assert schema == 'geometry_msgs/msg/Vector3Stamped'
            np.testing.assert_array_equal(xyz(m.vector), f['gyro_bias'][t])
          else:
            assert schema == 'sensor_msgs/msg/JointState'
            assert list(m.name) == [cid]
            assert (m.position[0], m.velocity[0], m.effort[0]) == (
                np.float64(f['position'][t]), np.float64(f['velocity'][t]),
                np.float64(f['applied_effort'][t]))
    for cid in truths:
      f = {k.split('/')[2]: z[k][row] for k in z if k.startswith(f'truth/{cid}/')}
      if 'angular_velocity' in f and 'linear_acceleration' in f:
        topic = f'{ns}/{cid}/truth/imu'
        msgs = got[topic]
        assert len(msgs) == n_ticks
        for t, (schema, log_t, _, _, m) in enumerate(msgs):
          assert ns_of(m.header.stamp) == log_t == t * DT_NS
          np.testing.assert_array_equal(xyz(m.angular_velocity), f['angular_velocity'][t])
          np.testing.assert_array_equal(xyz(m.linear_acceleration), f['linear_acceleration'][t])
          if 'orientation' in f:
            np.testing.assert_array_equal(wxyz(m.orientation), f['orientation'][t])
          else:
            assert m.orientation_covariance[0] == -1.0
        expected_topics.add(topic)
      elif 'orientation' in f:
        topic = f'{ns}/{cid}/truth/orientation'
        msgs = got[topic]
        assert len(msgs) == n_ticks
        for t, (_, log_t, _, _, m) in enumerate(msgs):
          assert ns_of(m.header.stamp) == log_t == t * DT_NS
          np.testing.assert_array_equal(wxyz(m.quaternion), f['orientation'][t])
        expected_topics.add(topic)
      if {'position', 'velocity', 'applied_effort'} <= set(f):
        topic = f'{ns}/{cid}/truth/joint_states'
        msgs = got[topic]
        assert len(msgs) == n_ticks
        for t, (_, log_t, _, _, m) in enumerate(msgs):
          assert ns_of(m.header.stamp) == log_t == t * DT_NS
          np.testing.assert_array_equal([m.position[0], m.velocity[0], m.effort[0]],
                                        [f['position'][t], f['velocity'][t],
                                         f['applied_effort'][t]])
        expected_topics.add(topic)
  assert set(got) == expected_topics
  return got


# ------------------------------------------------------------------ synthetic run directory


def delivery(rng, n_worlds, n_ticks, period, latency, loss):
  """`new_data, valid, sequence, sample_tick, arrival_tick` of a periodic, lossy link."""
  new = np.zeros((n_worlds, n_ticks), bool)
  seq = np.full((n_worlds, n_ticks), -1, np.int32)
  st = np.zeros((n_worlds, n_ticks), np.int32)
  at = np.zeros((n_worlds, n_ticks), np.int32)
  for w in range(n_worlds):
    last = (-1, 0, 0)
    for n, k in enumerate(range(0, n_ticks, period)):
      arrive = k + latency
      if arrive < n_ticks and rng.random() >= loss:
        new[w, arrive] = True
        seq[w, arrive:], st[w, arrive:], at[w, arrive:] = n, k, arrive
  valid = seq >= 0
  return new, valid, seq, st, at


@pytest.fixture(scope='module')
def synthetic_run(tmp_path_factory):
  rng = np.random.default_rng(7)
  d = tmp_path_factory.mktemp('run')
  K, T = 4, 60
  z = {'time_s': np.arange(T) * DT, 'world_index': np.array([10, 11, 12, 13])}

  def link(cid, period, latency, loss, sample):
    new, valid, seq, st, at = delivery(rng, K, T, period, latency, loss)
    z.update({f'sensor/{cid}/{k}': v for k, v in sample.items()})
    z.update({f'sensor/{cid}/new_data': new, f'sensor/{cid}/valid': valid,
              f'sensor/{cid}/sequence': seq, f'sensor/{cid}/sample_tick': st,
              f'sensor/{cid}/arrival_tick': at})

  f32 = lambda *s: rng.normal(size=(K, T) + s).astype(np.float32)
  quat = lambda: (lambda q: q / np.linalg.norm(q, axis=-1, keepdims=True))(f32(4))
  link('imu', 1, 1, 0.2, {'angular_velocity': f32(3), 'linear_acceleration': f32(3),
                          'angular_velocity_variance': np.abs(f32(3)),
                          'linear_acceleration_variance': np.abs(f32(3)),
                          'angular_velocity_clip_count': np.zeros((K, T, 3), np.int32)})
  link('ahrs', 5, 3, 0.1, {'orientation': quat(), 'angular_velocity': f32(3),
                           'linear_acceleration': f32(3), 'orientation_variance': np.abs(f32(3)),
                           'angular_velocity_variance': np.abs(f32(3)),
                           'linear_acceleration_variance': np.abs(f32(3))})
  link('wheel', 2, 0, 0.0, {'position': f32(), 'velocity': f32(), 'applied_effort': f32(),
                            'current': f32()})
  link('ekf', 1, 0, 0.0, {'orientation': quat(), 'gyro_bias': f32(3), 'covariance': f32(6, 6)})
  link('other', 1, 0, 0.0, {'reading': f32()})   # nothing to export
  z.update({'truth/imu/angular_velocity': f32(3), 'truth/imu/linear_acceleration': f32(3),
            'truth/ahrs/orientation': quat(), 'truth/ahrs/angular_velocity': f32(3),
            'truth/ahrs/linear_acceleration': f32(3),
            'truth/wheel/position': f32(), 'truth/wheel/velocity': f32(),
            'truth/wheel/applied_effort': f32(), 'truth/wheel/setpoint': f32(),
            'truth/ekf/orientation': quat()})
  np.savez(d / 'trace.npz', **z)
  (d / 'meta.json').write_text(json.dumps({
      'dt_s': DT, 'seed': 0, 'worlds': 14, 'ticks': T - 1,
      'components': {c: {'type': t} for c, t in (('imu', 'fibril_sim/imu'),
                                                 ('ahrs', 'fibril_sim/ahrs'),
                                                 ('wheel', 'fibril_sim/motor'),
                                                 ('ekf', 'fibril_mjx/attitude_ekf'),
                                                 ('other', 'x/other'))}}))
  return d, z


def test_synthetic_export_matches_trace(synthetic_run, tmp_path):
  d, z = synthetic_run
  out = tmp_path / 'run.mcap'
  with pytest.warns(mcap_export.UnmappedComponentWarning, match=r"component 'other' \(x/other, "
                    r"fields reading\) has no ROS 2 message mapping"):
    counts = mcap_export.export_mcap(d, out, worlds=[10, 13])
  got = check_export(out, z, [10, 13])
  assert counts == {t: len(m) for t, m in got.items()}
  assert not any(t.startswith('/world_0011') or t.startswith('/world_0012') for t in got)
  # lost samples are absent: fewer imu messages than ticks after the first delivery
  assert len(got['/world_0010/imu/imu']) < z['time_s'].shape[0] - 1
  with open(out, 'rb') as f:
    meta = {m.name: m.metadata for m in make_reader(f).iter_metadata()}
  assert meta['fibril_components']['ahrs'] == 'fibril_sim/ahrs'


def test_default_exports_every_traced_world(synthetic_run, tmp_path):
  d, z = synthetic_run
  out = tmp_path / 'all.mcap'
  with pytest.warns(mcap_export.UnmappedComponentWarning):
    mcap_export.export_mcap(d, out)
  check_export(out, z, [10, 11, 12, 13])


def test_errors(synthetic_run, tmp_path, capsys):
  d, _ = synthetic_run
  with pytest.raises(FibrilError, match=r'world 5 is not in trace.npz; traced worlds: '
                     r'10, 11, 12, 13'):
    mcap_export.export_mcap(d, tmp_path / 'x.mcap', worlds=[5])
  (tmp_path / 'exists.mcap').write_bytes(b'')
  with pytest.raises(FibrilError, match=r'exists.mcap: already exists \(use --overwrite'):
    mcap_export.export_mcap(d, tmp_path / 'exists.mcap')
  with pytest.raises(FibrilError, match=r'nope: run directory not found'):
    mcap_export.export_mcap(tmp_path / 'nope', tmp_path / 'y.mcap')
  (tmp_path / 'empty').mkdir()
  with pytest.raises(FibrilError, match=r'empty: no meta.json'):
    mcap_export.export_mcap(tmp_path / 'empty', tmp_path / 'y.mcap')
  (tmp_path / 'empty' / 'meta.json').write_text('{}')
  with pytest.raises(FibrilError, match=r'empty: no trace.npz \(the run kept no traces'):
    mcap_export.export_mcap(tmp_path / 'empty', tmp_path / 'y.mcap')
  assert not list(tmp_path.glob('.*partial*'))
  assert cli.main(['export-mcap', str(d), '--worlds', '0,x', '--out', str(tmp_path / 'z')]) == 2
  err = capsys.readouterr().err.strip()
  assert err == "error: --worlds '0,x': expected comma-separated world indices, e.g. 0,3"


# ------------------------------------------------------------------ a real run


def test_real_run_round_trip(tmp_path, capsys):
  run = tmp_path / 'run'
  assert cli.main(['run', str(REPO / 'manifests' / 'imu_ekf.yaml'), '--worlds', '4',
                   '--duration', '0.1', '--trace-worlds', '4', '--out', str(run)]) == 0
  out = tmp_path / 'run.mcap'
  assert cli.main(['export-mcap', str(run), '--worlds', '0,3', '--out', str(out)]) == 0
  with np.load(run / 'trace.npz') as f:
    z = {k: f[k] for k in f.files}
  got = check_export(out, z, [0, 3])
  assert {'/world_0000/imu/imu', '/world_0003/ekf_quat/orientation',
          '/world_0003/ekf_quat/gyro_bias', '/world_0000/imu/truth/imu',
          '/world_0003/ekf_rpy/truth/orientation'} <= set(got)
  # the raw IMU has no orientation estimate
  assert got['/world_0000/imu/imu'][0][4].orientation_covariance[0] == -1.0


def test_space_and_write_errors_are_one_line_and_leave_no_file(synthetic_run, tmp_path,
                                                              monkeypatch):
  d, _ = synthetic_run

  def export():
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', mcap_export.UnmappedComponentWarning)
      mcap_export.export_mcap(d, tmp_path / 'full.mcap')
  assert_space_and_write_errors(
      export, tmp_path / 'full.mcap', 'the MCAP file', monkeypatch,
      lambda mp, f: mp.setattr(mcap_export.TYPESTORE, 'serialize_cdr', f))
