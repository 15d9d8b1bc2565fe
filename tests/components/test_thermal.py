"""IMU thermal model (`components/sensors/thermal.py`) against a float64 NumPy reference.

The example manifest `manifests/imu_thermal.yaml` runs with the white noise and the output LSBs
of the rate channels switched off and short time constants (overrides), so every sample is
`(1 + ks·ΔT)·x + k1·ΔT + k2·ΔT²` of the MuJoCo input `x` (truth) with the sensor temperature
`T_s` from the first-order lag of the ambient table, computed here in float64. The delivered
temperature (lag, noise, TEMP_DATA resolution) is checked by its residual statistics, with
tolerances from the sample count; a closed-form step response checks the lag after the ramp;
two worlds with different ambient tables check the per-world input.
"""

from __future__ import annotations

import math
import pathlib

import jax
import numpy as np
import pytest

import fibril_mjx
from fibril_mjx.analysis.common import flatten

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = REPO / 'manifests' / 'imu_thermal.yaml'
TIMES = [0.0, 0.1, 0.4]
TAU, TAU_D = 0.08, 0.02
N_TICKS = 300
OVERRIDES = {'components': [
    {'component': 'imu', 'field': f, 'value': v} for f, v in [
        ('angular_velocity_noise_density', [0.0, 0.0, 0.0]),
        ('linear_acceleration_noise_density', [0.0, 0.0, 0.0]),
        ('angular_velocity_resolution', 0.0), ('linear_acceleration_resolution', 0.0),
        ('ambient_temperature_time_s', TIMES), ('temperature_time_constant_s', TAU),
        ('temperature_output_time_constant_s', TAU_D)]]}


@pytest.fixture(scope='module')
def run():
  sim = fibril_mjx.load(MANIFEST, overrides=OVERRIDES)
  c = sim.components['imu']
  params = sim.default_params(2)
  amb = np.array(c.get_param(params['imu'], 'ambient_temperature_c'))
  amb[1] = [30.0, 10.0, 60.0]                          # world 1: another scenario
  params['imu'] = c.set_param(params['imu'], 'ambient_temperature_c', amb)
  _, trace, _ = sim.rollout(params, fibril_mjx.world_keys(0, 2), N_TICKS)
  return sim, flatten(jax.device_get(trace)), amb


def reference(sim, z, w, amb):
  """float64: (rows delivered, T_s, expected gyro, expected accel, lag of T_s for delivery)."""
  cfg = sim.components['imu'].cfg
  rows = np.flatnonzero(z['sensor/imu/new_data'][w] & z['sensor/imu/valid'][w])
  ticks = z['sensor/imu/sample_tick'][w][rows]
  t = ticks * sim.dt
  ta = np.interp(t, TIMES, amb[w])
  d = cfg.period_s
  a, a_d = 1 - math.exp(-d / TAU), 1 - math.exp(-d / TAU_D)
  ts, lag = np.empty_like(ta), np.empty_like(ta)
  for i in range(len(ta)):
    ts[i] = ta[0] if i == 0 else ts[i - 1] + a * (ta[i] - ts[i - 1])
    lag[i] = ts[0] if i == 0 else lag[i - 1] + a_d * (ts[i] - lag[i - 1])
  dT = (ts - cfg.reference_temperature_c)[:, None]
  k = lambda f: np.asarray(getattr(cfg, f), np.float64)   # noqa: E731
  x_w = z['truth/imu/angular_velocity'][w][ticks].astype(np.float64)
  x_a = z['truth/imu/linear_acceleration'][w][ticks].astype(np.float64)
  gyro = ((1 + k('angular_velocity_scale_temperature_k1') * dT) * x_w
          + k('angular_velocity_bias_temperature_k1') * dT
          + k('angular_velocity_bias_temperature_k2') * dT ** 2)
  accel = (x_a + k('linear_acceleration_bias_temperature_k1') * dT
           + k('linear_acceleration_bias_temperature_k2') * dT ** 2)
  return rows, ticks, ts, gyro, accel, lag


