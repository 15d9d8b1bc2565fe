"""Recording format: round trip, validation errors (one line, file and key), CSV import."""

import numpy as np
import pytest

from fibril_mjx.io import recording as rc
from fibril_mjx.errors import FibrilError

pytestmark = pytest.mark.usefixtures('plain_messages')


def _rec(n=50):
  t = np.arange(n) * 0.01
  g = np.random.default_rng(0)
  return rc.Recording(
      sensors={'imu': {'angular_velocity': g.standard_normal((n, 3)),
                       'sample_time_s': t, 'arrival_time_s': t + 0.002,
                       'sequence': np.arange(n)}},
      commands={'motor': {'position': np.ones(4), 'time_s': np.arange(4) * 0.1}},
      truth={'imu': {'angular_velocity': np.zeros((n, 3)), 'time_s': t}},
      initial={'qpos': np.zeros(7), 'qvel': np.zeros(6)},
      meta={'manifest': 'm.yaml', 'source': 'test', 'units': {'angular_velocity': 'rad/s'}})


def test_npz_round_trip(tmp_path):
  rec = _rec()
  rc.write_recording(tmp_path / 'a.npz', rec)
  back = rc.read_recording(tmp_path / 'a.npz')
  assert back.meta == rec.meta
  for k, v in rec.arrays().items():
    np.testing.assert_array_equal(back.arrays()[k], v)


def test_parquet_round_trip(tmp_path):
  pytest.importorskip('pyarrow')
  rec = _rec()
  rc.write_recording(tmp_path / 'a.parquet', rec)
  back = rc.read_recording(tmp_path / 'a.parquet')
  for k, v in rec.arrays().items():
    np.testing.assert_array_equal(back.arrays()[k], v)


@pytest.mark.parametrize('mutate, where, rule', [
    (lambda r: r.sensors['imu'].pop('arrival_time_s'), 'sensor/imu/arrival_time_s', 'missing'),
    (lambda r: r.sensors['imu']['sample_time_s'].__setitem__(7, 0.0),
     'sensor/imu/sample_time_s[7]', 'strictly increasing'),
    (lambda r: r.sensors['imu']['angular_velocity'].__setitem__((3, 1), np.nan),
     'sensor/imu/angular_velocity', 'finite'),
    (lambda r: r.sensors['imu'].__setitem__('sequence', np.arange(49)),
     'sensor/imu/sequence', 'leading dimension must be the sample count 50, got shape (49,)'),
    (lambda r: r.commands['motor'].__setitem__('position', np.ones((3, 2))),
     'command/motor/position',
     'leading dimension must be the command count 4, got shape (3, 2)'),
])
def test_validation_errors_are_one_line(tmp_path, mutate, where, rule):
  rec = _rec()
  mutate(rec)
  path = tmp_path / 'bad.npz'
  arrays = rec.arrays()
  np.savez(path, meta=np.array('{}'), **arrays)
  with pytest.raises(FibrilError) as e:
    rc.read_recording(path)
  msg = str(e.value)
  assert '\n' not in msg and str(path) in msg and where in msg and rule in msg


def test_csv_import_with_mapping(tmp_path):
  path = tmp_path / 'log.csv'
  rows = ['t,t_rx,gx,gy,gz'] + [f'{i * 0.01},{i * 0.01 + 0.003},{i},{-i},1' for i in range(20)]
  path.write_text('\n'.join(rows) + '\n')
  mapping = {'component': 'imu', 'columns': {'sample_time_s': 't', 'arrival_time_s': 't_rx',
                                             'angular_velocity': ['gx', 'gy', 'gz']},
             'scale': {'angular_velocity': 0.5}}
  rec = rc.read_csv(path, mapping)
  np.testing.assert_allclose(rec.sensors['imu']['angular_velocity'][4], [2.0, -2.0, 0.5])
  mapping['columns']['angular_velocity'] = ['gx', 'gq', 'gz']
  with pytest.raises(FibrilError, match="column 'gq'.*missing"):
    rc.read_csv(path, mapping)
  path.write_text('\n'.join(rows[:3] + ['0.03,0.04,nan,1,1']) + '\n')
  mapping['columns']['angular_velocity'] = ['gx', 'gy', 'gz']
  with pytest.raises(FibrilError, match="column 'gx' row 4.*finite"):
    rc.read_csv(path, mapping)


def test_csv_gz_reads_as_the_csv(tmp_path):
  import gzip
  text = 't,gx\n' + ''.join(f'{i * 0.01},{i}\n' for i in range(10))
  (tmp_path / 'log.csv').write_text(text)
  (tmp_path / 'log.csv.gz').write_bytes(gzip.compress(text.encode()))
  mapping = {'component': 'imu', 'columns': {'sample_time_s': 't', 'angular_velocity': ['gx']}}
  plain, packed = (rc.read_csv(tmp_path / f, mapping) for f in ('log.csv', 'log.csv.gz'))
  for k, v in plain.sensors['imu'].items():
    np.testing.assert_array_equal(packed.sensors['imu'][k], v)
