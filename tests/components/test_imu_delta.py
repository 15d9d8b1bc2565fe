"""Integrated IMU outputs (`components/sensors/delta_imu.py`, `integration:` of `fibril_sim/imu`).

The ideal increments are the rotation between the site attitudes at a window's two ends and the
specific-force integral in the start axes, from the physics state. References, float64 NumPy,
written here, outside the code under test:
- closed-form coning: attitude `q(t) = [cos(β/2), sin(β/2)·cos Ωt, sin(β/2)·sin Ωt, 0]`, body rate
  `ω = (−Ω sinβ sin Ωt, Ω sinβ cos Ωt, −Ω(1 − cos β))` (from `2 q* ⊗ q̇`), window rotation vector
  `log(q(t0)* ⊗ q(t1))`;
- sculling (roll `φ = A sin Ωt` in phase with a sway `y = B sin Ωt`, gravity on): `Δv = ∫ C(τ)
  f(τ) dτ` of the accelerometer's specific force `f = R(t)ᵀ(a − g)` in the body axes, rotated
  to the window's start axes `C = R(t0)ᵀR(t)`, by Gauss–Legendre quadrature;
- a torque-free tumble stepped by MuJoCo C (`mj_step`, float64): its own quaternions.
The motion is driven exactly through the recorded-trajectory backend (`physics_c`: `mj_forward`
of each logged state); the simulator's float32 sample is the only rounding.
"""

from __future__ import annotations

import math
import pathlib

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import yaml

import fibril_mjx
from fibril_mjx.analysis import imu as imu_analysis
from fibril_mjx.analysis.common import flatten
from fibril_mjx.batch import physics_c
from fibril_mjx.components.sensors import delta_imu

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = REPO / 'manifests' / 'imu_delta.yaml'
RIG = REPO / 'manifests' / 'imu_delta_rig.xml'
EPS32 = float(np.finfo(np.float32).eps)
PERIOD = 0.004                      # output windows (s)


# ------------------------------------------------------------------------------ references

def _quat_mul(a, b):
  w1, x1, y1, z1 = np.moveaxis(a, -1, 0)
  w2, x2, y2, z2 = np.moveaxis(b, -1, 0)
  return np.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                   w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2],
                  -1)


def _conj(q):
  return q * np.array([1.0, -1.0, -1.0, -1.0])


def _rotvec(q):
  """Rotation vectors of quaternions (the `w ≥ 0` representative)."""
  q = q * np.where(q[..., :1] < 0, -1.0, 1.0)
  v = q[..., 1:]
  s = np.linalg.norm(v, axis=-1)
  th = 2 * np.arctan2(s, q[..., 0])
  return v * (th / np.where(s == 0, 1.0, s))[..., None]


def _exp(phi):
  """Quaternions of rotation vectors."""
  th = np.linalg.norm(phi, axis=-1, keepdims=True)
  k = np.where(th == 0, 0.5, np.sin(th / 2) / np.where(th == 0, 1.0, th))
  return np.concatenate([np.cos(th / 2), k * phi], -1)


def _angle(p, q):
  """Angle (rad) between attitudes."""
  return np.linalg.norm(_rotvec(_quat_mul(_conj(p), q)), axis=-1)


def _compose(q0, dthetas):
  """`q0 ⊗ exp(Δθ₁) ⊗ … ⊗ exp(Δθₖ)` for every k `(n, 4)` (float64)."""
  out, q = [], np.asarray(q0, np.float64)
  for d in np.asarray(dthetas, np.float64):
    q = _quat_mul(q, _exp(d))
    out.append(q)
  return np.array(out)


def coning(beta, omega, t):
  """Closed-form coning: attitudes `(n, 4)` and body rates `(n, 3)` at times `t`."""
  c, s = math.cos(beta / 2), math.sin(beta / 2)
  q = np.stack([np.full_like(t, c), s * np.cos(omega * t), s * np.sin(omega * t),
                np.zeros_like(t)], -1)
  w = np.stack([-omega * math.sin(beta) * np.sin(omega * t),
                omega * math.sin(beta) * np.cos(omega * t),
                np.full_like(t, -omega * (1 - math.cos(beta)))], -1)
  return q, w


