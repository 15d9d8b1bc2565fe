"""ROS bags as recordings: rosbag2 (MCAP or SQLite storage; a bag directory or a bare `.mcap`
/ `.db3` file) and ROS 1 `.bag` files, read with `rosbags` (pure Python, no ROS install).

A topic mapping names which component each topic belongs to:

    imu=/imu/data,baro=/baro/pressure,baro=/baro/temperature,command/rotor=/rotor/cmd

(`--topics` on the command line; `topics: {imu: /imu/data}` in a tune file, a list when one
component takes several topics). `ID=TOPIC` is a sensor component (`sensor/ID=TOPIC` too),
`command/ID=TOPIC` an actuator component's commands. `TOPIC#NAME` picks the entry named NAME
of a `JointState` (default: the entry named after the component, or the only one) and
`TOPIC#I` element I of a `Float64MultiArray` (default 0). Several topics of one component
(barometer pressure + temperature, GNSS fix + velocity) are merged sample by sample: their
header stamps must be the same.

Times: a sample's header stamp becomes `sample_time_s`, the bag's receive (log) time
`arrival_time_s`, both in seconds on one clock that starts at the bag's first message (the
earliest receive time in the bag or header stamp of a mapped topic), computed in integer
nanoseconds. Topics without a header (`Float64MultiArray`, `Float64`) use the receive time.

Messages become sample fields through `bag_fields.READERS` (`ROS type → reader`; the table:
docs/internals/interfaces.md, "ROS bags"). A problem is one line naming the bag, the topic and
the field (`fibril_mjx.errors.ConfigError`): a missing topic, a type with no reader, stamps that
do not increase or come after their receive time, values in a wrong unit.
"""

from __future__ import annotations

import pathlib

import numpy as np

from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean, unreadable
from fibril_mjx.io import recording_data as rc
from fibril_mjx.io import bag_fields
from fibril_mjx.io.bag_fields import COMMAND, READERS, SENSOR, Ctx, TopicMap, UnitError
from fibril_mjx.io.mcap_export import TYPESTORE

SUFFIXES = ('.bag', '.mcap', '.db3')


def is_bag(path) -> bool:
  """A directory (rosbag2) or a `.bag`, `.mcap`, `.db3` file."""
  p = pathlib.Path(path)
  return p.suffix in SUFFIXES or p.is_dir()


def parse_topics(spec, origin: str = '--topics') -> list[TopicMap]:
  """`'imu=/imu/data,command/rotor=/cmd'`, `{imu: /imu/data}` or `{baro: [/p, /t]}` →
  `TopicMap`s; one-line errors naming `origin`."""
  items: list[tuple[str, str]] = []
  if isinstance(spec, str):
    for part in (p.strip() for p in spec.split(',')):
      if not part:
        continue
      if '=' not in part:
        raise ConfigError(origin, '', 'expected ID=TOPIC[,ID=TOPIC] (e.g. imu=/imu/data)', part)
      k, v = part.split('=', 1)
      items.append((k.strip(), v.strip()))
  elif isinstance(spec, dict):
    for k, v in spec.items():
      for t in (v if isinstance(v, list) else [v]):
        if not isinstance(t, str):
          raise ConfigError(origin, str(k), 'a topic name (or a list of them)', t)
        items.append((str(k), t.strip()))
  else:
    raise ConfigError(origin, '', 'a topic mapping ID=TOPIC[,ID=TOPIC] or {ID: TOPIC}', spec)
  if not items:
    raise ConfigError(origin, '', 'at least one ID=TOPIC needed (e.g. imu=/imu/data)')
  out = []
  for k, v in items:
    group, cid = SENSOR, k
    if '/' in k:
      group, cid = k.split('/', 1)
      if group not in (SENSOR, COMMAND) or not cid or '/' in cid:
        raise ConfigError(origin, k, 'a component id, sensor/ID or command/ID')
    if not cid:
      raise ConfigError(origin, k or v, 'a component id before "="')
    topic, _, select = v.partition('#')
    if not topic.startswith('/') and topic:
      topic = '/' + topic
    if not topic:
      raise ConfigError(origin, k, 'a topic name after "="', v)
    out.append(TopicMap(group, cid, topic, select))
  return out


# ---------------------------------------------------------------------------- the bag


def _where(topic, field):
  return f'topic {topic} field {field}'


def _stack(values):
  a = np.asarray(values)
  if a.dtype == object:
    a = np.asarray(values, np.float64)
  return a


