"""Export a run directory (`fibril-mjx run ... --out DIR`) as ROS 2 messages in an MCAP file.

Messages are CDR-encoded by `mcap-ros2-support` from the standard ROS 2 message definitions
below; nothing here encodes bytes. One namespace per world (`/world_0003/...`, the global world
index), one message per delivered sample (`new_data`), truth on separate `.../truth/...` topics
at every tick. Header stamps are the sample's acquisition time (`sample_tick · dt`); the MCAP
log time is its arrival (`arrival_tick · dt`), the instant a consumer would receive it; times
start at 0 (simulation time).

A component's messages follow from the fields of its samples (so new component types with the
same fields export without changes):

| sample fields | topic | message |
| --- | --- | --- |
| `angular_velocity`, `linear_acceleration` (+ `orientation`, `*_variance`) | `<id>/imu` | `sensor_msgs/msg/Imu` |
| `position`, `velocity`, `applied_effort` | `<id>/joint_states` | `sensor_msgs/msg/JointState` (name = component id, effort = applied effort) |
| `orientation` (no rates: an estimator) | `<id>/orientation` | `geometry_msgs/msg/QuaternionStamped` |
| `gyro_bias` | `<id>/gyro_bias` | `geometry_msgs/msg/Vector3Stamped` |

Imu covariances are diagonal, from the sample variances (`orientation_variance` is roll, pitch,
yaw); a sample without orientation has `orientation_covariance[0] = -1` as ROS 2 specifies;
a sample without variances leaves its covariance all zero ("unknown"). Truth Imu messages carry
zero covariances. Quaternions are converted from `[w, x, y, z]` to ROS `(x, y, z, w)`.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Iterator

import numpy as np

from fibril_mjx.errors import FibrilError

# Standard ROS 2 (Humble and later) message definitions in the concatenated form rosbag2
# writes to MCAP schemas; mcap-ros2-support builds its CDR encoder from them.
_SEP = '\n' + '=' * 80 + '\n'
_HEADER = ('MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id' + _SEP
           + 'MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec')
_VECTOR3 = 'MSG: geometry_msgs/Vector3\nfloat64 x\nfloat64 y\nfloat64 z'
_QUATERNION = 'MSG: geometry_msgs/Quaternion\nfloat64 x 0\nfloat64 y 0\nfloat64 z 0\nfloat64 w 1'
MSGDEFS = {
    'sensor_msgs/msg/Imu': (
        'std_msgs/Header header\ngeometry_msgs/Quaternion orientation\n'
        'float64[9] orientation_covariance\ngeometry_msgs/Vector3 angular_velocity\n'
        'float64[9] angular_velocity_covariance\ngeometry_msgs/Vector3 linear_acceleration\n'
        'float64[9] linear_acceleration_covariance' + _SEP + _HEADER + _SEP + _QUATERNION
        + _SEP + _VECTOR3),
    'sensor_msgs/msg/JointState': (
        'std_msgs/Header header\nstring[] name\nfloat64[] position\nfloat64[] velocity\n'
        'float64[] effort' + _SEP + _HEADER),
    'geometry_msgs/msg/QuaternionStamped': (
        'std_msgs/Header header\ngeometry_msgs/Quaternion quaternion' + _SEP + _HEADER + _SEP
        + _QUATERNION),
    'geometry_msgs/msg/Vector3Stamped': (
        'std_msgs/Header header\ngeometry_msgs/Vector3 vector' + _SEP + _HEADER + _SEP
        + _VECTOR3),
}

IMU, JOINT, ORIENTATION, BIAS = ('imu', 'joint_states', 'orientation', 'gyro_bias')
DATATYPE = {IMU: 'sensor_msgs/msg/Imu', JOINT: 'sensor_msgs/msg/JointState',
            ORIENTATION: 'geometry_msgs/msg/QuaternionStamped',
            BIAS: 'geometry_msgs/msg/Vector3Stamped'}


def parse_worlds(text: str | None) -> list[int] | None:
  """`'0,3'` → `[0, 3]`; None → None (every traced world)."""
  if text is None or text == '':
    return None
  try:
    out = [int(t) for t in text.split(',') if t.strip() != '']
  except ValueError:
    raise FibrilError(f'--worlds {text!r}: expected comma-separated world indices, e.g. 0,3'
                      ) from None
  if not out or min(out) < 0:
    raise FibrilError(f'--worlds {text!r}: expected non-negative world indices, e.g. 0,3')
  return out


def topic_kinds(fields: set[str]) -> list[str]:
  """The message kinds (`IMU`, `JOINT`, `ORIENTATION`, `BIAS`) a component's fields map to."""
  kinds = []
  if {'angular_velocity', 'linear_acceleration'} <= fields:
    kinds.append(IMU)
  elif 'orientation' in fields:
    kinds.append(ORIENTATION)
  if {'position', 'velocity', 'applied_effort'} <= fields:
    kinds.append(JOINT)
  if 'gyro_bias' in fields:
    kinds.append(BIAS)
  return kinds


