"""Every reader of user data answers a damaged file in one line naming it (issue 67): each reader
× {empty, truncated to two thirds, random bytes, another format's file}."""

from __future__ import annotations

import gzip

import mujoco
import numpy as np
import pytest
from rosbags.rosbag1 import Writer as Writer1
from rosbags.rosbag2 import StoragePlugin, Writer as Writer2
from rosbags.typesys import Stores, get_typestore

from fibril_mjx import cli
from fibril_mjx.config.manifest import read_manifest
from fibril_mjx.errors import FibrilError
from fibril_mjx.io import recording as rc, trajectory
from fibril_mjx.physics import mjcf

pytestmark = pytest.mark.usefixtures('plain_messages')

XML = '<mujoco><worldbody><body><freejoint/><geom size="0.1"/></body></worldbody></mujoco>'
CSV_MAP = {'component': 'imu', 'columns': {'sample_time_s': 't', 'angular_velocity': ['gx', 'gy']}}


def _bag(path, kind):
  """A ROS bag of five `std_msgs/Float64` messages on /x: `mcap`, `db3` (ROS 2) or `bag`
  (ROS 1); the path of its one file."""
  if kind == 'bag':
    ts = get_typestore(Stores.ROS1_NOETIC)
    with Writer1(path) as w:
      c = w.add_connection('/x', 'std_msgs/msg/Float64', typestore=ts)
      for k in range(5):
        w.write(c, 10**9 + k, ts.serialize_ros1(ts.types['std_msgs/msg/Float64'](data=k),
                                                 'std_msgs/msg/Float64'))
    return path
  ts = get_typestore(Stores.ROS2_HUMBLE)
  storage = StoragePlugin.MCAP if kind == 'mcap' else StoragePlugin.SQLITE3
  with Writer2(path.with_name(kind), version=9, storage_plugin=storage) as w:
    c = w.add_connection('/x', 'std_msgs/msg/Float64', typestore=ts)
    for k in range(5):
      w.write(c, 10**9 + k, ts.serialize_cdr(ts.types['std_msgs/msg/Float64'](data=k),
                                             'std_msgs/msg/Float64'))
  return next(path.with_name(kind).glob(f'*.{kind}'))


@pytest.fixture(scope='module')
def good(tmp_path_factory):
  """The bytes of one sound file per format."""
  d = tmp_path_factory.mktemp('good')
  t = np.arange(20) * 0.01
  rec = rc.Recording({'imu': {'angular_velocity': np.ones((20, 2)), 'sample_time_s': t,
                              'arrival_time_s': t}}, meta={'source': 'test'})
  out = {f: rc.write_recording(d / f'r.{f}', rec).read_bytes() for f in ('npz', 'parquet')}
  text = 't,gx,gy\n' + ''.join(f'{x},1,2\n' for x in t)
  out['csv'], out['csv.gz'] = text.encode(), gzip.compress(text.encode())
  out['yaml'] = b'fibril_manifest: 1\nmodel: rig.xml\ncomponents: []\n'
  out['xml'] = XML.encode()
  np.savez(d / 'q.npz', qpos=np.zeros((5, 7)))
  out['trajectory'] = (d / 'q.npz').read_bytes()
  for kind in ('mcap', 'db3', 'bag'):
    out[kind] = _bag(d / f'b.{kind}', kind).read_bytes()
  return out


def _read_trajectory(p):
  return trajectory.load(p, mujoco.MjModel.from_xml_string(XML))


# reader: (file name, its sound bytes' key, another format's key, the call)
READERS = {
    'npz recording': ('r.npz', 'npz', 'yaml', rc.read_recording),
    'parquet recording': ('r.parquet', 'parquet', 'npz', rc.read_recording),
    'csv': ('r.csv', 'csv', 'npz', lambda p: rc.read_csv(p, CSV_MAP)),
    'csv.gz': ('r.csv.gz', 'csv.gz', 'csv', lambda p: rc.read_csv(p, CSV_MAP)),
    'mcap bag': ('b.mcap', 'mcap', 'npz', lambda p: rc.read_recording(p, topics='x=/x')),
    'db3 bag': ('b.db3', 'db3', 'npz', lambda p: rc.read_recording(p, topics='x=/x')),
    'ros1 bag': ('b.bag', 'bag', 'mcap', lambda p: rc.read_recording(p, topics='x=/x')),
    'yaml manifest': ('m.yaml', 'yaml', 'npz', read_manifest),
    'mjcf': ('m.xml', 'xml', 'yaml', lambda p: mjcf.load_spec(p, {})),
    'trajectory npz': ('q.npz', 'trajectory', 'parquet', _read_trajectory),
}
DAMAGE = {
    'empty': lambda good, other: b'',
    'truncated': lambda good, other: good[:len(good) * 2 // 3],
    'random bytes': lambda good, other: np.random.default_rng(3).bytes(4096),
    'another format': lambda good, other: other,
}


@pytest.mark.parametrize('damage', sorted(DAMAGE))
@pytest.mark.parametrize('reader', sorted(READERS))
def test_damaged_file_is_one_line_naming_it(good, tmp_path, reader, damage):
  name, key, other, read = READERS[reader]
  path = tmp_path / name
  path.write_bytes(DAMAGE[damage](good[key], good[other]))
  with pytest.raises(FibrilError) as info:
    read(path)
  msg = str(info.value)
  assert len(msg.splitlines()) == 1 and msg.startswith(f'{path}:'), msg
  assert len(msg) < 300, msg
  if damage == 'empty':
    assert 'empty' in msg, msg
  if 'not a readable' in msg:   # a file that is not the format at all: says what to do
    assert '); ' in msg, msg


def test_cli_exit_code_and_one_line(tmp_path, capsys):
  """The documented exit status 2 (a user error) and one `error:` line, no traceback."""
  manifest = tmp_path / 'm.yaml'
  manifest.write_bytes(np.random.default_rng(0).bytes(300))
  assert cli.main(['plan', str(manifest)]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f'error: {manifest}: not a readable YAML file') and err.count('\n') == 1
