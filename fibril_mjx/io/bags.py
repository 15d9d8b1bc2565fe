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

Messages → sample fields (`READERS`, `ROS type → reader`; units of the sample types):

| ROS message | sample fields |
| --- | --- |
| `sensor_msgs/Imu` | `angular_velocity`, `linear_acceleration`; `orientation` `[w, x, y, z]` unless `orientation_covariance[0] = -1`; `*_variance` from the covariance diagonals when known (not all zero) |
| `sensor_msgs/MagneticField` | `magnetic_field_ut` (T × 1e6), `variance` (µT²) |
| `sensor_msgs/FluidPressure` | `pressure_pa`, `variance`; `differential_pressure_pa` for a `fibril_sim/airspeed` component (see `types`) |
| `sensor_msgs/Temperature` | `temperature_k` (°C + 273.15) |
| `sensor_msgs/NavSatFix` | `latitude_e7`, `longitude_e7` (int), `height_m`, `fix_type` (3 with a fix, 0 without), `horizontal_accuracy_m`, `vertical_accuracy_m` (√ of the covariance diagonal, when its type is known) |
| `geometry_msgs/TwistWithCovarianceStamped`, `TwistStamped` | `velocity_enu_m_s`, `speed_accuracy_m_s` (√ covariance[0], when known) |
| `sensor_msgs/Range` | `distance_m` (±inf kept, REP 117), `in_range` (finite and within min/max), `variance` (when the message has it) |
| `sensor_msgs/JointState` | `position`, `velocity`, `applied_effort` (= effort) of one entry; empty arrays are left out |
| `geometry_msgs/QuaternionStamped`, `Vector3Stamped` | `orientation` `[w, x, y, z]`; `gyro_bias` (an estimator, as `export-mcap` writes it) |
| commands: `sensor_msgs/JointState` | `kind` (motor command kind: position, velocity or effort, the first non-empty array), `value` |
| commands: `std_msgs/Float64MultiArray`, `Float64` | `value`, `issued` (a scalar actuator command) |

An optional sample field is kept when every message of the topic has it. Problems are one
line naming the bag, the topic and the field (`fibril_mjx.errors.ConfigError`): a topic not in
the bag, a type with no reader, header stamps that do not increase, a stamp later than its
receive time, and values in a wrong unit (a magnetic field above 0.01 T — µT or gauss; an
absolute pressure below 3 kPa — hPa or kPa; a temperature above 200 °C — kelvin; a latitude
beyond ±90° or a longitude beyond ±180°; a negative range; accelerations whose median norm
is about 1 — g instead of m/s²).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable

import numpy as np

from fibril_mjx.components.actuators.motor import KINDS
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean
from fibril_mjx.io import recording_data as rc
from fibril_mjx.io.mcap_export import TYPESTORE

SUFFIXES = ('.bag', '.mcap', '.db3')
SENSOR, COMMAND = 'sensor', 'command'


def is_bag(path) -> bool:
  """A directory (rosbag2) or a `.bag`, `.mcap`, `.db3` file."""
  p = pathlib.Path(path)
  return p.suffix in SUFFIXES or p.is_dir()


@dataclasses.dataclass(frozen=True)
class TopicMap:
  """One `ID=TOPIC` entry: `group` `sensor` or `command`, the component id, the topic and the
  `#` selector (a JointState name or an array index; '' when none)."""
  group: str
  cid: str
  topic: str
  select: str = ''


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


# ---------------------------------------------------------------------------- readers


@dataclasses.dataclass(frozen=True)
class Ctx:
  """What a reader knows besides the message: the mapping entry and the component type."""
  entry: TopicMap
  ctype: str | None


class UnitError(Exception):
  """Raised by a reader: `(field, value, rule)`."""


def _xyz(v) -> list:
  return [float(v.x), float(v.y), float(v.z)]


def _diag3(cov, scale=1.0):
  c = np.asarray(cov, np.float64)
  if not np.any(c) or c[0] < 0:
    return None
  return (c[[0, 4, 8]] * scale).tolist()


def _imu(m, ctx):
  out = {'angular_velocity': _xyz(m.angular_velocity),
         'linear_acceleration': _xyz(m.linear_acceleration)}
  q = m.orientation
  oc = np.asarray(m.orientation_covariance, np.float64)
  if oc[0] != -1.0 and (q.w, q.x, q.y, q.z) != (0.0, 0.0, 0.0, 0.0):
    out['orientation'] = [float(q.w), float(q.x), float(q.y), float(q.z)]
    out['orientation_variance'] = _diag3(oc)
  out['angular_velocity_variance'] = _diag3(m.angular_velocity_covariance)
  out['linear_acceleration_variance'] = _diag3(m.linear_acceleration_covariance)
  return out


