"""Recordings: logs of real or simulated devices in one file, for fitting and tuning.

A recording is one `.npz` or `.parquet` file of named arrays (`sensor/<id>/<field>` with
`sample_time_s`, `arrival_time_s` and optional `sequence`; optional `command/`, `truth/`,
`initial/` arrays and a JSON `meta`; every key, shape and rule: docs/guides/validate-fit.md,
"Recording format"), or a ROS bag with a topic mapping (`fibril_mjx.io.bags`). Times are
seconds on one clock per recording; field names and units are those of the component's sample
type. `read_recording` reports the first problem as one line `file: key = value: rule`;
`read_csv` imports a CSV log with a column mapping; `recording_from_trace` turns one world of a
simulated rollout into a recording (samples where `new_data`, truth under `truth/`).
"""
from __future__ import annotations

import gzip
import json
import pathlib
from typing import Any

import numpy as np

from fibril_mjx.errors import FibrilError, did_you_mean, unreadable
from fibril_mjx.io import bags
from fibril_mjx.io.readers import parquet, read_npz, read_parquet
from fibril_mjx.mechanisms import fifo
from fibril_mjx.io.recording_data import (ARRIVAL_TIME, COMMAND_TIME, INFINITY_ALLOWED,  # noqa: F401
                                          PREFIXES, SAMPLE_TIME, Recording, recording_error,
                                          validate)

def _from_flat(arrays: dict, meta: dict, file) -> Recording:
  rec = Recording({}, meta=meta, path=str(file))
  groups = {'sensor': rec.sensors, 'command': rec.commands, 'truth': rec.truth}
  for key, a in arrays.items():
    parts = key.split('/')
    if parts[0] == 'initial' and len(parts) == 2:
      rec.initial[parts[1]] = a
    elif parts[0] in groups and len(parts) == 3 and all(parts):
      groups[parts[0]].setdefault(parts[1], {})[parts[2]] = a
    else:
      raise recording_error(file, key, 'unknown key: expected sensor/<id>/<field>, '
                            'command/<id>/<field>, truth/<id>/<field>, initial/qpos|qvel or meta')
  return rec


# ------------------------------------------------------------------------ files


def write_recording(path, rec: Recording) -> pathlib.Path:
  """Writes `rec` to `path` (`.npz` or `.parquet`) after validating it.

  Parquet layout: one row per array with columns `key` (string), `dtype` (string), `shape`
  (list<int64>) and `data` (binary, C-order bytes); `meta` is the JSON schema metadata
  entry `fibril_meta`.

  Returns:
    the path written.
  """
  path = pathlib.Path(path)
  rec.path = rec.path or str(path)
  validate(rec)
  arrays = rec.arrays()
  meta = json.dumps(rec.meta, sort_keys=True, default=json_default)
  path.parent.mkdir(parents=True, exist_ok=True)
  if path.suffix == '.npz':
    with open(path, 'wb') as fh:
      np.savez_compressed(fh, meta=np.array(meta), **arrays)
  elif path.suffix == '.parquet':
    pa, pq = parquet()
    keys = list(arrays)
    table = pa.table({
        'key': pa.array(keys, pa.string()),
        'dtype': pa.array([arrays[k].dtype.str for k in keys], pa.string()),
        'shape': pa.array([list(arrays[k].shape) for k in keys], pa.list_(pa.int64())),
        'data': pa.array([np.ascontiguousarray(arrays[k]).tobytes() for k in keys],
                         pa.binary()),
    }).replace_schema_metadata({'fibril_meta': meta})
    pq.write_table(table, path)
  else:
    raise recording_error(path, '', 'recording files end in .npz or .parquet', path.suffix)
  return path


def json_default(o):
  """`json.dumps(default=...)` for NumPy values: scalars as Python numbers, arrays as lists,
  anything else as its `str`."""
  if isinstance(o, np.generic):
    return o.item()
  if isinstance(o, np.ndarray):
    return o.tolist()
  return str(o)


