"""`fibril_sim/imu` (SPEC §5.2): equations vs an independent float64 NumPy reference, each error
term vs its closed form, physics (six static orientations, centripetal term), validation.

Most tests drive the component's `acquire` directly with synthetic sensor data (no physics), as
test_ahrs.py does; the physics tests share one compiled MJX rig (`imu_rig.py`). Statistical
tolerances are 5 standard errors of the estimator at the test's sample size, with fixed seeds.
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

import imu_rig
from finite_diff import central_differences
from conftest import RIG_XML, SensorData
from ref_helpers import normals, write_manifest
from error_helpers import FINITE, GE0, GT0, NO_VALUE, assert_reported, load_error, write
from fibril_mjx.config import paths
from fibril_mjx.analysis import stats
from fibril_mjx.builder.build import BuildContext
from fibril_mjx.components.sensors import imu
from fibril_mjx.config.manifest import Catalog

DT = 0.002
PERIOD = 0.01
STEP = 5  # ticks per acquisition
CID = 'imu'
SENSORS = {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel'}
GYRO, ACCEL = slice(4, 7), slice(7, 10)   # RIG_XML sensordata: quat, gyro, accel, ...
CH_COLS = {'angular_velocity': GYRO, 'linear_acceleration': ACCEL}
WK = jax.random.fold_in(jax.random.PRNGKey(5), np.uint32(7))


@pytest.fixture(scope='module')
def ctx():
  m = mujoco.MjModel.from_xml_string(RIG_XML)
  return BuildContext(m, DT, 'test.yaml', 'components[0].config'), Catalog([paths.profiles_dir()])


def make(ctx, period_s=PERIOD, **cfg):
  c, cat = ctx
  # acquire() is driven directly here (no physics ticks between samples): the bandwidth
  # filter runs on the samples unless a test asks for the physics rate.
  raw = {**SENSORS, 'filter_rate': 'output', **cfg}
  if period_s is not None:
    raw['period_s'] = period_s
  return imu.build(CID, raw, c, cat)


def synthetic(n, seed=0):
  """Smooth rates and specific force with some broadband content; sensordata `(n, 10)`."""
  t = np.arange(n) * PERIOD
  rs = np.random.default_rng(seed)
  sd = np.zeros((n, 10))
  sd[:, 0] = 1.0
  sd[:, GYRO] = np.stack([np.sin(2.0 * t), 0.5 * np.cos(1.1 * t), 0.8 * np.sin(0.6 * t + 0.3)],
                         1) + 0.05 * rs.normal(size=(n, 3))
  sd[:, ACCEL] = np.array([0.3, -0.2, 9.81]) + np.stack(
      [np.sin(3 * t), np.cos(2 * t), 0.5 * np.sin(5 * t)], 1)
  return sd


def static(n, gyro=(0.0, 0.0, 0.0), accel=(0.0, 0.0, 9.81)):
  sd = np.zeros((n, 10))
  sd[:, 0] = 1.0
  sd[:, GYRO] = gyro
  sd[:, ACCEL] = accel
  return sd


def _go(c, params, sd, world_key):
  def body(s, xs):
    sdn, n = xs
    return c.acquire(params, s, SensorData(sdn), n * STEP, n)
  s = c.init(params, world_key)
  s, samples = jax.lax.scan(body, s, (sd, jnp.arange(sd.shape[0], dtype=jnp.int32)))
  return s, samples


_JIT = jax.jit(_go, static_argnums=0)
_JIT_WORLDS = jax.jit(jax.vmap(_go, in_axes=(None, None, None, 0)), static_argnums=0)


def run(c, sd, wk=WK, params=None, jit=True):
  """Acquisitions n = 0..N-1 at ticks n·STEP; returns `(final state, samples)` as NumPy."""
  p = c.default_params() if params is None else params
  f = _JIT if jit else _go
  return jax.tree.map(np.asarray, f(c, p, jnp.asarray(sd, jnp.float32), wk))


def run_worlds(c, sd, n_worlds, seed=0):
  keys = jax.vmap(lambda w: jax.random.fold_in(jax.random.PRNGKey(seed), w))(
      jnp.arange(n_worlds))
  return jax.tree.map(np.asarray, _JIT_WORLDS(c, c.default_params(), jnp.asarray(sd, jnp.float32),
                                              keys))


# ------------------------------------------------------------------ float64 reference

def ref_imu(sd, cfg, wk):
  """Independent float64 implementation of SPEC §5.2 for both channels."""
  n = sd.shape[0]
  out = {}
  before = cfg.get('noise_before_filter', False)
  for ch, cols in CH_COLS.items():
    g = lambda k, d: np.asarray(cfg.get(f'{ch}_{k}', d), np.float64)  # noqa: E731
    x = sd[:, cols].astype(np.float64)
    gain = np.eye(3) + np.diag(g('scale', [1, 1, 1]) - 1) + g('misalignment', np.zeros((3, 3)))
    y = x @ gain.T
    err = np.zeros((n, 3)) + g('bias', [0, 0, 0])
    s_on = g('bias_turn_on_stddev', [0, 0, 0])
    if np.any(s_on > 0):
      err += s_on * normals(wk, CID, f'{ch}_bias_turn_on', 1, 3)[0]
    s_gm = g('bias_instability_stddev', [0, 0, 0])
    if np.any(s_gm > 0):
      tau = g('bias_correlation_time_s', [1, 1, 1])
      phi = np.exp(-PERIOD / tau)
      z = normals(wk, CID, f'{ch}_bias_instability', n, 3)
      b = np.empty((n, 3))
      b[0] = s_gm * z[0]
      for k in range(1, n):
        b[k] = phi * b[k - 1] + s_gm * np.sqrt(1 - phi ** 2) * z[k]
      err += b
    k_rw = g('random_walk', [0, 0, 0])
    if np.any(k_rw > 0):
      z = normals(wk, CID, f'{ch}_random_walk', n, 3)
      b = np.zeros((n, 3))
      for k in range(1, n):
        b[k] = b[k - 1] + k_rw * np.sqrt(PERIOD) * z[k]
      err += b
    dens = g('noise_density', [0, 0, 0])
    if np.any(dens > 0):
      err += dens / np.sqrt(PERIOD) * normals(wk, CID, f'{ch}_noise', n, 3)
    if before:
      y = y + err
    fc = cfg.get(f'{ch}_bandwidth_hz', 0.0)
    if fc > 0:
      a = 1 - math.exp(-2 * math.pi * fc * PERIOD)
      f = np.empty_like(y)
      f[0] = y[0]
      for k in range(1, n):
        f[k] = f[k - 1] + a * (y[k] - f[k - 1])
      y = f
    if not before:
      y = y + err
    flags = np.zeros_like(y, bool)
    lim = cfg.get(f'{ch}_limit', 0.0)
    if lim > 0:
      flags = np.abs(y) > lim
      y = np.clip(y, -lim, lim)
    res = cfg.get(f'{ch}_resolution', 0.0)
    if res > 0:
      y = res * np.round(y / res)
    out[ch], out[ch + '_flags'] = y, flags
  return out


M_GYRO = [[0, 0.01, -0.02], [0.015, 0, 0.005], [-0.01, 0.02, 0]]
M_ACC = [[0, -0.005, 0.01], [0.02, 0, -0.01], [0.003, 0.004, 0]]

CASES = {
    'identity': {},
    'scale': dict(angular_velocity_scale=[1.1, 0.9, 1.02], linear_acceleration_scale=[0.98, 1.03, 1.0]),
    'misalignment': dict(angular_velocity_misalignment=M_GYRO,
                         linear_acceleration_misalignment=M_ACC),
    'scale_and_misalignment': dict(angular_velocity_scale=[1.05, 0.97, 1.0],
                                   angular_velocity_misalignment=M_GYRO),
    'bandwidth': dict(angular_velocity_bandwidth_hz=5.0, linear_acceleration_bandwidth_hz=8.0),
    'bias': dict(angular_velocity_bias=[0.01, -0.02, 0.03],
                 linear_acceleration_bias=[0.1, 0.0, -0.2]),
    'bias_before_filter': dict(angular_velocity_bias=[0.01, -0.02, 0.03],
                               angular_velocity_bandwidth_hz=3.0, noise_before_filter=True),
    'saturation': dict(angular_velocity_limit=0.6, linear_acceleration_limit=10.0),
    'everything_deterministic': dict(
        angular_velocity_bandwidth_hz=4.0, angular_velocity_scale=[1.1, 0.9, 1.0],
        angular_velocity_misalignment=M_GYRO, angular_velocity_bias=[0.01, 0, 0],
        angular_velocity_limit=0.7, linear_acceleration_misalignment=M_ACC,
        linear_acceleration_limit=10.2),
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_noise_off_equals_reference(ctx, name):
  cfg = CASES[name]
  c = make(ctx, **cfg)
  sd = synthetic(400)
  _, got = run(c, sd)
  ref = ref_imu(sd, cfg, WK)
  np.testing.assert_allclose(got.angular_velocity, ref['angular_velocity'], atol=2e-5)
  np.testing.assert_allclose(got.linear_acceleration, ref['linear_acceleration'], atol=1e-4)
  for ch in imu.CHANNELS:
    np.testing.assert_array_equal(getattr(got, ch + '_saturated'), ref[ch + '_flags'])
    np.testing.assert_array_equal(getattr(got, ch + '_clip_count')[-1], ref[ch + '_flags'].sum(0))
  if name == 'saturation':
    assert ref['angular_velocity_flags'].any() and ref['linear_acceleration_flags'].any()


ALL_TERMS = dict(
    angular_velocity_noise_density=[0.01, 0.02, 0.005],
    angular_velocity_bias=[0.01, 0.0, -0.01],
    angular_velocity_bias_turn_on_stddev=[0.05, 0.02, 0.03],
    angular_velocity_bias_instability_stddev=[0.01, 0.02, 0.03],
    angular_velocity_bias_correlation_time_s=[0.5, 1.0, 2.0],
    angular_velocity_random_walk=[0.01, 0.005, 0.02],
    angular_velocity_bandwidth_hz=6.0,
    angular_velocity_misalignment=M_GYRO,
    linear_acceleration_noise_density=[0.02, 0.02, 0.04],
    linear_acceleration_bias_turn_on_stddev=[0.1, 0.1, 0.1],
    linear_acceleration_bias_instability_stddev=[0.05, 0.05, 0.05],
    linear_acceleration_bias_correlation_time_s=[3.0, 3.0, 3.0],
    linear_acceleration_random_walk=[0.02, 0.02, 0.02],
    linear_acceleration_bandwidth_hz=10.0,
)


@pytest.mark.parametrize('before', [False, True], ids=['after_filter', 'before_filter'])
def test_all_terms_equal_reference_with_same_draws(ctx, before):
  cfg = dict(ALL_TERMS, noise_before_filter=before)
  c = make(ctx, **cfg)
  sd = synthetic(300)
  _, got = run(c, sd)
  ref = ref_imu(sd, cfg, WK)
  np.testing.assert_allclose(got.angular_velocity, ref['angular_velocity'], atol=3e-5)
  np.testing.assert_allclose(got.linear_acceleration, ref['linear_acceleration'], atol=1e-4)


def test_resolution_grid_and_rounding(ctx):
  cfg = dict(angular_velocity_resolution=0.01, linear_acceleration_resolution=0.0098)
  c = make(ctx, **cfg)
  sd = synthetic(400)
  _, got = run(c, sd)
  ref = ref_imu(sd, cfg, WK)
  for ch, step in (('angular_velocity', 0.01), ('linear_acceleration', 0.0098)):
    v = getattr(got, ch)
    np.testing.assert_allclose(v / step, np.round(v / step), atol=1e-3)
    d = np.abs(v - ref[ch])
    # float32 vs float64 may round a value within ~1e-6 of a half step differently
    assert np.mean(d > 1e-5) < 0.005 and d.max() < step + 1e-5, ch


def test_cross_axis_is_exact_with_noise_off(ctx):
  """A unit input on axis j reads column j of I + diag(scale − 1) + M, in both channels."""
  scale = [1.02, 0.97, 1.01]
  c = make(ctx, angular_velocity_scale=scale, angular_velocity_misalignment=M_GYRO,
           linear_acceleration_misalignment=M_ACC)
  sd = np.zeros((3, 10))
  sd[:, 0] = 1.0
  sd[:, GYRO] = np.eye(3)
  sd[:, ACCEL] = np.eye(3)
  _, got = run(c, sd)
  want_g = np.eye(3) + np.diag(np.array(scale) - 1) + np.array(M_GYRO)
  want_a = np.eye(3) + np.array(M_ACC)
  np.testing.assert_allclose(got.angular_velocity.T, want_g, rtol=0, atol=1e-7)
  np.testing.assert_allclose(got.linear_acceleration.T, want_a, rtol=0, atol=1e-7)


def test_each_term_has_its_own_stream(ctx):
  """Switching terms on never changes another term's draws: errors add up exactly."""
  sd = static(200)
  terms = {
      'white': dict(angular_velocity_noise_density=[0.01] * 3),
      'turn_on': dict(angular_velocity_bias_turn_on_stddev=[0.05] * 3),
      'gm': dict(angular_velocity_bias_instability_stddev=[0.02] * 3,
                 angular_velocity_bias_correlation_time_s=[1.0] * 3),
      'rw': dict(angular_velocity_random_walk=[0.01] * 3),
      'accel_white': dict(linear_acceleration_noise_density=[0.05] * 3),
  }
  alone = {k: run(make(ctx, **v), sd)[1].angular_velocity for k, v in terms.items()}
  together = run(make(ctx, **{k: v for d in terms.values() for k, v in d.items()}), sd)[1]
  np.testing.assert_allclose(together.angular_velocity, sum(alone.values()), atol=1e-6)
  assert np.all(alone['accel_white'] == 0)   # accel terms do not touch the gyro
  for a in ('white', 'turn_on', 'gm', 'rw'):
    assert np.any(alone[a] != 0)


