"""ROS 2 messages of the component samples: the message pieces (header, vectors, covariances) and
one converter per built-in component type, registered at the end as the type's `ros` part
(`registry.register`; the mapping rules are in the docstring of `fibril_mjx/io/mcap_export.py`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
from rosbags.typesys import Stores, get_typestore

from fibril_mjx.core import registry

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
TYPES = TYPESTORE.types   # `{'sensor_msgs/msg/Imu': message class, ...}`


@dataclasses.dataclass(frozen=True)
class Context:
  """What a converter may need besides the sample: the component id, its resolved config
  (`{field: value}` from meta.json) and the world namespace (`/world_0003`)."""
  cid: str
  config: dict
  namespace: str

  def field(self, name, default=None):
    return self.config.get(name, default)


# converter(sample: {field: value}, header: std_msgs/msg/Header, ctx) -> [(suffix, message)]
Converter = Callable[[dict, object, Context], list]


# ----------------------------------------------------------------------- message pieces


def header(stamp_ns: int, frame_id: str):
  T = TYPES
  return T['std_msgs/msg/Header'](
      stamp=T['builtin_interfaces/msg/Time'](sec=int(stamp_ns // 1_000_000_000),
                                             nanosec=int(stamp_ns % 1_000_000_000)),
      frame_id=frame_id)


def vector3(v):
  return TYPES['geometry_msgs/msg/Vector3'](x=float(v[0]), y=float(v[1]), z=float(v[2]))


def quaternion(q_wxyz):
  return TYPES['geometry_msgs/msg/Quaternion'](x=float(q_wxyz[1]), y=float(q_wxyz[2]),
                                               z=float(q_wxyz[3]), w=float(q_wxyz[0]))


def diag_covariance(var, n=3, scale=1.0) -> np.ndarray:
  """Row-major `(n·n,)` float64 with `var · scale` on the diagonal (zeros: unknown)."""
  out = np.zeros(n * n, np.float64)
  if var is not None:
    out[::n + 1] = np.asarray(var, np.float64) * scale
  return out


def imu_messages(s, hdr, ctx, *, truth=False):
  """`[('imu', sensor_msgs/Imu)]` of an IMU / AHRS sample `s` (no orientation: covariance[0]
  = −1); `truth`: covariances unknown (zero)."""
  if 'orientation' in s:
    q = quaternion(s['orientation'])
    q_cov = diag_covariance(None if truth else s.get('orientation_variance'))
  else:
    q = TYPES['geometry_msgs/msg/Quaternion'](x=0.0, y=0.0, z=0.0, w=0.0)
    q_cov = diag_covariance(None)
    q_cov[0] = -1.0                     # ROS 2: no orientation estimate
  return [('imu', TYPES['sensor_msgs/msg/Imu'](
      header=hdr, orientation=q, orientation_covariance=q_cov,
      angular_velocity=vector3(s['angular_velocity']),
      angular_velocity_covariance=diag_covariance(
          None if truth else s.get('angular_velocity_variance')),
      linear_acceleration=vector3(s['linear_acceleration']),
      linear_acceleration_covariance=diag_covariance(
          None if truth else s.get('linear_acceleration_variance'))))]


def joint_messages(s, hdr, ctx):
  """`[('joint_states', sensor_msgs/JointState)]` of a motor sample (one entry, named after the
  component)."""
  f64 = lambda k: np.array([float(s[k])], np.float64)
  return [('joint_states', TYPES['sensor_msgs/msg/JointState'](
      header=hdr, name=[ctx.cid], position=f64('position'), velocity=f64('velocity'),
      effort=f64('applied_effort')))]


def orientation_messages(s, hdr, ctx):
  """`[('orientation', geometry_msgs/QuaternionStamped)]` of a sample's orientation."""
  return [('orientation', TYPES['geometry_msgs/msg/QuaternionStamped'](
      header=hdr, quaternion=quaternion(s['orientation'])))]


def _gyro_bias(s, hdr, ctx):
  return [('gyro_bias', TYPES['geometry_msgs/msg/Vector3Stamped'](
      header=hdr, vector=vector3(s['gyro_bias'])))]


def by_fields(s, hdr, ctx) -> list:
  """The field-based mapping (types without a converter; truth): rates → Imu, else orientation
  → QuaternionStamped; position/velocity/applied effort → JointState; gyro bias →
  Vector3Stamped. Empty when none applies."""
  out = []
  if 'angular_velocity' in s and 'linear_acceleration' in s:
    out += imu_messages(s, hdr, ctx)
  elif 'orientation' in s:
    out += orientation_messages(s, hdr, ctx)
  if {'position', 'velocity', 'applied_effort'} <= set(s):
    out += joint_messages(s, hdr, ctx)
  if 'gyro_bias' in s:
    out += _gyro_bias(s, hdr, ctx)
  return out


