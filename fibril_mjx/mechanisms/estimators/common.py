"""What both attitude EKFs share: `EkfParams`, the `Estimator` pair, the gyro/accelerometer
models (noise, lever arm, gating) and the Joseph-form update (see the package docstring)."""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx.mechanisms import quat, smallmat
from fibril_mjx.mechanisms.smallmat import matmul as mm


class EkfParams(NamedTuple):
  """Noise and gating parameters shared by both attitude EKFs (all arrays, differentiable).

  Attributes:
    gyro_noise_density: `(3,)` gyro white-noise density, rad/s/√Hz (IEEE-952 / Kalibr N).
    gyro_bias_random_walk: `(3,)` gyro bias random walk K, rad/s/√s.
    accel_noise_std_mps2: `(3,)` accelerometer noise std per sample, m/s².
    accel_gate_mps2: `()` soft gate on `| ‖a‖ − g |`, m/s²; beyond it R is inflated.
    accel_reject_mps2: `()` hard gate on `| ‖a‖ − g |`, m/s²; beyond it the update is skipped
      (a switch: its gradient is zero almost everywhere).
    gravity_mps2: `()` gravity magnitude g, m/s².
    accel_inflation_gain: `()` c in the inflated variance `σ_a² + c²·(e − gate)²` (1: the
      excess magnitude itself as the std of the unmodelled acceleration per axis).
    lever_arm_m: `(3,)` position of the IMU relative to a reference point on the same rigid
      body whose own acceleration is left to the noise model (a pivot, the centre of mass),
      in the IMU frame, m; zeros: no lever-arm compensation.
  """
  gyro_noise_density: jax.Array
  gyro_bias_random_walk: jax.Array
  accel_noise_std_mps2: jax.Array
  accel_gate_mps2: jax.Array
  accel_reject_mps2: jax.Array
  gravity_mps2: jax.Array
  accel_inflation_gain: jax.Array
  lever_arm_m: jax.Array


def ekf_params(gyro_noise_density=1e-3, gyro_bias_random_walk=1e-5,
               accel_noise_std_mps2=0.05, accel_gate_mps2=0.5, accel_reject_mps2=3.0,
               gravity_mps2=9.81, accel_inflation_gain=1.0, lever_arm_m=0.0,
               dtype=None) -> EkfParams:
  """Builds `EkfParams`, broadcasting per-axis values to `(3,)`.

  Args:
    gyro_noise_density: rad/s/√Hz, scalar or `(3,)`.
    gyro_bias_random_walk: rad/s/√s, scalar or `(3,)`.
    accel_noise_std_mps2: m/s² per sample, scalar or `(3,)`.
    accel_gate_mps2: soft gate, m/s², scalar.
    accel_reject_mps2: hard gate, m/s², scalar (`jnp.inf` disables rejection).
    gravity_mps2: m/s², scalar.
    accel_inflation_gain: c of the inflated variance, scalar.
    lever_arm_m: IMU position relative to the reference point, IMU frame, m, `(3,)`.
    dtype: array dtype; default is JAX's default float (float32 unless x64 is on).

  Returns:
    `EkfParams`.
  """
  dtype = dtype or jnp.zeros(()).dtype
  v3 = lambda v: jnp.broadcast_to(jnp.asarray(v, dtype), (3,))
  s = lambda v: jnp.asarray(v, dtype)
  return EkfParams(v3(gyro_noise_density), v3(gyro_bias_random_walk),
                   v3(accel_noise_std_mps2), s(accel_gate_mps2), s(accel_reject_mps2),
                   s(gravity_mps2), s(accel_inflation_gain), v3(lever_arm_m))


class Estimator(NamedTuple):
  """An attitude estimator as pure functions.

  Attributes:
    init: `init(params, attitude0, att_std_rad, bias_std_radps, bias0=None) -> state`.
    step: `step(params, state, gyro (3,) rad/s, accel (3,) m/s², dt s, new_data) -> state`.
    attitude: `attitude(state) -> (4,)` unit quaternion body → world.
  """
  init: Callable
  step: Callable
  attitude: Callable