def _rx(phi):
  c, s = np.cos(phi), np.sin(phi)
  o, z = np.ones_like(phi), np.zeros_like(phi)
  return np.stack([np.stack([o, z, z], -1), np.stack([z, c, -s], -1),
                   np.stack([z, s, c], -1)], -2)


def sculling(a, b, omega, g, t):
  """Roll `φ = a sin Ωt` with sway `y = b sin Ωt`: `(φ, φ̇, y, ẏ)` and the accelerometer's
  specific force in the body axes `f = R(t)ᵀ(ÿ e_y − g)` `(n, 3)`."""
  phi, dphi = a * np.sin(omega * t), a * omega * np.cos(omega * t)
  y, dy, ddy = b * np.sin(omega * t), b * omega * np.cos(omega * t), -b * omega ** 2 * np.sin(
      omega * t)
  acc = np.stack([np.zeros_like(t), ddy, np.zeros_like(t)], -1) - np.asarray(g)
  f = np.einsum('nji,nj->ni', _rx(phi), acc)
  return phi, dphi, y, dy, f


def sculling_windows(a, b, omega, g, t0, period, nodes=16):
  """Reference `Δv = ∫ R(t0)ᵀR(t) f(t) dt` of windows starting at `t0` `(n,)` (Gauss–Legendre)."""
  x, wts = np.polynomial.legendre.leggauss(nodes)
  dv = np.zeros((len(t0), 3))
  for xi, wi in zip(x, wts):
    t = t0 + 0.5 * period * (xi + 1)
    phi, _, _, _, f = sculling(a, b, omega, g, t)
    phi0 = a * np.sin(omega * t0)
    dv += 0.5 * period * wi * np.einsum('nij,nj->ni', _rx(phi - phi0), f)
  return dv


# ------------------------------------------------------------------------------ simulator

FREE_BODY = """<mujoco>
  <option timestep="{dt}" gravity="{g[0]} {g[1]} {g[2]}"/>
  <worldbody>
    <body name="b"><freejoint/><geom type="box" size="0.1 0.06 0.03" mass="1"/>
      <site name="imu_site"/></body>
  </worldbody>
  <sensor><gyro name="imu_gyro" site="imu_site"/>
    <accelerometer name="imu_accel" site="imu_site"/></sensor>
</mujoco>"""


def _sim(tmp_path, xml: str, physics='c', **config):
  (tmp_path / 'model.xml').write_text(xml)
  cfg = {'gyroscope_sensor': 'imu_gyro', 'accelerometer_sensor': 'imu_accel',
         'period_s': PERIOD, 'integration': 'delta', **config}
  doc = {'fibril_manifest': 1, 'model': 'model.xml',
         'components': [{'id': 'imu', 'type': 'fibril_sim/imu', 'config': cfg}]}
  (tmp_path / 'm.yaml').write_text(yaml.safe_dump(doc))
  return fibril_mjx.load(tmp_path / 'm.yaml', physics=physics)


def _replay(tmp_path, dt, g, qpos, qvel):
  """An ideal delta IMU on the free body replaying `qpos`, `qvel` (a tick each): the flat trace
  of world 0 and the delivered samples' mask (the first, empty window left out)."""
  sim = _sim(tmp_path, FREE_BODY.format(dt=dt, g=g))
  n = qpos.shape[0] - 1
  _, trace = physics_c.simulation_rollout(sim, sim.default_params(2), fibril_mjx.world_keys(0, 2),
                                          n, trajectory={'qpos': qpos, 'qvel': qvel})
  z = {k: np.asarray(v)[0] for k, v in flatten(jax.device_get(trace)).items()}
  new = z['sensor/imu/new_data'].astype(bool)
  new[0] = False
  assert np.all(np.diff(z['sensor/imu/sample_tick'][new]) == round(PERIOD / dt))
  return z, new


