"""`fibril_sim/ahrs` equations against an independent float64 NumPy/SciPy reference.

The component's `acquire` is driven directly with synthetic sensor data (no physics), so each
equation of SPEC §5.1 is checked in isolation: rates (scale → low-pass → bias + AR(1) →
yaw-rate bias → saturation → quantization) and orientation (rpy → yaw sign → yaw reference →
quaternion filter → right-composed AR(1) residual → yaw drift → resolution → canonical sign).
The reference derives the random normals itself from the SPEC §4 stream formula.
"""

import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from conftest import RIG_XML, SENSORS, SensorData
from finite_diff import central_differences
from ref_helpers import normals
from fibril_mjx.config import paths
from fibril_mjx.builder.build import BuildContext
from fibril_mjx.components.sensors import ahrs
from fibril_mjx.config.manifest import Catalog

DT = 0.002
PERIOD = 0.01
STEP = 5  # ticks per acquisition
CID = 'ahrs'


@pytest.fixture(scope='module')
def ctx():
  m = mujoco.MjModel.from_xml_string(RIG_XML)
  return BuildContext(m, DT, 'test.yaml', 'components[0].config'), Catalog([paths.profiles_dir()])


def make(ctx, **cfg):
  c, cat = ctx
  return ahrs.build(CID, {**SENSORS, 'period_s': PERIOD, **cfg}, c, cat)


def synthetic(n, seed=0, yaw_amp=1.0):
  """Smooth orientation (roll/pitch/yaw), rates and specific force; sensordata `(n, 10)`."""
  t = np.arange(n) * PERIOD
  roll = 0.4 * np.sin(1.3 * t + 0.2)
  pitch = 0.3 * np.sin(0.9 * t + 1.0)
  yaw = 0.3 + yaw_amp * np.sin(0.7 * t)
  q_xyzw = Rotation.from_euler('ZYX', np.stack([yaw, pitch, roll], 1)).as_quat()
  q = np.concatenate([q_xyzw[:, 3:], q_xyzw[:, :3]], 1)
  q[5::7] *= -1  # MuJoCo may report either hemisphere
  rs = np.random.default_rng(seed)
  gyro = np.stack([np.sin(2.0 * t), 0.5 * np.cos(1.1 * t), 0.8 * np.sin(0.6 * t + 0.3)], 1)
  gyro = gyro + 0.05 * rs.normal(size=gyro.shape)
  accel = np.array([0.3, -0.2, 9.81]) + np.stack([np.sin(3 * t), np.cos(2 * t), 0 * t], 1)
  return np.concatenate([q, gyro, accel], 1)


def _go(c, params, sd, world_key):
  def body(s, xs):
    sdn, n = xs
    s, sample = c.acquire(params, s, SensorData(sdn), n * STEP, n)
    return s, sample
  s = c.init(params, world_key)
  return jax.lax.scan(body, s, (sd, jnp.arange(sd.shape[0], dtype=jnp.int32)))[1]


_JIT = jax.jit(_go, static_argnums=0)
_JIT_WORLDS = jax.jit(jax.vmap(_go, in_axes=(None, None, None, 0)), static_argnums=0)


def run_component(c, params, sd, world_key, jit=True):
  """Acquisitions n = 0..N-1 at ticks n·STEP; returns stacked samples."""
  f = _JIT if jit else _go
  return jax.tree.map(np.asarray, f(c, params, jnp.asarray(sd, jnp.float32), world_key))


def run_worlds(c, params, sd, world_keys):
  """`run_component` for a batch of world keys (vmapped); leaves `(nworld, N, ...)`."""
  return jax.tree.map(np.asarray, _JIT_WORLDS(c, params, jnp.asarray(sd, jnp.float32),
                                              world_keys))


# ------------------------------------------------------------------ float64 reference