@pytest.mark.parametrize('w', [0, 1])
def test_bias_and_scale_follow_the_lagged_temperature(run, w):
  sim, z, amb = run
  rows, ticks, ts, gyro, accel, _ = reference(sim, z, w, amb)
  assert len(rows) == N_TICKS + 1
  np.testing.assert_allclose(z['truth/imu/temperature_c'][w][rows], ts, rtol=0, atol=2e-4)
  np.testing.assert_allclose(z['sensor/imu/angular_velocity'][w][rows], gyro, rtol=2e-6,
                             atol=2e-7)
  np.testing.assert_allclose(z['sensor/imu/linear_acceleration'][w][rows], accel, rtol=2e-6,
                             atol=2e-5)
  # the truth bias carries the thermal bias (fixed terms are off in this configuration)
  cfg = sim.components['imu'].cfg
  dT = ts - cfg.reference_temperature_c
  want = (np.outer(dT, cfg.linear_acceleration_bias_temperature_k1)
          + np.outer(dT ** 2, cfg.linear_acceleration_bias_temperature_k2))
  np.testing.assert_allclose(z['truth/imu/linear_acceleration_bias'][w][rows], want, atol=2e-6)


def test_lag_closed_form_after_the_ramp(run):
  """After the last breakpoint the ambient is constant: T_s − T_end decays as exp(−Δt/τ)."""
  sim, z, amb = run
  for w in (0, 1):
    rows, ticks, _, _, _, _ = reference(sim, z, w, amb)
    t = ticks * sim.dt
    tsim = z['truth/imu/temperature_c'][w][rows].astype(np.float64)
    after = t > TIMES[-1] + 1e-9
    i0 = np.flatnonzero(after)[0]
    end = amb[w][-1]
    want = end + (tsim[i0] - end) * np.exp(-(t[after] - t[i0]) / TAU)
    np.testing.assert_allclose(tsim[after], want, atol=3e-4)
    if amb[w][0] == amb[w][1]:   # world 0 soaks first: the sensor sits at the ambient
      assert np.allclose(tsim[t <= TIMES[1]], amb[w][0], atol=1e-5)


def test_delivered_temperature_lag_noise_resolution(run):
  sim, z, amb = run
  cfg = sim.components['imu'].cfg
  q, sigma = cfg.temperature_resolution_c, cfg.temperature_noise_stddev_c
  for w in (0, 1):
    rows, _, _, _, _, lag = reference(sim, z, w, amb)
    td = z['sensor/imu/temperature_c'][w][rows].astype(np.float64)
    k = td / q
    assert np.max(np.abs(k - np.round(k))) < 2e-3          # on the TEMP_DATA grid
    r = td - lag
    n = len(r)
    s_tot = math.sqrt(sigma ** 2 + q ** 2 / 12)
    assert abs(r.mean()) < 4 * s_tot / math.sqrt(n)
    assert abs(r.std(ddof=1) - s_tot) < 4 * s_tot / math.sqrt(2 * (n - 1))
  # the two worlds draw their own noise (named stream per world)
  assert not np.allclose(z['sensor/imu/temperature_c'][0] - z['truth/imu/temperature_c'][0],
                         z['sensor/imu/temperature_c'][1] - z['truth/imu/temperature_c'][1])


def test_plan_lists_the_thermal_model(run):
  from fibril_mjx.workflows import plan
  text = plan.render(run[0])
  assert 'thermal: ambient table of 3 point(s); sensor lag on' in text
  assert 'delivered temperature_c' in text


def test_compiled_out_when_off():
  sim = fibril_mjx.load(REPO / 'manifests' / 'icm42688p_bus.yaml')
  c = sim.components['imu']
  assert c.thermal is None
  assert 'angular_velocity_bias_temperature_k1' in c.compiled_out()
  state = jax.eval_shape(lambda: c.init(c.default_params(), fibril_mjx.world_keys(0, 1)[0]))
  assert state.thermal is None and 'temperature_noise' not in state.streams
  assert 'temperature_c' not in state.held.sample._fields