def coning_errors(tmp_path, dt, beta=0.05, hz=10.0, duration=1.0):
  """The coning run at timestep `dt`: `(delivered − closed form, naive sum − closed form)`
  `(nwin, 3)` per window, the composed attitudes' angle to the closed form `(nwin,)`, and the
  same of the naive windows composed."""
  omega, L = 2 * math.pi * hz, round(PERIOD / dt)
  t = np.arange(round(duration / dt) + 1) * dt
  q, w = coning(beta, omega, t)
  qpos = np.concatenate([np.zeros((t.size, 3)), q], 1)
  qvel = np.concatenate([np.zeros((t.size, 3)), w], 1)
  z, new = _replay(tmp_path, dt, (0, 0, 0), qpos, qvel)
  ticks = z['sensor/imu/sample_tick'][new]
  exact = _rotvec(_quat_mul(_conj(q[ticks - L]), q[ticks]))
  got = z['sensor/imu/delta_angle'][new].astype(np.float64)
  idx = ticks[:, None] + np.arange(-L, 1)[None]
  naive = 0.5 * (w[idx][:, 1:] + w[idx][:, :-1]).sum(1) * dt    # Σ of rates (trapezoid)
  composed = _angle(_compose(q[ticks[0] - L], got), q[ticks])
  naive_composed = _angle(_compose(q[ticks[0] - L], naive), q[ticks])
  return got - exact, naive - exact, composed, naive_composed, exact


@pytest.mark.parametrize('dt', [0.002, 0.0005])
def test_coning_against_the_closed_form(tmp_path, dt):
  """Coning β = 0.05 rad at 10 Hz, 4 ms windows, at MuJoCo's default 2 ms and at 0.5 ms: every
  window's Δθ is the closed-form rotation to float32 rounding, ≥ 10× better than the plain sum
  of rates; composed over 1 s the windows give the closed-form attitude (no drift), while the
  naive windows drift; the body-z increments sum to the coning drift `−Ω(1 − cos β)·t` plus the
  windows' coning terms, as the closed form's do."""
  err, naive, composed, naive_composed, exact = coning_errors(tmp_path, dt)
  beta, omega = 0.05, 2 * math.pi * 10.0
  # a priori: the quaternions' float32 rounding (vector parts ≤ sin(β/2), w ≈ 1) and the
  # arithmetic on a Δθ of |Δθ|
  tol = 8 * EPS32 * (math.sin(beta / 2) + np.abs(exact).max())
  assert np.abs(err).max() < tol, (np.abs(err).max(), tol)
  rms, naive_rms = np.sqrt(np.mean(err ** 2)), np.sqrt(np.mean(naive ** 2))
  assert naive_rms > 10 * rms, (naive_rms, rms)
  n = composed.size
  assert composed.max() < n * tol, (composed.max(), n * tol)
  assert naive_composed[-1] > 10 * max(composed[-1], tol)
  t = n * PERIOD
  drift = -omega * (1 - math.cos(beta)) * t            # ∫ω_z dt over the composed windows
  np.testing.assert_allclose(np.sum(naive[:, 2] + exact[:, 2]), drift, rtol=1e-6)
  np.testing.assert_allclose(np.sum(err[:, 2] + exact[:, 2]), np.sum(exact[:, 2]),
                             atol=n * tol)


SCULL = dict(a=0.1, b=0.02, omega=2 * math.pi * 8.0, g=(0.0, 0.0, -9.81))


def sculling_errors(tmp_path, dt, duration=0.5):
  """The sculling run at timestep `dt`: `(delivered − reference, plain sum of specific forces −
  reference)` `(nwin, 3)` per window, the delivered Δv, and the largest velocity (m/s)."""
  a, b, omega, g = SCULL['a'], SCULL['b'], SCULL['omega'], SCULL['g']
  L = round(PERIOD / dt)
  t = np.arange(round(duration / dt) + 1) * dt
  phi, dphi, y, dy, f = sculling(a, b, omega, g, t)
  z0 = np.zeros_like(t)
  qpos = np.stack([z0, y, z0, np.cos(phi / 2), np.sin(phi / 2), z0, z0], -1)
  qvel = np.stack([z0, dy, z0, dphi, z0, z0], -1)
  z, new = _replay(tmp_path, dt, g, qpos, qvel)
  ticks = z['sensor/imu/sample_tick'][new]
  ref = sculling_windows(a, b, omega, g, t[ticks - L], PERIOD)
  got = z['sensor/imu/delta_velocity'][new].astype(np.float64)
  idx = ticks[:, None] + np.arange(-L, 1)[None]
  naive = 0.5 * (f[idx][:, 1:] + f[idx][:, :-1]).sum(1) * dt
  return got - ref, naive - ref, got, np.abs(dy).max()


