"""The shared inertial chain (`components/inertial.py`): the bandwidth filter at the physics
rate against the analytic response of a tone above the output Nyquist frequency, and the
AHRS yaw variance consistent with its drift (normalized squared error ≈ 1 across worlds)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from conftest import RIG_XML, SENSORS, SensorData
from fibril_mjx.config import paths
from fibril_mjx.mechanisms import schedule
from fibril_mjx.builder.build import BuildContext
from fibril_mjx.components.sensors import ahrs, imu
from fibril_mjx.config.manifest import Catalog

DT = 0.002
PERIOD = 0.01          # output 100 Hz: Nyquist 50 Hz
TONE_HZ = 70.0         # above the output Nyquist frequency (aliases to 30 Hz)
FC_HZ = 20.0
TICKS = 2500
WK = jax.random.PRNGKey(3)


@pytest.fixture(scope='module')
def ctx():
  m = mujoco.MjModel.from_xml_string(RIG_XML)
  return BuildContext(m, DT, 'test.yaml', 'components[0].config'), Catalog([paths.profiles_dir()])


def tone_sensordata(n_ticks, amp=1.0):
  """sensordata `(T, 10)` of RIG_XML (quat, gyro, accel): a pure tone on gyro z."""
  t = np.arange(n_ticks) * DT
  sd = np.zeros((n_ticks, 10))
  sd[:, 0] = 1.0
  sd[:, 6] = amp * np.sin(2 * np.pi * TONE_HZ * t)
  sd[:, 9] = 9.81
  return sd


def drive(c, sd):
  """Runs `c.sense` every tick (track every tick, acquire at instants) over `sd`; returns
  `(sample ticks, gyro z samples)` of the acquisitions (no latency: delivered at once)."""
  p = c.default_params()

  def body(carry, xs):
    s, clock = carry
    sdk, tick = xs
    due, n, clock = schedule.advance(c.schedule, clock, tick)
    s = c.sense(p, s, SensorData(sdk), tick, {'acquisition': (due, n)}, {})
    d = c.output(s)
    return (s, clock), (d.new_data, d.sample_tick, d.sample.angular_velocity[2])

  carry = (c.init(p, WK), schedule.init(c.schedule))
  _, (new, tick, wz) = jax.jit(lambda sd: jax.lax.scan(
      body, carry, (sd, jnp.arange(sd.shape[0], dtype=jnp.int32))))(jnp.asarray(sd, jnp.float32))
  new = np.asarray(new)
  return np.asarray(tick)[new], np.asarray(wz, np.float64)[new]


def amplitude_at(t, y, f_hz):
  """Least-squares amplitude of the tone `f_hz` in samples `y` at times `t`."""
  a = np.stack([np.sin(2 * np.pi * f_hz * t), np.cos(2 * np.pi * f_hz * t)], 1)
  coef, *_ = np.linalg.lstsq(a, y, rcond=None)
  return float(np.hypot(*coef))


def first_order_gain(fc_hz, step_s, f_hz):
  """|H| of y[k] = y[k-1] + α(x[k] − y[k-1]) at frequency f, α = 1 − exp(−2π fc Δ)."""
  alpha = 1 - math.exp(-2 * math.pi * fc_hz * step_s)
  w = 2 * math.pi * f_hz * step_s
  return alpha / abs(1 - (1 - alpha) * complex(math.cos(w), -math.sin(w)))


def make_imu(ctx, rate):
  c, cat = ctx
  return imu.build('imu', {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel',
                           'period_s': PERIOD, 'angular_velocity_bandwidth_hz': FC_HZ,
                           'filter_rate': rate}, c, cat)


def test_physics_rate_filter_attenuates_a_tone_above_nyquist_as_analytic(ctx):
  c = make_imu(ctx, 'physics')
  ticks, wz = drive(c, tone_sensordata(TICKS))
  keep = ticks * DT > 0.2                          # after the 1/(2π·20 Hz) transient
  got = amplitude_at(ticks[keep] * DT, wz[keep], TONE_HZ)
  want = first_order_gain(FC_HZ, DT, TONE_HZ)      # ≈ 0.283: the filter at the internal rate
  assert got == pytest.approx(want, rel=2e-3)
  # the same samples from an independent float64 recursion at every tick, then decimated
  x = tone_sensordata(TICKS)[:, 6]
  alpha = 1 - math.exp(-2 * math.pi * FC_HZ * DT)
  y = np.empty_like(x)
  y[0] = x[0]
  for k in range(1, len(x)):
    y[k] = y[k - 1] + alpha * (x[k] - y[k - 1])
  np.testing.assert_allclose(wz, y[ticks], atol=2e-6)


def test_output_rate_filter_aliases_the_tone_first(ctx):
  """Filtering the samples instead sees the 30 Hz alias at the output rate: less attenuation
  (≈ 0.64) — the aliasing the physics-rate default avoids."""
  c = make_imu(ctx, 'output')
  ticks, wz = drive(c, tone_sensordata(TICKS))
  keep = ticks * DT > 0.2
  got = amplitude_at(ticks[keep] * DT, wz[keep], TONE_HZ)
  alias_hz = abs(TONE_HZ - 1 / PERIOD)
  assert got == pytest.approx(first_order_gain(FC_HZ, PERIOD, alias_hz), rel=2e-3)
  assert got > 2 * first_order_gain(FC_HZ, DT, TONE_HZ)


def test_raw_imu_defaults_to_the_physics_rate(ctx):
  c, cat = ctx
  built = imu.build('imu', {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel',
                            'period_s': PERIOD, 'angular_velocity_bandwidth_hz': FC_HZ}, c, cat)
  assert built.channels[0].filters_every_tick
  assert any('filter at the physics rate' in line for line in built.describe())


def test_ahrs_yaw_variance_covers_the_drift(ctx):
  """Yaw error = b_ψ·t + residual with b_ψ ~ N(0, σ_b²) per episode: the reported yaw variance
  σ² + q²/12 + (σ_b t)² makes the normalized squared error ≈ 1 at every time."""
  c_ctx, cat = ctx
  sigma_b, sigma = 0.02, 0.002
  c = ahrs.build('ahrs', {**SENSORS, 'period_s': PERIOD, 'yaw_reference': 'world',
                          'yaw_rate_bias_stddev_rad_s': sigma_b,
                          'orientation_noise_stddev_rad': [sigma, sigma, sigma]}, c_ctx, cat)
  n, worlds = 400, 1000
  sd = np.zeros((n, 10))
  sd[:, 0] = 1.0
  sd[:, 9] = 9.81
  p = c.default_params()

  def one(key):
    def body(s, xs):
      sdn, k = xs
      s, smp = c.acquire(p, s, SensorData(sdn), k * 5, k)
      return s, (smp.orientation, smp.orientation_variance)
    return jax.lax.scan(body, c.init(p, key), (jnp.asarray(sd, jnp.float32),
                                               jnp.arange(n, dtype=jnp.int32)))[1]
  keys = jax.vmap(lambda w: jax.random.fold_in(WK, w))(jnp.arange(worlds))
  q, var = jax.tree.map(np.asarray, jax.jit(jax.vmap(one))(keys))
  w_, z_ = q[..., 0].astype(np.float64), q[..., 3].astype(np.float64)
  yaw = 2 * np.arctan2(z_, w_)                      # level and static: pure yaw
  t = np.arange(n) * PERIOD
  np.testing.assert_allclose(var[0, :, 2], sigma ** 2 + (sigma_b * t) ** 2, rtol=1e-5)
  for k in (10, 100, 200, 399):
    nees = np.mean(yaw[:, k] ** 2 / var[:, k, 2])
    # mean of `worlds` χ²(1) values: std √(2/worlds); 5 standard errors
    assert nees == pytest.approx(1.0, abs=5 * math.sqrt(2 / worlds)), (k, nees)
  # without the drift term (the old report) the late-time NEES would be far above 1
  assert np.mean(yaw[:, -1] ** 2 / sigma ** 2) > 50


# ------------------------------------------------------------------ faults on imu / ahrs

@pytest.fixture(scope='module')
def faulted(tmp_path_factory):
  import fibril_mjx
  from conftest import ahrs_entry, write_rig
  imu_entry = {'id': 'imu', 'type': 'fibril_sim/imu', 'config': {
      'gyroscope_sensor': 'gyro2', 'accelerometer_sensor': 'accel2', 'period_s': 0.004,
      'angular_velocity_bias_turn_on_stddev': [0.1, 0.1, 0.1],
      'faults': [{'type': 'dropout', 'start_s': 0.02, 'end_s': 0.04},
                 {'type': 'bias_step', 'start_s': 0.06, 'value': [1.0, 2.0, 3.0],
                  'fields': ['angular_velocity']},
                 {'type': 'reset', 'start_s': 0.1, 'end_s': 0.104}]}}
  ahrs = ahrs_entry(period_s=0.004, faults=[{'type': 'stuck', 'start_s': 0.02, 'end_s': 0.05,
                                               'fields': ['linear_acceleration']}])
  sim = fibril_mjx.load(write_rig(tmp_path_factory.mktemp('faults'), [imu_entry, ahrs]))
  _, tr, _ = sim.rollout(sim.default_params(2), fibril_mjx.world_keys(0, 2), 80)
  return sim, jax.tree.map(np.asarray, tr)


def test_imu_faults_as_the_consumer_sees_them(faulted):
  sim, tr = faulted
  d, truth = tr['sensor']['imu'], tr['truth']['imu']
  t = np.arange(d.new_data.shape[1]) * 0.002
  new = d.new_data[0]
  assert not new[(t >= 0.02) & (t < 0.04)].any() and new[t < 0.02].any()   # dropout: no packet
  seq = d.sequence[0][new]
  assert np.diff(seq).max() == 6                  # sequence jumps over the 5 skipped acquisitions
  late = new & (t >= 0.06) & (t < 0.1)
  st = d.sample_tick[0][late]
  err = d.sample.angular_velocity[0][late] - truth['angular_velocity'][0][st] - \
      truth['angular_velocity_bias'][0][st]
  np.testing.assert_allclose(err, np.broadcast_to([1.0, 2.0, 3.0], err.shape), atol=1e-5)
  # the reset (0.1 s) redraws the turn-on bias from its stream (draw 1)
  b = truth['angular_velocity_bias'][0]
  assert np.all(b[40] != b[60]) and np.allclose(b[60], b[79])
  health = truth['health'][0]
  # healthy → degraded (1st miss, tick 10) → invalid (3rd miss, tick 14) → recovering (first
  # good sample, tick 20) → healthy after 5 good ones
  assert (health[8], health[10], health[14], health[18], health[20]) == (0, 1, 2, 2, 3)
  assert health[-1] == 0                          # recovered after the good samples


def test_ahrs_stuck_accelerometer_holds_the_last_value(faulted):
  _, tr = faulted
  d = tr['sensor']['ahrs']
  t = np.arange(d.new_data.shape[1]) * 0.002
  new = d.new_data[0]
  window = new & (d.sample_tick[0] * 0.002 >= 0.02) & (d.sample_tick[0] * 0.002 < 0.05)
  a = d.sample.linear_acceleration[0][window]
  assert len(a) > 3 and np.all(a == a[0])
  after = new & (d.sample_tick[0] * 0.002 >= 0.05)
  assert not np.all(d.sample.linear_acceleration[0][after] == a[0])
  assert not np.all(d.sample.angular_velocity[0][window] == d.sample.angular_velocity[0][window][0])