def field_mappable(fields: set) -> bool:
  """Whether `by_fields` writes anything for samples with these fields."""
  return bool(({'angular_velocity', 'linear_acceleration'} <= fields) or 'orientation' in fields
              or {'position', 'velocity', 'applied_effort'} <= fields or 'gyro_bias' in fields)


def _attitude_ekf(s, hdr, ctx):
  return orientation_messages(s, hdr, ctx) + _gyro_bias(s, hdr, ctx)



def _magnetometer(s, hdr, ctx):
  return [('magnetic_field', TYPES['sensor_msgs/msg/MagneticField'](
      header=hdr, magnetic_field=vector3(np.asarray(s['magnetic_field_ut'], np.float64) * 1e-6),
      magnetic_field_covariance=diag_covariance(s['variance'], scale=1e-12)))]


def _barometer(s, hdr, ctx):
  T = TYPES
  return [('pressure', T['sensor_msgs/msg/FluidPressure'](
              header=hdr, fluid_pressure=float(s['pressure_pa']), variance=float(s['variance']))),
          ('temperature', T['sensor_msgs/msg/Temperature'](
              header=hdr, temperature=float(s['temperature_k']) - 273.15, variance=0.0))]


def _airspeed(s, hdr, ctx):
  return [('differential_pressure', TYPES['sensor_msgs/msg/FluidPressure'](
      header=hdr, fluid_pressure=float(s['differential_pressure_pa']),
      variance=float(s['variance'])))]


def _gnss(s, hdr, ctx):
  T = TYPES
  fix = T['sensor_msgs/msg/NavSatFix']
  st = T['sensor_msgs/msg/NavSatStatus']
  status = st(status=st.STATUS_FIX if int(s['fix_type']) >= 2 else st.STATUS_NO_FIX,
              service=st.SERVICE_GPS)
  h, v = float(s['horizontal_accuracy_m']), float(s['vertical_accuracy_m'])
  sv = float(s['speed_accuracy_m_s'])
  svv = float(ctx.field('vertical_velocity_noise_stddev_m_s', sv) or sv)
  twist_cov = np.zeros(36, np.float64)
  twist_cov[[0, 7, 14]] = sv ** 2, sv ** 2, svv ** 2
  twist_cov[[21, 28, 35]] = -1.0       # angular velocity: not measured
  return [('fix', fix(header=hdr, status=status, latitude=int(s['latitude_e7']) * 1e-7,
                      longitude=int(s['longitude_e7']) * 1e-7, altitude=float(s['height_m']),
                      position_covariance=diag_covariance([h * h, h * h, v * v]),
                      position_covariance_type=fix.COVARIANCE_TYPE_DIAGONAL_KNOWN)),
          ('velocity', T['geometry_msgs/msg/TwistWithCovarianceStamped'](
              header=hdr, twist=T['geometry_msgs/msg/TwistWithCovariance'](
                  twist=T['geometry_msgs/msg/Twist'](
                      linear=vector3(s['velocity_enu_m_s']), angular=vector3((0, 0, 0))),
                  covariance=twist_cov)))]


def _rangefinder(s, hdr, ctx):
  r = TYPES['sensor_msgs/msg/Range']
  return [('range', r(header=hdr, radiation_type=r.INFRARED, field_of_view=0.0,
                      min_range=float(ctx.field('min_range_m', 0.0)),
                      max_range=float(ctx.field('max_range_m', float('inf'))),
                      range=float(s['distance_m']), variance=float(s['variance'])))]


def _lidar(s, hdr, ctx):
  """One `sensor_msgs/msg/LaserScan` per elevation ring (`<id>/scan`, or `<id>/scan_<r>` with
  several rings; beams are azimuth-major): ranges as delivered (REP 117: +inf no return /
  beyond max, −inf below min), `time_increment` from the beam firing times, no intensities."""
  ls = TYPES['sensor_msgs/msg/LaserScan']
  nh, nv = int(ctx.field('horizontal_samples', 1)), int(ctx.field('vertical_samples', 1))
  lo = math.radians(float(ctx.field('horizontal_min_deg', -180.0)))
  hi = math.radians(float(ctx.field('horizontal_max_deg', 180.0)))
  inc = (hi - lo) / (nh - 1) if nh > 1 else 0.0
  ranges = np.asarray(s['range_m'], np.float32).reshape(nh, nv)
  times = np.asarray(s['beam_time_s'], np.float64).reshape(nh, nv)
  out = []
  for r in range(nv):
    t = times[:, r]
    dt = float((t[-1] - t[0]) / (nh - 1)) if nh > 1 else 0.0
    out.append(('scan' if nv == 1 else f'scan_{r}', ls(
        header=hdr, angle_min=lo, angle_max=lo + inc * (nh - 1), angle_increment=inc,
        time_increment=dt, scan_time=float(ctx.field('sweep_time_s', 0.0)),
        range_min=float(ctx.field('min_range_m', 0.0)),
        range_max=float(ctx.field('max_range_m', float('inf'))),
        ranges=np.ascontiguousarray(ranges[:, r]), intensities=np.zeros(0, np.float32))))
  return out