def _imu_check(fields):
  a = np.asarray(fields['linear_acceleration'], np.float64)
  med = float(np.median(np.linalg.norm(a, axis=-1)))
  if 0.8 <= med <= 1.2:
    raise UnitError('linear_acceleration', round(med, 4), 'must be in m/s² (median norm is '
                    'about 1: this looks like g)')


def _magnetic(m, ctx):
  b = np.asarray(_xyz(m.magnetic_field))
  if np.linalg.norm(b) > 0.01:
    raise UnitError('magnetic_field', float(np.linalg.norm(b)),
                    'must be in tesla (|B| ≤ 0.01 T; this looks like µT or gauss)')
  return {'magnetic_field_ut': (b * 1e6).tolist(),
          'variance': _diag3(m.magnetic_field_covariance, 1e12)}


def _pressure(m, ctx):
  p = float(m.fluid_pressure)
  var = float(m.variance) if m.variance > 0 else None
  if ctx.ctype == 'fibril_sim/airspeed':
    return {'differential_pressure_pa': p, 'variance': var}
  if not 3000.0 <= p <= 2.0e5:
    raise UnitError('fluid_pressure', p, 'must be an absolute pressure in Pa (3 kPa … 200 kPa; '
                    'this looks like hPa or kPa)')
  return {'pressure_pa': p, 'variance': var}


def _temperature(m, ctx):
  t = float(m.temperature)
  if not -100.0 <= t <= 200.0:
    raise UnitError('temperature', t, 'must be in °C (-100 … 200; this looks like kelvin)')
  return {'temperature_k': t + 273.15}


def _navsat(m, ctx):
  lat, lon = float(m.latitude), float(m.longitude)
  if not -90.0 <= lat <= 90.0:
    raise UnitError('latitude', lat, 'must be in degrees (-90 … 90)')
  if not -180.0 <= lon <= 180.0:
    raise UnitError('longitude', lon, 'must be in degrees (-180 … 180)')
  c = np.asarray(m.position_covariance, np.float64)
  known = int(m.position_covariance_type) != 0
  return {'latitude_e7': int(round(lat * 1e7)), 'longitude_e7': int(round(lon * 1e7)),
          'height_m': float(m.altitude), 'fix_type': 3 if int(m.status.status) >= 0 else 0,
          'horizontal_accuracy_m': float(np.sqrt(0.5 * (c[0] + c[4]))) if known else None,
          'vertical_accuracy_m': float(np.sqrt(c[8])) if known else None}


def _twist_cov(m, ctx):
  c = np.asarray(m.twist.covariance, np.float64)
  return {'velocity_enu_m_s': _xyz(m.twist.twist.linear),
          'speed_accuracy_m_s': float(np.sqrt(c[0])) if c[0] > 0 else None}


def _twist(m, ctx):
  return {'velocity_enu_m_s': _xyz(m.twist.linear)}


def _range(m, ctx):
  r = float(m.range)
  if np.isfinite(r) and r < 0:
    raise UnitError('range', r, 'must be ≥ 0 m (or ±inf out of range, REP 117)')
  ok = bool(np.isfinite(r) and m.min_range <= r <= m.max_range)
  var = getattr(m, 'variance', 0.0)
  return {'distance_m': r, 'in_range': ok, 'variance': float(var) if var > 0 else None}


def _joint_index(m, ctx):
  names = list(m.name)
  want = ctx.entry.select or ctx.entry.cid
  if want in names:
    return names.index(want)
  if ctx.entry.select:
    raise UnitError('name', names, f'has no entry {want!r}' + did_you_mean(want, names))
  n = max(len(m.position), len(m.velocity), len(m.effort))
  if n == 1:
    return 0
  raise UnitError('name', names, f'has {n} entries and none named {want!r}: pick one with '
                  'TOPIC#NAME')


def _joint(m, ctx):
  i = _joint_index(m, ctx)
  out = {}
  for src, dst in (('position', 'position'), ('velocity', 'velocity'),
                   ('effort', 'applied_effort')):
    a = np.asarray(getattr(m, src), np.float64)
    out[dst] = float(a[i]) if a.size > i else None
  return out


def _joint_command(m, ctx):
  i = _joint_index(m, ctx)
  for kind in ('position', 'velocity', 'effort'):
    a = np.asarray(getattr(m, kind), np.float64)
    if a.size > i:
      return {'kind': KINDS.index(kind), 'value': float(a[i])}
  raise UnitError('position', [], 'a command JointState needs position, velocity or effort')


def _array_command(m, ctx):
  i = int(ctx.entry.select or 0) if (ctx.entry.select or '0').isdigit() else None
  data = np.asarray(m.data, np.float64)
  if i is None or i >= data.size:
    raise UnitError(f'data[{ctx.entry.select or 0}]', data.size,
                    'no such element (TOPIC#I picks element I)')
  return {'value': float(data[i]), 'issued': True}


def _float_command(m, ctx):
  return {'value': float(m.data), 'issued': True}


