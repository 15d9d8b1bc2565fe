"""Tutorial: fit an IMU profile from your own logs, first CSV, then a ROS 2 bag
(docs/tutorials/fit-profile.md).

Stand-in for your bench logs: three static logs of one IMU unit, written here with NumPy the
way a logger would (CSV in deg/s and g, a header row), from a known white noise density and
rate random walk, so you can see the fit find them. `fibril-mjx fit-profile` reads them through
a column mapping and writes an empirical profile, its evidence (method, values ± standard
errors, held-out agreement, Allan plots) and a JSON of the fit. The same samples are then
written as ROS 2 bags (`sensor_msgs/msg/Imu`, rosbags' own writer, MCAP storage) and fitted
again with `--topics`: the same numbers come out.

    .venv/bin/python examples/tutorial_fit_profile.py --out out/tutorials/fit_profile
    .venv/bin/python examples/tutorial_fit_profile.py --small      # the test suite's size
"""

from __future__ import annotations

import argparse
import math
import pathlib
import shutil

import numpy as np
import yaml

from fibril_mjx import cli

RATE_HZ = 200.0
G = 9.80665
# The unit's "true" values (what a real log hides from you).
GYRO_DENSITY = np.array([3e-4, 2e-4, 4e-4])      # rad/s/√Hz
GYRO_RANDOM_WALK = np.array([2e-4, 2e-4, 2e-4])  # rad/s/√s (bias random walk)
ACCEL_DENSITY = np.array([2e-3, 2e-3, 3e-3])     # m/s²/√Hz

CSV_MAP = {
    'component': 'imu',
    'columns': {'sample_time_s': 't', 'angular_velocity': ['gx', 'gy', 'gz'],
                'linear_acceleration': ['ax', 'ay', 'az']},
    'scale': {'angular_velocity': math.pi / 180.0,     # the logger writes deg/s
              'linear_acceleration': G},               # and g
    'meta': {'source': 'tutorial bench logs (synthetic)'},
}


def write_logs(out: pathlib.Path, n_logs: int, seconds: float, seed: int = 0):
  """Writes `n_logs` static CSV logs; returns their paths and the samples (SI units)."""
  rng = np.random.default_rng(seed)
  n = int(seconds * RATE_HZ)
  t = np.arange(n) / RATE_HZ
  paths, samples = [], []
  for i in range(n_logs):
    walk = np.cumsum(rng.normal(size=(n, 3)), axis=0) * GYRO_RANDOM_WALK / math.sqrt(RATE_HZ)
    w = rng.normal(size=(n, 3)) * GYRO_DENSITY * math.sqrt(RATE_HZ) + walk
    a = rng.normal(size=(n, 3)) * ACCEL_DENSITY * math.sqrt(RATE_HZ) + [0.0, 0.0, G]
    table = np.column_stack([t, np.degrees(w), a / G])
    p = out / f'static_{i}.csv'
    np.savetxt(p, table, delimiter=',', header='t,gx,gy,gz,ax,ay,az', comments='', fmt='%.9g')
    paths.append(p)
    samples.append((t, w, a))
  return paths, samples


def write_bags(out: pathlib.Path, samples) -> list[pathlib.Path]:
  """The same samples as ROS 2 bags on /imu/data (header stamps = sample times)."""
  from rosbags.rosbag2 import StoragePlugin, Writer
  from rosbags.typesys import Stores, get_typestore
  ts = get_typestore(Stores.ROS2_HUMBLE)
  T = ts.types
  msgtype = 'sensor_msgs/msg/Imu'
  epoch_ns = 1_717_000_000_000_000_000
  paths = []
  for i, (t, w, a) in enumerate(samples):
    path = out / f'static_{i}_bag'
    if path.exists():
      shutil.rmtree(path)
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
      conn = writer.add_connection('/imu/data', msgtype, typestore=ts)
      for k in range(len(t)):
        ns = epoch_ns + int(round(t[k] * 1e9))
        v3 = lambda v: T['geometry_msgs/msg/Vector3'](x=v[0], y=v[1], z=v[2])
        msg = T[msgtype](
            header=T['std_msgs/msg/Header'](
                stamp=T['builtin_interfaces/msg/Time'](sec=ns // 10**9, nanosec=ns % 10**9),
                frame_id='imu'),
            orientation=T['geometry_msgs/msg/Quaternion'](x=0, y=0, z=0, w=1),
            orientation_covariance=np.array([-1.0] + [0.0] * 8),   # no orientation
            angular_velocity=v3(w[k]), angular_velocity_covariance=np.zeros(9),
            linear_acceleration=v3(a[k]), linear_acceleration_covariance=np.zeros(9))
        writer.write(conn, ns + 1_000_000, ts.serialize_cdr(msg, msgtype))   # received 1 ms later
    paths.append(path)
  return paths


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', default='out/tutorials/fit_profile')
  ap.add_argument('--small', action='store_true', help='tiny sizes (the test suite runs this)')
  args = ap.parse_args(argv)
  seconds = 60.0 if args.small else 600.0
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)

  # 1. Your logs, and a mapping from their columns to the IMU sample's fields.
  csv_paths, samples = write_logs(out, 3, seconds)
  (out / 'csv_map.yaml').write_text(yaml.safe_dump(CSV_MAP, sort_keys=False))

  # 2. fit-profile from CSV (the same as the shell command in the tutorial page).
  rc = cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'imu',
                 '--static', *map(str, csv_paths), '--csv-map', str(out / 'csv_map.yaml'),
                 '--out', str(out / 'csv' / 'my_imu_empirical.yaml'), '--overwrite'])
  assert rc == 0
  fitted_csv = yaml.safe_load((out / 'csv' / 'my_imu_empirical.yaml').read_text())['fields']

  # 3. The same logs as ROS 2 bags: name the topic that holds the component.
  bag_paths = write_bags(out, samples)
  rc = cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'imu',
                 '--static', *map(str, bag_paths), '--topics', 'imu=/imu/data',
                 '--out', str(out / 'bag' / 'my_imu_empirical.yaml'), '--overwrite'])
  assert rc == 0
  fitted_bag = yaml.safe_load((out / 'bag' / 'my_imu_empirical.yaml').read_text())['fields']

  dens_csv = np.asarray(fitted_csv['angular_velocity_noise_density'])
  dens_bag = np.asarray(fitted_bag['angular_velocity_noise_density'])
  print('gyro noise density [rad/s/√Hz]  true', GYRO_DENSITY, ' CSV fit', dens_csv,
        ' bag fit', dens_bag)
  figure = out / 'csv' / 'fit_allan_angular_velocity.png'
  shutil.copy(figure, out / 'figure.png')
  print(f'wrote {out / "figure.png"} (the fit\'s Allan deviation plot)')
  return {'true': GYRO_DENSITY.tolist(), 'csv': dens_csv.tolist(), 'bag': dens_bag.tolist()}


if __name__ == '__main__':
  main()
