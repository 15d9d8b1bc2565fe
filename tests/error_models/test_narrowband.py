"""`em.narrowband` (a vibration line as a second-order resonant Gauss–Markov process) against
float64 NumPy models written here: the step-by-step AR(2) recurrence on the stream's own draws,
the stationary autocovariance `γk = a1·γk−1 + a2·γk−2` across worlds, the closed-form PSD
`c²Δ/|1 − a1 e^{−iω} − a2 e^{−2iω}|²` (its integral is σ², its peak sits at f0), and the IMU's
manifest rules and compile-out at the default."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from fibril_mjx import error_models as em
from fibril_mjx.builder.build import BuildContext
from fibril_mjx.components.sensors import imu
from fibril_mjx.config import paths
from fibril_mjx.config.manifest import Catalog
from fibril_mjx.errors import ConfigError, ConfigErrors
from fibril_mjx.mechanisms import faults
from ref_helpers import normals, stream_key

WK = jax.random.PRNGKey(11)
SIGMA, F0, BW, DT = 0.7, 3.5, 0.4, 0.01


class P(NamedTuple):
  s: jax.Array
  f: jax.Array
  b: jax.Array


def coefficients(f0, bw, dt):
  r = np.exp(-np.pi * bw * dt)
  return 2 * r * np.cos(2 * np.pi * f0 * dt), -r * r


def autocov(sigma, f0, bw, dt, lags):
  """Stationary autocovariance of the AR(2) by its Yule–Walker recurrence (float64)."""
  a1, a2 = coefficients(f0, bw, dt)
  g = np.empty(lags + 1)
  g[0] = sigma ** 2
  g[1] = a1 / (1 - a2) * g[0]
  for k in range(2, lags + 1):
    g[k] = a1 * g[k - 1] + a2 * g[k - 2]
  return g


def psd(f, sigma, f0, bw, dt):
  """One-sided PSD of the AR(2) (units²/Hz) in closed form."""
  a1, a2 = coefficients(f0, bw, dt)
  c2 = sigma ** 2 * (1 + a2) * ((1 - a2) ** 2 - a1 ** 2) / (1 - a2)
  z = np.exp(-2j * np.pi * f * dt)
  return 2 * c2 * dt / np.abs(1 - a1 * z - a2 * z * z) ** 2


TERM = em.chain(em.narrowband('s', 'f', 'b', 'line', 'nb', (3,)))


def run_world(key, p, n):
  streams = faults.stream_keys(key, 'dev', TERM.streams)

  def step(st, i):
    st, x, _ = TERM.apply(p, st, jnp.zeros(3, jnp.float32),
                          em.Ctx(lambda _: True, streams, i, DT, {}))
    return st, x
  return jax.lax.scan(step, TERM.zero_state(), jnp.arange(n))[1]


def test_recurrence_on_the_streams_draws():
  """Sample by sample: the float64 AR(2) with the stationary start, on the same normals."""
  n = 60
  p = P(s=jnp.full(3, SIGMA, jnp.float32), f=jnp.full(3, F0, jnp.float32),
        b=jnp.full(3, BW, jnp.float32))
  out = np.asarray(jax.jit(run_world, static_argnums=2)(WK, p, n), np.float64)
  streams = faults.stream_keys(WK, 'dev', TERM.streams)
  z = normals(WK, 'dev', 'line', n, (3, 3))
  np.testing.assert_array_equal(np.asarray(streams['line']),
                                np.asarray(stream_key(WK, 'dev', 'line')))
  a1, a2 = coefficients(F0, BW, DT)
  c = SIGMA * np.sqrt((1 + a2) * ((1 - a2) ** 2 - a1 ** 2) / (1 - a2))
  rho1 = a1 / (1 - a2)
  y2 = SIGMA * z[0, 1]
  y1 = rho1 * y2 + SIGMA * np.sqrt(1 - rho1 ** 2) * z[0, 2]
  ref = np.empty((n, 3))
  for k in range(n):
    ref[k] = a1 * y1 + a2 * y2 + c * z[k, 0]
    y1, y2 = ref[k], y1
  np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-5)
  eager = np.asarray(run_world(WK, p, 8), np.float64)
  np.testing.assert_allclose(eager, out[:8], rtol=1e-5, atol=1e-6)


def test_stationary_autocovariance_and_psd():
  """Across 3000 worlds × 3 axes: Var y[k] = σ² at every k (stationary from the first sample)
  and the lag covariances follow the Yule–Walker recurrence; tolerances 5 standard errors of
  a sample covariance of 9000 Gaussian pairs (≤ √2 σ²/√9000)."""
  w, n, lags = 3000, 40, 12
  p = P(s=jnp.full(3, SIGMA, jnp.float32), f=jnp.full(3, F0, jnp.float32),
        b=jnp.full(3, BW, jnp.float32))
  y = np.asarray(jax.jit(jax.vmap(lambda k: run_world(k, p, n)))(jax.random.split(WK, w)),
                 np.float64)                     # (w, n, 3)
  y = np.moveaxis(y, 2, 1).reshape(w * 3, n)
  g = autocov(SIGMA, F0, BW, DT, lags)
  tol = 5 * np.sqrt(2.0) * SIGMA ** 2 / np.sqrt(y.shape[0])
  for k in (0, n // 2, n - 1):
    assert abs(np.mean(y[:, k] ** 2) - g[0]) < tol
  emp = np.array([np.mean(y[:, 20] * y[:, 20 - j]) for j in range(lags + 1)])
  assert np.all(np.abs(emp - g) < tol), (emp, g)
  # the closed-form PSD: integrates to σ² over [0, fs/2], peaks at f0 (within the bandwidth)
  f = np.linspace(0, 0.5 / DT, 200001)
  s = psd(f, SIGMA, F0, BW, DT)
  assert np.trapezoid(s, f) == pytest.approx(SIGMA ** 2, rel=1e-3)
  assert abs(f[np.argmax(s)] - F0) < BW / 2


@pytest.fixture(scope='module')
def ctx():
  from conftest import RIG_XML
  m = mujoco.MjModel.from_xml_string(RIG_XML)
  return BuildContext(m, 0.002, 'test.yaml', 'components[0].config'), Catalog(
      [paths.profiles_dir()])


def build(ctx, **cfg):
  c, cat = ctx
  raw = {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel', 'period_s': DT,
         'filter_rate': 'output', **cfg}
  return imu.build('imu', raw, c, cat)


def test_imu_compiles_it_out_at_default_and_in_when_set(ctx):
  off = build(ctx)
  assert not any('narrowband' in f for c in off.channels for f in c.on)
  on = build(ctx, angular_velocity_narrowband_stddev=[0, 0, 0.01],
             angular_velocity_narrowband_frequency_hz=[0, 0, 3.7],
             angular_velocity_narrowband_bandwidth_hz=[0, 0, 0.5])
  assert 'angular_velocity_narrowband_stddev' in on.channels[0].on
  assert on.channels[0].uses('angular_velocity_narrowband_frequency_hz')
  assert not on.channels[1].on & {'linear_acceleration_narrowband_stddev'}
  assert 'angular_velocity_narrowband_stddev' in imu.ERRORS.drift_fields()


@pytest.mark.parametrize('cfg, path, rule', [
    ({'angular_velocity_narrowband_stddev': [0, 0, 0.01],
      'angular_velocity_narrowband_frequency_hz': [0, 0, 3.7]},
     'angular_velocity_narrowband_bandwidth_hz[2]', 'must be > 0 where'),
    ({'linear_acceleration_narrowband_stddev': [0.1, 0, 0],
      'linear_acceleration_narrowband_frequency_hz': [60.0, 0, 0],
      'linear_acceleration_narrowband_bandwidth_hz': [1.0, 0, 0]},
     'linear_acceleration_narrowband_frequency_hz[0]', 'below the Nyquist frequency'),
])
def test_imu_rules(ctx, cfg, path, rule):
  with pytest.raises((ConfigError, ConfigErrors)) as e:
    build(ctx, **cfg)
  msg = str(e.value)
  assert path in msg and rule in msg, msg
