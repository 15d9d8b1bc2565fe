"""Integrated IMU outputs (`components/sensors/delta_imu.py`, `integration:` of `fibril_sim/imu`).

References, float64, written here:
- closed-form coning: attitude `q(t) = [cos(θ/2), sin(θ/2)·cos Ωt, sin(θ/2)·sin Ωt, 0]`, body rate
  `ω = (−Ω sinθ sin Ωt, Ω sinθ cos Ωt, −2Ω sin²(θ/2))` (from `2 q* ⊗ q̇`), exact window rotation
  vector `log(q(t0)* ⊗ q(t1))`;
- a NumPy integration at the physics rate: rate and specific force linear between ticks, the
  body attitude propagated with Rodrigues' formula over `M` midpoint sub-steps per tick, `Δv =
  ∫ C(τ) f dτ` in the body axes at the window start, `Δθ = log(C(T))`.

Tolerances are a-priori bounds of what the algorithm neglects, computed from the signal (T the
window, |ω|, |f| bounds of the signal, `|α(τ)| ≤ |ω|τ`): the third-order terms of the Bortz and
velocity expansions, `∫(1/12)|α|²|ω|dτ ≤ (|ω|T)³/36` for the angle and `∫½|α|²|f|dτ ≤
|f|T·(|ω|T)²/6` for the velocity; plus the trapezoid's `L·dt³·max|ω̈|/12` where the input is a
smooth signal sampled at ticks (the closed-form case); float32 rounding `4·L·ε·|x|` in the
simulator. Each check also shows that the compensation it tests is far larger than its
tolerance.
"""

from __future__ import annotations

import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

import fibril_mjx
from fibril_mjx.analysis.common import flatten
from fibril_mjx.components.sensors import delta_imu

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = REPO / 'manifests' / 'imu_delta.yaml'
RIG = REPO / 'manifests' / 'imu_delta_rig.xml'
EPS32 = float(np.finfo(np.float32).eps)


# ------------------------------------------------------------------------------ references

def _skew(v):
  z = np.zeros(v.shape[:-1])
  return np.stack([np.stack([z, -v[..., 2], v[..., 1]], -1),
                   np.stack([v[..., 2], z, -v[..., 0]], -1),
                   np.stack([-v[..., 1], v[..., 0], z], -1)], -2)


def _expm(phi):
  """Rodrigues: rotation matrices `(..., 3, 3)` of rotation vectors `(..., 3)`."""
  th = np.linalg.norm(phi, axis=-1)[..., None, None]
  k = _skew(phi)
  small = th < 1e-8
  a = np.where(small, 1.0 - th ** 2 / 6, np.sin(th) / np.where(small, 1.0, th))
  b = np.where(small, 0.5 - th ** 2 / 24, (1 - np.cos(th)) / np.where(small, 1.0, th) ** 2)
  return np.eye(3) + a * k + b * (k @ k)


def _logm(r):
  """Rotation vectors `(..., 3)` of rotation matrices (angles < π)."""
  v = 0.5 * np.stack([r[..., 2, 1] - r[..., 1, 2], r[..., 0, 2] - r[..., 2, 0],
                      r[..., 1, 0] - r[..., 0, 1]], -1)
  s = np.linalg.norm(v, axis=-1)
  c = 0.5 * (np.trace(r, axis1=-2, axis2=-1) - 1.0)
  th = np.arctan2(s, c)
  f = np.where(s < 1e-12, 1.0, th / np.where(s < 1e-12, 1.0, s))
  return v * f[..., None]


def numpy_windows(w, f, dt, m=64):
  """Float64 reference of windows: `w`, `f` `(nwin, L+1, 3)` rate (rad/s) and specific force
  (m/s²) at the window's ticks (its start tick first), linear between ticks. Returns `(Δθ,
  Δv)` `(nwin, 3)`: the rotation vector over the window and `∫ C f dτ` in the start axes."""
  w, f = np.asarray(w, np.float64), np.asarray(f, np.float64)
  nwin, n1, _ = w.shape
  c = np.broadcast_to(np.eye(3), (nwin, 3, 3)).copy()
  dv = np.zeros((nwin, 3))
  h = dt / m
  for i in range(n1 - 1):
    for j in range(m):
      u = (j + 0.5) / m
      wm = w[:, i] + (w[:, i + 1] - w[:, i]) * u
      fm = f[:, i] + (f[:, i + 1] - f[:, i]) * u
      half = _expm(wm * h / 2)
      dv += np.einsum('nij,nj->ni', c @ half, fm) * h
      c = c @ _expm(wm * h)
  return _logm(c), dv


