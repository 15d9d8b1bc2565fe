"""Export a run directory (`fibril-mjx run ... --out DIR`) as ROS 2 messages in an MCAP file.

Message classes, definitions (the MCAP schemas, `ros2msg` encoding) and the CDR encoding come
from the `rosbags` typestore of ROS 2 Jazzy (`TYPESTORE`); nothing here writes a message
definition or encodes bytes. The file is an MCAP with the `ros2` profile, as `ros2 bag record
-s mcap` writes it: Foxglove, `ros2 bag play` and `rosbags` open it as it is.

One namespace per world (`/world_0003/...`, the global world index), one message per
delivered sample (`new_data`), truth on separate `.../truth/...` topics at every tick. Header
stamps are the sample's acquisition time (`sample_tick · dt`); the MCAP log time is its arrival
(`arrival_tick · dt`), the instant a consumer would receive it; times start at 0 (simulation
time). The MCAP message sequence is the sample's `sequence`.

Which messages a component writes is its type's `ros` part in `fibril_mjx.core.registry` (the
built-in ones are registered in `io/ros_messages.py`); a converter turns one delivered sample into `(topic suffix,
message)` pairs:

| component type | topic | message |
| --- | --- | --- |
| `fibril_sim/imu`, `fibril_sim/ahrs` | `<id>/imu` | `sensor_msgs/msg/Imu` |
| `fibril_sim/magnetometer` | `<id>/magnetic_field` | `sensor_msgs/msg/MagneticField` (T) |
| `fibril_sim/barometer` | `<id>/pressure`, `<id>/temperature` | `sensor_msgs/msg/FluidPressure` (Pa), `sensor_msgs/msg/Temperature` (°C) |
| `fibril_sim/airspeed` | `<id>/differential_pressure` | `sensor_msgs/msg/FluidPressure`: the pitot − static differential pressure (Pa) |
| `fibril_sim/gnss` | `<id>/fix`, `<id>/velocity` | `sensor_msgs/msg/NavSatFix`, `geometry_msgs/msg/TwistWithCovarianceStamped` (ENU) |
| `fibril_sim/rangefinder` | `<id>/range` | `sensor_msgs/msg/Range` |
| `fibril_sim/lidar` | `<id>/scan` (`<id>/scan_<ring>`) | `sensor_msgs/msg/LaserScan` per elevation ring |
| `fibril_sim/camera` | `<id>/camera_info`, `<id>/landmarks` | `sensor_msgs/msg/CameraInfo`, `geometry_msgs/msg/PolygonStamped` (u, v px; depth m) |
| `fibril_sim/optical_flow` | `<id>/flow`, `<id>/body_rate`, `<id>/quality` | `geometry_msgs/msg/Vector3Stamped` ×2, `std_msgs/msg/UInt8` (no standard flow message) |
| `fibril_sim/motor` (and any type with `position`, `velocity`, `applied_effort`) | `<id>/joint_states` | `sensor_msgs/msg/JointState` (name = component id, effort = applied effort) |
| `fibril_mjx/attitude_ekf` (and any type with `orientation` but no rates) | `<id>/orientation`, `<id>/gyro_bias` | `geometry_msgs/msg/QuaternionStamped`, `geometry_msgs/msg/Vector3Stamped` |

A type without a registered converter is exported by its fields when they are those of a row
above (rates → Imu, orientation → QuaternionStamped, position/velocity/applied effort →
JointState, gyro bias → Vector3Stamped); a component with neither is named in a warning
(`UnmappedComponentWarning`, and `export-mcap` prints it), never skipped silently. A new
sensor type gives its mapping as the `ros` part of its registration (`fibril_mjx.register(type,
ros=...)` adds that part alone):

```python
def thermometer_ros(s, header, ctx):     # s: {field: value of this sample}
  return [('temperature', mcap_export.TYPES['sensor_msgs/msg/Temperature'](
      header=header, temperature=float(s['temperature_k']) - 273.15, variance=0.0))]

fibril_mjx.register('acme/thermometer', build=build, config_model=Config, ros=thermometer_ros)
```

`ctx` (`Context`) carries the component id, its resolved config fields (`ctx.field(name)`, from
the run's meta.json) and the world namespace.

Conventions: covariances are diagonal, from the sample variances (Imu `orientation_variance`
is roll, pitch, yaw); an Imu without orientation has `orientation_covariance[0] = -1` as ROS 2
specifies; a sample without variances leaves its covariance all zero ("unknown"); truth
messages carry zero covariances. Quaternions go from `[w, x, y, z]` to ROS `(x, y, z, w)`.
MagneticField is in tesla (the sample's µT × 1e-6, variance µT² × 1e-12). Airspeed: ROS 2 has
no differential-pressure or airspeed message, so the pitot's sample (a pressure difference,
Pa) goes out as `FluidPressure` on its own `differential_pressure` topic, not converted to a
speed. GNSS: `NavSatFix.status` is `STATUS_FIX` with a fix (`fix_type ≥ 2`) and
`STATUS_NO_FIX` otherwise (service GPS), latitude / longitude in degrees from the 1e-7
integers, altitude the ellipsoidal height, `position_covariance` diag(σh², σh², σv²) in ENU
from the delivered accuracies (`COVARIANCE_TYPE_DIAGONAL_KNOWN`); the velocity is ENU with
linear covariance diag(σvh², σvh², σvv²) (σvh the delivered speed accuracy, σvv the configured
vertical velocity noise) and the angular diagonal −1 (not measured). Range follows REP 117 as
the ROS 2 message documents it: `range` +inf for no return / beyond `max_range`, −inf below
`min_range` (the sample's own ±inf), `radiation_type` INFRARED, `min_range` / `max_range` the
configured limits, `field_of_view` 0 (a single beam), `variance` the sample variance.
"""

