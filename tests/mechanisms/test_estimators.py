"""Tests for fibril_mjx.mechanisms.estimators: attitude EKFs against a NumPy truth generator.

The truth is written here independently of `fibril_mjx.mechanisms.quat`: rotation matrices built from
elementary rotations, body angular velocity from their analytic derivatives, and the
accelerometer's specific force at rest/under pure rotation about the IMU, `Rᵀ [0, 0, g]`.
Errors are measured in float64 NumPy from the estimators' quaternions.
"""

import functools

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from fibril_mjx.mechanisms import estimators as est

G = 9.81
DT = 0.01  # 100 Hz IMU

# A MEMS-class IMU (per-sample σ = density / √dt, Kalibr convention).
GYRO_DENSITY = 5e-4       # rad/s/√Hz
GYRO_RW = 1e-5            # rad/s/√s
ACCEL_STD = 0.02          # m/s² per sample
BIAS = np.array([0.01, -0.02, 0.015])  # rad/s, injected constant gyro bias


# ----------------------------------------------------------------- NumPy reference


def _rx(a):
  c, s, o, z = np.cos(a), np.sin(a), np.ones_like(a), np.zeros_like(a)
  return np.stack([np.stack([o, z, z], -1), np.stack([z, c, -s], -1),
                   np.stack([z, s, c], -1)], -2)


def _ry(a):
  c, s, o, z = np.cos(a), np.sin(a), np.ones_like(a), np.zeros_like(a)
  return np.stack([np.stack([c, z, s], -1), np.stack([z, o, z], -1),
                   np.stack([-s, z, c], -1)], -2)


def _rz(a):
  c, s, o, z = np.cos(a), np.sin(a), np.ones_like(a), np.zeros_like(a)
  return np.stack([np.stack([c, -s, z], -1), np.stack([s, c, z], -1),
                   np.stack([z, z, o], -1)], -2)


def np_quat_to_matrix(q):
  """Body → world rotation of `[w, x, y, z]` quaternions `(..., 4)`, float64."""
  q = np.asarray(q, np.float64)
  q = q / np.linalg.norm(q, axis=-1, keepdims=True)
  w, x, y, z = np.moveaxis(q, -1, 0)
  return np.stack([
      np.stack([w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
      np.stack([2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)], -1),
      np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z], -1),
  ], -2)


