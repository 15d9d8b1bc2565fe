"""Tutorial: export a run to MCAP (Foxglove, ROS 2) and to MAVLink HIL packets
(docs/tutorials/export.md).

Runs `manifests/hil_quad.yaml` (a small multirotor with an ICM-42688-P IMU, an LIS3MDL
magnetometer, an MS5611 barometer, an MS4525DO pitot and a NEO-M8N GNSS), writes the run
directory, exports it twice — `fibril-mjx export-mcap` (ROS 2 messages in MCAP: Foxglove,
PlotJuggler, `ros2 bag play` open it) and `fibril-mjx export-mavlink` (HIL_SENSOR / HIL_GPS in
a `.tlog`) — and reads both files back with independent readers (mcap-ros2-support,
pymavlink) to plot what a consumer receives.

    .venv/bin/python examples/tutorial_export.py --out out/tutorials/export
    .venv/bin/python examples/tutorial_export.py --small      # the test suite's size
"""

from __future__ import annotations

import argparse
import collections
import pathlib

import numpy as np

from fibril_mjx import cli

MANIFEST = pathlib.Path(__file__).resolve().parents[1] / 'manifests' / 'hil_quad.yaml'


def read_mcap(path) -> dict:
  """`{topic: [(log time s, decoded ROS 2 message), ...]}` read by mcap's own decoder."""
  from mcap.reader import make_reader
  from mcap_ros2.decoder import DecoderFactory
  topics = collections.defaultdict(list)
  with open(path, 'rb') as f:
    reader = make_reader(f, decoder_factories=[DecoderFactory()])
    for _, channel, message, decoded in reader.iter_decoded_messages(log_time_order=True):
      topics[channel.topic].append((message.log_time * 1e-9, decoded))
  return dict(topics)


def read_tlog(path) -> list:
  """Every MAVLink message of a .tlog, decoded by pymavlink."""
  from pymavlink import mavutil
  conn = mavutil.mavlink_connection(str(path))
  out = []
  while (m := conn.recv_match()) is not None:
    out.append(m)
  return out


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', default='out/tutorials/export')
  ap.add_argument('--small', action='store_true', help='tiny sizes (the test suite runs this)')
  args = ap.parse_args(argv)
  seconds = 1.0 if args.small else 5.0
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  run_dir, mcap_path, tlog_path = out / 'run', out / 'hil_quad.mcap', out / 'hil_quad.tlog'

  # 1. A run directory (any `fibril-mjx run` output).
  assert cli.main(['run', str(MANIFEST), '--worlds', '2', '--duration', str(seconds),
                   '--out', str(run_dir), '--overwrite']) == 0
  # 2. ROS 2 messages in MCAP: one namespace per world, truth on .../truth/...
  assert cli.main(['export-mcap', str(run_dir), '--worlds', '0,1', '--out',
                   str(mcap_path)]) == 0
  # 3. MAVLink HIL: what a flight controller in HIL mode receives, one world per .tlog.
  assert cli.main(['export-mavlink', str(run_dir), '--world', '0', '--out',
                   str(tlog_path)]) == 0

  topics = read_mcap(mcap_path)
  counts = {k: len(v) for k, v in sorted(topics.items())}
  for k, n in counts.items():
    print(f'{n:6d}  {k}')
  packets = read_tlog(tlog_path)
  kinds = collections.Counter(m.get_type() for m in packets)
  print('MAVLink:', dict(kinds))

  imu = topics['/world_0000/imu/imu']
  t_imu = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for _, m in imu])
  gz = np.array([m.angular_velocity.z for _, m in imu])
  hil = [m for m in packets if m.get_type() == 'HIL_SENSOR']
  t_hil = np.array([m.time_usec * 1e-6 for m in hil])
  alt = np.array([m.pressure_alt for m in hil])
  zacc = np.array([m.zacc for m in hil])

  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
  ax[0].plot(t_imu, gz, lw=0.6)
  ax[0].set(xlabel='header stamp [s]', ylabel='rad/s',
            title='MCAP /world_0000/imu/imu\nangular_velocity.z (sensor_msgs/Imu)')
  ax[1].plot(t_hil, zacc, lw=0.6)
  ax[1].set(xlabel='time_usec [s]', ylabel='m/s² (FRD)', title='MAVLink HIL_SENSOR zacc')
  ax[2].plot(t_hil, alt, lw=0.8)
  ax[2].set(xlabel='time_usec [s]', ylabel='m', title='HIL_SENSOR pressure_alt')
  fig.tight_layout()
  fig.savefig(out / 'figure.png', dpi=80)
  print(f'wrote {mcap_path}, {tlog_path}, {out / "figure.png"}')
  return {'mcap_topics': counts, 'mavlink': dict(kinds)}


if __name__ == '__main__':
  main()