from __future__ import annotations

import json
import pathlib
import warnings
from typing import Iterator

import numpy as np

from fibril_mjx.config.version import __version__
from fibril_mjx.core import registry
from fibril_mjx.errors import FibrilError, unreadable
from fibril_mjx.io import outdir
from fibril_mjx.io.readers import read_npz
from fibril_mjx.mechanisms import fifo
from fibril_mjx.io.ros_messages import (  # noqa: F401  (the converter API, re-exported)
    TYPES, TYPESTORE, Context, Converter, by_fields, diag_covariance, field_mappable, header,
    imu_messages, joint_messages, orientation_messages, quaternion, vector3)

class UnmappedComponentWarning(UserWarning):
  """A component whose samples map to no ROS 2 message (named, not skipped silently)."""


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


# ----------------------------------------------------------------------- the run


def _group(arrays, prefix: str) -> dict[str, dict[str, np.ndarray]]:
  """`{'sensor/imu/x': a}` → `{'imu': {'x': a}}` for one prefix."""
  out: dict[str, dict[str, np.ndarray]] = {}
  for key in arrays:
    parts = key.split('/')
    if len(parts) == 3 and parts[0] == prefix:
      out.setdefault(parts[1], {})[parts[2]] = arrays[key]
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
  again = f'run it again into another --out ({run_dir} was damaged after the run)'
  try:
    meta = json.loads(meta_path.read_text(encoding='utf-8'))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise unreadable(meta_path, 'meta.json', e, again) from None
  return read_npz(trace, again), meta


def export_bytes(run_dir, worlds: list[int] | None) -> float:
  """About the bytes an export of `worlds` (None: every traced one) writes: the share of
  `trace.npz` of those worlds, twice (a message carries its header and field names), and
  64 KiB for the file's own records."""
  run_dir = pathlib.Path(run_dir)
  with np.load(run_dir / 'trace.npz') as z:
    traced = len(z['world_index'])
  share = 1.0 if worlds is None else min(1.0, len(worlds) / max(traced, 1))
  return 2 * share * (run_dir / 'trace.npz').stat().st_size + 2 ** 16


_BOOK = ('new_data', 'valid', 'sequence', 'sample_tick', 'arrival_tick')


def _converter(ctype: str | None, sample_fields: set) -> Converter | None:
  conv = registry.get(ctype).ros if ctype else None
  if conv is not None:
    return conv
  return by_fields if field_mappable(sample_fields) else None


def _config(meta, cid) -> dict:
  c = (meta.get('components') or {}).get(cid) or {}
  return {k: (v.get('value') if isinstance(v, dict) else v)
          for k, v in (c.get('fields') or {}).items()}