def np_matrix_to_quat(r):
  """`[w, x, y, z]` of a rotation matrix `(3, 3)` (Shepperd), float64."""
  tr = np.trace(r)
  k = np.argmax([tr, r[0, 0], r[1, 1], r[2, 2]])
  if k == 0:
    s = 2 * np.sqrt(1 + tr)
    q = [s / 4, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s]
  elif k == 1:
    s = 2 * np.sqrt(1 + r[0, 0] - r[1, 1] - r[2, 2])
    q = [(r[2, 1] - r[1, 2]) / s, s / 4, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s]
  elif k == 2:
    s = 2 * np.sqrt(1 + r[1, 1] - r[0, 0] - r[2, 2])
    q = [(r[0, 2] - r[2, 0]) / s, (r[0, 1] + r[1, 0]) / s, s / 4, (r[1, 2] + r[2, 1]) / s]
  else:
    s = 2 * np.sqrt(1 + r[2, 2] - r[0, 0] - r[1, 1])
    q = [(r[1, 0] - r[0, 1]) / s, (r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, s / 4]
  return np.array(q)


def np_matrix_to_rpy(r):
  """Z-Y-X roll, pitch, yaw of rotation matrices `(..., 3, 3)`."""
  return np.stack([np.arctan2(r[..., 2, 1], r[..., 2, 2]),
                   -np.arcsin(np.clip(r[..., 2, 0], -1, 1)),
                   np.arctan2(r[..., 1, 0], r[..., 0, 0])], -1)


def attitude_error_deg(q_est, r_true):
  """Full rotation angle between estimate and truth `(n,)`, degrees."""
  m = np.einsum('...ji,...jk->...ik', np_quat_to_matrix(q_est), r_true)
  v = np.stack([m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                m[..., 1, 0] - m[..., 0, 1]], -1)
  return np.degrees(np.arctan2(np.linalg.norm(v, axis=-1), np.trace(m, axis1=-2, axis2=-1) - 1))


def tilt_error_deg(q_est, r_true):
  """Angle between estimated and true gravity direction in the body `(n,)`, degrees."""
  u = np_quat_to_matrix(q_est)[..., 2, :]
  v = r_true[..., 2, :]
  return np.degrees(np.arctan2(np.linalg.norm(np.cross(u, v), axis=-1), np.sum(u * v, -1)))


FREQ = np.array([0.23, 0.1, 0.17])
PHASE = np.array([0.3, 0.0, 1.0])


def motion(t, amp, tilt=0.0):
  """Truth `R(t) = Rz(ψ) Rx(ε) Ry(θ) Rx(φ)` with sinusoidal φ, θ, ψ, and body rates.

  With ε = 0 these are Z-Y-X roll φ, pitch θ, yaw ψ. With ε ≠ 0 and |θ| reaching 90° the
  body passes within ε of the Z-Y-X singularity (pitch ±90°), where roll and yaw swing fast.

  Returns:
    `(R (n, 3, 3), omega_body (n, 3) rad/s)`.
  """
  w = 2 * np.pi * FREQ
  ang = amp * np.sin(w * t[:, None] + PHASE)
  rate = amp * w * np.cos(w * t[:, None] + PHASE)
  phi, th, psi = ang.T
  dphi, dth, dpsi = rate.T
  r_eps = _rx(np.full(t.shape, float(tilt)))
  r = _rz(psi) @ r_eps @ _ry(th) @ _rx(phi)
  # ω_body = vee(Rᵀ Ṙ), term by term.
  a = np.swapaxes(r_eps @ _ry(th) @ _rx(phi), -1, -2)
  b = np.swapaxes(_rx(phi), -1, -2)
  omega = (np.einsum('kij,kj->ki', a, np.stack([0 * t, 0 * t, dpsi], -1))
           + np.einsum('kij,kj->ki', b, np.stack([0 * t, dth, 0 * t], -1))
           + np.stack([dphi, 0 * t, 0 * t], -1))
  return r, omega


def imu_samples(n, amp, tilt, seed, bias=BIAS):
  """Noisy gyro/accel at t_k = k·DT, k = 1..n, plus the truth.

  The gyro sample k is the body rate at the middle of (t_{k−1}, t_k] (the rate the EKFs
  hold over the step) plus bias and white noise; the accelerometer is `Rᵀ g + noise`.

  Returns:
    `(gyro (n, 3), accel (n, 3), R_true (n, 3, 3), R0 (3, 3))`, float64.
  """
  rng = np.random.default_rng(seed)
  t = np.arange(1, n + 1) * DT
  _, omega = motion(t - DT / 2, amp, tilt)
  r, _ = motion(t, amp, tilt)
  r0, _ = motion(np.zeros(1), amp, tilt)
  gyro = omega + bias + GYRO_DENSITY / np.sqrt(DT) * rng.standard_normal((n, 3))
  accel = G * r[:, 2, :] + ACCEL_STD * rng.standard_normal((n, 3))
  return gyro, accel, r, r0[0]


def test_truth_generator_rates_match_numerical_derivative():
  t = np.linspace(0, 20, 501)
  for amp, tilt in [((0.4, 0.7, 0.8), 0.0), ((0.2, 1.75, 0.3), 0.01)]:
    amp = np.array(amp)
    r, omega = motion(t, amp, tilt)
    h = 1e-6
    r_dot = (motion(t + h, amp, tilt)[0] - motion(t - h, amp, tilt)[0]) / (2 * h)
    w = np.einsum('kji,kjl->kil', r, r_dot)
    np.testing.assert_allclose(np.stack([w[:, 2, 1], w[:, 0, 2], w[:, 1, 0]], -1), omega,
                               atol=1e-7)


# ----------------------------------------------------------------------- runners


def params(**kw):
  base = dict(gyro_noise_density=GYRO_DENSITY, gyro_bias_random_walk=GYRO_RW,
              accel_noise_std_mps2=ACCEL_STD, accel_gate_mps2=0.5, accel_reject_mps2=3.0,
              gravity_mps2=G)
  base.update(kw)
  return est.ekf_params(**base)


def run(estimator, p, state0, gyro, accel, new_data=None):
  """Scan `estimator.step` over samples; returns (final state, attitudes, biases)."""
  if new_data is None:
    new_data = jnp.ones(gyro.shape[0], bool)

  def body(state, x):
    state = estimator.step(p, state, x[0], x[1], DT, x[2])
    return state, (estimator.attitude(state), state.gyro_bias)

  return jax.lax.scan(body, state0, (gyro, accel, new_data))


run_jit = jax.jit(run, static_argnums=0)


@functools.partial(jax.jit, static_argnums=0)
def run_batch(estimator, p, state0, gyro, accel, new_data=None):
  """`run` vmapped over a leading world axis of params, state and samples."""
  if new_data is None:
    new_data = jnp.ones(gyro.shape[:2], bool)
  return jax.vmap(functools.partial(run, estimator))(p, state0, gyro, accel, new_data)


def stack(trees):
  return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *trees)


