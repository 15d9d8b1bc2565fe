"""The RPY (Z-Y-X Euler) attitude EKF, the reference the attitude-estimation notes (SPEC §7)
compare with (see the package docstring)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx.mechanisms import quat, smallmat
from fibril_mjx.mechanisms.smallmat import matmul as mm
from fibril_mjx.mechanisms.estimators.common import (EkfParams, Estimator, accel_noise, diag_cov,
                                                     kalman_update, process_noise, tree_where,
                                                     ekf_step)


class RpyEkfState(NamedTuple):
  """State of the Euler-angle EKF.

  Attributes:
    rpy: `(3,)` roll, pitch, yaw (Z-Y-X), rad; roll and yaw wrapped to (−π, π].
    gyro_bias: `(3,)` gyro bias estimate, rad/s.
    cov: `(6, 6)` covariance of `[roll, pitch, yaw, b_x, b_y, b_z]`.
    gyro_prev: `(3,)` previous gyro sample, rad/s (for the angular acceleration).
    gyro_prev_valid: bool `()`, whether `gyro_prev` holds a sample.
  """
  rpy: jax.Array
  gyro_bias: jax.Array
  cov: jax.Array
  gyro_prev: jax.Array
  gyro_prev_valid: jax.Array


def euler_rate_matrix(rpy):
  """`E(roll, pitch)` `(3, 3)` with `rpy' = E · ω_body` (Z-Y-X angles).

    E = [[1, sin r tan p,  cos r tan p],
         [0, cos r,       −sin r     ],
         [0, sin r / cos p, cos r / cos p]]

  This is the full kinematics for a body-frame gyro; the identity is its small-angle
  limit. (The attitude-estimation notes, SPEC §7, write the world-frame-rate version, which
  depends on yaw; a strapdown gyro measures body rates.) Singular at pitch = ±90° (gimbal lock): roll and
  yaw rates become unbounded and only their difference/sum is defined. `cos(pitch)` is kept
  at least 1e-6 in magnitude so the filter stays finite, but its estimates degrade badly
  near the singularity; use the quaternion EKF there.

  Args:
    rpy: `(3,)` radians (yaw unused).

  Returns:
    `(3, 3)`.
  """
  sr, cr = jnp.sin(rpy[0]), jnp.cos(rpy[0])
  sp, cp = jnp.sin(rpy[1]), _safe_cos(rpy[1])
  tp = sp / cp
  z, o = jnp.zeros_like(sr), jnp.ones_like(sr)
  return jnp.stack([
      jnp.stack([o, sr * tp, cr * tp]),
      jnp.stack([z, cr, -sr]),
      jnp.stack([z, sr / cp, cr / cp]),
  ])


def _safe_cos(angle, eps=1e-6):
  c = jnp.cos(angle)
  return jnp.where(c >= 0, jnp.maximum(c, eps), jnp.minimum(c, -eps))


def euler_rate_jacobian(rpy, omega):
  """`∂(E(rpy)·ω)/∂rpy` `(3, 3)` (yaw column is zero)."""
  sr, cr = jnp.sin(rpy[0]), jnp.cos(rpy[0])
  sp, cp = jnp.sin(rpy[1]), _safe_cos(rpy[1])
  tp = sp / cp
  wy, wz = omega[1], omega[2]
  a = sr * wy + cr * wz          # appears in roll' (×tan p) and yaw' (×1/cos p)
  da_dr = cr * wy - sr * wz
  z = jnp.zeros_like(sr)
  return jnp.stack([
      jnp.stack([da_dr * tp, a / (cp * cp), z]),
      jnp.stack([-sr * wy - cr * wz, z, z]),
      jnp.stack([da_dr / cp, a * sp / (cp * cp), z]),
  ])


def rpy_measurement(params: EkfParams, rpy):
  """Predicted accelerometer reading `R(rpy)ᵀ [0, 0, g]` and its Jacobian.

    h = g · [−sin p, sin r cos p, cos r cos p]

  Args:
    params: `EkfParams` (uses `gravity_mps2`).
    rpy: `(3,)` radians.

  Returns:
    `(h, H)`: `(3,)` m/s² and `(3, 6)` Jacobian w.r.t. `[roll, pitch, yaw, b]`.
  """
  g = params.gravity_mps2
  sr, cr = jnp.sin(rpy[0]), jnp.cos(rpy[0])
  sp, cp = jnp.sin(rpy[1]), jnp.cos(rpy[1])
  h = g * jnp.stack([-sp, sr * cp, cr * cp])
  z = jnp.zeros_like(sr)
  h_rpy = g * jnp.stack([
      jnp.stack([z, -cp, z]),
      jnp.stack([cr * cp, -sr * sp, z]),
      jnp.stack([-sr * cp, -cr * sp, z]),
  ])
  return h, jnp.concatenate([h_rpy, jnp.zeros((3, 3), h.dtype)], axis=1)


def _wrap_rpy(rpy):
  return jnp.stack([quat.wrap_angle(rpy[0]), rpy[1], quat.wrap_angle(rpy[2])])


def rpy_ekf_init(params: EkfParams, rpy0, att_std_rad, bias_std_radps,
                 bias0=None) -> RpyEkfState:
  """Initial RPY-EKF state.

  Args:
    params: `EkfParams` (sets the dtype).
    rpy0: `(3,)` initial roll, pitch, yaw, rad.
    att_std_rad: std of roll, pitch, yaw (scalar or `(3,)`), rad.
    bias_std_radps: gyro bias prior std (scalar or `(3,)`), rad/s.
    bias0: `(3,)` initial bias estimate, rad/s; default zeros.

  Returns:
    `RpyEkfState`.
  """
  dtype = params.gravity_mps2.dtype
  b0 = jnp.zeros(3, dtype) if bias0 is None else jnp.asarray(bias0, dtype)
  return RpyEkfState(jnp.asarray(rpy0, dtype), b0,
                     diag_cov(att_std_rad, bias_std_radps, dtype), jnp.zeros(3, dtype),
                     jnp.bool_(False))


def rpy_ekf_predict(params: EkfParams, state: RpyEkfState, gyro, dt) -> RpyEkfState:
  """Propagation `rpy ← rpy + E(r, p)·(ω_m − b)·dt`, `P ← F P Fᵀ + Q`.

  `F = [[I + dt·∂(Eω̂)/∂rpy, −dt·E], [0, I]]`; Q maps the gyro noise through E.

  Args:
    params: `EkfParams`.
    state: `RpyEkfState`.
    gyro: `(3,)` rad/s, body frame.
    dt: seconds.

  Returns:
    Predicted `RpyEkfState` (roll and yaw wrapped; pitch is not folded back into
    [−π/2, π/2], which is still a valid Z-Y-X triple).
  """
  omega = gyro - state.gyro_bias
  e = euler_rate_matrix(state.rpy)
  rpy = _wrap_rpy(state.rpy + dt * smallmat.matvec(e, omega))
  eye = jnp.eye(3, dtype=omega.dtype)
  f = jnp.block([[eye + dt * euler_rate_jacobian(state.rpy, omega), -dt * e],
                 [jnp.zeros((3, 3), omega.dtype), eye]])
  cov = mm(mm(f, state.cov), f.T) + process_noise(params, dt, e)
  return state._replace(rpy=rpy, cov=0.5 * (cov + cov.T), gyro_prev=gyro,
                        gyro_prev_valid=jnp.bool_(True))


def rpy_ekf_update(params: EkfParams, state: RpyEkfState, accel) -> RpyEkfState:
  """Accelerometer update with gating; returns `state` itself when rejected.

  Args:
    params: `EkfParams`.
    state: predicted `RpyEkfState`.
    accel: `(3,)` m/s², body frame.

  Returns:
    Updated `RpyEkfState`.
  """
  r, accept = accel_noise(params, accel)
  h, h_jac = rpy_measurement(params, state.rpy)
  dx, cov = kalman_update(state.cov, h_jac, accel - h, r)
  new = state._replace(rpy=_wrap_rpy(state.rpy + dx[:3]), gyro_bias=state.gyro_bias + dx[3:],
                       cov=cov)
  return tree_where(accept, new, state)


# One IMU sample: `rpy_ekf_step(params, state, gyro, accel, dt, new_data) -> RpyEkfState`.
rpy_ekf_step = ekf_step(rpy_ekf_predict, rpy_ekf_update)


def rpy_ekf_attitude(state: RpyEkfState):
  """Attitude estimate `(4,)`, unit quaternion body → world, from the Euler angles."""
  return quat.from_rpy(state.rpy)


def rpy_ekf() -> Estimator:
  """The RPY EKF as an `Estimator` (init, step, attitude)."""
  return Estimator(rpy_ekf_init, rpy_ekf_step, rpy_ekf_attitude)
