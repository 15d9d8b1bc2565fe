"""The quaternion attitude EKF (multiplicative error state, world-frame error; see the package
docstring)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx.mechanisms import quat
from fibril_mjx.mechanisms.smallmat import matmul as mm
from fibril_mjx.mechanisms.estimators.common import (EkfParams, Estimator, accel_noise, diag_cov,
                                                     kalman_update, process_noise, skew,
                                                     tree_where, ekf_step)


class QuatEkfState(NamedTuple):
  """State of the quaternion (error-state) EKF.

  Attributes:
    q: `(4,)` unit quaternion body → world, `[w, x, y, z]`.
    gyro_bias: `(3,)` gyro bias estimate, rad/s.
    cov: `(6, 6)` covariance of `[δθ (rad, world frame), δb (rad/s)]`.
    gyro_prev: `(3,)` previous gyro sample, rad/s (for the angular acceleration).
    gyro_prev_valid: bool `()`, whether `gyro_prev` holds a sample.
  """
  q: jax.Array
  gyro_bias: jax.Array
  cov: jax.Array
  gyro_prev: jax.Array
  gyro_prev_valid: jax.Array


def quat_ekf_init(params: EkfParams, q0, att_std_rad, bias_std_radps,
                  bias0=None) -> QuatEkfState:
  """Initial quaternion-EKF state.

  Args:
    params: `EkfParams` (sets the dtype).
    q0: `(4,)` initial attitude body → world (normalized here).
    att_std_rad: attitude error std, scalar or `(3,)`, rad (world-frame rotation vector;
      index 2 is yaw).
    bias_std_radps: gyro bias prior std (scalar or `(3,)`, rad/s).
    bias0: `(3,)` initial bias estimate, rad/s; default zeros.

  Returns:
    `QuatEkfState`.
  """
  dtype = params.gravity_mps2.dtype
  q0 = quat.normalize(jnp.asarray(q0, dtype))
  b0 = jnp.zeros(3, dtype) if bias0 is None else jnp.asarray(bias0, dtype)
  return QuatEkfState(q0, b0, diag_cov(att_std_rad, bias_std_radps, dtype),
                      jnp.zeros(3, dtype), jnp.bool_(False))


def quat_measurement(params: EkfParams, q):
  """Predicted accelerometer reading `h(q) = R(q)ᵀ [0, 0, g]` and its Jacobian.

  Args:
    params: `EkfParams` (uses `gravity_mps2`).
    q: `(4,)` unit quaternion body → world.

  Returns:
    `(h, H)`: `(3,)` specific force in the body frame, m/s², and `(3, 6)` Jacobian w.r.t.
    the error state `[δθ, δb]`. With the world-frame error `R_true = R(δθ) R(q)`,
    `h ≈ R(q)ᵀ (I − [δθ]×) g_w`, so `H = [R(q)ᵀ [g_w]×, 0]`; its null direction is world z
    (yaw) at every linearization point.
  """
  w, x, y, z = q[0], q[1], q[2], q[3]
  g = params.gravity_mps2
  h = g * jnp.stack(
      [2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z])
  g_skew = skew(jnp.stack([jnp.zeros_like(g), jnp.zeros_like(g), g]))
  h_jac = jnp.concatenate([mm(quat.to_matrix(q).T, g_skew), jnp.zeros((3, 3), h.dtype)], axis=1)
  return h, h_jac


def quat_ekf_predict(params: EkfParams, state: QuatEkfState, gyro, dt) -> QuatEkfState:
  """Propagation `q ← normalize(q ⊗ [1, ω̂ dt/2])`, `P ← Φ P Φᵀ + Q`.

  In the world-frame error the attitude error does not rotate with the body:
  `δθ' = −R(q)(δb + n_g)`, so `Φ = [[I, −R(q)·dt], [0, I]]` and the gyro noise enters
  through `R(q)` (q at the start of the step).

  Args:
    params: `EkfParams`.
    state: `QuatEkfState`.
    gyro: `(3,)` measured angular velocity, body frame, rad/s.
    dt: step in seconds.

  Returns:
    Predicted `QuatEkfState` (remembering `gyro` for the next angular acceleration).
  """
  omega = gyro - state.gyro_bias
  dq = jnp.concatenate([jnp.ones((1,), omega.dtype), 0.5 * dt * omega])
  q = quat.normalize(quat.multiply(state.q, dq))
  eye = jnp.eye(3, dtype=omega.dtype)
  rot = quat.to_matrix(state.q)
  phi = jnp.block([[eye, -dt * rot], [jnp.zeros((3, 3), omega.dtype), eye]])
  cov = mm(mm(phi, state.cov), phi.T) + process_noise(params, dt, rot)
  return state._replace(q=q, cov=0.5 * (cov + cov.T), gyro_prev=gyro,
                        gyro_prev_valid=jnp.bool_(True))


def quat_ekf_update(params: EkfParams, state: QuatEkfState, accel) -> QuatEkfState:
  """Accelerometer update with gating; returns `state` itself when rejected.

  The correction is injected as `q ← normalize([1, δθ/2] ⊗ q)`, `b ← b + δb`; the
  covariance is kept as is (reset Jacobian ≈ I; in the world-frame error the large yaw
  variance stays along world z exactly).

  Args:
    params: `EkfParams`.
    state: predicted `QuatEkfState`.
    accel: `(3,)` measured specific force, body frame, m/s².

  Returns:
    Updated `QuatEkfState`.
  """
  r, accept = accel_noise(params, accel)
  h, h_jac = quat_measurement(params, state.q)
  dx, cov = kalman_update(state.cov, h_jac, accel - h, r)
  dq = jnp.concatenate([jnp.ones((1,), dx.dtype), 0.5 * dx[:3]])
  new = state._replace(q=quat.normalize(quat.multiply(dq, state.q)),
                       gyro_bias=state.gyro_bias + dx[3:], cov=cov)
  return tree_where(accept, new, state)


# One IMU sample: `quat_ekf_step(params, state, gyro, accel, dt, new_data) -> QuatEkfState`.
quat_ekf_step = ekf_step(quat_ekf_predict, quat_ekf_update)


def quat_ekf_attitude(state: QuatEkfState):
  """Attitude estimate `(4,)`, unit quaternion body → world."""
  return state.q


def quat_ekf() -> Estimator:
  """The quaternion EKF as an `Estimator` (init, step, attitude)."""
  return Estimator(quat_ekf_init, quat_ekf_step, quat_ekf_attitude)


# ------------------------------------------------------------------------ RPY EKF