def f32(x):
  return jnp.asarray(x, jnp.float32)


def rotate_about(r, axis, angle):
  """`r · Rot(axis, angle)` (a body-frame perturbation), NumPy."""
  axis = np.asarray(axis, np.float64) / np.linalg.norm(axis)
  k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
  return r @ (np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k)


# ------------------------------------------------------------- equations vs NumPy


def test_quat_measurement_and_jacobian_match_numpy():
  with jax.enable_x64(True):
    p = params(dtype=jnp.float64)
    rng = np.random.default_rng(0)
    for _ in range(5):
      q = rng.standard_normal(4)
      q /= np.linalg.norm(q)
      h, h_jac = est.quat_measurement(p, jnp.asarray(q))
      r = np_quat_to_matrix(q)
      np.testing.assert_allclose(h, r.T @ [0, 0, G], atol=1e-12)
      # World-frame error: R_true = Rot(δθ) R.
      num = np.zeros((3, 3))
      for j in range(3):
        e = np.zeros(3)
        e[j] = 1e-6
        hp = (rotate_about(np.eye(3), e, 1e-6) @ r).T @ [0, 0, G]
        hm = (rotate_about(np.eye(3), e, -1e-6) @ r).T @ [0, 0, G]
        num[:, j] = (hp - hm) / 2e-6
      np.testing.assert_allclose(h_jac[:, :3], num, atol=1e-7)
      np.testing.assert_array_equal(h_jac[:, 3:], 0)
      # The null direction of the attitude block is world z (yaw) at any attitude.
      np.testing.assert_allclose(np.asarray(h_jac[:, :3]) @ [0, 0, 1], 0, atol=1e-12)


def test_rpy_equations_match_numpy():
  with jax.enable_x64(True):
    p = params(dtype=jnp.float64)
    t = np.linspace(0, 10, 7)
    amp = np.array([0.4, 0.7, 0.8])
    r, omega = motion(t, amp)
    rpy = np_matrix_to_rpy(r)
    w = 2 * np.pi * FREQ
    rpy_dot = amp * w * np.cos(w * t[:, None] + PHASE)
    for k in range(t.size):
      e = np.asarray(est.euler_rate_matrix(jnp.asarray(rpy[k])))
      np.testing.assert_allclose(e @ omega[k], rpy_dot[k], atol=1e-12)
      h, h_jac = est.rpy_measurement(p, jnp.asarray(rpy[k]))
      np.testing.assert_allclose(h, r[k].T @ [0, 0, G], atol=1e-12)
      num_h = np.zeros((3, 3))
      num_f = np.zeros((3, 3))
      for j in range(3):
        d = np.zeros(3)
        d[j] = 1e-6
        rp = _rz(rpy[k, 2] + d[2]) @ _ry(rpy[k, 1] + d[1]) @ _rx(rpy[k, 0] + d[0])
        rm = _rz(rpy[k, 2] - d[2]) @ _ry(rpy[k, 1] - d[1]) @ _rx(rpy[k, 0] - d[0])
        num_h[:, j] = (rp.T - rm.T) @ [0, 0, G] / 2e-6
        ep = np.asarray(est.euler_rate_matrix(jnp.asarray(rpy[k] + d)))
        em = np.asarray(est.euler_rate_matrix(jnp.asarray(rpy[k] - d)))
        num_f[:, j] = (ep - em) @ omega[k] / 2e-6
      np.testing.assert_allclose(h_jac[:, :3], num_h, atol=1e-7)
      jac_f = est.euler_rate_jacobian(jnp.asarray(rpy[k]), jnp.asarray(omega[k]))
      np.testing.assert_allclose(jac_f, num_f, atol=1e-7)


# ------------------------------------------------------------------ convergence


