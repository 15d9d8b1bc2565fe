"""Attitude estimators that consume IMU samples (SPEC §7).

Two extended Kalman filters, each a pure `(init, step)` pair on a single world (batch with
one `jax.vmap`, run over time with `lax.scan`), differentiable in their noise parameters:

- **Quaternion EKF** (`quat_ekf`): a multiplicative, error-state EKF. The nominal state is
  the unit quaternion `q` (body → world, `[w, x, y, z]`, `quat.py` conventions) and the gyro
  bias `b_g`; the covariance is 6×6 over the error state `[δθ, δb]` with
  `q_true = [1, δθ/2] ⊗ q` (δθ: small rotation in the **world** frame, rad) and
  `b_true = b_g + δb` (rad/s). The 6×6 form avoids the rank-deficient 7×7 covariance of the
  unit-norm quaternion. The world-frame error keeps yaw on a fixed error axis (world z),
  which the accelerometer Jacobian annihilates at every linearization point; with a
  body-frame error (`q ⊗ [1, δθ/2]`) the null direction moves with each re-linearization,
  the filter gains spurious yaw information, and on a still, level IMU its `b_z` estimate
  wandered by ±0.05 rad/s with a falsely collapsed σ ≈ 0.002 rad/s over 60 s.
- **RPY EKF** (`rpy_ekf`): state `[roll, pitch, yaw, b_g]` (Z-Y-X Euler angles, rad) with
  the full Euler-rate kinematics and a 6×6 covariance. It is singular at pitch = ±90°
  (see `euler_rate_matrix`) and is provided as the reference the attitude-estimation notes
  (restated in SPEC §7) compare with.

Both use the same models and `EkfParams`:

- prediction with the bias-corrected gyro `ω̂ = ω_m − b_g` over `dt`; quaternion:
  `q ← normalize(q ⊗ [1, ω̂·dt/2])`; RPY: `rpy ← rpy + E(roll, pitch)·ω̂·dt`;
- gyro bias: random walk `b ← b + K√dt·ξ`; gyro white noise of density `N`
  (IEEE-952 / Kalibr: per-sample σ = N/√dt, angle variance `N²·dt` per step);
- measurement: the accelerometer's specific force at rest, `h = R(q)ᵀ g`, `g = [0, 0, g]`
  (z up; a still, level accelerometer reads `+g` on z), with analytic Jacobians; noise
  σ = `accel_noise_std_mps2` per axis (a density N_a maps to `N_a/√dt`);
- lever arm (`lever_arm_m`, the IMU's known offset r from a reference point of its rigid
  body): each sample is compensated to `a − α̂ × r − ω̂ × (ω̂ × r)` before the update
  (`compensated_accel`; SPEC §5.2: `a_sensor = a_ref + α × r + ω × (ω × r)`), with the
  bias-corrected gyro and `α̂` the backward difference of consecutive gyro samples. The
  dependence of the compensation on `b_g` is left out of the Jacobian (second order);
- accelerometer gating on `e = | ‖a‖ − g |` of the compensated sample (the robot
  accelerates): above `accel_gate_mps2` the measurement variance is inflated to
  `σ_a² + c²·(e − accel_gate_mps2)²`, `c = accel_inflation_gain` (the excess magnitude is a
  lower bound on the non-gravitational acceleration; C¹ at the gate, so with the gate at 0
  the noise adapts smoothly); above `accel_reject_mps2` the update is skipped (set it to
  `inf` to never skip);
- Joseph-form covariance update `P ← (I − KH) P (I − KH)ᵀ + K R Kᵀ`.

Observability: the accelerometer sees only the direction of gravity, so **yaw is
unobservable** — its variance grows as the integrated gyro noise, which is expected. For the
same reason only the gyro-bias components orthogonal to gravity (in the body frame) are
observable while the attitude is static: on a level, still body `b_x`, `b_y` converge and
`b_z` stays at its prior (a `b_z` error only makes yaw drift). Rotating the body moves
gravity through the body axes and makes all three observable over time.

Timing: `step(params, state, gyro, accel, dt, new_data)` processes one IMU sample; `dt` is
the time since the previously processed sample (use the IMU's nominal `period_s`). When
`new_data` is False the state is returned unchanged (selected with `jnp.where`, so it works
under `vmap` with per-world masks).
"""

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


def _skew(v):
  """`[v]×` `(3, 3)` with `[v]× w = v × w`."""
  z = jnp.zeros_like(v[0])
  return jnp.stack([
      jnp.stack([z, -v[2], v[1]]),
      jnp.stack([v[2], z, -v[0]]),
      jnp.stack([-v[1], v[0], z]),
  ])


def _tree_where(c, a, b):
  return jax.tree_util.tree_map(lambda x, y: jnp.where(c, x, y), a, b)