def _stamp(ns: int) -> dict:
  return {'sec': int(ns // 1_000_000_000), 'nanosec': int(ns % 1_000_000_000)}


def _xyz(v) -> dict:
  return {'x': float(v[0]), 'y': float(v[1]), 'z': float(v[2])}


def _quat(q_wxyz) -> dict:
  return {'x': float(q_wxyz[1]), 'y': float(q_wxyz[2]), 'z': float(q_wxyz[3]),
          'w': float(q_wxyz[0])}


def _diag(var) -> list[float]:
  out = [0.0] * 9
  if var is not None:
    out[0], out[4], out[8] = (float(v) for v in var)
  return out


def _message(kind: str, f: dict, t: int, header: dict, name: str) -> dict:
  """One message of `kind` from the fields `f` (arrays `(T, ...)`) at tick index `t`."""
  get = lambda k: None if k not in f else f[k][t]
  if kind == IMU:
    if 'orientation' in f:
      orientation, o_cov = _quat(f['orientation'][t]), _diag(get('orientation_variance'))
    else:
      orientation, o_cov = {'x': 0.0, 'y': 0.0, 'z': 0.0, 'w': 0.0}, [-1.0] + [0.0] * 8
    return {'header': header, 'orientation': orientation, 'orientation_covariance': o_cov,
            'angular_velocity': _xyz(f['angular_velocity'][t]),
            'angular_velocity_covariance': _diag(get('angular_velocity_variance')),
            'linear_acceleration': _xyz(f['linear_acceleration'][t]),
            'linear_acceleration_covariance': _diag(get('linear_acceleration_variance'))}
  if kind == JOINT:
    return {'header': header, 'name': [name], 'position': [float(f['position'][t])],
            'velocity': [float(f['velocity'][t])], 'effort': [float(f['applied_effort'][t])]}
  if kind == ORIENTATION:
    return {'header': header, 'quaternion': _quat(f['orientation'][t])}
  if kind == BIAS:
    return {'header': header, 'vector': _xyz(f['gyro_bias'][t])}
  raise ValueError(kind)


def _group(z, prefix: str) -> dict[str, dict[str, np.ndarray]]:
  """`{'sensor/imu/x': a}` → `{'imu': {'x': a}}` for one prefix."""
  out: dict[str, dict[str, np.ndarray]] = {}
  for key in z.files:
    parts = key.split('/')
    if len(parts) == 3 and parts[0] == prefix:
      out.setdefault(parts[1], {})[parts[2]] = z[key]
  return out


def namespace(world: int) -> str:
  return f'/world_{world:04d}'


def read_run(run_dir) -> tuple[dict, dict]:
  """`(trace arrays, meta)` of a run directory; one-line errors for what is missing."""
  run_dir = pathlib.Path(run_dir)
  if not run_dir.is_dir():
    raise FibrilError(f'{run_dir}: run directory not found')
  trace, meta_path = run_dir / 'trace.npz', run_dir / 'meta.json'
  if not meta_path.is_file():
    raise FibrilError(f'{run_dir}: no meta.json (not a fibril-mjx run directory)')
  if not trace.is_file():
    raise FibrilError(f'{run_dir}: no trace.npz (the run kept no traces: --trace-worlds 0)')
  meta = json.loads(meta_path.read_text())
  with np.load(trace) as z:
    arrays = {k: z[k] for k in z.files}
  return arrays, meta


def messages(run_dir, worlds: list[int] | None = None
             ) -> Iterator[tuple[str, str, int, int, int, dict]]:
  """The messages of an export, in time order.

  Yields:
    `(topic, datatype, log_time_ns, publish_time_ns, sequence, message dict)`.
  """
  arrays, meta = read_run(run_dir)

  class _Z:  # the grouping helper reads `.files` and items
    files = list(arrays)
    def __getitem__(self, k):
      return arrays[k]
  z = _Z()
  dt_ns = int(round(float(meta['dt_s']) * 1e9))
  traced = [int(w) for w in arrays['world_index']]
  if worlds is None:
    worlds = traced
  for w in worlds:
    if w not in traced:
      raise FibrilError(f'{run_dir}: world {w} is not in trace.npz; traced worlds: '
                        f'{", ".join(map(str, traced))}')
  sensor, truth = _group(z, 'sensor'), _group(z, 'truth')
  n_ticks = arrays['time_s'].shape[0]
  out = []
  for w in worlds:
    row, ns = traced.index(w), namespace(w)
    for cid, fields in sensor.items():
      f = {k: v[row] for k, v in fields.items()}
      kinds = topic_kinds(set(f))
      if not kinds:
        continue
      for t in np.flatnonzero(f['new_data'] & f['valid']):
        stamp_ns = int(f['sample_tick'][t]) * dt_ns
        log_ns = int(f['arrival_tick'][t]) * dt_ns
        frame = f'{ns[1:]}/world' if ORIENTATION in kinds else f'{ns[1:]}/{cid}'
        header = {'stamp': _stamp(stamp_ns), 'frame_id': frame}
        for kind in kinds:
          out.append((log_ns, f'{ns}/{cid}/{kind}', DATATYPE[kind], stamp_ns,
                      int(f['sequence'][t]), _message(kind, f, t, header, cid)))
    for cid, fields in truth.items():
      f = {k: v[row] for k, v in fields.items()}
      kinds = [k for k in topic_kinds(set(f)) if k != BIAS]
      for t in range(n_ticks):
        t_ns = t * dt_ns
        frame = f'{ns[1:]}/world' if ORIENTATION in kinds else f'{ns[1:]}/{cid}'
        header = {'stamp': _stamp(t_ns), 'frame_id': frame}
        for kind in kinds:
          msg = _message(kind, f, t, header, cid)
          if kind == IMU:  # exact values: no covariance
            msg['angular_velocity_covariance'] = [0.0] * 9
            msg['linear_acceleration_covariance'] = [0.0] * 9
            if 'orientation' in f:
              msg['orientation_covariance'] = [0.0] * 9
          out.append((t_ns, f'{ns}/{cid}/truth/{kind}', DATATYPE[kind], t_ns, t, msg))
  out.sort(key=lambda m: (m[0], m[1]))
  for log_ns, topic, datatype, publish_ns, seq, msg in out:
    yield topic, datatype, log_ns, log_ns, seq, msg


def export_mcap(run_dir, out, *, worlds: list[int] | None = None, overwrite: bool = False
                ) -> dict[str, int]:
  """Writes the run's messages to `out` (an `.mcap` file) with `mcap-ros2-support`.

  Args:
    run_dir: a `fibril-mjx run` output directory (trace.npz, meta.json).
    out: the file to write (written to a temporary sibling, renamed when complete).
    worlds: global world indices to export (default: every traced world).
    overwrite: replace an existing `out`.

  Returns:
    `{topic: message count}`.
  """
  from mcap_ros2.writer import Writer
  out = pathlib.Path(out)
  if out.exists() and not overwrite:
    raise FibrilError(f'{out}: already exists (use --overwrite to replace it)')
  _, meta = read_run(run_dir)
  msgs = messages(run_dir, worlds)
  tmp = out.parent / f'.{out.name}.partial-{os.getpid()}'
  counts: dict[str, int] = {}
  try:
    with open(tmp, 'wb') as fh:
      writer = Writer(fh)
      schemas = {}
      writer.add_metadata('fibril_run', {
          k: json.dumps(meta.get(k)) for k in ('fibril_mjx', 'manifest', 'manifest_sha256',
                                               'seed', 'worlds', 'dt_s', 'ticks')})
      writer.add_metadata('fibril_components', {
          cid: c.get('type', '') for cid, c in (meta.get('components') or {}).items()})
      for topic, datatype, log_ns, pub_ns, seq, msg in msgs:
        if datatype not in schemas:
          schemas[datatype] = writer.register_msgdef(datatype, MSGDEFS[datatype])
        writer.write_message(topic, schemas[datatype], msg, log_time=log_ns,
                             publish_time=pub_ns, sequence=seq & 0xFFFFFFFF)
        counts[topic] = counts.get(topic, 0) + 1
      writer.finish()
    os.replace(tmp, out)
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise
  return counts