def test_quat_ekf_converges_from_30deg_and_estimates_observable_bias():
  """Static IMU, 30° initial error, constant gyro bias: tilt and bias converge.

  World 0 is level, world 1 is tilted (roll 0.3, pitch −0.2). Observable: the bias
  components orthogonal to gravity in the body frame; the one along gravity (b_z when level)
  only drives yaw and stays at its prior, while the yaw variance grows.
  """
  n = 6000  # 60 s
  tilt_bound_deg = 0.25
  bias_bound = 1e-3  # rad/s, ≈ 5σ of the filter's own final σ (≈2e-4)
  p = params()
  gyros, accels, truths, states, tilt0 = [], [], [], [], []
  for world, rpy in enumerate([(0.0, 0.0, 0.5), (0.3, -0.2, -1.0)]):
    r_true = _rz(np.float64(rpy[2])) @ _ry(np.float64(rpy[1])) @ _rx(np.float64(rpy[0]))
    rng = np.random.default_rng(10 + world)
    gyro = BIAS + GYRO_DENSITY / np.sqrt(DT) * rng.standard_normal((n, 3))
    accel = G * r_true[2] + ACCEL_STD * rng.standard_normal((n, 3))
    r0 = rotate_about(r_true, [1.0, -0.7, 0.2], np.radians(30))
    tilt0.append(tilt_error_deg(np_matrix_to_quat(r0), r_true))
    states.append(est.quat_ekf_init(p, f32(np_matrix_to_quat(r0)), np.radians(30), 0.05))
    gyros.append(gyro)
    accels.append(accel)
    truths.append(r_true)
  final, (q, b) = run_batch(est.quat_ekf(), stack([p, p]), stack(states),
                            f32(np.stack(gyros)), f32(np.stack(accels)))
  q, b = np.asarray(q), np.asarray(b)
  for w in range(2):
    tilt = tilt_error_deg(q[w], truths[w][None])
    assert tilt0[w] > 25.0  # the initial estimate is ~30° off in tilt
    assert tilt[500:].max() < tilt_bound_deg, tilt[500:].max()  # after 5 s
    up = truths[w][2]  # gravity direction in the body
    err = b[w, -1] - BIAS
    err_perp = err - up * (up @ err)
    assert np.linalg.norm(err_perp) < bias_bound, err_perp
    print(f'world {w}: tilt err {tilt0[w]:.1f}° at start, {tilt[0]:.2f}° after the first '
          f'update, {tilt[99]:.3f}° at 1 s, max after 5 s {tilt[500:].max():.3f}°, '
          f'bias err ⊥g {err_perp}, along g {up @ err:.4f} rad/s')
    # Along gravity: unobservable, stays near its prior mean 0 with prior-sized σ.
    var_up = up @ np.asarray(final.cov[w, 3:, 3:]) @ up
    assert np.sqrt(var_up) > 0.9 * 0.05
    assert abs(up @ b[w, -1]) < 0.01
  # Yaw (world z) variance grows monotonically: it is unobservable.
  yaw_var = np.asarray(final.cov[:, 2, 2])
  assert np.all(yaw_var > np.radians(30) ** 2)


def test_rpy_ekf_converges_static():
  n = 3000
  p = params()
  rng = np.random.default_rng(3)
  r_true = _rz(np.float64(0.4)) @ _ry(np.float64(-0.25)) @ _rx(np.float64(0.35))
  gyro = BIAS + GYRO_DENSITY / np.sqrt(DT) * rng.standard_normal((n, 3))
  accel = G * r_true[2] + ACCEL_STD * rng.standard_normal((n, 3))
  rpy0 = np_matrix_to_rpy(rotate_about(r_true, [1.0, -0.7, 0.2], np.radians(30)))
  state0 = est.rpy_ekf_init(p, f32(rpy0), np.radians(30), 0.05)
  _, (q, b) = run_jit(est.rpy_ekf(), p, state0, f32(gyro), f32(accel))
  tilt = tilt_error_deg(np.asarray(q), r_true[None])
  assert tilt[500:].max() < 0.25
  up = r_true[2]
  err = np.asarray(b[-1]) - BIAS
  assert np.linalg.norm(err - up * (up @ err)) < 1e-3


# --------------------------------------------------------------- gating, new_data