def ref_ahrs(sd, cfg, wk):
  """Independent float64 implementation of SPEC §5.1 (SciPy rotations)."""
  n = sd.shape[0]
  g = lambda k, d: np.asarray(cfg.get(k, d), np.float64)  # noqa: E731
  period = PERIOD
  b_psi = 0.0
  if cfg.get('yaw_rate_bias_stddev_rad_s', 0) > 0:
    b_psi = cfg['yaw_rate_bias_stddev_rad_s'] * normals(wk, CID, 'yaw_rate_bias', 1)[0]
  out = {}

  for ch, cols, lim, res in (('angular_velocity', slice(4, 7), 'angular_velocity_limit_rad_s',
                              'angular_velocity_resolution'),
                             ('linear_acceleration', slice(7, 10),
                              'linear_acceleration_limit_m_s2',
                              'linear_acceleration_resolution')):
    x = sd[:, cols].astype(np.float64) * g(f'{ch}_scale', [1, 1, 1])
    fc = cfg.get(f'{ch}_bandwidth_hz', 0.0)
    if fc > 0:
      a = 1 - math.exp(-2 * math.pi * fc * period)
      y = np.empty_like(x)
      y[0] = x[0]
      for k in range(1, n):
        y[k] = y[k - 1] + a * (x[k] - y[k - 1])
      x = y
    x = x + g(f'{ch}_bias', [0, 0, 0])
    sigma = g(f'{ch}_noise_stddev', [0, 0, 0])
    if np.any(sigma > 0):
      rho = g(f'{ch}_noise_correlation', [0, 0, 0])
      z = normals(wk, CID, f'{ch}_noise', n, 3)
      e = np.empty_like(x)
      e[0] = sigma * z[0]
      for k in range(1, n):
        e[k] = rho * e[k - 1] + sigma * np.sqrt(1 - rho ** 2) * z[k]
      x = x + e
    if ch == 'angular_velocity':
      x[:, 2] += b_psi
    flags = np.zeros_like(x, bool)
    if cfg.get(lim, 0) > 0:
      flags = np.abs(x) > cfg[lim]
      x = np.clip(x, -cfg[lim], cfg[lim])
    if cfg.get(res, 0) > 0:
      x = cfg[res] * np.round(x / cfg[res])
    out[ch], out[ch + '_flags'] = x, flags

  # Orientation.
  q = sd[:, :4].astype(np.float64)
  r = Rotation.from_quat(np.concatenate([q[:, 1:], q[:, :1]], 1))
  ypr = r.as_euler('ZYX')                       # yaw, pitch, roll
  sign = cfg.get('orientation_yaw_sign', 1.0)
  ypr[:, 0] *= sign
  if cfg.get('yaw_reference', 'initial') == 'initial':
    ypr[:, 0] = np.angle(np.exp(1j * (ypr[:, 0] - ypr[0, 0])))
  qs = Rotation.from_euler('ZYX', ypr).as_quat()   # xyzw
  fo = cfg.get('orientation_bandwidth_hz', 0.0)
  if fo > 0:
    a = 1 - math.exp(-2 * math.pi * fo * period)
    y = qs.copy()
    for k in range(1, n):
      qk = qs[k] if np.dot(y[k - 1], qs[k]) >= 0 else -qs[k]
      v = y[k - 1] + a * (qk - y[k - 1])
      y[k] = v / np.linalg.norm(v)
    qs = y
  rot = Rotation.from_quat(qs)
  so = g('orientation_noise_stddev_rad', [0, 0, 0])
  if np.any(so > 0):
    rho = g('orientation_noise_correlation', [0, 0, 0])
    z = normals(wk, CID, 'orientation_noise', n, 3)
    e = np.empty((n, 3))
    e[0] = so * z[0]
    for k in range(1, n):
      e[k] = rho * e[k - 1] + so * np.sqrt(1 - rho ** 2) * z[k]
    rot = rot * Rotation.from_euler('ZYX', e[:, ::-1])   # composed on the right
  if b_psi:
    t = np.arange(n) * period
    rot = Rotation.from_euler('Z', (sign * b_psi * t)[:, None]) * rot   # about world Z (left)
  res = cfg.get('orientation_resolution_rad', 0.0)
  if res > 0:
    ypr = rot.as_euler('ZYX')
    rot = Rotation.from_euler('ZYX', res * np.round(ypr / res))
  qx = rot.as_quat()
  qw = np.concatenate([qx[:, 3:], qx[:, :3]], 1)
  out['orientation'] = np.where(qw[:, :1] < 0, -qw, qw)
  out['b_psi'] = b_psi
  return out