def messages(run_dir, worlds: list[int] | None = None, *, unmapped: list | None = None
             ) -> Iterator[tuple[str, str, int, int, int, object]]:
  """The messages of an export, in time order.

  Args:
    unmapped: if given, the ids of components with no message mapping are appended to it.

  Yields:
    `(topic, ROS 2 type name, log_time_ns, publish_time_ns, sequence, message object)`.
  """
  arrays, meta = read_run(run_dir)
  dt_ns = int(round(float(meta['dt_s']) * 1e9))
  traced = [int(w) for w in arrays['world_index']]
  if worlds is None:
    worlds = traced
  for w in worlds:
    if w not in traced:
      raise FibrilError(f'{run_dir}: world {w} is not in trace.npz; traced worlds: '
                        f'{", ".join(map(str, traced))}')
  sensor, truth = _group(arrays, 'sensor'), _group(arrays, 'truth')
  # FIFO delivery: each sample at its acquisition tick, logged at its batch's arrival
  sensor = {cid: fifo.by_acquisition(f) if fifo.is_batch(f) else f for cid, f in sensor.items()}
  types = {cid: (c or {}).get('type') for cid, c in (meta.get('components') or {}).items()}
  n_ticks = arrays['time_s'].shape[0]
  convs = {}
  for cid, fields in sensor.items():
    convs[cid] = _converter(types.get(cid), set(fields) - set(_BOOK))
    if convs[cid] is None:
      if unmapped is not None:
        unmapped.append(cid)
      warnings.warn(f'{run_dir}: component {cid!r} ({types.get(cid) or "unknown type"}, '
                    f'fields {", ".join(sorted(set(fields) - set(_BOOK)))}) has no ROS 2 '
                    'message mapping: not exported', UnmappedComponentWarning, stacklevel=2)
  out = []
  for w in worlds:
    row, ns = traced.index(w), namespace(w)
    for cid, fields in sensor.items():
      conv = convs[cid]
      if conv is None:
        continue
      ctx = Context(cid, _config(meta, cid), ns)
      f = {k: v[row] for k, v in fields.items()}
      names = [k for k in f if k not in _BOOK]
      for t in np.flatnonzero(f['new_data'] & f['valid']):
        stamp_ns = int(f['sample_tick'][t]) * dt_ns
        log_ns = int(f['arrival_tick'][t]) * dt_ns
        s = {k: f[k][t] for k in names}
        frame = f'{ns[1:]}/world' if 'orientation' in s and 'angular_velocity' not in s \
            else f'{ns[1:]}/{cid}'
        for suffix, msg in conv(s, header(stamp_ns, frame), ctx):
          out.append((log_ns, f'{ns}/{cid}/{suffix}', msg.__msgtype__, stamp_ns,
                      int(f['sequence'][t]), msg))
    for cid, fields in truth.items():
      f = {k: v[row] for k, v in fields.items()}
      if not field_mappable(set(f) - {'gyro_bias'}):
        continue
      ctx = Context(cid, {}, ns)
      frame = f'{ns[1:]}/world' if 'orientation' in f and 'angular_velocity' not in f \
          else f'{ns[1:]}/{cid}'
      for t in range(n_ticks):
        t_ns = t * dt_ns
        s = {k: f[k][t] for k in f if k != 'gyro_bias'}
        hdr = header(t_ns, frame)
        msgs = (imu_messages(s, hdr, ctx, truth=True) if 'angular_velocity' in s
                and 'linear_acceleration' in s else
                orientation_messages(s, hdr, ctx) if 'orientation' in s else [])
        if {'position', 'velocity', 'applied_effort'} <= set(s):
          msgs += joint_messages(s, hdr, ctx)
        for suffix, msg in msgs:
          out.append((t_ns, f'{ns}/{cid}/truth/{suffix}', msg.__msgtype__, t_ns, t, msg))
  out.sort(key=lambda m: (m[0], m[1]))
  for log_ns, topic, datatype, publish_ns, seq, msg in out:
    yield topic, datatype, log_ns, log_ns, seq, msg


def schema_text(datatype: str) -> str:
  """The `ros2msg` definition of a type (with its dependencies), from the typestore."""
  return TYPESTORE.generate_msgdef(datatype, ros_version=2)[0]


def export_mcap(run_dir, out, *, worlds: list[int] | None = None, overwrite: bool = False
                ) -> dict[str, int]:
  """Writes the run's messages to `out` (an `.mcap` file, ROS 2 profile, CDR).

  Args:
    run_dir: a `fibril-mjx run` output directory (trace.npz, meta.json).
    out: the file to write (written to a temporary sibling, renamed when complete).
    worlds: global world indices to export (default: every traced world).
    overwrite: replace an existing `out`.

  Returns:
    `{topic: message count}`. Components without a mapping raise an
    `UnmappedComponentWarning` naming them.
  """
  from mcap.writer import Writer
  out = outdir.claim_file(out, overwrite=overwrite)
  _, meta = read_run(run_dir)
  msgs = messages(run_dir, worlds)
  outdir.check_space(out, export_bytes(run_dir, worlds), 'the MCAP file')
  counts: dict[str, int] = {}
  with outdir.write_errors(out), outdir.staged_file(out) as tmp:
    with open(tmp, 'wb') as fh:
      writer = Writer(fh)
      writer.start(profile='ros2', library=f'fibril_mjx {__version__} (rosbags)')
      schemas: dict[str, int] = {}
      channels: dict[str, int] = {}
      writer.add_metadata('fibril_run', {
          k: json.dumps(meta.get(k)) for k in ('fibril_mjx', 'manifest', 'manifest_sha256',
                                               'seed', 'worlds', 'dt_s', 'ticks')})
      writer.add_metadata('fibril_components', {
          cid: c.get('type', '') for cid, c in (meta.get('components') or {}).items()})
      for topic, datatype, log_ns, pub_ns, seq, msg in msgs:
        if topic not in channels:
          if datatype not in schemas:
            schemas[datatype] = writer.register_schema(
                datatype, 'ros2msg', schema_text(datatype).encode())
          channels[topic] = writer.register_channel(topic, 'cdr', schemas[datatype])
        data = bytes(TYPESTORE.serialize_cdr(msg, datatype))
        writer.add_message(channels[topic], log_time=log_ns, data=data, publish_time=pub_ns,
                           sequence=seq & 0xFFFFFFFF)
        counts[topic] = counts.get(topic, 0) + 1
      writer.finish()
  return counts