def test_accel_gating_inflates_and_rejects():
  p = params(accel_gate_mps2=0.5, accel_reject_mps2=3.0)
  r_true = _ry(np.float64(0.2))
  # A converged filter (σ 0.3°): the inflated R then dominates HPHᵀ.
  state = est.quat_ekf_init(p, f32(np_matrix_to_quat(r_true)), 0.005, 0.01)
  gyro = f32(np.zeros(3))
  still = G * r_true[2]
  push = still + r_true.T @ [3.0, 0.0, 0.5]   # | ‖a‖ − g | = 0.93: inflated
  shove = still + r_true.T @ [8.0, 0.0, 3.0]  # | ‖a‖ − g | = 5.3: rejected
  predicted = est.quat_ekf_predict(p, state, gyro, DT)
  cases = [still, push, shove]
  gaps = [abs(np.linalg.norm(a) - G) for a in cases]
  assert gaps[0] < 0.5 < gaps[1] < 3.0 < gaps[2]
  for accel, e in zip(cases, gaps):
    s_gated = est.quat_ekf_step(p, state, gyro, f32(accel), DT, True)
    s_open = est.quat_ekf_step(p._replace(accel_gate_mps2=f32(np.inf),
                                          accel_reject_mps2=f32(np.inf)),
                               state, gyro, f32(accel), DT, True)
    moved_gated = np.degrees(float(est.tilt_error_rad(s_gated.q, predicted.q)))
    moved_open = np.degrees(float(est.tilt_error_rad(s_open.q, predicted.q)))
    if e > 3.0:
      for a, b in zip(s_gated, predicted):
        np.testing.assert_array_equal(a, b)
      assert moved_open > 1.0
    elif e > 0.5:
      assert moved_gated < 0.2 * moved_open
    else:
      np.testing.assert_allclose(s_gated.q, s_open.q, atol=1e-6)


@pytest.mark.parametrize('make', [est.quat_ekf, est.rpy_ekf])
def test_new_data_false_keeps_state_under_vmap(make):
  e = make()
  p = params()
  if make is est.quat_ekf:
    s0 = e.init(p, f32([0.9, 0.1, -0.2, 0.3]), 0.1, 0.01)
  else:
    s0 = e.init(p, f32([0.1, -0.2, 0.3]), 0.1, 0.01)
  batch = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), s0)
  gyro = f32([[0.1, 0.2, -0.3]] * 2)
  accel = f32([[0.5, -1.0, 9.7]] * 2)
  mask = jnp.array([False, True])
  out = jax.jit(jax.vmap(e.step, in_axes=(None, 0, 0, 0, None, 0)))(
      p, batch, gyro, accel, DT, mask)
  for a, b in zip(out, batch):
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[1], b[1])
  one = e.step(p, s0, gyro[1], accel[1], DT, True)
  for a, b in zip(out, one):  # float32, different op order under vmap
    np.testing.assert_allclose(a[1], b, rtol=1e-4, atol=1e-5)


# ------------------------------------------------ quaternion vs RPY, singularity


def _run_pair(amp, tilt, seeds, n):
  """Both EKFs on the same samples; returns (err_quat_deg, err_rpy_deg, diff_deg) (w, n)."""
  p = params()
  data = [imu_samples(n, amp, tilt, s) for s in seeds]
  gyro = f32(np.stack([d[0] for d in data]))
  accel = f32(np.stack([d[1] for d in data]))
  r0 = [d[3] for d in data]
  # Known bias with a small prior: isolates the kinematics from bias-driven yaw drift.
  sq = stack([est.quat_ekf_init(p, f32(np_matrix_to_quat(r)), 0.01, 1e-3, f32(BIAS))
              for r in r0])
  sr = stack([est.rpy_ekf_init(p, f32(np_matrix_to_rpy(r)), 0.01, 1e-3, f32(BIAS))
              for r in r0])
  pb = stack([p] * len(seeds))
  _, (qq, _) = run_batch(est.quat_ekf(), pb, sq, gyro, accel)
  _, (qr, _) = run_batch(est.rpy_ekf(), pb, sr, gyro, accel)
  truth = np.stack([d[2] for d in data])
  qq, qr = np.asarray(qq), np.asarray(qr)
  diff = attitude_error_deg(qq, np_quat_to_matrix(qr))
  pitch = np.degrees(np.abs(np_matrix_to_rpy(truth)[..., 1]).max())
  return attitude_error_deg(qq, truth), attitude_error_deg(qr, truth), diff, pitch


def test_quat_and_rpy_ekf_agree_away_from_singularity():
  err_q, err_r, diff, pitch = _run_pair(np.array([0.4, 0.7, 0.8]), 0.0, [0, 1], 2000)
  assert pitch <= 45.0
  print(f'|pitch| ≤ {pitch:.1f}°: max err quat {err_q.max():.3f}°, rpy {err_r.max():.3f}°, '
        f'max quat-vs-rpy {diff.max():.3f}°')
  assert err_q.max() < 1.0 and err_r.max() < 1.0
  assert diff.max() < 0.5