@pytest.mark.parametrize('dt', [0.002, 0.0005])
def test_sculling_against_the_specific_force_integral(tmp_path, dt):
  """Sculling (roll 0.1 rad in phase with a 2 cm sway at 8 Hz) under gravity, at 2 ms and
  0.5 ms: each window's Δv is the integral of the accelerometer's specific force in the start
  axes (the sign convention: `+|g|` up at rest), to float32 rounding; the plain sum of specific
  forces misses rotation and sculling by far more; the rectified z increment has the closed
  form's mean."""
  err, naive, got, vmax = sculling_errors(tmp_path, dt)
  tol = 8 * EPS32 * (vmax + 9.81 * PERIOD)
  assert np.abs(err).max() < tol, (np.abs(err).max(), tol)
  assert np.abs(naive).max() > 10 * tol
  # over whole periods the body-z specific force averages to gravity's `+|g|·<cos φ>` (up, the
  # accelerometer's sign) plus the sculling rectification `A·B·Ω²/2`
  a, b, omega = SCULL['a'], SCULL['b'], SCULL['omega']
  np.testing.assert_allclose(np.mean(got[:, 2]) / PERIOD,
                             9.81 * (1 - a ** 2 / 4) + a * b * omega ** 2 / 2, rtol=2e-3)


def tumble_errors(tmp_path, dt=0.002, duration=2.0):
  """A torque-free tumble stepped by MuJoCo C: the angle (rad) between the delivered Δθ
  composed from the first attitude and MuJoCo's quaternion at every window end `(nwin,)`, the
  delivered Δθ, and the tumble's total rotation."""
  m = mujoco.MjModel.from_xml_string(FREE_BODY.format(dt=dt, g=(0, 0, 0)))
  d = mujoco.MjData(m)
  d.qvel[3:] = (0.2, 6.0, 0.3)
  qpos, qvel = [], []
  for _ in range(round(duration / dt) + 1):
    qpos.append(d.qpos.copy())
    qvel.append(d.qvel.copy())
    mujoco.mj_step(m, d)
  qpos, qvel = np.array(qpos), np.array(qvel)
  z, new = _replay(tmp_path, dt, (0, 0, 0), qpos, qvel)
  ticks = z['sensor/imu/sample_tick'][new]
  got = z['sensor/imu/delta_angle'][new].astype(np.float64)
  composed = _compose(qpos[ticks[0] - round(PERIOD / dt), 3:], got)
  return _angle(composed, qpos[ticks, 3:]), got, _angle(qpos[0, 3:], qpos[-1, 3:])


def test_tumble_composes_to_mujoco_c_quaternions(tmp_path):
  """A torque-free tumble near the intermediate axis, stepped by MuJoCo C (`mj_step`, 2 ms,
  2 s): the delivered Δθ composed from the first attitude reproduce MuJoCo's own quaternions at
  every window end, to float32 rounding."""
  err, got, turned = tumble_errors(tmp_path)
  # a priori: the final quaternion's float32 rounding, and each window's arithmetic on |Δθ|
  tol = 4 * EPS32 + err.size * 8 * EPS32 * np.abs(got).max()
  assert err.max() < tol, (err.max(), tol)
  assert turned > 1.0    # it tumbles


# ------------------------------------------------------------------------------ pure functions

