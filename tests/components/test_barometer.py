"""`fibril_sim/barometer`: ISA pressure and every error term against an independent float64
NumPy reference (same named-stream draws), noise and drift against closed forms, a shared
weather process between two barometers, validation messages."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nav_helpers as nh
from fibril_mjx.components.sensors import barometer

PERIOD = 0.01
STEP = 5
# US Standard Atmosphere 1976 constants, written out here (not imported from the module)
G0, M_AIR, R_GAS, LAPSE = 9.80665, 0.0289644, 8.31432, 0.0065


def make(cid='baro', **cfg):
  ctx, cat = nh.context()
  return barometer.build(cid, {'site': 's', 'period_s': PERIOD, **cfg}, ctx, cat)


def isa(h, p0=101325.0, t0=288.15):
  return p0 * (1 - LAPSE * h / t0) ** (G0 * M_AIR / (R_GAS * LAPSE))


def scenario(n, seed=0):
  rs = np.random.default_rng(seed)
  t = np.arange(n) * nh.DT
  z = 50.0 + 30.0 * np.sin(0.9 * t) + rs.normal(0, 0.1, n)
  xmat = np.stack([nh.rot_z(0.5 * ti) for ti in t])
  sd = np.zeros((n, nh.NSD))
  sd[:, nh.VEL] = np.stack([8 + 4 * np.sin(1.7 * t), 1.5 * np.cos(t), 0.5 * np.sin(3 * t)], 1)
  throttle = 12.0 + 10.0 * np.sin(2.3 * t)
  xpos = np.stack([np.zeros(n), np.zeros(n), z], 1)
  return nh.data_seq(n, xmat=xmat, xpos=xpos, sensordata=sd, ctrl=throttle), (z, xmat, sd,
                                                                             throttle)


def reference(cfg, raw, wk=nh.WK, cid='baro'):
  z, xmat, sd, throttle = raw
  ks = np.arange(0, len(z), STEP)
  n = len(ks)
  g = lambda k, d=0.0: cfg.get(k, d)  # noqa: E731
  h = z[ks] + g('altitude_offset_m')
  p0, t0 = g('sea_level_pressure_pa', 101325.0), g('sea_level_temperature_k', 288.15)
  p = isa(h, p0, t0)
  temp = t0 - LAPSE * h + g('temperature_offset_k')
  p = p + g('bias_pa')
  if g('bias_turn_on_stddev_pa') > 0:
    p = p + g('bias_turn_on_stddev_pa') * nh.normals(wk, cid, 'bias_turn_on', 1)[0]
  if g('bias_instability_stddev_pa') > 0:
    phi = math.exp(-PERIOD / cfg['bias_correlation_time_s'])
    p = p + nh.gm_reference(nh.normals(wk, cid, 'bias_instability', n), phi,
                            g('bias_instability_stddev_pa'))
  if g('common_mode_stddev_pa') > 0:
    phi = math.exp(-PERIOD / cfg['common_mode_correlation_time_s'])
    p = p + g('common_mode_stddev_pa') * nh.gm_reference(
        nh.normals(wk, cfg['common_mode_stream'], 'weather', n, shared=True), phi, 1.0)
  p = p + g('temperature_coefficient_pa_per_k') * (temp - g('reference_temperature_k', 298.15))
  if 'throttle_bias_points' in cfg:
    p = p + np.interp(throttle[ks], cfg['throttle_bias_points'], cfg['throttle_bias_pa'])
  if 'airspeed_bias_points_m_s' in cfg:
    wind = np.asarray(g('wind_m_s', [0, 0, 0]), np.float64)
    v = sd[ks][:, nh.VEL] - np.einsum('kji,j->ki', xmat[ks], wind)
    p = p + np.interp(np.linalg.norm(v, axis=1), cfg['airspeed_bias_points_m_s'],
                      cfg['airspeed_bias_pa'])
  if g('noise_stddev_pa') > 0:
    p = p + g('noise_stddev_pa') * nh.normals(wk, cid, 'noise', n)
  flag = np.zeros(n, bool)
  if g('pressure_min_pa') or g('pressure_max_pa'):
    hi = g('pressure_max_pa') or np.inf
    flag = (p < g('pressure_min_pa')) | (p > hi)
    p = np.clip(p, g('pressure_min_pa'), hi)
  if g('resolution_pa') > 0:
    p = g('resolution_pa') * np.round(p / g('resolution_pa'))
  return p, temp, flag


ERRORS = dict(altitude_offset_m=120.0, sea_level_pressure_pa=100800.0,
              sea_level_temperature_k=280.0, bias_pa=12.0, bias_turn_on_stddev_pa=40.0,
              bias_instability_stddev_pa=5.0, bias_correlation_time_s=0.5,
              common_mode_stream='weather', common_mode_stddev_pa=8.0,
              common_mode_correlation_time_s=0.3, temperature_coefficient_pa_per_k=1.5,
              temperature_offset_k=6.0, throttle_actuator='thr',
              throttle_bias_points=[0.0, 10.0, 25.0], throttle_bias_pa=[0.0, -6.0, -30.0],
              velocity_sensor='vel', wind_m_s=[3.0, -1.0, 0.0],
              airspeed_bias_points_m_s=[0.0, 5.0, 15.0], airspeed_bias_pa=[0.0, 2.0, 20.0],
              noise_stddev_pa=1.2)
CASES = {
    'isa': {},
    'isa_conditions': dict(altitude_offset_m=800.0, sea_level_pressure_pa=99000.0,
                           sea_level_temperature_k=300.0),
    'all_errors': ERRORS,
    'range_and_resolution': dict(pressure_min_pa=100600.0, pressure_max_pa=101000.0,
                                 resolution_pa=1.0),
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_equation_matches_reference(name):
  cfg = CASES[name]
  data, raw = scenario(1000)
  c = make(**cfg)
  _, out, _, _ = nh.drive(c, data)
  nd = out.new_data
  p, temp, flag = reference(cfg, raw)
  atol = 0.1 + (1.0 if 'resolution_pa' in cfg else 0.0)
  np.testing.assert_allclose(out.sample.pressure_pa[nd], p, atol=atol)
  np.testing.assert_allclose(out.sample.temperature_k[nd], temp, atol=1e-3)
  np.testing.assert_array_equal(out.sample.saturated[nd], flag)
  if name == 'range_and_resolution':
    assert flag.any() and not flag.all()


def test_isa_constants_give_the_standard_atmosphere():
  """Sea level and the exponent g0·M/(R·L) of US Standard Atmosphere 1976."""
  assert abs(barometer.ISA_EXPONENT - G0 * M_AIR / (R_GAS * LAPSE)) < 1e-6
  assert float(barometer.isa_pressure(0.0, 101325.0, 288.15)) == 101325.0
  np.testing.assert_allclose(float(barometer.isa_pressure(jnp.float32(1000.0), 101325.0, 288.15)),
                             isa(1000.0), rtol=2e-7)


def test_terms_off_are_absent():
  c = make()
  assert c.describe()[-2] == 'terms on: none'
  assert not c.fault_plan.active and c.throttle_ctrl == -1 and c.velocity is None


def test_sample_fields_and_the_default_fault_fields():
  """The sample's fields in order (the trace's columns), and a fault entry without `fields`
  acting on the measurement (the first field), one with `fields` on what it names."""
  assert barometer.Sample._fields == ('pressure_pa', 'temperature_k', 'variance', 'saturated',
                                      'health')
  assert 'health: int32' in barometer.Sample.__doc__
  c = make(faults=[{'type': 'stuck', 'start_s': 0.1},
                   {'type': 'bias_step', 'start_s': 0.2, 'value': 1.0,
                    'fields': ['temperature_k']}])
  assert c.fault_plan.fields == (('pressure_pa',), ('temperature_k',))


def test_noise_and_drift_closed_forms():
  sig_n, sig_d, tau = 1.2, 4.0, 0.2
  c = make(noise_stddev_pa=sig_n, resolution_pa=0.0)
  worlds, n = 16, 2000
  data = nh.data_seq(n * STEP)
  _, out, _, _ = nh.drive_worlds(c, data, worlds)
  e = out.sample.pressure_pa[:, ::STEP].astype(np.float64) - 101325.0
  assert abs(e.std() / sig_n - 1) < 5 / math.sqrt(2 * e.size) + 1e-3  # float32 ulp at 1e5 Pa
  np.testing.assert_allclose(out.sample.variance[0, -1], sig_n ** 2, rtol=1e-5)
  c = make(bias_instability_stddev_pa=sig_d, bias_correlation_time_s=tau)
  _, out, _, _ = nh.drive_worlds(c, data, worlds)
  b = out.sample.pressure_pa[:, ::STEP].astype(np.float64) - 101325.0
  phi = math.exp(-PERIOD / tau)
  n_eff = b.size * (1 - phi ** 2) / (1 + phi ** 2)
  assert abs(np.sqrt(np.mean(b ** 2)) / sig_d - 1) < 5 / math.sqrt(2 * n_eff) + 2e-3
  for k in (1, 10, 20):
    r = np.sum(b[:, :-k] * b[:, k:]) / np.sum(b[:, :-k] ** 2)
    assert abs(r - phi ** k) < 5 * nh.bartlett_sd(phi, k, worlds * (n - k)), (k, r)


def test_shared_weather_between_two_barometers():
  cfg = dict(common_mode_stream='weather', common_mode_stddev_pa=10.0,
             common_mode_correlation_time_s=0.05, noise_stddev_pa=5.0)
  data = nh.data_seq(2000 * STEP)
  a = nh.drive_worlds(make('baro_a', **cfg), data, 8)[1].sample.pressure_pa[:, ::STEP]
  b = nh.drive_worlds(make('baro_b', **cfg), data, 8)[1].sample.pressure_pa[:, ::STEP]
  ea, eb = a.astype(np.float64) - 101325.0, b.astype(np.float64) - 101325.0
  rho = 100.0 / 125.0
  phi = math.exp(-PERIOD / 0.05)
  n_eff = ea.size * (1 - phi ** 2) / (1 + phi ** 2)
  r = np.sum(ea * eb) / math.sqrt(np.sum(ea ** 2) * np.sum(eb ** 2))
  assert abs(r - rho) < 5 * (1 - rho ** 2) / math.sqrt(n_eff), r


def test_gradient_wrt_sea_level_pressure():
  c = make(altitude_offset_m=500.0)
  data, raw = scenario(10)
  d0 = jax.tree.map(lambda x: x[0], data)
  p0 = c.default_params()

  def f(ps):
    p = p0._replace(sea_level_pressure_pa=ps)
    return c.acquire(p, c.init(p, nh.WK), d0, 0, 0)[1].pressure_pa
  g = float(jax.grad(f)(p0.sea_level_pressure_pa))
  h = raw[0][0] + 500.0
  np.testing.assert_allclose(g, (1 - LAPSE * h / 288.15) ** 5.255877, rtol=1e-5)


# ------------------------------------------------------------------ validation

P = 'components[0].config'


def comp(**cfg):
  return {'id': 'baro', 'type': 'fibril_sim/barometer',
          'config': {'site': 's', 'period_s': 0.01, **cfg}}


RULES = {
    'table_lengths': (comp(throttle_actuator='thr', throttle_bias_points=[0, 1],
                           throttle_bias_pa=[0]), f'{P}.throttle_bias_pa', '[0.0]',
                      'needs one value per entry of throttle_bias_points (2)'),
    'table_order': (comp(throttle_actuator='thr', throttle_bias_points=[0, 2, 1],
                         throttle_bias_pa=[0, 0, 0]), f'{P}.throttle_bias_points',
                    '[0.0, 2.0, 1.0]', 'must increase strictly'),
    'throttle_actuator_needed': (comp(throttle_bias_points=[0, 1], throttle_bias_pa=[0, 1]),
                                 f'{P}.throttle_actuator', None, 'required with '
                                 'throttle_bias_points (the actuator whose ctrl is the throttle)'),
    'throttle_actuator_unknown': (comp(throttle_actuator='th', throttle_bias_points=[0, 1],
                                       throttle_bias_pa=[0, 1]), f'{P}.throttle_actuator',
                                  "'th'", "no MuJoCo actuator of that name (did you mean 'thr'?)"),
    'velocity_sensor_type': (comp(velocity_sensor='gyro', airspeed_bias_points_m_s=[0, 5],
                                  airspeed_bias_pa=[0, 1]), f'{P}.velocity_sensor', "'gyro'",
                             "must name a velocimeter sensor (dim 3); 'gyro' is a gyro sensor"),
    'airspeed_negative': (comp(velocity_sensor='vel', airspeed_bias_points_m_s=[-1, 5],
                               airspeed_bias_pa=[0, 1]), f'{P}.airspeed_bias_points_m_s[0]',
                          '-1', 'input should be greater than or equal to 0'),
    'pressure_range': (comp(pressure_min_pa=1000, pressure_max_pa=500), f'{P}.pressure_max_pa',
                       '500.0', 'must be > pressure_min_pa = 1000 (or 0: no upper limit)'),
    'negative_noise': (comp(noise_stddev_pa=-1), f'{P}.noise_stddev_pa', '-1',
                       'input should be greater than or equal to 0'),
    'zero_sea_level': (comp(sea_level_pressure_pa=0), f'{P}.sea_level_pressure_pa', '0',
                       'input should be greater than 0'),
    'drift_tau': (comp(bias_instability_stddev_pa=2.0), f'{P}.bias_correlation_time_s', '0.0',
                  'must be > 0 where bias_instability_stddev_pa > 0 (Gauss–Markov correlation '
                  'time)'),
    'cm_tau': (comp(common_mode_stream='w', common_mode_stddev_pa=3.0),
               f'{P}.common_mode_correlation_time_s', '0.0', 'must be > 0 where '
               'common_mode_stddev_pa > 0 (Gauss–Markov correlation time)'),
    'cm_stream': (comp(common_mode_stddev_pa=3.0, common_mode_correlation_time_s=1.0),
                  f'{P}.common_mode_stream', 'None', 'must name a shared stream where '
                  'common_mode_stddev_pa > 0'),
    'throttle_points_needed': (comp(throttle_actuator='thr'), f'{P}.throttle_bias_points', '[]',
                               'must list the throttle values of the bias table when '
                               'throttle_actuator is set'),
    'airspeed_points_needed': (comp(velocity_sensor='vel'), f'{P}.airspeed_bias_points_m_s',
                               '[]', 'must list the airspeeds of the bias table when '
                               'velocity_sensor is set'),
    'site_missing': (comp(site='baro'), f'{P}.site', "'baro'",
                     'no MuJoCo site of that name in the compiled model'),
}


@pytest.mark.parametrize('case', sorted(RULES))
def test_config_rule(tmp_path, case):
  c, path, value, rule = RULES[case]
  nh.assert_rule(tmp_path, [c], path, value, rule)


def test_profile_loads_with_every_value_cited():
  import yaml

  from fibril_mjx.config import paths
  c = make(profiles={'device': 'ms5611_nominal'})
  doc = yaml.safe_load((paths.profiles_dir() / 'ms5611_nominal.yaml').read_text())
  for name, value in doc['fields'].items():
    assert len(doc['provenance']['fields'][name]) > 20, name
    assert getattr(c.cfg, name) == value
  assert (paths.profiles_dir() / doc['provenance']['evidence']).is_file()
