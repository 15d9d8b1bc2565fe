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
built-in ones are registered in `io/ros_messages.py`): a converter turns one delivered sample
into `(topic suffix, message)` pairs. A type without one is exported by its fields when they
are those of a built-in row, else named in a warning (`UnmappedComponentWarning`), never
skipped silently. The topics per type, the message conventions (covariances, units, REP 117)
and a new type's converter: docs/internals/interfaces.md, "MCAP export".
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