def read_recording(path, *, topics=None, types: dict | None = None) -> Recording:
  """Reads and validates a recording; one-line errors on bad input.

  Args:
    path: a `.npz` or `.parquet` recording, or a ROS bag (a rosbag2 directory, a `.mcap` /
      `.db3` file or a ROS 1 `.bag`; `fibril_mjx.io.bags`).
    topics: for a bag, the topic mapping (`'imu=/imu/data,...'` or `{id: topic}`); required
      for bags, ignored otherwise.
    types: for a bag, optional `{component id: component type}` (`fibril_mjx.io.bags.read_bag`).
  """
  path = pathlib.Path(path)
  if bags.is_bag(path):
    if topics is None:
      raise FibrilError(f'{path}: a ROS bag needs a topic mapping (--topics ID=TOPIC[,ID=TOPIC], '
                        'or topics: {ID: TOPIC} in a tune file)')
    return bags.read_bag(path, topics, types=types)
  if not path.is_file():
    raise FibrilError(f'{path}: recording not found')
  if path.suffix == '.npz':
    arrays = read_npz(path)
    meta_raw = arrays.pop('meta', None)
    meta_raw = None if meta_raw is None else str(meta_raw)
  elif path.suffix == '.parquet':
    table = read_parquet(path)
    for col in ('key', 'dtype', 'shape', 'data'):
      if col not in table.column_names:
        raise recording_error(path, col, 'missing column of the recording layout')
    arrays = {}
    for k, dt, shape, data in zip(*(table.column(c).to_pylist()
                                    for c in ('key', 'dtype', 'shape', 'data'))):
      arrays[k] = np.frombuffer(data, dtype=np.dtype(dt)).reshape(shape).copy()
    md = table.schema.metadata or {}
    meta_raw = md.get(b'fibril_meta')
    meta_raw = None if meta_raw is None else meta_raw.decode()
  else:
    raise recording_error(path, '', 'recording files end in .npz or .parquet', path.suffix)
  if meta_raw is None:
    raise recording_error(path, 'meta', 'missing (a JSON object with manifest, source, units)')
  try:
    meta = json.loads(meta_raw)
  except json.JSONDecodeError as e:
    raise recording_error(path, 'meta', f'not valid JSON ({e.msg})') from None
  return validate(_from_flat(arrays, meta, path))


# ------------------------------------------------------------------------ from a trace


def recording_from_trace(trace: dict, world: int, dt: float | None = None, *, sim=None,
                         meta: dict | None = None) -> Recording:
  """One world of a rollout trace as a recording.

  Every sensing component's delivered samples (ticks where `new_data`; with FIFO delivery
  every sample of every batch, `fifo.rows`) become `sensor/<id>/<field>` with
  `sample_time_s = sample_tick·dt`, `arrival_time_s = arrival_tick·dt` (the batch's) and
  `sequence`; `trace['truth']` (if recorded, `observe_truth=True`)
  becomes `truth/<id>/<field>` per tick with `truth/<id>/time_s`, kept apart from samples.

  Args:
    trace: `sim.rollout(...)[1]`, leaves `(nworld, T, ...)` (NumPy or JAX).
    world: index into the world axis.
    dt: physics timestep in seconds (or pass `sim`).
    sim: the `Simulation` (for `dt` and the manifest path in `meta`).
    meta: extra metadata merged into `{'source': 'fibril_mjx simulation', ...}`.

  Returns:
    a validated `Recording`.
  """
  if dt is None:
    if sim is None:
      raise ValueError('recording_from_trace needs dt or sim')
    dt = sim.dt
  info = {'source': 'fibril_mjx simulation', 'dt_s': float(dt), 'world': int(world),
          'units': 'sample-type units (rad, rad/s, m/s^2); times in s'}
  if sim is not None:
    info['manifest'] = str(sim.manifest.path)
    info['components'] = {cid: c.type for cid, c in sim.components.items()}
  info.update(meta or {})
  rec = Recording({}, meta=info)
  for cid, out in trace.get('sensor', {}).items():
    if not hasattr(out, 'new_data') or not hasattr(out, 'sample'):
      continue
    names = out.sample._fields if hasattr(out.sample, '_fields') else ()
    if isinstance(out, fifo.Batch):   # FIFO delivery: every sample of every batch
      d, _ = fifo.split(out)
      r = fifo.rows({k: np.asarray(v[world:world + 1]) for k, v in d.items()})
      get = lambda k: r[k][0]   # noqa: E731
    else:
      get = lambda k: np.asarray(getattr(out.sample, k, None) if k in names   # noqa: E731
                                 else getattr(out, k))[world]
    new = get('new_data').astype(bool)
    fields = {}
    for f in names:
      fields[f] = get(f)[new]
    fields[SAMPLE_TIME] = get('sample_tick')[new].astype(np.float64) * dt
    fields[ARRIVAL_TIME] = get('arrival_tick')[new].astype(np.float64) * dt
    fields['sequence'] = get('sequence')[new].astype(np.int64)
    rec.sensors[cid] = fields
  for cid, fields in trace.get('truth', {}).items():
    d = {f: np.asarray(a[world]) for f, a in fields.items()}
    n = next(iter(d.values())).shape[0]
    d[COMMAND_TIME] = np.arange(n, dtype=np.float64) * dt
    rec.truth[cid] = d
  return validate(rec)