def test_exact_jit_vmap_and_modes():
  """jit equals eager; vmap equals a loop; `average` adds no sample fields and no pose;
  `delta` adds `DELTA_FIELDS`: the ideal increments plus the integrated rate error
  `T·(y − x̄)`; an empty window gives zeros."""
  rng = np.random.default_rng(0)
  q = rng.normal(size=(4, 4))
  q = jnp.asarray(q / np.linalg.norm(q, axis=1, keepdims=True), jnp.float32)
  v = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)
  poses = delta_imu.Pose(q, v)
  pose = lambda i: jax.tree.map(lambda x: x[i], poses)   # noqa: E731
  g = (0.0, 0.0, -9.81)
  one = delta_imu.exact(pose(0), pose(1), 0.004, g)
  np.testing.assert_array_equal(jax.jit(delta_imu.exact, static_argnums=3)(
      pose(0), pose(1), 0.004, g)[0], one[0])
  batched = jax.vmap(delta_imu.exact, (0, 0, None, None))(pose(slice(0, 3)),
                                                          pose(slice(1, 4)), 0.004, g)
  for i in range(3):
    for b, o in zip(batched, delta_imu.exact(pose(i), pose(i + 1), 0.004, g)):
      np.testing.assert_allclose(b[i], o, rtol=1e-6, atol=1e-7)
  # against NumPy: rotation vector of q0*⊗q1 and R0ᵀ(v1 − v0 − gT)
  qn = np.asarray(q, np.float64)
  np.testing.assert_allclose(one[0], _rotvec(_quat_mul(_conj(qn[0]), qn[1])), atol=4e-6)
  r0 = np.asarray(jax.device_get(fibril_mjx.mechanisms.quat.to_matrix(q[0])), np.float64)
  np.testing.assert_allclose(one[1], r0.T @ (np.asarray(v[1] - v[0], np.float64)
                                            - np.array(g) * 0.004), rtol=1e-5, atol=1e-6)
  w, a = jnp.ones(3, jnp.float32), 2 * jnp.ones(3, jnp.float32)
  dl = delta_imu.Integrator('delta', 0.001, g)
  st = dl.init()
  st = dl.accumulate(st, (w, a), (w, a), pose(0))
  empty = dl.window(st, (w, a), (w, a), pose(0))
  assert float(empty.duration_s) == 0.0 and np.all(np.asarray(empty.delta_angle) == 0)
  for i in range(1, 4):
    st = dl.accumulate(st, (w * i, a), (w * i + 1, a), pose(i))
  win = dl.window(st, (w, a), (w, a), pose(3))
  np.testing.assert_allclose(win.duration_s, 0.003)
  np.testing.assert_allclose(win.mean_rate, 2 * np.ones(3))
  np.testing.assert_allclose(win.input_rate, 3 * np.ones(3))
  y = {'angular_velocity': win.input_rate + 0.5, 'linear_acceleration': win.input_accel - 2.0}
  fields, restarted = dl.finish(y, st, win, pose(3))
  want = delta_imu.exact(pose(0), pose(3), 0.003, g)
  np.testing.assert_allclose(fields['delta_angle'], want[0] + 1.5 * 0.003, rtol=1e-6)
  np.testing.assert_allclose(fields['delta_velocity'], want[1] - 2.0 * 0.003, rtol=1e-5)
  assert int(restarted.ticks) == 0
  np.testing.assert_array_equal(restarted.start.quat, q[3])
  assert set(dl.truth(restarted)) == set(delta_imu.TRUTH_FIELDS)
  avg = delta_imu.Integrator('average', 0.001)
  st = avg.accumulate(avg.init(), (w, a), (w, a), None)
  fields, _ = avg.finish({'angular_velocity': w, 'linear_acceleration': a}, st,
                         avg.window(st, (w, a), (w, a), None), None)
  assert set(fields) == {'angular_velocity', 'linear_acceleration'}


# ------------------------------------------------------------------------------ error terms

BIAS = [0.01, -0.02, 0.03]          # rad/s
SCALE = [1.01, 0.99, 1.02]
ACCEL_N = 2e-3                      # m/s²/√Hz, x axis only
WORLDS, TICKS = 4, 1000             # 0.5 s at 2 kHz


