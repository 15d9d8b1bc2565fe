"""Converts the identification project's processed XL330 pendulum logs (JSON, one per run) into
fibril recordings (`.npz`, `fibril_mjx/io/recording.py`): how the files of this folder were made.

    python tests/data/servo_xl330/make_recordings.py DIR_WITH_PROCESSED_JSON

Per log: `command/servo/{time_s, issued, enable, position, kp, kd}` from the entries'
`timestamp`, `torque_enable`, `goal_position` and the log's `kp` (kd = 0: the logs run a P law);
`sensor/servo/{position, sample_time_s, arrival_time_s}` from `position` (the servo's encoder,
rad) stamped at `timestamp`; `initial/qpos`, `initial/qvel` from the first entry; the rest of
the log's header in `meta`. Fields dropped: `speed` (except the first), `load`, `input_volts`,
`temp`.
"""

import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).parent


def convert(src: pathlib.Path, dst: pathlib.Path) -> None:
  log = json.loads(src.read_text())
  e = log['entries']
  t = np.array([x['timestamp'] for x in e], np.float64)
  pos = np.array([x['position'] for x in e], np.float64)
  n = len(e)
  meta = {k: v for k, v in log.items() if k != 'entries'}
  meta.update(source=f'Rhoban/bam processed log {src.name}', units='rad, s',
              manifest='manifests/tuning/servo_xl330.yaml')
  arrays = {
      'command/servo/time_s': t,
      'command/servo/issued': np.ones(n, bool),
      'command/servo/enable': np.array([bool(x['torque_enable']) for x in e]),
      'command/servo/position': np.array([x['goal_position'] for x in e], np.float64),
      'command/servo/kp': np.full(n, float(log['kp'])),
      'command/servo/kd': np.zeros(n),
      'sensor/servo/position': pos,
      'sensor/servo/sample_time_s': t,
      'sensor/servo/arrival_time_s': t,
      'initial/qpos': pos[:1],
      'initial/qvel': np.array([e[0].get('speed', 0.0)], np.float64),
  }
  with open(dst, 'wb') as fh:
    np.savez_compressed(fh, meta=np.array(json.dumps(meta, sort_keys=True)), **arrays)


if __name__ == '__main__':
  for f in sorted(pathlib.Path(sys.argv[1]).glob('*.json')):
    log = json.loads(f.read_text())
    name = f'kp{int(log["kp"])}_{log["trajectory"]}.npz'
    convert(f, HERE / name)
    print('wrote', name)