# ------------------------------------------------------------------ statistics

def _allan_check(x, rate, level_fn, noise, taus):
  """Measured Allan deviation vs the closed form, tolerance 5/√(2·edf) relative."""
  t, adev = stats.allan_deviation(x, rate, taus)
  want = level_fn(t)
  edf = stats.allan_edf(x.size, np.round(t * rate), noise)
  tol = 5.0 / np.sqrt(2.0 * edf)
  np.testing.assert_array_less(np.abs(adev / want - 1.0), tol)
  return t, adev


def test_white_noise_allan_deviation_is_density_over_sqrt_tau(ctx):
  n_g, n_a = np.array([0.02, 0.01, 0.005]), np.array([0.05, 0.1, 0.2])
  c = make(ctx, angular_velocity_noise_density=n_g.tolist(),
           linear_acceleration_noise_density=n_a.tolist())
  n = 1 << 17
  _, got = run(c, static(n, accel=(0, 0, 0)))
  rate = 1.0 / PERIOD
  taus = PERIOD * np.array([1, 3, 10, 30, 100, 300, 1000])
  for x, dens in ((got.angular_velocity, n_g), (got.linear_acceleration, n_a)):
    for i in range(3):
      xi = x[:, i].astype(np.float64)
      # per-sample σ = N·√(1/Δ)
      sigma = dens[i] / math.sqrt(PERIOD)
      assert abs(xi.std() / sigma - 1) < 5 / math.sqrt(2 * n)
      t, adev = _allan_check(xi, rate, lambda tau: stats.allan_white_level(dens[i], tau),
                             'white', taus)
      slope = np.polyfit(np.log(t), np.log(adev), 1)[0]
      # slope error from the relative errors at the ends of the fit over its log span
      tol = 5 * math.sqrt(2) / math.sqrt(2 * stats.allan_edf(n, 1000, 'white')) / math.log(1000)
      assert abs(slope + 0.5) < tol, (slope, tol)