def _manifest(tmp_path, **config):
  doc = yaml.safe_load(MANIFEST.read_text())
  doc['model'] = str(RIG)
  cfg = {'gyroscope_sensor': 'imu_gyro', 'accelerometer_sensor': 'imu_accel',
         'period_s': PERIOD, 'integration': 'delta', **config}
  doc['components'][0]['config'] = cfg
  p = tmp_path / 'imu_delta.yaml'
  p.write_text(yaml.safe_dump(doc))
  return p


def _run(path, worlds=WORLDS, ticks=TICKS, bias=None):
  """Flat trace of a rollout; `bias`: per-world gyro biases `(worlds, 3)` (compiled in)."""
  sim = fibril_mjx.load(path, vary=None if bias is None else {'imu': ['angular_velocity_bias']})
  p = sim.default_params(worlds)
  if bias is not None:
    p['imu'] = p['imu']._replace(angular_velocity_bias=jnp.asarray(bias, jnp.float32))
  _, trace, _ = sim.rollout(p, fibril_mjx.world_keys(0, worlds), ticks)
  return flatten(jax.device_get(trace))


def _group(z, kind):
  return {k.split('/')[-1]: v for k, v in z.items() if k.startswith(f'{kind}/imu/')}


def test_error_terms_on_the_ideal_increments(tmp_path):
  """On the gimbal rig (MJX): delivered Δθ = ideal + `(scale − 1)·x̄·T + b·T`, the rate fields
  `scale·x̄ + b` of the window means; accelerometer white noise gives Δv the variance
  `(N/√Δ)²·T²` about the ideal Δv."""
  z = _run(_manifest(tmp_path, angular_velocity_bias=BIAS, angular_velocity_scale=SCALE,
                     linear_acceleration_noise_density=[ACCEL_N, 0.0, 0.0]))
  s, tr = _group(z, 'sensor'), _group(z, 'truth')
  dvx = []
  for wd in range(WORLDS):
    new = s['new_data'][wd].astype(bool)
    new[0] = False
    ticks = s['sample_tick'][wd][new]
    T = np.asarray(s['delta_time_s'][wd][new], np.float64)
    np.testing.assert_allclose(T, PERIOD, rtol=1e-6)
    ideal = tr['delta_angle'][wd][ticks].astype(np.float64)
    mean = tr['angular_velocity_window_mean'][wd][ticks].astype(np.float64)
    want = ideal + (np.asarray(SCALE) - 1) * mean * T[:, None] + np.asarray(BIAS) * T[:, None]
    got = s['delta_angle'][wd][new].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=0, atol=8 * EPS32 * (np.abs(ideal).max() + 0.1))
    np.testing.assert_allclose(s['angular_velocity'][wd][new], np.asarray(SCALE) * mean + BIAS,
                               rtol=1e-5, atol=1e-6)
    dv = s['delta_velocity'][wd][new].astype(np.float64)
    ideal_v = tr['delta_velocity'][wd][ticks].astype(np.float64)
    np.testing.assert_allclose(dv[:, 1:], ideal_v[:, 1:], rtol=0, atol=1e-6)
    dvx.append(dv[:, 0] - ideal_v[:, 0])
  dvx = np.concatenate(dvx)
  var_want = (ACCEL_N / math.sqrt(PERIOD)) ** 2 * PERIOD ** 2
  assert abs(np.mean(dvx ** 2) / var_want - 1) < 5 * math.sqrt(2 / dvx.size)


def test_run_summary_of_an_ideal_integrating_imu(tmp_path):
  """The run summary compares like with like: an ideal `delta` IMU has zero rate errors (window
  means vs window means, not vs point truth) and zero Δθ / Δv errors; a gyro bias shows in both
  at its size."""
  z = _run(_manifest(tmp_path), worlds=2, ticks=400, bias=[[0.0] * 3, [0.02, 0.0, 0.0]])
  m = imu_analysis.host_metrics(_group(z, 'sensor'), _group(z, 'truth'))
  for k in ('angular_velocity_error_rms_rad_s', 'linear_acceleration_error_rms_m_s2',
            'delta_angle_error_rms_rad', 'delta_velocity_error_rms_m_s'):
    assert m[k][0] == 0.0, (k, m[k])
  # the point truth at the sample tick is not what a window mean estimates
  point = imu_analysis.common.rate_error_metrics(_group(z, 'sensor'), _group(z, 'truth'))
  assert point['angular_velocity_error_rms_rad_s'][0] > 1e-3
  # world 1's gyro bias, 0.02 rad/s on x: in the rates, and times T in every Δθ but the first
  # sample's (an empty window, T = 0)
  np.testing.assert_allclose(m['angular_velocity_error_rms_rad_s'][1], 0.02 / math.sqrt(3),
                             rtol=1e-4)
  n = float(m['delivered'][1])
  np.testing.assert_allclose(m['delta_angle_error_rms_rad'][1],
                             0.02 * PERIOD / math.sqrt(3) * math.sqrt((n - 1) / n), rtol=1e-3)
  assert m['delta_velocity_error_rms_m_s'][1] == 0.0