# ------------------------------------------------------------------------- helpers


def skew(v):
  """`[v]×` `(3, 3)` with `[v]× w = v × w`."""
  z = jnp.zeros_like(v[0])
  return jnp.stack([
      jnp.stack([z, -v[2], v[1]]),
      jnp.stack([v[2], z, -v[0]]),
      jnp.stack([-v[1], v[0], z]),
  ])


def tree_where(c, a, b):
  """`a` where the scalar `c` is True, else `b`, leaf by leaf (two pytrees of one structure)."""
  return jax.tree_util.tree_map(lambda x, y: jnp.where(c, x, y), a, b)


def diag_cov(att_std_rad, bias_std_radps, dtype):
  """Initial covariance `(6, 6)` of `[attitude error, gyro bias]`: diagonal, from the 1σ
  values (scalars or `(3,)`; rad, rad/s)."""
  att = jnp.broadcast_to(jnp.asarray(att_std_rad, dtype), (3,))
  bias = jnp.broadcast_to(jnp.asarray(bias_std_radps, dtype), (3,))
  return jnp.diag(jnp.concatenate([att, bias]) ** 2)


def accel_noise(params, accel):
  """Measurement covariance `(3, 3)` after gating, and whether to update at all."""
  e = jnp.abs(jnp.linalg.norm(accel) - params.gravity_mps2)
  excess = params.accel_inflation_gain * jnp.maximum(e - params.accel_gate_mps2, 0.0)
  r = jnp.diag(params.accel_noise_std_mps2 ** 2 + excess ** 2)
  return r, e <= params.accel_reject_mps2


def process_noise(params, dt, rate_map):
  """Discrete process noise `(6, 6)` of `[angle error, δb]`.

  Continuous model: `angle' = M·(−δb − n_g)`, `δb' = n_b` with white `n_g` of density
  `N` and `n_b` of density `K`; `M` maps body rates to the angle parameterization (I for
  the quaternion error, E(roll, pitch) for Euler angles), held constant over dt.
  """
  n2 = params.gyro_noise_density ** 2
  k2 = params.gyro_bias_random_walk ** 2
  q_aa = mm(rate_map * (n2 * dt + k2 * dt ** 3 / 3.0), rate_map.T)   # M diag(·) Mᵀ
  q_ab = -rate_map * (k2 * dt ** 2 / 2.0)                              # −M diag(·)
  q_bb = jnp.diag(k2 * dt)
  return jnp.block([[q_aa, q_ab], [q_ab.T, q_bb]])


def lever_arm_accel(omega, alpha, lever_arm):
  """Specific force of the rotation at an IMU offset by `r` from a reference point.

  On a rigid body `a_imu = a_ref + α × r + ω × (ω × r)` (tangential and centripetal terms);
  the accelerometer adds `−g`, so the measured specific force is the reference point's
  plus these two terms.

  Args:
    omega: `(3,)` angular velocity, rad/s, IMU frame.
    alpha: `(3,)` angular acceleration, rad/s², IMU frame.
    lever_arm: `(3,)` IMU position relative to the reference point, m, IMU frame.

  Returns:
    `(3,)` m/s², IMU frame.
  """
  return jnp.cross(alpha, lever_arm) + jnp.cross(omega, jnp.cross(omega, lever_arm))


def compensated_accel(params, state, gyro, accel, dt):
  """The accelerometer sample with the lever-arm terms of the rotation removed.

  `a − α̂ × r − ω̂ × (ω̂ × r)` with the bias-corrected rate `ω̂ = gyro − b_g` and the angular
  acceleration `α̂ = (gyro − gyro_prev)/dt` (backward difference of consecutive samples; the
  bias cancels). Without a previous sample or with `dt = 0`, `α̂ = 0`. With a zero lever arm
  this returns `accel` exactly.

  Args:
    params: `EkfParams` (uses `lever_arm_m`).
    state: the filter state before this sample (`gyro_bias`, `gyro_prev`, `gyro_prev_valid`).
    gyro: `(3,)` rad/s; accel: `(3,)` m/s²; dt: seconds since the previous sample.

  Returns:
    `(3,)` m/s².
  """
  ok = state.gyro_prev_valid & (dt > 0)
  alpha = jnp.where(ok, (gyro - state.gyro_prev) / jnp.where(ok, dt, 1.0), 0.0)
  return accel - lever_arm_accel(gyro - state.gyro_bias, alpha, params.lever_arm_m)