def _quat_mul(a, b):
  w1, x1, y1, z1 = np.moveaxis(a, -1, 0)
  w2, x2, y2, z2 = np.moveaxis(b, -1, 0)
  return np.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                   w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2],
                  -1)


def coning(theta, omega, t):
  """Closed-form coning: attitude quaternions `(n, 4)` and body rates `(n, 3)` at times `t`."""
  c, s = math.cos(theta / 2), math.sin(theta / 2)
  q = np.stack([np.full_like(t, c), s * np.cos(omega * t), s * np.sin(omega * t),
                np.zeros_like(t)], -1)
  w = np.stack([-omega * math.sin(theta) * np.sin(omega * t),
                omega * math.sin(theta) * np.cos(omega * t),
                np.full_like(t, -2 * omega * s * s)], -1)
  return q, w


def _quat_rotvec(q):
  q = q * np.sign(q[..., :1])
  v = q[..., 1:]
  s = np.linalg.norm(v, axis=-1)
  th = 2 * np.arctan2(s, q[..., 0])
  return v * (th / np.where(s == 0, 1.0, s))[..., None]


# ------------------------------------------------------------------------------ pure algorithm

def _run_windows(rates, accels, dt, ticks_per_window):
  """The integrator (float64) over ticks; acquisitions at ticks 0, L, 2L, ...: `Window`s."""
  def body(st, x):
    k, w, a = x
    st = delta_imu.accumulate(st, w, a, dt)
    win = delta_imu.window(st, w, a, dt)
    due = (k % ticks_per_window) == 0
    st = jax.tree.map(lambda r, s: jnp.where(due, r, s), delta_imu.restart(st), st)
    return st, win

  with jax.enable_x64(True):
    n = rates.shape[0]
    xs = (jnp.arange(n), jnp.asarray(rates, jnp.float64), jnp.asarray(accels, jnp.float64))
    _, wins = jax.jit(lambda xs: jax.lax.scan(body, delta_imu.init(jnp.float64), xs))(xs)
    wins = jax.tree.map(np.asarray, wins)
  return jax.tree.map(lambda x: x[::ticks_per_window], wins)


def test_coning_closed_form():
  """Classic coning (half-angle 0.2 rad at 10 Hz, 10 kHz ticks, 40-tick windows): the coning-
  compensated Δθ matches the closed-form rotation vector of every window. (Fine ticks keep the
  trapezoid's sampling error, which the closed form does not have, below the coning term.)"""
  theta, omega, dt, L, nwin = 0.2, 2 * math.pi * 10.0, 0.0001, 40, 25
  t = np.arange(nwin * L + 1) * dt
  q, w = coning(theta, omega, t)
  wins = _run_windows(w, np.zeros_like(w), dt, L)
  q0, q1 = q[0:-1:L], q[L::L]
  exact = _quat_rotvec(_quat_mul(q0 * np.array([1, -1, -1, -1]), q1))
  got = wins.delta_angle[1:]
  rate = omega * math.sqrt(math.sin(theta) ** 2 + 4 * math.sin(theta / 2) ** 4)   # |ω|
  T = L * dt
  tol = rate ** 3 * T ** 3 / 36 + L * dt ** 3 * omega ** 3 * math.sin(theta) / 12
  err = np.abs(got - exact).max()
  assert err < tol, (err, tol)
  # the coning term matters: the plain sum of increments misses it by far more than tol
  uncompensated = np.abs(_run_alpha(w, dt, L) - exact).max()
  assert uncompensated > 10 * tol, (uncompensated, tol)
  np.testing.assert_allclose(wins.duration_s[1:], T, rtol=1e-12)
  assert wins.duration_s[0] == 0.0 and np.all(wins.delta_angle[0] == 0.0)


def _run_alpha(w, dt, L):
  """Σ Δα per window, the trapezoid sum without the coning term (NumPy)."""
  inc = 0.5 * (w[1:] + w[:-1]) * dt
  return inc.reshape(-1, L, 3).sum(1)


def _signals(t):
  """Smooth rate and specific force: sculling (rate about x in phase with force along y) plus
  off-axis tones and gravity."""
  om = 2 * math.pi * 15.0
  w = np.stack([2.0 * np.cos(om * t), 0.5 * np.sin(2.3 * om * t), 0.3 * np.cos(0.7 * om * t)], -1)
  f = np.stack([1.0 * np.sin(1.7 * om * t), 8.0 * np.cos(om * t), 9.81 + 2.0 * np.sin(om * t)],
               -1)
  return w, f


