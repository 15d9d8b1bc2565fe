"""Local east-north-up (ENU) positions around a geodetic origin → WGS-84 latitude, longitude,
ellipsoidal height, in float32 JAX without losing centimetres.

Absolute Earth-centred coordinates (~6.4e6 m) have a float32 resolution of 0.5 m, so nothing
absolute is computed in the graph. With the origin's latitude φ0, longitude λ0, height h0
(host float64, static) and an ENU offset `(E, N, U)`:

- the offset in Earth-centred coordinates has its meridian-plane components
  `a = −sin φ0·N + cos φ0·U` (radial, along the origin's distance p0 from the axis),
  `δz = cos φ0·N + sin φ0·U` (along the axis) and `E` (east);
- longitude: `δλ = atan2(E, p0 + a)` (exact);
- distance from the axis: `δp = a + E²/(2(p0 + a))` (exact to `E⁴/p0³`);
- latitude and height: second-order Taylor expansion of the exact WGS-84 inverse in
  `(δp, δz)` with coefficients computed on the host in float64 (`Origin.build`): error below
  1 mm within 3 km of the origin and ~3 cm at 10 km (third-order terms, `(d/R)³·R`).

Latitude and longitude are returned as int32 in units of 1e-7 degree (as u-blox UBX-NAV-PVT
and MAVLink report them), the integer origin plus the rounded float32 offset.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

WGS84_A = 6378137.0
WGS84_F = 1.0 / 298.257223563
WGS84_E2 = WGS84_F * (2.0 - WGS84_F)
E7 = 1e7


def geodetic_to_ecef(lat_rad, lon_rad, h_m):
  """WGS-84 geodetic → Earth-centred, Earth-fixed (NumPy float64)."""
  lat, lon, h = (np.asarray(v, np.float64) for v in (lat_rad, lon_rad, h_m))
  n = WGS84_A / np.sqrt(1.0 - WGS84_E2 * np.sin(lat) ** 2)
  return np.stack([(n + h) * np.cos(lat) * np.cos(lon), (n + h) * np.cos(lat) * np.sin(lon),
                   (n * (1.0 - WGS84_E2) + h) * np.sin(lat)], -1)


def ecef_to_geodetic(xyz):
  """Earth-centred, Earth-fixed → WGS-84 `(lat_rad, lon_rad, h_m)` (NumPy float64; fixed-point
  iteration on the latitude, converged to 1e-15 rad)."""
  xyz = np.asarray(xyz, np.float64)
  x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
  p = np.hypot(x, y)
  lat = np.arctan2(z, p * (1.0 - WGS84_E2))
  for _ in range(20):
    n = WGS84_A / np.sqrt(1.0 - WGS84_E2 * np.sin(lat) ** 2)
    lat = np.arctan2(z + WGS84_E2 * n * np.sin(lat), p)
  n = WGS84_A / np.sqrt(1.0 - WGS84_E2 * np.sin(lat) ** 2)
  h = p / np.cos(lat) - n if np.all(np.abs(np.cos(lat)) > 1e-3) else np.abs(z) / np.abs(
      np.sin(lat)) - n * (1.0 - WGS84_E2)
  return lat, np.arctan2(y, x), h


def _lat_h(p, z):
  lat, _, h = ecef_to_geodetic(np.array([p, 0.0, z]))
  return np.array([float(lat), float(h)])


@dataclasses.dataclass(frozen=True)
class Origin:
  """Static geodetic origin and the coefficients of the local expansion (float64, host).

  Attributes:
    lat_deg, lon_deg, height_m: the origin.
    lat_e7, lon_e7: the origin in 1e-7 degree, rounded to integers; `lat_frac`, `lon_frac`
      the remainders (1e-7 degree).
    p0: distance of the origin from the Earth's axis (m).
    jac: `((dφ/dp, dφ/dz), (dh/dp, dh/dz))`; hess: `((φ_pp, φ_pz, φ_zz), (h_pp, h_pz, h_zz))`.
  """
  lat_deg: float
  lon_deg: float
  height_m: float
  lat_e7: int
  lon_e7: int
  lat_frac: float
  lon_frac: float
  p0: float
  sin_lat: float
  cos_lat: float
  jac: tuple
  hess: tuple

  @staticmethod
  def build(lat_deg: float, lon_deg: float, height_m: float) -> 'Origin':
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    x0 = geodetic_to_ecef(lat, lon, height_m)
    p0, z0 = float(math.hypot(x0[0], x0[1])), float(x0[2])
    step = 100.0
    f = lambda dp, dz: _lat_h(p0 + dp, z0 + dz)  # noqa: E731
    f0 = f(0, 0)
    fp = (f(step, 0) - f(-step, 0)) / (2 * step)
    fz = (f(0, step) - f(0, -step)) / (2 * step)
    fpp = (f(step, 0) - 2 * f0 + f(-step, 0)) / step ** 2
    fzz = (f(0, step) - 2 * f0 + f(0, -step)) / step ** 2
    fpz = (f(step, step) - f(step, -step) - f(-step, step) + f(-step, -step)) / (4 * step ** 2)
    jac = tuple((float(fp[i]), float(fz[i])) for i in range(2))
    hess = tuple((float(fpp[i]), float(fpz[i]), float(fzz[i])) for i in range(2))
    le, oe = lat_deg * E7, lon_deg * E7
    return Origin(float(lat_deg), float(lon_deg), float(height_m), int(round(le)),
                  int(round(oe)), le - round(le), oe - round(oe), p0, math.sin(lat),
                  math.cos(lat), jac, hess)


def enu_to_geodetic_e7(origin: Origin, enu):
  """ENU offset `(3,)` m (float32) → `(lat_e7 int32, lon_e7 int32, height_m float32)`.

  Latitude and longitude in 1e-7 degree (rounded), height above the WGS-84 ellipsoid.
  """
  e, n, u = enu[0], enu[1], enu[2]
  a = -origin.sin_lat * n + origin.cos_lat * u
  dz = origin.cos_lat * n + origin.sin_lat * u
  rho = origin.p0 + a
  dp = a + e * e / (2.0 * rho)
  dlon = jnp.arctan2(e, rho)
  (jp, jz), (kp, kz) = origin.jac
  (fpp, fpz, fzz), (hpp, hpz, hzz) = origin.hess
  dlat = jp * dp + jz * dz + 0.5 * fpp * dp * dp + fpz * dp * dz + 0.5 * fzz * dz * dz
  dh = kp * dp + kz * dz + 0.5 * hpp * dp * dp + hpz * dp * dz + 0.5 * hzz * dz * dz
  to_e7 = 180.0 / math.pi * E7
  lat = origin.lat_e7 + jnp.round(origin.lat_frac + dlat * to_e7).astype(jnp.int32)
  lon = origin.lon_e7 + jnp.round(origin.lon_frac + dlon * to_e7).astype(jnp.int32)
  return lat.astype(jnp.int32), lon.astype(jnp.int32), origin.height_m + dh


def geodetic_e7_to_enu(origin: Origin, lat_e7, lon_e7, height_m):
  """Host-side inverse (NumPy float64): geodetic in 1e-7 degree → ENU around the origin (m)."""
  lat = np.radians(np.asarray(lat_e7, np.float64) / E7)
  lon = np.radians(np.asarray(lon_e7, np.float64) / E7)
  d = geodetic_to_ecef(lat, lon, height_m) - geodetic_to_ecef(
      math.radians(origin.lat_deg), math.radians(origin.lon_deg), origin.height_m)
  return d @ ecef_to_enu_matrix(origin.lat_deg, origin.lon_deg).T


def ecef_to_enu_matrix(lat_deg: float, lon_deg: float) -> np.ndarray:
  """Rotation ECEF → ENU at a point (rows: east, north, up)."""
  sl, cl = math.sin(math.radians(lat_deg)), math.cos(math.radians(lat_deg))
  so, co = math.sin(math.radians(lon_deg)), math.cos(math.radians(lon_deg))
  return np.array([[-so, co, 0.0], [-sl * co, -sl * so, cl], [cl * co, cl * so, sl]])