def _open(path):
  """The bag at `path`, opened with `rosbags` (a `FibrilError` when missing or unreadable)."""
  from rosbags.highlevel import AnyReader
  bag = str(path)
  if not path.exists():
    raise FibrilError(f'{bag}: bag not found')
  try:
    reader = AnyReader([path], default_typestore=TYPESTORE)
    reader.open()
  except Exception as e:  # noqa: BLE001 — any rosbags failure is an unreadable bag
    raise unreadable(bag, 'ROS bag', e) from None
  return reader


def _resolve_readers(entries, by_topic, bag) -> dict:
  """`{entry: (ROS type, Reader)}` for every mapped topic (a `ConfigError` when a topic is not
  in the bag or its type has no reader)."""
  have = sorted(by_topic)
  readers = {}
  for e in entries:
    if e.topic not in by_topic:
      raise ConfigError(bag, f'topic {e.topic}', f'not in the bag (mapped to {e.group}/'
                        f'{e.cid}; topics: {", ".join(have) or "none"})'
                        + did_you_mean(e.topic, have))
    msgtype = by_topic[e.topic][0].msgtype
    table = READERS[e.group]
    if msgtype not in table:
      raise ConfigError(bag, f'topic {e.topic}', f'type {msgtype} has no mapping to '
                        f'{e.group} fields (known: {", ".join(sorted(table))})')
    readers[e] = (msgtype, table[msgtype])
  return readers


def _read_messages(reader, entries, bag):
  """The mapped topics' messages, read from an open bag.

  Returns:
    `(readers, raw, start)`: `{entry: (ROS type, Reader)}`, `{topic: [(receive ns, message)]}`
    in receive order, and the bag's start time (ns; 0 for an empty bag).
  """
  by_topic: dict[str, list] = {}
  for c in reader.connections:
    by_topic.setdefault(c.topic, []).append(c)
  readers = _resolve_readers(entries, by_topic, bag)
  conns = [c for e in entries for c in by_topic[e.topic]]
  raw: dict[str, list] = {e.topic: [] for e in entries}
  for conn, log_ns, data in reader.messages(connections=conns):
    raw[conn.topic].append((int(log_ns), reader.deserialize(data, conn.msgtype)))
  start = int(reader.start_time) if reader.readers else 0
  return readers, raw, start


def _stamps(entries, readers, raw, bag) -> dict:
  """`{entry: (n,) int64}` sample stamps (ns): header stamps, or receive times for a type
  without a header."""
  stamps = {}
  for e in entries:
    msgs = raw[e.topic]
    if not msgs:
      raise ConfigError(bag, f'topic {e.topic}', 'has no messages')
    if readers[e][1].stamped:
      st = np.array([m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec
                     for _, m in msgs], np.int64)
    else:
      st = np.array([t for t, _ in msgs], np.int64)
    stamps[e] = st
  return stamps


def _check_stamps(e, st, rx, t0, bag):
  """Stamps `st` (n,) increasing in receive order (strictly for a sensor) and, for a sensor,
  never later than the receive times `rx` (n,); all ns, `t0` the time origin."""
  d = np.diff(st)
  strict = e.group == SENSOR
  bad = d <= 0 if strict else d < 0
  if np.any(bad):
    i = int(np.argmax(bad)) + 1
    raise ConfigError(bag, _where(e.topic, f'header.stamp (message {i})'),
                      f'must be {"strictly increasing" if strict else "non-decreasing"} in '
                      f'receive order (previous {float(st[i - 1] - t0) * 1e-9!r} s)',
                      float(st[i] - t0) * 1e-9)
  if e.group == SENSOR:
    late = rx < st
    if np.any(late):
      i = int(np.argmax(late))
      raise ConfigError(bag, _where(e.topic, f'header.stamp (message {i})'),
                        f'later than its receive time {float(rx[i] - t0) * 1e-9!r} s (header '
                        'stamps and the bag on different clocks?)', float(st[i] - t0) * 1e-9)


def _topic_fields(e, rd, msgs, ctx, bag) -> dict:
  """`{field: (n, ...) array}` of one topic's messages read by `rd`; an optional field only
  when every message has it; unit-checked."""
  rows = []
  for i, (_, m) in enumerate(msgs):
    try:
      rows.append(rd.read(m, ctx))
    except UnitError as u:
      field, value, rule = u.args
      raise ConfigError(bag, _where(e.topic, f'{field} (message {i})'), rule, value) from None
  fields = {}
  for k in rows[0]:
    vals = [r.get(k) for r in rows]
    if any(v is None for v in vals):
      continue
    fields[k] = _stack(vals)
  if rd.check is not None:
    try:
      rd.check(fields)
    except UnitError as u:
      field, value, rule = u.args
      raise ConfigError(bag, _where(e.topic, field), rule, value) from None
  return fields