def test_only_rpy_ekf_degrades_near_pitch_90():
  """The body pitches to within ε = 0.01 rad (0.57°) of pitch 90° and back.

  Near the singularity roll and yaw swing fast (≈ θ'/ε); the RPY EKF's Euler-angle
  integration and linearization lose accuracy there and the yaw error it picks up is never
  corrected (yaw is unobservable). The quaternion EKF does not notice.
  """
  amp = np.array([0.2, 1.75, 0.3])
  seeds = [0, 1, 2, 3]
  err_q, err_r, _, pitch = _run_pair(amp, 0.01, seeds, 2000)
  err_q_far, err_r_far, _, pitch_far = _run_pair(amp, 0.1, seeds, 2000)
  assert 89.0 < pitch < 90.0 and pitch_far < 85.0
  q_max, r_max = err_q.max(axis=1), err_r.max(axis=1)
  print(f'max |pitch| {pitch:.2f}°: max err quat {q_max}, rpy {r_max}; '
        f'at {pitch_far:.2f}°: quat {err_q_far.max(axis=1)}, rpy {err_r_far.max(axis=1)}')
  assert np.all(q_max < 1.0)
  assert np.all(np.abs(q_max - err_q_far.max(axis=1)) < 0.1)  # quat EKF unaffected
  assert np.all(r_max > 2.5 * q_max)
  assert np.all(r_max > 1.5 * err_r_far.max(axis=1))


# --------------------------------------------------- batching, jit, gradients


def test_vmap_matches_loop_of_single_runs():
  n, worlds = 400, 4
  p_list = [params(accel_noise_std_mps2=0.02 * (1 + w)) for w in range(worlds)]
  data = [imu_samples(n, np.array([0.4, 0.7, 0.8]), 0.0, 20 + w) for w in range(worlds)]
  for make in (est.quat_ekf, est.rpy_ekf):
    e = make()
    if make is est.quat_ekf:
      s0 = [e.init(p_list[0], f32(np_matrix_to_quat(rotate_about(d[3], [1, 0, 0], 0.2))),
                   0.3, 0.05) for d in data]
    else:
      s0 = [e.init(p_list[0], f32(np_matrix_to_rpy(d[3]) + 0.2), 0.3, 0.05) for d in data]
    mask = jnp.asarray(np.random.default_rng(5).random((worlds, n)) > 0.2)
    batched = run_batch(
        e, stack(p_list), stack(s0), f32(np.stack([d[0] for d in data])),
        f32(np.stack([d[1] for d in data])), mask)
    for w in range(worlds):
      single = run_jit(e, p_list[w], s0[w], f32(data[w][0]), f32(data[w][1]), mask[w])
      for a, b in zip(jax.tree_util.tree_leaves(batched),
                      jax.tree_util.tree_leaves(single)):
        np.testing.assert_allclose(a[w], b, rtol=1e-4, atol=2e-5)


def test_jit_matches_no_jit():
  """The jitted scan equals a Python loop of unjitted (op-by-op) steps."""
  n = 20
  p = params()
  gyro, accel, _, r0 = imu_samples(n, np.array([0.4, 0.7, 0.8]), 0.0, 7)
  for make in (est.quat_ekf, est.rpy_ekf):
    e = make()
    if make is est.quat_ekf:
      s0 = e.init(p, f32(np_matrix_to_quat(rotate_about(r0, [0, 1, 0], 0.05))), 0.05, 0.01)
    else:
      s0 = e.init(p, f32(np_matrix_to_rpy(r0) - 0.05), 0.05, 0.01)
    jitted, _ = run_jit(e, p, s0, f32(gyro), f32(accel))
    eager = s0
    for k in range(n):
      eager = e.step(p, eager, f32(gyro[k]), f32(accel[k]), DT, True)
    for a, b in zip(jitted, eager):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('make', [est.quat_ekf, est.rpy_ekf])