def test_noise_before_filter_keeps_density_and_reduces_sample_std(ctx):
  dens, fc = 0.02, 5.0
  c = make(ctx, angular_velocity_noise_density=[dens] * 3, angular_velocity_bandwidth_hz=fc,
           noise_before_filter=True)
  n = 1 << 17
  _, got = run(c, static(n))
  alpha = 1 - math.exp(-2 * math.pi * fc * PERIOD)
  gain = alpha / (2 - alpha)
  sigma = dens / math.sqrt(PERIOD)
  x = got.angular_velocity.astype(np.float64)
  # sample std of a filtered AR(1) (φ = 1 − α): n_eff = n (1 − φ²)/(1 + φ²)
  phi = 1 - alpha
  n_eff = n * (1 - phi ** 2) / (1 + phi ** 2)
  np.testing.assert_allclose(x.std(0), sigma * math.sqrt(gain), rtol=5 / math.sqrt(2 * n_eff))
  np.testing.assert_allclose(got.angular_velocity_variance[0], sigma ** 2 * gain, rtol=1e-5)
  # well beyond the filter's time constant the Allan deviation is still N/√τ
  taus = PERIOD * np.array([100, 300, 1000])
  for i in range(3):
    _allan_check(x[:, i], 1 / PERIOD, lambda tau: stats.allan_white_level(dens, tau), 'white',
                 taus)