WK = jax.random.fold_in(jax.random.PRNGKey(3), np.uint32(11))

CASES = {
    'identity': {},
    'scale_bias': dict(angular_velocity_scale=[1.1, 0.9, 1.02], angular_velocity_bias=[0.01, -0.02, 0.03],
                       linear_acceleration_scale=[0.98, 1.03, 1.0],
                       linear_acceleration_bias=[0.1, 0.0, -0.2]),
    'filters': dict(orientation_bandwidth_hz=2.0, angular_velocity_bandwidth_hz=5.0,
                    linear_acceleration_bandwidth_hz=8.0),
    'yaw_sign_world': dict(orientation_yaw_sign=-1.0, yaw_reference='world'),
    'yaw_sign_initial': dict(orientation_yaw_sign=-1.0),
    'saturation': dict(angular_velocity_limit_rad_s=0.6, linear_acceleration_limit_m_s2=1.2),
    'everything_deterministic': dict(
        orientation_bandwidth_hz=3.0, angular_velocity_bandwidth_hz=4.0,
        angular_velocity_scale=[1.1, 0.9, 1.0], angular_velocity_bias=[0.01, 0, 0],
        orientation_yaw_sign=-1.0, angular_velocity_limit_rad_s=0.7),
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_noise_off_equals_reference(ctx, name):
  cfg = CASES[name]
  c = make(ctx, **cfg)
  sd = synthetic(400)
  got = run_component(c, c.default_params(), sd, WK)
  ref = ref_ahrs(sd, cfg, WK)
  tol = 2e-5  # float32 evaluation of O(1)-O(10) quantities vs float64
  np.testing.assert_allclose(got.orientation, ref['orientation'], atol=tol)
  np.testing.assert_allclose(got.angular_velocity, ref['angular_velocity'], atol=tol)
  np.testing.assert_allclose(got.linear_acceleration, ref['linear_acceleration'], atol=1e-4)
  np.testing.assert_array_equal(got.angular_velocity_saturated, ref['angular_velocity_flags'])
  np.testing.assert_array_equal(got.angular_velocity_clip_count[-1],
                                ref['angular_velocity_flags'].sum(0))
  if name == 'saturation':
    assert ref['angular_velocity_flags'].any() and ref['linear_acceleration_flags'].any()


def test_noise_on_equals_reference_with_same_draws(ctx):
  cfg = dict(orientation_noise_stddev_rad=[0.01, 0.02, 0.03],
             orientation_noise_correlation=[0.9, 0.5, 0.0],
             angular_velocity_noise_stddev=[0.01, 0.02, 0.05],
             angular_velocity_noise_correlation=[0.8, 0.0, -0.3],
             linear_acceleration_noise_stddev=[0.1, 0.1, 0.2],
             linear_acceleration_noise_correlation=[0.3, 0.3, 0.3],
             yaw_rate_bias_stddev_rad_s=0.02, orientation_bandwidth_hz=4.0)
  c = make(ctx, **cfg)
  sd = synthetic(300)
  got = run_component(c, c.default_params(), sd, WK)
  ref = ref_ahrs(sd, cfg, WK)
  assert ref['b_psi'] != 0
  np.testing.assert_allclose(got.orientation, ref['orientation'], atol=3e-5)
  np.testing.assert_allclose(got.angular_velocity, ref['angular_velocity'], atol=3e-5)
  np.testing.assert_allclose(got.linear_acceleration, ref['linear_acceleration'], atol=1e-4)


def test_resolution_matches_reference_except_rounding_ties(ctx):
  cfg = dict(orientation_resolution_rad=0.01, angular_velocity_resolution=0.01,
             linear_acceleration_resolution=0.0098)
  c = make(ctx, **cfg)
  sd = synthetic(400)
  got = run_component(c, c.default_params(), sd, WK)
  ref = ref_ahrs(sd, cfg, WK)
  for f, step in (('angular_velocity', 0.01), ('linear_acceleration', 0.0098)):
    d = np.abs(getattr(got, f) - ref[f])
    # float32 vs float64 may round a value lying within ~1e-6 of a half step differently
    assert np.mean(d > 1e-5) < 0.005 and d.max() < step + 1e-5, f
    on_grid = getattr(got, f) / step
    np.testing.assert_allclose(on_grid, np.round(on_grid), atol=1e-3)
  # orientation: the delivered roll/pitch/yaw lie on the 0.01 rad grid
  rpy = Rotation.from_quat(np.concatenate([got.orientation[:, 1:], got.orientation[:, :1]], 1)
                           ).as_euler('ZYX')
  np.testing.assert_allclose(rpy / 0.01, np.round(rpy / 0.01), atol=2e-3)
  d = np.abs(got.orientation - ref['orientation']).max(axis=1)
  assert np.mean(d > 2e-5) < 0.01  # only where an angle sits on a rounding tie


def test_canonical_sign_and_unit_norm(ctx):
  c = make(ctx, orientation_bandwidth_hz=1.0, orientation_noise_stddev_rad=[0.1, 0.1, 0.1])
  got = run_component(c, c.default_params(), synthetic(300, yaw_amp=3.0), WK)
  assert (got.orientation[:, 0] >= 0).all()
  np.testing.assert_allclose(np.linalg.norm(got.orientation, axis=1), 1.0, atol=1e-6)


def test_jit_and_eager_agree(ctx):
  c = make(ctx, **CASES['everything_deterministic'],
           angular_velocity_noise_stddev=[0.1, 0.1, 0.1])
  sd = synthetic(40)
  a = run_component(c, c.default_params(), sd, WK, jit=True)
  b = run_component(c, c.default_params(), sd, WK, jit=False)
  for x, y in zip(a, b):
    np.testing.assert_allclose(x, y, atol=1e-6)


def test_variances_are_sigma2_plus_q2_over_12(ctx):
  c = make(ctx, angular_velocity_noise_stddev=[0.1, 0.2, 0.3], angular_velocity_resolution=0.05,
           orientation_noise_stddev_rad=[0.01, 0.0, 0.02], linear_acceleration_resolution=0.01)
  got = run_component(c, c.default_params(), synthetic(3), WK)
  np.testing.assert_allclose(got.angular_velocity_variance[0],
                             np.array([0.1, 0.2, 0.3]) ** 2 + 0.05 ** 2 / 12, rtol=1e-6)
  np.testing.assert_allclose(got.orientation_variance[0], [1e-4, 0.0, 4e-4], rtol=1e-6)
  np.testing.assert_allclose(got.linear_acceleration_variance[0], [0.01 ** 2 / 12] * 3,
                             rtol=1e-6)


# ------------------------------------------------------------------ statistics

def test_ar1_noise_std_and_autocorrelation(ctx):
  n, sigma, rho = 20000, 0.5, 0.8
  c = make(ctx, angular_velocity_noise_stddev=[sigma] * 3,
           angular_velocity_noise_correlation=[rho] * 3)
  sd = np.zeros((n, 10))
  sd[:, 0] = 1.0
  e = run_component(c, c.default_params(), sd, WK).angular_velocity.astype(np.float64)
  # Effective sample size of an AR(1): n (1-ρ²)/(1+ρ²) for the variance estimate.
  n_eff = n * (1 - rho ** 2) / (1 + rho ** 2)
  std = e.std(axis=0)
  tol_std = 5 * sigma / math.sqrt(2 * n_eff)   # 5 standard errors of a std estimate
  np.testing.assert_allclose(std, sigma, atol=tol_std)
  for k in (1, 2, 5):
    r = np.array([np.corrcoef(e[:-k, i], e[k:, i])[0, 1] for i in range(3)])
    # Bartlett: var(r_k) ≈ (1/n)·[(1+ρ²)(1−ρ^{2k})/(1−ρ²) − 2kρ^{2k}]
    var = ((1 + rho ** 2) * (1 - rho ** (2 * k)) / (1 - rho ** 2) - 2 * k * rho ** (2 * k)) / n
    np.testing.assert_allclose(r, rho ** k, atol=5 * math.sqrt(var))
  # stationary from the first sample: the first samples across worlds have std σ
  keys = jax.vmap(lambda w: jax.random.fold_in(jax.random.PRNGKey(0), w))(jnp.arange(400))
  firsts = run_worlds(c, c.default_params(), sd[:1], keys).angular_velocity[:, 0]
  np.testing.assert_allclose(np.std(firsts), sigma, atol=5 * sigma / math.sqrt(2 * 1200))


def test_yaw_drift_slope_equals_gyro_z_bias(ctx):
  c = make(ctx, yaw_rate_bias_stddev_rad_s=0.05)
  n = 500
  sd = np.zeros((n, 10))
  sd[:, 0] = 1.0
  got = run_component(c, c.default_params(), sd, WK)
  b = got.angular_velocity[:, 2]
  assert np.all(b == b[0]) and b[0] != 0      # gyro Z carries b_ψ (truth is 0)
  yaw = np.unwrap(Rotation.from_quat(np.concatenate(
      [got.orientation[:, 1:], got.orientation[:, :1]], 1)).as_euler('ZYX')[:, 0])
  t = np.arange(n) * PERIOD
  assert yaw[0] == 0
  slope = np.polyfit(t, yaw, 1)[0]
  np.testing.assert_allclose(slope, b[0], rtol=1e-4)
  # per-episode: constant within an episode, different across worlds, std as configured
  keys = jax.vmap(lambda w: jax.random.fold_in(jax.random.PRNGKey(1), w))(jnp.arange(300))
  bs = run_worlds(c, c.default_params(), sd[:2], keys).angular_velocity[:, 0, 2]
  assert len(np.unique(bs)) == 300   # different across worlds
  np.testing.assert_allclose(np.std(bs), 0.05, atol=5 * 0.05 / math.sqrt(600))


# ------------------------------------------------------------------ gradients

@pytest.mark.parametrize('field, value', [
    ('angular_velocity_bandwidth_hz', 4.0),
    ('orientation_bandwidth_hz', 3.0),
    ('angular_velocity_scale', [1.05, 0.95, 1.1]),
    ('angular_velocity_bias', [0.02, -0.01, 0.03]),
    ('linear_acceleration_bias', [0.1, 0.2, -0.1]),
])
def test_gradient_matches_finite_differences(ctx, field, value):
  c = make(ctx, **{field: value})
  sd = jnp.asarray(synthetic(60), jnp.float32)
  p0 = c.default_params()
  w = jnp.asarray(np.random.default_rng(1).normal(size=(60, 3)), jnp.float32)

  def loss(v):
    p = c.set_param(p0, field, v)
    def body(s, xs):
      sdn, n = xs
      s, smp = c.acquire(p, s, SensorData(sdn), n * STEP, n)
      return s, (smp.angular_velocity, smp.linear_acceleration, smp.orientation)
    _, (wv, a, q) = jax.lax.scan(body, c.init(p, WK), (sd, jnp.arange(60, dtype=jnp.int32)))
    return jnp.sum(wv * w) + jnp.sum(a * w) + jnp.sum(q[:, 1:] * w)

  v0 = c.get_param(p0, field)
  g = np.asarray(jax.grad(loss)(v0), np.float64)
  fd = central_differences(loss, v0)
  assert np.all(np.abs(np.atleast_1d(g)) > 1e-3), 'gradient must not vanish'
  # central differences in float32: O(h²) truncation + O(eps·|loss|/h) rounding ≈ 1e-3 rel.
  np.testing.assert_allclose(np.atleast_1d(g), fd, rtol=5e-3, atol=5e-3)
