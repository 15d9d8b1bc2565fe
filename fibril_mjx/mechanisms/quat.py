"""Quaternion and Euler-angle helpers, written once for every component.

Conventions: quaternions are `[w, x, y, z]` (MuJoCo's order), Hamilton product, active
rotation of vectors from the body frame to the world frame (`v_world = R(q) v_body`).
Euler angles are roll/pitch/yaw in the Z-Y-X (yaw-pitch-roll) convention:
`R = Rz(yaw) · Ry(pitch) · Rx(roll)`.
All functions act on the last axis and broadcast over leading axes.
"""

from __future__ import annotations

import jax.numpy as jnp

from fibril_mjx.mechanisms import smallmat


def multiply(p, q):
  """Hamilton product `p ⊗ q`.

  Args:
    p, q: quaternions `(..., 4)`.

  Returns:
    `(..., 4)`.
  """
  pw, px, py, pz = p[..., 0], p[..., 1], p[..., 2], p[..., 3]
  qw, qx, qy, qz = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
  return jnp.stack([
      pw * qw - px * qx - py * qy - pz * qz,
      pw * qx + px * qw + py * qz - pz * qy,
      pw * qy - px * qz + py * qw + pz * qx,
      pw * qz + px * qy - py * qx + pz * qw,
  ], axis=-1)


def conjugate(q):
  """Conjugate (inverse of a unit quaternion) `(..., 4)`."""
  return q * jnp.array([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def normalize(q):
  """Unit quaternion `(..., 4)`."""
  return q / jnp.linalg.norm(q, axis=-1, keepdims=True)


def canonical(q):
  """The representative with `w >= 0` `(..., 4)`."""
  return jnp.where(q[..., :1] < 0, -q, q)


def to_rpy(q):
  """Roll, pitch, yaw (Z-Y-X) of a unit quaternion.

  Args:
    q: `(..., 4)`.

  Returns:
    `(..., 3)` radians; roll, yaw in (-π, π], pitch in [-π/2, π/2].
  """
  w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
  roll = jnp.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
  pitch = jnp.arcsin(jnp.clip(2 * (w * y - z * x), -1.0, 1.0))
  yaw = jnp.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
  return jnp.stack([roll, pitch, yaw], axis=-1)


def from_rpy(rpy):
  """Unit quaternion of roll, pitch, yaw (Z-Y-X).

  Args:
    rpy: `(..., 3)` radians.

  Returns:
    `(..., 4)`.
  """
  h = 0.5 * rpy
  cr, sr = jnp.cos(h[..., 0]), jnp.sin(h[..., 0])
  cp, sp = jnp.cos(h[..., 1]), jnp.sin(h[..., 1])
  cy, sy = jnp.cos(h[..., 2]), jnp.sin(h[..., 2])
  return jnp.stack([
      cr * cp * cy + sr * sp * sy,
      sr * cp * cy - cr * sp * sy,
      cr * sp * cy + sr * cp * sy,
      cr * cp * sy - sr * sp * cy,
  ], axis=-1)


def about_z(angle):
  """Rotation by `angle` `(...)` radians about Z, `(..., 4)`."""
  h = 0.5 * angle
  zero = jnp.zeros_like(h)
  return jnp.stack([jnp.cos(h), zero, zero, jnp.sin(h)], axis=-1)


def to_matrix(q):
  """Rotation matrix `R(q)` `(..., 3, 3)` (body → world)."""
  w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
  return jnp.stack([
      jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
      jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
      jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
  ], axis=-2)


def to_rotvec(q):
  """Rotation vector `θ·u` `(..., 3)` of a unit quaternion (the representative with `w >= 0`,
  so `|θ| <= π`): `2·atan2(|v|, w)·v/|v|`, `2v/w` in the limit `|v| → 0`."""
  q = canonical(q)
  v = q[..., 1:]
  s2 = jnp.sum(v * v, axis=-1, keepdims=True)
  small = s2 == 0.0
  s = jnp.sqrt(jnp.where(small, 1.0, s2))          # finite gradients at zero rotation
  f = jnp.where(small, 2.0 / q[..., :1], 2.0 * jnp.arctan2(s, q[..., :1]) / s)
  return f * v


def rotate(q, v):
  """`R(q) v` for vectors `v` `(..., 3)`."""
  return smallmat.matvec(to_matrix(q), v)


def wrap_angle(a):
  """Wrap radians to (-π, π]."""
  return jnp.pi - jnp.mod(jnp.pi - a, 2 * jnp.pi)