def _merge(prev: dict, e, fields, st, arrival_s, bag):
  """Adds a further topic's `fields` to the component `prev` read from another topic: the
  stamps must be equal, no field read twice; arrival is the later of the two."""
  if st.shape != prev['stamps'].shape or np.any(st != prev['stamps']):
    n = min(st.size, prev['stamps'].size)
    diff = np.flatnonzero(st[:n] != prev['stamps'][:n])
    i = int(diff[0]) if diff.size else n
    raise ConfigError(bag, _where(e.topic, f'header.stamp (message {i})'),
                      f'must equal the stamps of {prev["topic"]} (both mapped to '
                      f'{e.group}/{e.cid}; {st.size} vs {prev["stamps"].size} messages)')
  for k, v in fields.items():
    if k in prev['fields']:
      raise ConfigError(bag, _where(e.topic, k), f'already read from {prev["topic"]} '
                        f'(both mapped to {e.group}/{e.cid})')
    prev['fields'][k] = v
  if e.group == SENSOR:
    prev['fields'][rc.ARRIVAL_TIME] = np.maximum(prev['fields'][rc.ARRIVAL_TIME], arrival_s)


def _components(entries, readers, raw, stamps, t0, types, bag) -> dict:
  """`{(group, component id): {'fields', 'stamps', 'topic'}}`: each topic checked and read,
  sample / arrival / command times in s from `t0` added, a component's topics merged."""
  comps: dict[tuple[str, str], dict] = {}
  for e in entries:
    rd = bag_fields.for_type(e.group, *readers[e], types.get(e.cid))
    msgs, st = raw[e.topic], stamps[e]
    rx = np.array([t for t, _ in msgs], np.int64)
    _check_stamps(e, st, rx, t0, bag)
    fields = _topic_fields(e, rd, msgs, Ctx(e, types.get(e.cid)), bag)
    key = (e.group, e.cid)
    if key in comps:
      _merge(comps[key], e, fields, st, (rx - t0).astype(np.float64) * 1e-9, bag)
      continue
    if e.group == SENSOR:
      fields[rc.SAMPLE_TIME] = (st - t0).astype(np.float64) * 1e-9
      fields[rc.ARRIVAL_TIME] = (rx - t0).astype(np.float64) * 1e-9
    else:
      fields[rc.COMMAND_TIME] = (st - t0).astype(np.float64) * 1e-9
    comps[key] = {'fields': fields, 'stamps': st, 'topic': e.topic}
  return comps


def _recording(path, entries, comps, t0):
  """The components as a `Recording` of the bag at `path`, with its meta (not yet validated)."""
  bag = str(path)
  mapped: dict[str, list] = {}
  for e in entries:
    mapped.setdefault(f'{e.group}/{e.cid}', []).append(
        e.topic + (f'#{e.select}' if e.select else ''))
  rec = rc.Recording({}, meta={
      'source': f'ROS bag {path.name}', 'bag': bag, 'topics': mapped,
      'time_origin_ns': int(t0),
      'units': 'sample-type units (rad/s, m/s^2, uT, Pa, K, m); times in s from the first '
               'message'}, path=bag)
  for (group, cid), c in comps.items():
    (rec.sensors if group == SENSOR else rec.commands)[cid] = c['fields']
  return rec


def read_bag(path, topics, *, types: dict | None = None, origin: str = '--topics'):
  """A bag as a `Recording` (see the module doc).

  Args:
    path: a rosbag2 directory, a `.mcap` / `.db3` file, or a ROS 1 `.bag`.
    topics: the mapping (`parse_topics` text, dict or a list of `TopicMap`).
    types: optional `{component id: component type}` (e.g. from the manifest): decides
      FluidPressure → `differential_pressure_pa` for `fibril_sim/airspeed`.
    origin: where the mapping came from (for its errors).

  Returns:
    a validated `Recording` whose `path` is the bag.
  """
  path = pathlib.Path(path)
  bag = str(path)
  entries = topics if isinstance(topics, list) else parse_topics(topics, origin)
  reader = _open(path)
  try:
    readers, raw, start = _read_messages(reader, entries, bag)
  finally:
    reader.close()
  stamps = _stamps(entries, readers, raw, bag)
  t0 = min([start] + [int(s.min()) for s in stamps.values()]
           + [min(t for t, _ in raw[e.topic]) for e in entries])
  comps = _components(entries, readers, raw, stamps, t0, types or {}, bag)
  return rc.validate(_recording(path, entries, comps, t0))