# ------------------------------------------------------------------------ CSV


def read_csv(path, mapping: dict, *, mapping_file: str = '<mapping>') -> Recording:
  """Imports a CSV log (header row, one sample per row; `.csv.gz`: gzip-compressed) with a
  column mapping.

  Mapping (a dict, e.g. from YAML):

      component: imu                 # component id the samples belong to
      columns:
        sample_time_s: t             # required
        arrival_time_s: t_rx         # optional; defaults to the sample time
        angular_velocity: [gx, gy, gz]
        linear_acceleration: [ax, ay, az]
      scale: {angular_velocity: 0.017453292519943295, sample_time_s: 1.0e-6}  # optional
      meta: {source: bench log 2024-05-02, units: {angular_velocity: rad/s}}  # optional

  Rows are sorted by nothing: the sample times must already increase. A missing column, a
  non-numeric cell or NaN is a one-line error naming the file, the column and the row.

  Returns:
    a validated `Recording` with one sensor component.
  """
  import csv
  path = pathlib.Path(path)
  if not path.is_file():
    raise FibrilError(f'{path}: CSV file not found')
  if not isinstance(mapping, dict):
    raise recording_error(mapping_file, '', 'the CSV mapping must be a mapping', mapping)
  for key in mapping:
    if key not in ('component', 'columns', 'scale', 'meta'):
      raise recording_error(mapping_file, key,
                            'unknown key (known: component, columns, scale, meta)')
  cid = mapping.get('component')
  cols = mapping.get('columns')
  if not isinstance(cid, str) or not cid:
    raise recording_error(mapping_file, 'component', 'required: the component id of the samples',
                          cid)
  if not isinstance(cols, dict) or SAMPLE_TIME not in cols:
    raise recording_error(mapping_file, f'columns.{SAMPLE_TIME}',
                          'required: the sample time column')
  scale = mapping.get('scale') or {}
  opener = gzip.open if path.suffix == '.gz' else open
  try:
    with opener(path, 'rt', newline='', encoding='utf-8') as fh:
      rows = list(csv.reader(fh))
  except gzip.BadGzipFile:
    raise unreadable(path, '.csv.gz file', 'not gzip data: another format?') from None
  except EOFError:
    raise unreadable(path, '.csv.gz file', 'the compressed data ends early: truncated') from None
  except (UnicodeDecodeError, OSError, csv.Error) as e:
    raise unreadable(path, 'CSV file', e) from None
  if not rows:
    raise unreadable(path, 'CSV file', 'no header row')
  header = [h.strip() for h in rows[0]]
  body = rows[1:]
  index = {h: i for i, h in enumerate(header)}

  def column(name, field):
    if name not in index:
      raise recording_error(path, f'column {name!r}',
                            f'missing (mapped to {field} in {mapping_file})'
                            + did_you_mean(name, header))
    j = index[name]
    out = np.empty(len(body))
    for r, row in enumerate(body):
      cell = row[j].strip() if j < len(row) else ''
      try:
        out[r] = float(cell)
      except ValueError:
        raise recording_error(path, f'column {name!r} row {r + 2}', 'must be a number',
                              cell) from None
      if not np.isfinite(out[r]):
        raise recording_error(path, f'column {name!r} row {r + 2}', 'must be finite', cell)
    return out

  fields: dict[str, Any] = {}
  for field, spec in cols.items():
    names = spec if isinstance(spec, list) else [spec]
    data = np.stack([column(str(n), field) for n in names], axis=-1)
    data = data[:, 0] if not isinstance(spec, list) else data
    fields[field] = data * float(scale.get(field, 1.0))
  if ARRIVAL_TIME not in fields:
    fields[ARRIVAL_TIME] = fields[SAMPLE_TIME].copy()
  meta = {'source': f'CSV {path.name}', **(mapping.get('meta') or {})}
  rec = Recording({cid: fields}, meta=meta, path=str(path))
  return validate(rec)