def test_table_errors(tmp_path):
  import yaml
  doc = yaml.safe_load(MANIFEST.read_text())
  doc['model'] = str(REPO / 'assets' / 'examples' / 'turntable.xml')
  doc['components'][0]['config']['ambient_temperature_time_s'] = [0.0, 10.0]
  p = tmp_path / 'bad.yaml'
  p.write_text(yaml.safe_dump(doc))
  with pytest.raises(fibril_mjx.FibrilError, match='same, non-zero length'):
    fibril_mjx.load(p)
  doc['components'][0]['config']['ambient_temperature_time_s'] = [0.0, 10.0, 5.0]
  p.write_text(yaml.safe_dump(doc))
  with pytest.raises(fibril_mjx.FibrilError, match='strictly increasing'):
    fibril_mjx.load(p)


def test_ahrs_rates_carry_the_thermal_terms():
  """`fibril_sim/ahrs` (manifests/ahrs_turntable.yaml + thermal overrides): two worlds with the
  same world key (identical noise) where world 0 has zero coefficients; their rate difference is
  the float64 thermal term `ks·ΔT·(scale·x) + k1·ΔT + k2·ΔT²` of the lagged temperature."""
  import jax.numpy as jnp
  k1, k2, ks = [2e-3, -1e-3, 5e-4], [1e-5, 0.0, -2e-5], [1e-3, 0.0, 2e-3]
  times, temps, tau = [0.0, 0.5], [20.0, 40.0], 0.2
  ov = {'components': [{'component': 'ahrs', 'field': f, 'value': v} for f, v in [
      ('angular_velocity_resolution', 0.0), ('linear_acceleration_resolution', 0.0),
      ('ambient_temperature_time_s', times), ('ambient_temperature_c', temps),
      ('temperature_time_constant_s', tau), ('angular_velocity_bias_temperature_k1', k1),
      ('angular_velocity_bias_temperature_k2', k2),
      ('angular_velocity_scale_temperature_k1', ks),
      ('linear_acceleration_bias_temperature_k1', k1)]]}
  sim = fibril_mjx.load(REPO / 'manifests' / 'ahrs_turntable.yaml', overrides=ov)
  c = sim.components['ahrs']
  assert c.thermal is not None
  params = sim.default_params(2)
  for f in ('angular_velocity_bias_temperature_k1', 'angular_velocity_bias_temperature_k2',
            'angular_velocity_scale_temperature_k1', 'linear_acceleration_bias_temperature_k1'):
    v = np.array(c.get_param(params['ahrs'], f))
    v[0] = 0.0
    params['ahrs'] = c.set_param(params['ahrs'], f, v)
  keys = jnp.concatenate([fibril_mjx.world_keys(0, 1)] * 2)
  _, trace, _ = sim.rollout(params, keys, 100)
  z = flatten(jax.device_get(trace))
  cfg = c.cfg
  new = z['sensor/ahrs/new_data'][1] & z['sensor/ahrs/valid'][1]
  ticks = z['sensor/ahrs/sample_tick'][1][new]
  ta = np.interp(ticks * sim.dt, times, temps)
  a = 1 - math.exp(-cfg.period_s / tau)
  ts = np.empty_like(ta)
  for i in range(len(ta)):
    ts[i] = ta[0] if i == 0 else ts[i - 1] + a * (ta[i] - ts[i - 1])
  dT = (ts - cfg.reference_temperature_c)[:, None]
  x = z['truth/ahrs/angular_velocity'][1][ticks].astype(np.float64)
  want_w = (np.asarray(ks) * dT * (np.asarray(cfg.angular_velocity_scale) * x)
            + np.asarray(k1) * dT + np.asarray(k2) * dT ** 2)
  diff = lambda f: (z[f'sensor/ahrs/{f}'][1][new].astype(np.float64)   # noqa: E731
                    - z[f'sensor/ahrs/{f}'][0][new].astype(np.float64))
  np.testing.assert_allclose(diff('angular_velocity'), want_w, rtol=1e-4, atol=2e-6)
  np.testing.assert_allclose(diff('linear_acceleration'), np.asarray(k1) * dT, rtol=1e-4,
                             atol=2e-5)
  np.testing.assert_allclose(z['truth/ahrs/temperature_c'][1][ticks], ts, atol=2e-4)