def test_example_manifest_plan_and_errors(tmp_path):
  """The example builds (plan line); bad values give one-line errors."""
  sim = fibril_mjx.load(MANIFEST)
  c = sim.components['imu']
  assert c.integrator == delta_imu.Integrator('delta', sim.dt, (0.0, 0.0, -9.81))
  assert c.velocity is not None
  assert any('integration: delta' in line for line in c.describe())
  p = _manifest(tmp_path, integration='deltas')
  with pytest.raises(fibril_mjx.FibrilError) as e:
    fibril_mjx.load(p)
  assert str(e.value) == (f"{p}: components[0].config.integration = 'deltas': input should be "
                          "'none', 'average' or 'delta'")
  p = _manifest(tmp_path, angular_velocity_bandwidth_hz=40.0)
  with pytest.raises(fibril_mjx.FibrilError) as e:
    fibril_mjx.load(p)
  assert str(e.value) == (f"{p}: components[0].config.integration = 'delta': with "
                          'angular_velocity_bandwidth_hz > 0 needs filter_rate: output (the '
                          'low-pass then runs on the window means) or a bandwidth of 0')
  fibril_mjx.load(_manifest(tmp_path, angular_velocity_bandwidth_hz=40.0, filter_rate='output'))


def main():
  """Prints, at 2 ms and 0.5 ms physics with 4 ms windows, the per-window errors (RMS, max) of
  the delivered Δθ on the coning motion and Δv on the sculling motion against their references,
  next to the plain sums of rates / specific forces, the composed coning attitude's error after
  1 s, and the tumble's composed error against MuJoCo C: `python
  tests/components/test_imu_delta.py`."""
  import tempfile
  rms = lambda e: math.sqrt(np.mean(e ** 2))   # noqa: E731
  for dt in (0.002, 0.0005):
    with tempfile.TemporaryDirectory() as d:
      err, naive, composed, naive_composed, _ = coning_errors(pathlib.Path(d), dt)
    print(f'dt {dt * 1e3:g} ms, coning 0.05 rad at 10 Hz, 4 ms windows: Δθ error per window '
          f'RMS {rms(err):.3g} max {np.abs(err).max():.3g} rad; plain sum of rates RMS '
          f'{rms(naive):.3g} max {np.abs(naive).max():.3g} rad (ratio {rms(naive) / rms(err):.0f}); '
          f'composed over 1 s: {composed[-1]:.3g} rad vs {naive_composed[-1]:.3g} rad')
    with tempfile.TemporaryDirectory() as d:
      err, naive, _, _ = sculling_errors(pathlib.Path(d), dt)
    print(f'dt {dt * 1e3:g} ms, sculling 0.1 rad x 2 cm at 8 Hz: Δv error per window RMS '
          f'{rms(err):.3g} max {np.abs(err).max():.3g} m/s; plain sum of specific forces RMS '
          f'{rms(naive):.3g} max {np.abs(naive).max():.3g} m/s')
  with tempfile.TemporaryDirectory() as d:
    err, _, turned = tumble_errors(pathlib.Path(d))
  print(f'tumble (MuJoCo C, 2 ms, 2 s, {turned:.2f} rad net): composed Δθ vs MuJoCo quaternions '
        f'max {err.max():.3g} rad, at 2 s {err[-1]:.3g} rad')


if __name__ == '__main__':
  main()