def _camera(s, hdr, ctx):
  """`<id>/camera_info` (`sensor_msgs/msg/CameraInfo`, plumb_bob: the OpenCV k1 k2 p1 p2 k3)
  and `<id>/landmarks` (`geometry_msgs/msg/PolygonStamped`, one point per configured landmark
  in its order: x = u, y = v in pixels, z = depth in metres; NaN for a landmark not visible).
  ROS 2 has no standard message for image points; a polygon keeps them in one stamped message
  without an image."""
  T = TYPES
  fx, fy = float(ctx.field('fx_px', 1.0)), float(ctx.field('fy_px', 1.0))
  cx, cy = float(ctx.field('cx_px', 0.0)), float(ctx.field('cy_px', 0.0))
  k = np.array([fx, 0, cx, 0, fy, cy, 0, 0, 1], np.float64)
  info = T['sensor_msgs/msg/CameraInfo'](
      header=hdr, height=int(ctx.field('height_px', 0)), width=int(ctx.field('width_px', 0)),
      distortion_model='plumb_bob',
      d=np.asarray(ctx.field('distortion', (0.0,) * 5), np.float64), k=k,
      r=np.eye(3).reshape(-1),
      p=np.array([fx, 0, cx, 0, 0, fy, cy, 0, 0, 0, 1, 0], np.float64), binning_x=0,
      binning_y=0, roi=T['sensor_msgs/msg/RegionOfInterest'](
          x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))
  uv = np.asarray(s['uv_px'], np.float64)
  vis = np.asarray(s['visible'], bool)
  depth = np.asarray(s['depth_m'], np.float64)
  pts = [T['geometry_msgs/msg/Point32'](
      x=float(u[0]) if v else math.nan, y=float(u[1]) if v else math.nan,
      z=float(z) if v else math.nan) for u, v, z in zip(uv, vis, depth)]
  poly = T['geometry_msgs/msg/PolygonStamped'](
      header=hdr, polygon=T['geometry_msgs/msg/Polygon'](points=pts))
  return [('camera_info', info), ('landmarks', poly)]


def _optical_flow(s, hdr, ctx):
  """ROS 2 has no standard optical-flow message (PX4 and MAVROS each define their own), so the
  sample goes out as standard pieces: `<id>/flow` (`geometry_msgs/msg/Vector3Stamped`: x, y the
  integrated flow in rad over the frame, z its integration time in s), `<id>/body_rate`
  (`Vector3Stamped`: the integrated body rates, rad) and `<id>/quality`
  (`std_msgs/msg/UInt8`, 0–255; no header: its MCAP log time is the arrival)."""
  T = TYPES
  f = np.asarray(s['flow_rad'], np.float64)
  return [('flow', T['geometry_msgs/msg/Vector3Stamped'](
              header=hdr, vector=vector3((f[0], f[1], float(s['integration_time_s']))))),
          ('body_rate', T['geometry_msgs/msg/Vector3Stamped'](
              header=hdr, vector=vector3(s['body_rate_rad']))),
          ('quality', T['std_msgs/msg/UInt8'](data=int(np.clip(s['quality'], 0, 255))))]


# The `ros` part of each built-in type (export-mcap imports this module).
for _type, _ros in {
    'fibril_sim/imu': imu_messages,
    'fibril_sim/ahrs': imu_messages,
    'fibril_sim/motor': joint_messages,
    'fibril_mjx/attitude_ekf': _attitude_ekf,
    'fibril_sim/magnetometer': _magnetometer,
    'fibril_sim/barometer': _barometer,
    'fibril_sim/airspeed': _airspeed,
    'fibril_sim/gnss': _gnss,
    'fibril_sim/rangefinder': _rangefinder,
    'fibril_sim/lidar': _lidar,
    'fibril_sim/camera': _camera,
    'fibril_sim/optical_flow': _optical_flow,
}.items():
  registry.register(_type, ros=_ros)
