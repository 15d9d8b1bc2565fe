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
  the filter gains spurious yaw information (a wandering `b_z` estimate with a falsely
  collapsed σ on a still, level IMU: docs/internals/estimators.md).
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

from fibril_mjx.mechanisms.estimators.common import (  # noqa: F401
    EkfParams,
    Estimator,
    accel_accepted,
    accel_noise,
    compensated_accel,
    ekf_params,
    kalman_update,
    lever_arm_accel,
    tilt_error_rad,
    tilt_from_accel,
)
from fibril_mjx.mechanisms.estimators.quat_ekf import (  # noqa: F401
    QuatEkfState,
    quat_ekf,
    quat_ekf_attitude,
    quat_ekf_init,
    quat_ekf_predict,
    quat_ekf_step,
    quat_ekf_update,
    quat_measurement,
)
from fibril_mjx.mechanisms.estimators.rpy_ekf import (  # noqa: F401
    RpyEkfState,
    euler_rate_jacobian,
    euler_rate_matrix,
    rpy_ekf,
    rpy_ekf_attitude,
    rpy_ekf_init,
    rpy_ekf_predict,
    rpy_ekf_step,
    rpy_ekf_update,
    rpy_measurement,
)