def test_sculling_against_numpy_integration():
  """Δθ and Δv of smooth rates and forces against the float64 NumPy integration (linear
  between ticks, 64 sub-steps a tick); rotation compensation and sculling both needed."""
  dt, L, nwin = 0.0005, 8, 30
  t = np.arange(nwin * L + 1) * dt
  w, f = _signals(t)
  wins = _run_windows(w, f, dt, L)
  idx = np.arange(nwin)[:, None] * L + np.arange(L + 1)[None]
  ref_th, ref_v = numpy_windows(w[idx], f[idx], dt)
  T = L * dt
  wmax = np.linalg.norm(w, axis=-1).max()
  fmax = np.linalg.norm(f, axis=-1).max()
  tol_th = (wmax * T) ** 3 / 36
  tol_v = fmax * T * (wmax * T) ** 2 / 6
  err_th = np.abs(wins.delta_angle[1:] - ref_th).max()
  err_v = np.abs(wins.delta_velocity[1:] - ref_v).max()
  assert err_th < tol_th, (err_th, tol_th)
  assert err_v < tol_v, (err_v, tol_v)
  # without the sculling term (only υ + ½α×υ) the error is far beyond the tolerance
  alpha = _run_alpha(w, dt, L)
  nu = 0.5 * (f[idx][:, 1:] + f[idx][:, :-1]).sum(1) * dt
  no_scul = nu + 0.5 * np.cross(alpha, nu)
  assert np.abs(no_scul - ref_v).max() > 10 * tol_v
  assert np.abs(nu - ref_v).max() > 10 * tol_v


def test_jit_vmap_and_modes():
  """jit equals eager; vmap equals a loop; `average` adds no sample fields; `delta` adds
  `DELTA_FIELDS` with the integrated rate error `T·(y − x̄)`."""
  rng = np.random.default_rng(0)
  w = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)
  a = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)
  st = delta_imu.init()
  for i in range(3):
    st = delta_imu.accumulate(st, w[i], a[i], 0.001)
  jitted = jax.jit(delta_imu.accumulate, static_argnums=3)(st, w[3], a[3], 0.001)
  eager = delta_imu.accumulate(st, w[3], a[3], 0.001)
  jax.tree.map(np.testing.assert_array_equal, jitted, eager)
  sts = jax.tree.map(lambda x: jnp.stack([x] * 4), st)
  batched = jax.vmap(delta_imu.accumulate, (0, 0, 0, None))(sts, w, a, 0.001)
  for i in range(4):
    one = delta_imu.accumulate(st, w[i], a[i], 0.001)
    jax.tree.map(lambda b, o: np.testing.assert_allclose(b[i], o, rtol=1e-6, atol=1e-9),
                 batched, one)
  avg = delta_imu.Integrator('average', 0.001)
  win = avg.window(eager, w[0], a[0])
  fields, restarted = avg.finish({'angular_velocity': w[0], 'linear_acceleration': a[0]},
                                 eager, win)
  assert set(fields) == {'angular_velocity', 'linear_acceleration'}
  assert int(restarted.ticks) == 0 and np.all(np.asarray(restarted.alpha) == 0)
  dl = delta_imu.Integrator('delta', 0.001)
  y = {'angular_velocity': win.mean_rate + 0.5, 'linear_acceleration': win.mean_accel - 2.0}
  fields, _ = dl.finish(y, eager, win)
  np.testing.assert_allclose(fields['delta_angle'], win.delta_angle + 0.5 * win.duration_s,
                             rtol=1e-6)
  np.testing.assert_allclose(fields['delta_velocity'],
                             win.delta_velocity - 2.0 * win.duration_s, rtol=1e-6)


# ------------------------------------------------------------------------------ in the simulator

BIAS = [0.01, -0.02, 0.03]          # rad/s
SCALE = [1.01, 0.99, 1.02]
ACCEL_N = 2e-3                      # m/s²/√Hz, x axis only
WORLDS, TICKS = 4, 2000             # 1 s at 2 kHz