def test_gauss_markov_stationary_std_and_e_folding_time(ctx):
  sigma, tau = np.array([0.01, 0.02, 0.03]), 0.5
  c = make(ctx, angular_velocity_bias_instability_stddev=sigma.tolist(),
           angular_velocity_bias_correlation_time_s=[tau] * 3)
  worlds, n = 64, 5000
  _, got = run_worlds(c, static(n), worlds)
  b = got.angular_velocity.astype(np.float64)            # (worlds, n, 3), zero mean
  phi = math.exp(-PERIOD / tau)
  n_tot = worlds * n
  n_eff = n_tot * (1 - phi ** 2) / (1 + phi ** 2)
  std = np.sqrt(np.mean(b ** 2, axis=(0, 1)))
  np.testing.assert_allclose(std, sigma, rtol=5 / math.sqrt(2 * n_eff))
  # stationary start: the first sample across worlds already has std σ
  np.testing.assert_allclose(np.sqrt(np.mean(b[:, 0] ** 2, axis=0)), sigma,
                             rtol=5 / math.sqrt(2 * worlds))
  lag = int(round(tau / PERIOD))      # one correlation time: autocorrelation e^-1
  for k in (1, lag // 2, lag):
    r = np.sum(b[:, :-k] * b[:, k:], axis=(0, 1)) / np.sum(b[:, :-k] ** 2, axis=(0, 1))
    # Bartlett's variance of r_k for an AR(1)
    var = ((1 + phi ** 2) * (1 - phi ** (2 * k)) / (1 - phi ** 2) - 2 * k * phi ** (2 * k)) / (
        worlds * (n - k))
    np.testing.assert_allclose(r, phi ** k, atol=5 * math.sqrt(var))
  # e-folding time from the lag-1 coefficient
  r1 = np.sum(b[:, :-1] * b[:, 1:]) / np.sum(b[:, :-1] ** 2)
  tau_hat = -PERIOD / math.log(r1)
  sd_r1 = math.sqrt((1 - phi ** 2) / (3 * worlds * (n - 1)))
  assert abs(tau_hat - tau) < 5 * sd_r1 * PERIOD / (phi * math.log(phi) ** 2)


def test_random_walk_variance_grows_as_k2_t(ctx):
  k_rw = np.array([0.01, 0.02, 0.005])
  c = make(ctx, linear_acceleration_random_walk=k_rw.tolist())
  worlds, n = 2000, 300
  _, got = run_worlds(c, static(n, accel=(0, 0, 0)), worlds)
  b = got.linear_acceleration.astype(np.float64)          # (worlds, n, 3)
  assert np.all(b[:, 0] == 0)                              # starts at 0
  for k in (10, 100, 299):
    t = k * PERIOD
    var = np.mean(b[:, k] ** 2, axis=0)                    # known zero mean
    np.testing.assert_allclose(var, k_rw ** 2 * t, rtol=5 * math.sqrt(2 / worlds))
  # increments are independent with variance K²Δ
  inc = np.diff(b, axis=1)
  np.testing.assert_allclose(inc.var(axis=(0, 1)), k_rw ** 2 * PERIOD,
                             rtol=5 * math.sqrt(2 / inc[..., 0].size))


def test_turn_on_bias_constant_in_an_episode_and_dispersed_across_worlds(ctx):
  s_on = np.array([0.05, 0.1, 0.02])
  c = make(ctx, angular_velocity_bias_turn_on_stddev=s_on.tolist())
  worlds = 1000
  state, got = run_worlds(c, static(20), worlds)
  w = got.angular_velocity                                  # (worlds, 20, 3)
  assert np.all(w == w[:, :1])                              # constant within an episode
  assert len(np.unique(w[:, 0, 0])) == worlds               # different across worlds
  np.testing.assert_allclose(np.sqrt(np.mean(w[:, 0].astype(np.float64) ** 2, axis=0)), s_on,
                             rtol=5 / math.sqrt(2 * worlds))
  np.testing.assert_array_equal(state.angular_velocity.turn_on, w[:, 0])


def test_saturation_flags_and_cumulative_clip_counts(ctx):
  c = make(ctx, angular_velocity_limit=1.0, linear_acceleration_limit=5.0)
  sd = static(6)
  sd[:, GYRO] = [[0.5, -2.0, 0], [1.5, 0, 0], [0, 0, -1.01], [0, 0, 0], [3, 3, 3], [1.0, 0, 0]]
  state, got = run(c, sd)
  flags = np.abs(sd[:, GYRO]) > 1.0
  np.testing.assert_array_equal(got.angular_velocity_saturated, flags)
  np.testing.assert_array_equal(got.angular_velocity_clip_count, np.cumsum(flags, 0))
  np.testing.assert_allclose(got.angular_velocity, np.clip(sd[:, GYRO], -1, 1))
  assert np.all(got.linear_acceleration_saturated[:, 2])   # 9.81 > 5 on z every sample
  np.testing.assert_array_equal(got.linear_acceleration_clip_count[-1], [0, 0, 6])
  st = c.status(jax.tree.map(jnp.asarray, state))
  np.testing.assert_array_equal(st['angular_velocity_clip_count'], flags.sum(0))


def test_variances_in_the_sample(ctx):
  c = make(ctx, angular_velocity_noise_density=[0.01, 0.02, 0.0], angular_velocity_resolution=0.05,
           linear_acceleration_resolution=0.01,
           angular_velocity_bias_instability_stddev=[0.1] * 3,
           angular_velocity_bias_correlation_time_s=[1.0] * 3)
  _, got = run(c, static(2))
  np.testing.assert_allclose(got.angular_velocity_variance[0],
                             np.array([0.01, 0.02, 0.0]) ** 2 / PERIOD + 0.05 ** 2 / 12,
                             rtol=1e-6)
  np.testing.assert_allclose(got.linear_acceleration_variance[0], [0.01 ** 2 / 12] * 3,
                             rtol=1e-6)


def test_jit_and_eager_agree(ctx):
  c = make(ctx, **ALL_TERMS)
  sd = synthetic(30)
  a = run(c, sd, jit=True)[1]
  b = run(c, sd, jit=False)[1]
  for x, y in zip(a, b):
    np.testing.assert_allclose(x, y, atol=1e-6)


@pytest.mark.parametrize('field, value', [
    ('angular_velocity_scale', [1.05, 0.95, 1.1]),
    ('angular_velocity_misalignment', M_GYRO),
    ('angular_velocity_bandwidth_hz', 4.0),
    ('linear_acceleration_bias', [0.1, 0.2, -0.1]),
    ('linear_acceleration_noise_density', [0.02, 0.03, 0.01]),
    ('angular_velocity_bias_turn_on_stddev', [0.05, 0.02, 0.03]),
])
def test_gradient_matches_finite_differences(ctx, field, value):
  c = make(ctx, **{field: value})
  sd = jnp.asarray(synthetic(60), jnp.float32)
  p0 = c.default_params()
  w = jnp.asarray(np.random.default_rng(1).normal(size=(60, 3)), jnp.float32)

  def loss(v):
    p = c.set_param(p0, field, v)
    _, smp = _go(c, p, sd, WK)
    return jnp.sum(smp.angular_velocity * w) + jnp.sum(smp.linear_acceleration * w)

  v0 = c.get_param(p0, field)
  g = np.asarray(jax.grad(loss)(v0), np.float64).ravel()
  fd = central_differences(loss, v0)
  assert np.all(np.abs(g) > 1e-3), 'gradient must not vanish'
  np.testing.assert_allclose(g, fd, rtol=5e-3, atol=5e-3)


# ------------------------------------------------------------------ physics (MJX rig)

@pytest.fixture(scope='module')
def rig():
  return imu_rig.rollout()


def test_six_static_orientations_read_plus_minus_g(rig):
  for name, (_, axis, sign) in imu_rig.STATIC.items():
    s = rig['sensor'][f'imu_{name}']
    a = s.sample.linear_acceleration[:, 1:]          # every delivered sample, both worlds
    want = np.zeros(3)
    want[axis] = sign * imu_rig.G
    np.testing.assert_allclose(a, np.broadcast_to(want, a.shape), atol=1e-4, err_msg=name)
    np.testing.assert_allclose(s.sample.angular_velocity, 0.0, atol=1e-6)
    assert s.new_data[:, 1:].all()


def test_offset_site_on_spinning_body_shows_centripetal_term(rig):
  """Specific force ω×(ω×r) + α×r − g in site axes; steady spin about z (α = 0):
  (−ω² r_x, −ω² r_y, g), with ω from the IMU's own gyro samples."""
  s = rig['sensor']['imu_spin'].sample
  w = s.angular_velocity[:, -100:]
  a = s.linear_acceleration[:, -100:]
  np.testing.assert_allclose(w[..., 2], imu_rig.SPIN_RATE, rtol=1e-4)
  rx, ry, _ = imu_rig.SPIN_SITE_POS
  wz = w[..., 2].astype(np.float64)
  want = np.stack([-wz ** 2 * rx, -wz ** 2 * ry, np.full_like(wz, imu_rig.G)], -1)
  np.testing.assert_allclose(a, want, atol=2e-4)


def test_accelerometer_matches_mujoco_c_without_constraints():
  """MJX skips acceleration-stage sensors in constraint-free models; fibril_mjx.physics.mjx fixes it."""
  from fibril_mjx.physics.mjx import mjx
  m = mujoco.MjModel.from_xml_string(imu_rig._xml())
  d = mujoco.MjData(m)
  d.qvel[:] = [0.3, 5.0]
  d.ctrl[0] = 2.0
  mujoco.mj_forward(m, d)
  assert d.nefc == 0 and m.njnt == 2
  dx = mjx.put_data(m, mujoco.MjData(m)).replace(qvel=jnp.asarray(d.qvel, jnp.float32),
                                                 ctrl=jnp.asarray(d.ctrl, jnp.float32))
  got = np.asarray(jax.jit(mjx.forward)(mjx.put_model(m), dx).sensordata)
  np.testing.assert_allclose(got, d.sensordata, atol=1e-4)
  assert np.abs(d.sensordata).max() > 9


def test_truth_exposes_site_attitude_and_bias(rig):
  t = rig['truth']['imu_tilt']
  r = math.radians(imu_rig.TILT_ROLL_DEG)
  np.testing.assert_allclose(t['orientation'][0, -1], [math.cos(r / 2), math.sin(r / 2), 0, 0],
                             atol=1e-6)
  np.testing.assert_allclose(t['angular_velocity_bias'][:, -1],
                             np.broadcast_to(imu_rig.TILT_IMU['angular_velocity_bias'], (2, 3)),
                             atol=1e-7)
  # and the delivered samples are noisy around truth with the profile's per-sample σ
  s = rig['sensor']['imu_tilt'].sample.angular_velocity[:, 1:] - imu_rig.TILT_IMU[
      'angular_velocity_bias']
  sigma = math.sqrt(4.8869e-5 ** 2 / imu_rig.DT + 1.064225e-3 ** 2 / 12)
  n = s[..., 0].size
  np.testing.assert_allclose(s.reshape(-1, 3).std(0), sigma, rtol=5 / math.sqrt(2 * n))


def test_host_metrics_and_plot(rig, tmp_path):
  from fibril_mjx.analysis import common as report
  from fibril_mjx.analysis import imu as imu_analysis
  flat = report.flatten(rig)
  sensor, truth = report.group(flat, 'sensor', 'imu_tilt'), report.group(flat, 'truth', 'imu_tilt')
  m = imu_analysis.host_metrics(sensor, truth)
  assert m['delivered'].tolist() == [imu_rig.TICKS + 1] * 2
  sigma = math.sqrt(4.8869e-5 ** 2 / imu_rig.DT + 1.064225e-3 ** 2 / 12)
  # RMS includes the fixed bias
  want = math.sqrt(sigma ** 2 + np.mean(np.square(imu_rig.TILT_IMU['angular_velocity_bias'])))
  np.testing.assert_allclose(m['angular_velocity_error_rms_rad_s'], want, rtol=0.1)
  imu_analysis.plot(tmp_path / 'imu.png', 'imu_tilt', np.arange(imu_rig.TICKS + 1) * imu_rig.DT, sensor,
           truth, 0, m, 'test')
  assert (tmp_path / 'imu.png').stat().st_size > 10000


# ------------------------------------------------------------------ profiles

@pytest.mark.parametrize('pid', ['icm42688p_nominal', 'bmi088_nominal'])
def test_device_profiles_load_and_cite_every_value(ctx, pid):
  c = make(ctx, profiles={'device': pid}, period_s=None)
  doc = yaml.safe_load((paths.profiles_dir() / f'{pid}.yaml').read_text())
  assert doc['kind'] == 'device' and doc['component_types'] == ['fibril_sim/imu']
  cited = doc['provenance']['fields']
  for name, value in doc['fields'].items():
    assert name in cited and len(cited[name]) > 20, name
    assert getattr(c.cfg, name) == (tuple(value) if isinstance(value, list) else value)
  assert doc['provenance']['evidence'] == 'evidence/consumer_mems_imu.md'
  assert (paths.profiles_dir() / 'evidence' / 'consumer_mems_imu.md').is_file()


def test_icm42688p_numbers_follow_from_the_datasheet_values(ctx):
  c = make(ctx, profiles={'device': 'icm42688p_nominal'}, period_s=None).cfg
  d2r = math.pi / 180
  np.testing.assert_allclose(c.angular_velocity_noise_density, [2.8e-3 * d2r] * 3, rtol=1e-4)
  np.testing.assert_allclose(c.linear_acceleration_noise_density, [70e-6 * 9.80665] * 3,
                             rtol=1e-4)
  np.testing.assert_allclose(c.angular_velocity_resolution, d2r / 16.4, rtol=1e-6)
  np.testing.assert_allclose(c.linear_acceleration_resolution, 9.80665 / 2048, rtol=1e-6)
  np.testing.assert_allclose(c.angular_velocity_limit, 2000 * d2r, rtol=1e-6)
  np.testing.assert_allclose(c.linear_acceleration_limit, 16 * 9.80665, rtol=1e-6)


# ------------------------------------------------------------------ validation messages

IMU_XML = """\
<mujoco model="tiny_imu">
  <option timestep="0.002"/>
  <worldbody>
    <body name="arm">
      <joint name="hinge" type="hinge" axis="0 0 1"/>
      <geom type="sphere" size="0.05" mass="0.1"/>
      <site name="imu"/>
      <site name="other" pos="0.1 0 0"/>
    </body>
  </worldbody>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
    <accelerometer name="accel_other" site="other"/>
    <framequat name="quat" objtype="site" objname="imu"/>
  </sensor>
</mujoco>
"""


def imu_manifest(tmp_path, config: dict, *, extra_components=()) -> 'pathlib.Path':
  base = {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel'}
  comp = {'id': 'imu', 'type': 'fibril_sim/imu',
          'config': {k: v for k, v in {**base, **config}.items() if v is not None}}
  return write_manifest(tmp_path, IMU_XML, [comp, *extra_components], model='tiny_imu.xml')


NONNEG_SCALARS = ['phase_s', 'latency_s', 'jitter_s', 'angular_velocity_bandwidth_hz',
                  'linear_acceleration_bandwidth_hz', 'angular_velocity_limit',
                  'linear_acceleration_limit', 'angular_velocity_resolution',
                  'linear_acceleration_resolution']
NONNEG_VECTORS = [f'{ch}_{f}' for ch in imu.CHANNELS
                  for f in ('noise_density', 'bias_turn_on_stddev', 'bias_instability_stddev',
                            'bias_correlation_time_s', 'random_walk')]
ONE_G = [[0, 0, 0]] * 3

IMU_CASES = {
    **{f'negative_{f}': ({f: -0.5}, f, '-0.5', GE0) for f in NONNEG_SCALARS},
    **{f'negative_{f}': ({f: [0, -0.5, 0]}, f'{f}[1]', '-0.5', GE0) for f in NONNEG_VECTORS},
    'zero_scale': ({'angular_velocity_scale': [1, 0, 1]}, 'angular_velocity_scale[1]', '0', GT0),
    'negative_scale': ({'linear_acceleration_scale': [1, 1, -1]},
                       'linear_acceleration_scale[2]', '-1', GT0),
    'misalignment_diagonal': (
        {'angular_velocity_misalignment': [[0.01, 0, 0], [0, 0, 0], [0, 0, 0]]},
        'angular_velocity_misalignment', '[[0.01, 0, 0], [0, 0, 0], [0, 0, 0]]',
        'diagonal must be 0 (off-diagonal cross-axis terms only; per-axis gain belongs in the '
        '_scale field)'),
    'misalignment_not_3x3': (
        {'linear_acceleration_misalignment': [[0, 0, 0], [0, 0, 0]]},
        'linear_acceleration_misalignment', '[[0, 0, 0], [0, 0, 0]]', 'must have 3 items, got 2'),
    'misalignment_row_too_long': (
        {'linear_acceleration_misalignment': [[0, 0, 0, 0], [0, 0, 0], [0, 0, 0]]},
        'linear_acceleration_misalignment[0]', '[0, 0, 0, 0]',
        'tuple should have at most 3 items after validation, not 4'),
    'misalignment_nan': ({'angular_velocity_misalignment': [[0, float('nan'), 0], [0, 0, 0],
                                                            [0, 0, 0]]},
                         'angular_velocity_misalignment[0][1]', 'nan', FINITE),
    'nan_density': ({'angular_velocity_noise_density': [0, float('nan'), 0]},
                    'angular_velocity_noise_density[1]', 'nan', FINITE),
    'inf_bias': ({'linear_acceleration_bias': [float('inf'), 0, 0]},
                 'linear_acceleration_bias[0]', 'inf', FINITE),
    'noise_before_filter_not_bool': ({'noise_before_filter': 'maybe'}, 'noise_before_filter',
                                     "'maybe'", 'input should be a valid boolean'),
    'loss_probability_1': ({'loss_probability': 1.0}, 'loss_probability', '1.0',
                           'input should be less than 1'),
    'quantization_literal': ({'quantization': 'nearest'}, 'quantization', "'nearest'",
                             "input should be 'next_boundary' or 'strict'"),
    'period_zero': ({'period_s': 0}, 'period_s', '0', GT0),
    'period_below_dt': ({'period_s': 0.001}, 'period_s', '0.001',
                        'must be >= the physics timestep dt = 0.002 s'),
    'strict_period_off_grid': ({'period_s': 0.003, 'quantization': 'strict'}, 'period_s',
                               '0.003', 'quantization strict requires an integer multiple of '
                               'dt = 0.002 s (it is 1.5 ticks)'),
    'unknown_key': ({'angular_velocity_noise_densty': [0, 0, 0]},
                    'angular_velocity_noise_densty', '[0, 0, 0]',
                    "unknown field (did you mean 'angular_velocity_noise_density'?)"),
    'ahrs_field_name': ({'angular_velocity_noise_stddev': [0, 0, 0]},
                        'angular_velocity_noise_stddev', '[0, 0, 0]', 'unknown field'),
    'gyroscope_missing': ({'gyroscope_sensor': 'gyr'}, 'gyroscope_sensor', "'gyr'",
                          "no MuJoCo sensor of that name in the compiled model (did you mean "
                          "'gyro'?)"),
    'gyroscope_wrong_type': ({'gyroscope_sensor': 'accel'}, 'gyroscope_sensor', "'accel'",
                             "must name a gyro sensor (dim 3); 'accel' is a accelerometer "
                             'sensor'),
    'accelerometer_wrong_type': ({'accelerometer_sensor': 'quat'}, 'accelerometer_sensor',
                                 "'quat'", "must name a accelerometer sensor (dim 3); 'quat' is "
                                 'a framequat sensor'),
    'sensors_on_two_sites': ({'accelerometer_sensor': 'accel_other'}, 'accelerometer_sensor',
                             "'accel_other'", "must be on the same site as gyroscope_sensor "
                             "'gyro' (site 'imu'); 'accel_other' is on site 'other'"),
    'correlation_time_missing': (
        {'angular_velocity_bias_instability_stddev': [0, 0.01, 0]},
        'angular_velocity_bias_correlation_time_s[1]', '0.0',
        'must be > 0 where angular_velocity_bias_instability_stddev[1] > 0 (Gauss–Markov '
        'correlation time)'),
}


@pytest.mark.parametrize('case', sorted(IMU_CASES), ids=str)
def test_imu_config_rule(tmp_path, case):
  config, field, value, rule = IMU_CASES[case]
  config = {'period_s': 0.01, **config}
  manifest = imu_manifest(tmp_path, config)
  err = load_error(manifest)
  assert_reported(err, manifest, f'components[0].config.{field}', value, rule)


@pytest.mark.parametrize('field', ['gyroscope_sensor', 'accelerometer_sensor', 'period_s'])
def test_imu_required_field_missing(tmp_path, field):
  manifest = imu_manifest(tmp_path, {'period_s': 0.01, field: None})
  err = load_error(manifest)
  kind, suffix = {'gyroscope_sensor': ('gyro', 'gyro'),
                  'accelerometer_sensor': ('accelerometer', 'accel')}.get(field, (None, None))
  # a sensor name is required unless the IMU names a site instead (the way out, said)
  rule = ('required field is missing' if kind is None else
          f'required: the name of a MuJoCo {kind} sensor; or set site: SITE instead, and the '
          f'sensors are added (as fibril_imu_{suffix}, ...) without editing the robot\'s file')
  assert_reported(err, manifest, f'components[0].config.{field}', NO_VALUE, rule)


def test_imu_value_from_profile_is_reported_against_the_profile(tmp_path):
  write(tmp_path / 'catalog' / 'bad_imu.yaml', yaml.safe_dump({
      'id': 'bad_imu', 'kind': 'device', 'component_types': ['fibril_sim/imu'],
      'provenance': {'source': 'test'},
      'fields': {'period_s': 0.01, 'angular_velocity_noise_density': [0, -1, 0]}}))
  manifest = imu_manifest(tmp_path, {'profiles': {'device': 'bad_imu'}})
  doc = yaml.safe_load(manifest.read_text())
  doc['profile_paths'] = ['./catalog']
  manifest.write_text(yaml.safe_dump(doc))
  err = load_error(manifest)
  assert_reported(err, (tmp_path / 'catalog' / 'bad_imu.yaml').resolve(),
                  'fields.angular_velocity_noise_density[1]', '-1', GE0)