def test_ahrs_delivers_its_temperature_channel():
  """`fibril_sim/ahrs` with `temperature_output: true`: the delivered `temperature_c` is the
  float64 first-order lag (τ_d) of the lagged sensor temperature (τ), plus N(0, σ²) from its
  own stream, on the resolution grid — the IMU's channel, on the AHRS's 100 Hz schedule; the
  rate and orientation fields are those of the AHRS without it (same streams)."""
  import jax.numpy as jnp
  times, temps, tau, tau_d, sigma, q = [0.0, 0.8], [20.0, 45.0], 0.3, 0.1, 0.05, 0.01
  base = [('ambient_temperature_time_s', times), ('ambient_temperature_c', temps),
          ('temperature_time_constant_s', tau),
          ('angular_velocity_bias_temperature_k1', [1e-3, 0.0, 0.0])]
  out = base + [('temperature_output', True), ('temperature_output_time_constant_s', tau_d),
                ('temperature_noise_stddev_c', sigma), ('temperature_resolution_c', q)]
  load = lambda fields: fibril_mjx.load(  # noqa: E731  (MuJoCo C: the channel is the subject)
      REPO / 'manifests' / 'ahrs_turntable.yaml', physics='c', overrides={
          'components': [{'component': 'ahrs', 'field': f, 'value': v} for f, v in fields]})
  sims = [load(base), load(out)]
  keys = jnp.concatenate([fibril_mjx.world_keys(0, 1)] * 2)
  z0, z = (flatten(jax.device_get(s.rollout(s.default_params(2), keys, 1000)[1])) for s in sims)
  cfg = sims[1].components['ahrs'].cfg
  new = z['sensor/ahrs/new_data'][0] & z['sensor/ahrs/valid'][0]
  ticks = z['sensor/ahrs/sample_tick'][0][new]
  ta = np.interp(ticks * sims[1].dt, times, temps)
  a, a_d = 1 - math.exp(-cfg.period_s / tau), 1 - math.exp(-cfg.period_s / tau_d)
  ts, lag = np.empty_like(ta), np.empty_like(ta)
  for i in range(len(ta)):
    ts[i] = ta[0] if i == 0 else ts[i - 1] + a * (ta[i] - ts[i - 1])
    lag[i] = ts[0] if i == 0 else lag[i - 1] + a_d * (ts[i] - lag[i - 1])
  td = z['sensor/ahrs/temperature_c'][0][new].astype(np.float64)
  k = td / q
  assert np.max(np.abs(k - np.round(k))) < 2e-3            # on the resolution grid
  r, n = td - lag, len(td)
  s_tot = math.sqrt(sigma ** 2 + q ** 2 / 12)
  assert n >= 190 and abs(r.mean()) < 4 * s_tot / math.sqrt(n)
  assert abs(r.std(ddof=1) - s_tot) < 4 * s_tot / math.sqrt(2 * (n - 1))
  for f in ('orientation', 'angular_velocity', 'linear_acceleration'):
    np.testing.assert_array_equal(z[f'sensor/ahrs/{f}'], z0[f'sensor/ahrs/{f}'])
  assert 'temperature_c' not in z0 and 'temperature_c' not in sims[0].components[
      'ahrs'].init(sims[0].default_params()['ahrs'], keys[0]).held.sample._fields