def _manifest(tmp_path, **config):
  doc = yaml.safe_load(MANIFEST.read_text())
  doc['model'] = str(RIG)
  cfg = {'gyroscope_sensor': 'imu_gyro', 'accelerometer_sensor': 'imu_accel',
         'period_s': 0.004, 'integration': 'delta', **config}
  doc['components'][0]['config'] = cfg
  p = tmp_path / 'imu_delta.yaml'
  p.write_text(yaml.safe_dump(doc))
  return p


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  path = _manifest(tmp_path_factory.mktemp('delta'), angular_velocity_bias=BIAS,
                   angular_velocity_scale=SCALE,
                   linear_acceleration_noise_density=[ACCEL_N, 0.0, 0.0])
  sim = fibril_mjx.load(path)
  _, trace = sim.rollout(sim.default_params(WORLDS), fibril_mjx.world_keys(0, WORLDS), TICKS)
  return sim, flatten(jax.device_get(trace))


def test_simulated_deltas_against_numpy_truth_integration(run):
  """Delivered Δθ, Δv and window-mean rates against the float64 NumPy integration of the
  per-tick truth (the MuJoCo gyro and accelerometer); gyro bias and scale integrate to
  `(scale − 1)·α + b·T`; accelerometer white noise gives Δv the variance `(N/√Δ)²·T²`."""
  sim, z = run
  dt, L = sim.dt, 8
  T = L * dt
  new = z['sensor/imu/new_data'][0].astype(bool)
  ticks = np.asarray(z['sensor/imu/sample_tick'][0])[new][1:]       # windows after the first
  assert np.all(np.diff(ticks) == L)
  w_truth = np.asarray(z['truth/imu/angular_velocity'], np.float64)
  f_truth = np.asarray(z['truth/imu/linear_acceleration'], np.float64)
  idx = ticks[:, None] + np.arange(-L, 1)[None]
  ref_th, ref_v = numpy_windows(w_truth[0][idx], f_truth[0][idx], dt)
  alpha = 0.5 * (w_truth[0][idx][:, 1:] + w_truth[0][idx][:, :-1]).sum(1) * dt
  wmax = np.linalg.norm(w_truth[0], axis=-1).max()
  fmax = np.linalg.norm(f_truth[0], axis=-1).max()
  third_th = (wmax * T) ** 3 / 36
  third_v = fmax * T * (wmax * T) ** 2 / 6
  for wd in range(WORLDS):
    new = z['sensor/imu/new_data'][wd].astype(bool)
    dth = np.asarray(z['sensor/imu/delta_angle'][wd], np.float64)[new][1:]
    dv = np.asarray(z['sensor/imu/delta_velocity'][wd], np.float64)[new][1:]
    np.testing.assert_allclose(np.asarray(z['sensor/imu/delta_time_s'][wd])[new][1:], T,
                               rtol=1e-6)
    want = ref_th + (np.asarray(SCALE) - 1) * alpha + np.asarray(BIAS) * T
    tol_th = third_th + 4 * L * EPS32 * (np.abs(want) + np.abs(BIAS) * T)
    assert np.all(np.abs(dth - want) < tol_th), np.abs(dth - want).max() / tol_th.max()
    rate = np.asarray(z['sensor/imu/angular_velocity'][wd], np.float64)[new][1:]
    np.testing.assert_allclose(rate, np.asarray(SCALE) * alpha / T + BIAS, rtol=1e-5,
                               atol=1e-5)
    tol_v = third_v + 4 * L * EPS32 * np.abs(ref_v)
    assert np.all(np.abs(dv[:, 1:] - ref_v[:, 1:]) < tol_v[:, 1:])
  # noise on Δv_x: pooled over worlds and windows, the chi-square 5-sigma band of its variance
  dvx = np.concatenate([np.asarray(z['sensor/imu/delta_velocity'][wd], np.float64)[
      z['sensor/imu/new_data'][wd].astype(bool)][1:, 0] - ref_v[:, 0] for wd in range(WORLDS)])
  var_want = (ACCEL_N / math.sqrt(0.004)) ** 2 * T ** 2
  n = dvx.size
  assert abs(np.mean(dvx ** 2) / var_want - 1) < 5 * math.sqrt(2 / n), (np.mean(dvx ** 2),
                                                                         var_want, n)
  # the coning term is resolved: without it the angle error exceeds the tolerance
  assert np.abs(dth - want + (ref_th - alpha)).max() > 10 * third_th


def test_example_manifest_plan_and_errors(tmp_path):
  """The example builds (plan line); bad values give one-line errors."""
  sim = fibril_mjx.load(MANIFEST)
  c = sim.components['imu']
  assert c.integrator == delta_imu.Integrator('delta', sim.dt)
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