def accel_accepted(params, accel):
  """Whether the hard gate lets the (compensated) sample `accel` update the filter, `()`."""
  return accel_noise(params, accel)[1]


def kalman_update(cov, h_jac, innovation, r):
  """Joseph-form update. Returns the error-state correction `(6,)` and covariance."""
  pht = mm(cov, h_jac.T)
  s = mm(h_jac, pht) + r
  gain = mm(pht, smallmat.inv3(s))      # K = P Hᵀ S⁻¹
  i_kh = jnp.eye(cov.shape[0], dtype=cov.dtype) - mm(gain, h_jac)
  cov = mm(mm(i_kh, cov), i_kh.T) + mm(mm(gain, r), gain.T)
  return smallmat.matvec(gain, innovation), 0.5 * (cov + cov.T)


def tilt_from_accel(accel, yaw=0.0):
  """Roll and pitch that make a still accelerometer read `accel` (Z-Y-X, z up).

  Args:
    accel: `(3,)` specific force in the body frame, m/s².
    yaw: yaw to put in the result, rad (not observable from `accel`).

  Returns:
    `(3,)` [roll, pitch, yaw] in rad.
  """
  roll = jnp.arctan2(accel[1], accel[2])
  pitch = jnp.arctan2(-accel[0], jnp.sqrt(accel[1] ** 2 + accel[2] ** 2))
  return jnp.stack([roll, pitch, jnp.asarray(yaw, roll.dtype)])


def tilt_error_rad(q_est, q_true):
  """Angle between the estimated and true gravity directions in the body, rad.

  The roll/pitch (tilt) error independent of yaw: the angle between `R(q_est)ᵀ e_z` and
  `R(q_true)ᵀ e_z`. Its gradient is undefined at zero error; for a training loss use the
  squared chord `‖R(q_est)ᵀ e_z − R(q_true)ᵀ e_z‖²` instead.

  Args:
    q_est, q_true: `(..., 4)` unit quaternions body → world.

  Returns:
    `(...)` radians in [0, π].
  """
  u = quat.to_matrix(q_est)[..., 2, :]
  v = quat.to_matrix(q_true)[..., 2, :]
  return jnp.arctan2(jnp.linalg.norm(jnp.cross(u, v), axis=-1), jnp.sum(u * v, axis=-1))


# ------------------------------------------------------------------ quaternion EKF


def predict_update_step(predict, update, params, state, gyro, accel, dt, new_data):
  """One IMU sample of either EKF: `predict` with the gyro over `dt`, then `update` with the
  lever-arm compensated accelerometer (`compensated_accel`); the state is kept when `new_data`
  is False (a select, so it works under `vmap` with per-world masks).

  Args:
    predict, update: the filter's `(params, state, gyro, dt)` and `(params, state, accel)`.
    params: `EkfParams`.
    state: the filter's state (`QuatEkfState` / `RpyEkfState`).
    gyro: `(3,)` rad/s, body frame.
    accel: `(3,)` m/s², body frame (specific force).
    dt: seconds since the previously processed sample.
    new_data: bool `()`; when False the state is returned unchanged.

  Returns:
    The filter's state after the sample.
  """
  a_c = compensated_accel(params, state, gyro, accel, dt)
  new = update(params, predict(params, state, gyro, dt), a_c)
  return tree_where(new_data, new, state)


def ekf_step(predict, update):
  """The `Estimator.step` of a filter: `predict_update_step` with its `predict` and `update`."""
  def step(params, state, gyro, accel, dt, new_data):
    return predict_update_step(predict, update, params, state, gyro, accel, dt, new_data)
  step.__doc__ = (f'One IMU sample (`predict_update_step` of `{predict.__name__}`, '
                  f'`{update.__name__}`: its Args; returns the filter\'s state).')
  return step