def test_gradient_wrt_accel_noise_matches_finite_differences(make):
  n = 200
  gyro, accel, truth, r0 = imu_samples(n, np.array([0.4, 0.7, 0.8]), 0.0, 3)
  r_start = rotate_about(r0, [1, 1, 0], np.radians(10))
  with jax.enable_x64(True):
    e = make()
    p = params(dtype=jnp.float64)
    if make is est.quat_ekf:
      s0 = e.init(p, jnp.asarray(np_matrix_to_quat(r_start)), np.radians(10), 0.02)
    else:
      s0 = e.init(p, jnp.asarray(np_matrix_to_rpy(r_start)), np.radians(10), 0.02)
    up_true = jnp.asarray(truth[-1, 2])
    g64, a64 = jnp.asarray(gyro), jnp.asarray(accel)

    def loss(sigma):
      state, _ = run(e, p._replace(accel_noise_std_mps2=sigma * jnp.ones(3)), s0, g64, a64)
      q = e.attitude(state)
      w, x, y, z = q
      up = jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z])
      return jnp.sum((up - up_true) ** 2)  # squared tilt chord at the final sample

    loss_jit = jax.jit(loss)
    sigma = 0.05
    grad = float(jax.jit(jax.grad(loss))(sigma))
    h = 1e-5 * sigma
    fd = (float(loss_jit(sigma + h)) - float(loss_jit(sigma - h))) / (2 * h)
    print(f'{make.__name__}: d loss/d σ_a = {grad:.6e}, central FD {fd:.6e}')
    assert np.isfinite(grad) and grad != 0.0
    np.testing.assert_allclose(grad, fd, rtol=1e-5)


@functools.partial(jax.jit, static_argnums=0)
def _run_cov(estimator, p, state0, gyro, accel):
  """Scan `estimator.step`; returns the covariance after every sample `(n, 6, 6)`."""
  def body(state, x):
    state = estimator.step(p, state, x[0], x[1], DT, jnp.bool_(True))
    return state, state.cov
  return jax.lax.scan(body, state0, (gyro, accel))[1]


def test_covariance_stays_symmetric_positive_definite():
  """Positive definite after EVERY sample of a long float32 run (200 s at 100 Hz), not only
  at the end. (The former `cov == cov.T` check could not fail: the update symmetrizes its
  result; positive definiteness is what an unstable update form loses.)"""
  n = 20000
  p = params()
  gyro, accel, _, r0 = imu_samples(n, np.array([0.4, 0.7, 0.8]), 0.0, 9)
  for make, x0 in [(est.quat_ekf, f32(np_matrix_to_quat(r0))),
                   (est.rpy_ekf, f32(np_matrix_to_rpy(r0)))]:
    e = make()
    covs = np.asarray(_run_cov(e, p, e.init(p, x0, 0.5, 0.05), f32(gyro), f32(accel)),
                      np.float64)
    eig = np.linalg.eigvalsh(0.5 * (covs + np.swapaxes(covs, 1, 2)))
    assert eig.min() > 0, f'{make.__name__}: min eigenvalue {eig.min():.3e}'
    assert np.isfinite(covs).all()


def test_joseph_update_keeps_a_tiny_posterior_variance_positive():
  """A badly conditioned update in float32: prior σ = 100 on the measured states (strongly
  correlated with the others), measurement variance 1e-6. The optimal posterior variance is
  σ²R/(σ²+R) ≈ R = 1e-6, but K·H·P cancels P to float32 precision (1e4 · 6e-8 ≈ 6e-4), so the
  simple form `(I − KH) P` returns exactly 0 (a singular, not positive definite covariance),
  while the Joseph form `(I − KH) P (I − KH)ᵀ + K R Kᵀ` keeps `K R Kᵀ ≈ R`. Checked against a
  float64 reference."""
  sig = np.array([1e2, 1e2, 1e2, 1e-1, 1e-1, 1e-1])
  corr = np.eye(6)
  for i in range(3):
    corr[i, i + 3] = corr[i + 3, i] = 0.9
  cov = sig[:, None] * corr * sig[None, :]
  h = np.hstack([np.eye(3), np.zeros((3, 3))])
  r = 1e-6 * np.eye(3)
  _, got = jax.jit(est.kalman_update)(f32(cov), f32(h), f32(np.zeros(3)), f32(r))
  got = np.asarray(got, np.float64)
  k = cov @ h.T @ np.linalg.inv(h @ cov @ h.T + r)
  ref = (np.eye(6) - k @ h) @ cov
  assert np.linalg.eigvalsh(got).min() > 0
  np.testing.assert_allclose(np.diag(got)[:3], np.diag(ref)[:3], rtol=1e-3)
  np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-9)