def _quaternion(m, ctx):
  q = m.quaternion
  return {'orientation': [float(q.w), float(q.x), float(q.y), float(q.z)]}


def _vector(m, ctx):
  return {'gyro_bias': _xyz(m.vector)}


@dataclasses.dataclass(frozen=True)
class Reader:
  """How one ROS type becomes sample fields: `read(msg, ctx) → {field: value or None}`, an
  optional whole-topic `check(fields)` (units), and whether the type has a header."""
  read: Callable
  check: Callable | None = None
  stamped: bool = True


READERS: dict[str, dict[str, Reader]] = {
    SENSOR: {
        'sensor_msgs/msg/Imu': Reader(_imu, _imu_check),
        'sensor_msgs/msg/MagneticField': Reader(_magnetic),
        'sensor_msgs/msg/FluidPressure': Reader(_pressure),
        'sensor_msgs/msg/Temperature': Reader(_temperature),
        'sensor_msgs/msg/NavSatFix': Reader(_navsat),
        'geometry_msgs/msg/TwistWithCovarianceStamped': Reader(_twist_cov),
        'geometry_msgs/msg/TwistStamped': Reader(_twist),
        'sensor_msgs/msg/Range': Reader(_range),
        'sensor_msgs/msg/JointState': Reader(_joint),
        'geometry_msgs/msg/QuaternionStamped': Reader(_quaternion),
        'geometry_msgs/msg/Vector3Stamped': Reader(_vector),
    },
    COMMAND: {
        'sensor_msgs/msg/JointState': Reader(_joint_command),
        'std_msgs/msg/Float64MultiArray': Reader(_array_command, stamped=False),
        'std_msgs/msg/Float64': Reader(_float_command, stamped=False),
    },
}


# ---------------------------------------------------------------------------- the bag


def _where(topic, field):
  return f'topic {topic} field {field}'


def _stack(values):
  a = np.asarray(values)
  if a.dtype == object:
    a = np.asarray(values, np.float64)
  return a


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
  from rosbags.highlevel import AnyReader
  path = pathlib.Path(path)
  bag = str(path)
  entries = topics if isinstance(topics, list) else parse_topics(topics, origin)
  types = types or {}
  if not path.exists():
    raise FibrilError(f'{bag}: bag not found')
  try:
    reader = AnyReader([path], default_typestore=TYPESTORE)
    reader.open()
  except Exception as e:  # noqa: BLE001 — any rosbags failure is an unreadable bag
    msg = ' '.join(str(a) for a in getattr(e, 'args', ()) or (e,)).splitlines()[0]
    raise FibrilError(f'{bag}: not a readable ROS bag ({type(e).__name__}: {msg})') from None
  try:
    by_topic: dict[str, list] = {}
    for c in reader.connections:
      by_topic.setdefault(c.topic, []).append(c)
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
    conns = [c for e in entries for c in by_topic[e.topic]]
    raw: dict[str, list] = {e.topic: [] for e in entries}
    for conn, log_ns, data in reader.messages(connections=conns):
      raw[conn.topic].append((int(log_ns), reader.deserialize(data, conn.msgtype)))
    start = int(reader.start_time) if reader.readers else 0
  finally:
    reader.close()
  # stamps and the time origin (integer ns)
  stamps = {}
  for e in entries:
    msgs = raw[e.topic]
    if not msgs:
      raise ConfigError(bag, f'topic {e.topic}', 'has no messages')
    rd = readers[e][1]
    if rd.stamped:
      st = np.array([m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec
                     for _, m in msgs], np.int64)
    else:
      st = np.array([t for t, _ in msgs], np.int64)
    stamps[e] = st
  t0 = min([start] + [int(s.min()) for s in stamps.values()]
           + [min(t for t, _ in raw[e.topic]) for e in entries])
  comps: dict[tuple[str, str], dict] = {}
  for e in entries:
    msgtype, rd = readers[e]
    msgs, st = raw[e.topic], stamps[e]
    rx = np.array([t for t, _ in msgs], np.int64)
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
    ctx = Ctx(e, types.get(e.cid))
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
    t_s = (st - t0).astype(np.float64) * 1e-9
    key = (e.group, e.cid)
    if key not in comps:
      if e.group == SENSOR:
        fields[rc.SAMPLE_TIME] = t_s
        fields[rc.ARRIVAL_TIME] = (rx - t0).astype(np.float64) * 1e-9
      else:
        fields[rc.COMMAND_TIME] = t_s
      comps[key] = {'fields': fields, 'stamps': st, 'topic': e.topic}
      continue
    prev = comps[key]
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
      prev['fields'][rc.ARRIVAL_TIME] = np.maximum(prev['fields'][rc.ARRIVAL_TIME],
                                                   (rx - t0).astype(np.float64) * 1e-9)
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
  return rc.validate(rec)