def _diag_cov(att_std_rad, bias_std_radps, dtype):
  att = jnp.broadcast_to(jnp.asarray(att_std_rad, dtype), (3,))
  bias = jnp.broadcast_to(jnp.asarray(bias_std_radps, dtype), (3,))
  return jnp.diag(jnp.concatenate([att, bias]) ** 2)


def _accel_noise(params, accel):
  """Measurement covariance `(3, 3)` after gating, and whether to update at all."""
  e = jnp.abs(jnp.linalg.norm(accel) - params.gravity_mps2)
  excess = params.accel_inflation_gain * jnp.maximum(e - params.accel_gate_mps2, 0.0)
  r = jnp.diag(params.accel_noise_std_mps2 ** 2 + excess ** 2)
  return r, e <= params.accel_reject_mps2


def _process_noise(params, dt, rate_map):
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
  return _accel_noise(params, accel)[1]


def _kalman_update(cov, h_jac, innovation, r):
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
  return QuatEkfState(q0, b0, _diag_cov(att_std_rad, bias_std_radps, dtype),
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
  g_skew = _skew(jnp.stack([jnp.zeros_like(g), jnp.zeros_like(g), g]))
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
  cov = mm(mm(phi, state.cov), phi.T) + _process_noise(params, dt, rot)
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
  r, accept = _accel_noise(params, accel)
  h, h_jac = quat_measurement(params, state.q)
  dx, cov = _kalman_update(state.cov, h_jac, accel - h, r)
  dq = jnp.concatenate([jnp.ones((1,), dx.dtype), 0.5 * dx[:3]])
  new = state._replace(q=quat.normalize(quat.multiply(dq, state.q)),
                       gyro_bias=state.gyro_bias + dx[3:], cov=cov)
  return _tree_where(accept, new, state)


def quat_ekf_step(params: EkfParams, state: QuatEkfState, gyro, accel, dt,
                  new_data) -> QuatEkfState:
  """One IMU sample: predict with `gyro` over `dt`, then update with `accel` (lever-arm
  compensated, `compensated_accel`).

  Args:
    params: `EkfParams`.
    state: `QuatEkfState`.
    gyro: `(3,)` rad/s, body frame.
    accel: `(3,)` m/s², body frame (specific force).
    dt: seconds since the previously processed sample.
    new_data: bool `()`; when False the state is returned unchanged.

  Returns:
    `QuatEkfState`.
  """
  a_c = compensated_accel(params, state, gyro, accel, dt)
  new = quat_ekf_update(params, quat_ekf_predict(params, state, gyro, dt), a_c)
  return _tree_where(new_data, new, state)


def quat_ekf_attitude(state: QuatEkfState):
  """Attitude estimate `(4,)`, unit quaternion body → world."""
  return state.q


def quat_ekf() -> Estimator:
  """The quaternion EKF as an `Estimator` (init, step, attitude)."""
  return Estimator(quat_ekf_init, quat_ekf_step, quat_ekf_attitude)


# ------------------------------------------------------------------------ RPY EKF


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


def _euler_rate_jacobian(rpy, omega):
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
                     _diag_cov(att_std_rad, bias_std_radps, dtype), jnp.zeros(3, dtype),
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
  f = jnp.block([[eye + dt * _euler_rate_jacobian(state.rpy, omega), -dt * e],
                 [jnp.zeros((3, 3), omega.dtype), eye]])
  cov = mm(mm(f, state.cov), f.T) + _process_noise(params, dt, e)
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
  r, accept = _accel_noise(params, accel)
  h, h_jac = rpy_measurement(params, state.rpy)
  dx, cov = _kalman_update(state.cov, h_jac, accel - h, r)
  new = state._replace(rpy=_wrap_rpy(state.rpy + dx[:3]), gyro_bias=state.gyro_bias + dx[3:],
                       cov=cov)
  return _tree_where(accept, new, state)


def rpy_ekf_step(params: EkfParams, state: RpyEkfState, gyro, accel, dt,
                 new_data) -> RpyEkfState:
  """One IMU sample: predict with `gyro` over `dt`, then update with `accel`.

  Args:
    params: `EkfParams`.
    state: `RpyEkfState`.
    gyro: `(3,)` rad/s, body frame.
    accel: `(3,)` m/s², body frame.
    dt: seconds since the previously processed sample.
    new_data: bool `()`; when False the state is returned unchanged.

  Returns:
    `RpyEkfState`.
  """
  a_c = compensated_accel(params, state, gyro, accel, dt)
  new = rpy_ekf_update(params, rpy_ekf_predict(params, state, gyro, dt), a_c)
  return _tree_where(new_data, new, state)


def rpy_ekf_attitude(state: RpyEkfState):
  """Attitude estimate `(4,)`, unit quaternion body → world, from the Euler angles."""
  return quat.from_rpy(state.rpy)


def rpy_ekf() -> Estimator:
  """The RPY EKF as an `Estimator` (init, step, attitude)."""
  return Estimator(rpy_ekf_init, rpy_ekf_step, rpy_ekf_attitude)