# ------------------------------------------------ lever arm, smooth inflation


def _np_skew(v):
  return np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]], np.float64)


def test_lever_arm_compensation_matches_numpy():
  """`a − α̂×r − ω̂×(ω̂×r)` with `ω̂ = gyro − b`, `α̂ = (gyro − gyro_prev)/dt` against float64
  NumPy (skew matrices); no previous sample → α̂ = 0; a zero lever arm returns `accel` itself."""
  rng = np.random.default_rng(21)
  for _ in range(5):
    gyro, gyro_prev, b = rng.normal(0, 3, 3), rng.normal(0, 3, 3), rng.normal(0, 0.05, 3)
    accel, r, dt = rng.normal(0, 20, 3), rng.normal(0, 0.1, 3), 0.002
    with jax.enable_x64(True):
      p = params(lever_arm_m=r, dtype=jnp.float64)
      s = est.quat_ekf_init(p, jnp.array([1.0, 0, 0, 0]), 0.1, 0.01, b)
      s_prev = s._replace(gyro_prev=jnp.asarray(gyro_prev), gyro_prev_valid=jnp.bool_(True))
      got = np.asarray(est.compensated_accel(p, s_prev, gyro, accel, dt))
      got_first = np.asarray(est.compensated_accel(p, s, gyro, accel, dt))
      got_zero = np.asarray(est.compensated_accel(p._replace(lever_arm_m=jnp.zeros(3)), s_prev,
                                                  gyro, accel, dt))
    w = gyro - b
    alpha = (gyro - gyro_prev) / dt
    np.testing.assert_allclose(got, accel - _np_skew(alpha) @ r - _np_skew(w) @ _np_skew(w) @ r,
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_first, accel - _np_skew(w) @ _np_skew(w) @ r, rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_array_equal(got_zero, accel)


def test_lever_arm_removes_rotation_terms_of_a_spinning_offset_imu():
  """An IMU 0.1 m off a vertical spin axis (ω = 6 rad/s, spinning up at 20 rad/s²) reads
  `Rᵀg + α×r + ω×(ω×r)` (a 3.6 g centripetal term): the compensated filter keeps the tilt, the
  uncompensated one is pulled off by the centripetal acceleration."""
  n, r = 300, np.array([0.1, 0.0, 0.0])
  t = np.arange(1, n + 1) * DT
  rate = 6.0 + 20.0 * t
  omega = np.stack([0 * t, 0 * t, rate], -1)
  alpha = np.array([0.0, 0.0, 20.0])
  accel = np.stack([G * np.array([0, 0, 1.0]) + np.cross(alpha, r) + np.cross(w, np.cross(w, r))
                    for w in omega])
  out = {}
  for name, arm in (('compensated', r), ('plain', np.zeros(3))):
    p = params(accel_noise_std_mps2=0.5, accel_gate_mps2=np.inf, accel_reject_mps2=np.inf,
               lever_arm_m=arm)
    s0 = est.quat_ekf_init(p, f32([1.0, 0, 0, 0]), 0.01, 1e-4)
    s0 = s0._replace(gyro_prev=f32([0.0, 0.0, 6.0]), gyro_prev_valid=jnp.bool_(True))  # t = 0
    _, (q, _) = run_jit(est.quat_ekf(), p, s0, f32(omega), f32(accel))
    out[name] = tilt_error_deg(np.asarray(q), np.eye(3)[None]).max()
  assert out['compensated'] < 0.05, out
  assert out['plain'] > 5.0, out


def test_accel_inflation_gain_matches_numpy():
  """R = diag(σ² + c²·max(|‖a‖ − g| − gate, 0)²) (C¹ at the gate)."""
  sigma = np.array([0.1, 0.2, 0.3])
  for c, gate, a in [(1.0, 0.5, [0.3, 2.0, 10.5]), (5.0, 0.0, [0.1, 0.0, 9.7]),
                     (2.0, 0.3, [0.0, 0.0, 9.9])]:
    p = params(accel_noise_std_mps2=sigma, accel_gate_mps2=gate, accel_inflation_gain=c,
               accel_reject_mps2=np.inf)
    r, ok = est.accel_noise(p, f32(a))
    e = abs(np.linalg.norm(np.asarray(a, np.float64)) - G)
    np.testing.assert_allclose(np.asarray(r), np.diag(sigma ** 2 + (c * max(e - gate, 0)) ** 2),
                               rtol=1e-5)
    assert bool(ok)
