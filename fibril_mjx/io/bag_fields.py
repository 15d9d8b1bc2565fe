"""ROS messages → sample fields: the readers `bags.read_bag` applies, one per ROS type and
mapping group (`READERS`; the table in `fibril_mjx.io.bags`), with their unit checks, and the
readers of a type whose fields differ from the shared reader's (the type's `bag` part in the
registry: `for_type`)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from fibril_mjx.components.actuators.motor import KINDS
from fibril_mjx.core import registry
from fibril_mjx.errors import did_you_mean

SENSOR, COMMAND = 'sensor', 'command'


@dataclasses.dataclass(frozen=True)
class TopicMap:
  """One `ID=TOPIC` entry: `group` `sensor` or `command`, the component id, the topic and the
  `#` selector (a JointState name or an array index; '' when none)."""
  group: str
  cid: str
  topic: str
  select: str = ''


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


def _differential_pressure(m, ctx):
  return {'differential_pressure_pa': float(m.fluid_pressure),
          'variance': float(m.variance) if m.variance > 0 else None}


def _pressure(m, ctx):
  p = float(m.fluid_pressure)
  var = float(m.variance) if m.variance > 0 else None
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


def for_type(group: str, msgtype: str, reader: Reader, ctype: str | None) -> Reader:
  """The reader of `msgtype` for a sensor of type `ctype`: the type's own (its `bag` part)
  where it has one, else `reader` (the shared one of `READERS`)."""
  own = registry.get(ctype).bag if group == SENSOR and ctype else None
  return (own or {}).get(msgtype, reader)


# The `bag` part of a type whose fields differ from the shared reader's.
registry.register('fibril_sim/airspeed', bag={
    'sensor_msgs/msg/FluidPressure': Reader(_differential_pressure)})
