"""`fibril-mjx validate` for the navigation sensors: the static noise rig. The shipped device
profiles pass their own white-noise (+ quantization) check and a device whose noise differs
from its configuration fails, naming the check. Short records: the tolerance is 4 standard
errors of a std estimate, σ·4/√(2N), so a shorter run only widens it. A configured
Gauss–Markov term (the magnetometer here) gets its own rig and structure-function check."""

import json
import math

import numpy as np
import pytest
import yaml

from fibril_mjx import cli
from fibril_mjx.core import registry
from fibril_mjx.workflows import validate
from fibril_mjx.workflows.validate import gnss as vgnss

STATIC_S, WORLDS = 10.0, 8
XML = ('<mujoco><asset><material name="g" rgba="1 1 1 1"/></asset><worldbody>'
       '<geom type="plane" size="5 5 0.1" material="g"/><body pos="0 0 1">'
       '<joint type="hinge" axis="0 0 1"/><geom size="0.01" mass="1" contype="0" '
       'conaffinity="0"/><site name="s" zaxis="0 0 -1"/></body></worldbody><sensor>'
       '<velocimeter name="vel" site="s"/><rangefinder name="rng" site="s"/></sensor></mujoco>')
CONFIGS = {
    'fibril_sim/magnetometer': {'profiles': {'device': 'lis3mdl_nominal'}, 'site': 's',
                                'declination_deg': 6.0, 'inclination_deg': 67.0,
                                'intensity_ut': 50.0, 'hard_iron_ut': [3.0, -2.0, 1.5],
                                'bias_instability_stddev_ut': [0.2, 0.2, 0.2],
                                'bias_correlation_time_s': 50.0},
    'fibril_sim/barometer': {'profiles': {'device': 'ms5611_nominal'}, 'site': 's',
                             'altitude_offset_m': 120.0},
    'fibril_sim/rangefinder': {'profiles': {'device': 'tfmini_plus_nominal'},
                               'rangefinder_sensor': 'rng'},
    # the shipped profile sets the 14-bit step only; a white noise is configured so that the
    # static rig checks noise and quantization together
    'fibril_sim/airspeed': {'profiles': {'device': 'ms4525do_nominal'}, 'velocity_sensor': 'vel',
                            'noise_stddev_pa': 2.0},
}


def _manifest(tmp, ctype):
  (tmp / 'm.xml').write_text(XML)
  doc = {'fibril_manifest': 1, 'model': 'm.xml',
         'components': [{'id': 'dut', 'type': ctype, 'config': CONFIGS[ctype]}]}
  path = tmp / 'm.yaml'
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  return path


def _run(tmp, ctype, **kw):
  return validate.run(_manifest(tmp, ctype), 'dut', tmp / 'out', static_duration_s=STATIC_S,
                      worlds=WORLDS, progress=lambda *_: None, **kw)


@pytest.mark.parametrize('ctype', list(CONFIGS))
def test_shipped_profile_passes_static_noise(tmp_path, ctype):
  s = _run(tmp_path, ctype)
  assert s['passed'], validate.render(s)
  field = registry.get(ctype).validation_rig.field
  names = {c['name']: c for c in s['checks']}
  assert names[f'static_noise.{field}']['passed'] is True
  assert names[f'static_noise_whiteness.{field}']['passed'] is True
  if ctype == 'fibril_sim/magnetometer':    # a Gauss–Markov term configured: its own rig
    assert names[f'static_gauss_markov.{field}']['passed'] is True
  on_disk = json.loads((tmp_path / 'out' / 'summary.json').read_text())
  assert on_disk['passed'] and 'ALL CHECKS PASSED' in (tmp_path / 'out' / 'summary.txt').read_text()


def test_magnetometer_perturbed_noise_fails_naming_the_check(tmp_path, capsys):
  m = _manifest(tmp_path, 'fibril_sim/magnetometer')
  code = cli.main(['validate', str(m), '--component', 'dut', '--out', str(tmp_path / 'o'),
                   '--static-duration', str(STATIC_S), '--worlds', str(WORLDS),
                   '--perturb', 'noise_stddev_ut=[0.32, 0.40, 0.41]'])
  out = capsys.readouterr().out
  assert code == 1
  s = json.loads((tmp_path / 'o' / 'summary.json').read_text())
  assert 'static_noise.magnetic_field_ut' in s['failed']
  assert 'static_noise_whiteness.magnetic_field_ut' not in s['failed']
  assert 'FAIL  static_noise.magnetic_field_ut' in out


def test_barometer_perturbed_noise_fails(tmp_path):
  s = _run(tmp_path, 'fibril_sim/barometer', perturb={'noise_stddev_pa': 1.5})
  assert not s['passed'] and 'static_noise.pressure_pa' in s['failed']


def test_airspeed_perturbed_noise_fails_exactly_the_noise_check(tmp_path):
  s = _run(tmp_path, 'fibril_sim/airspeed', perturb={'noise_stddev_pa': 3.0})
  assert s['failed'] == ['static_noise.differential_pressure_pa'], validate.render(s)


# ------------------------------------------------------------------------------ GNSS
# A static rig with two receivers (one with the rig's own outage); tolerances from the sample
# size (Gauss–Markov samples are correlated: effective sample sizes from the configured model).

GNSS_S, GNSS_WORLDS = 60.0, 128
GNSS_PERTURB = {'horizontal_error_stddev_m': 1.06,            # configured 2.1233: 2x produced
                'vertical_correlation_time_s': 30.0,          # configured 60: 2x produced
                'horizontal_velocity_noise_stddev_m_s': 0.02124,   # configured 0.04247
                'reacquisition_s': 0.5,                       # configured 1.0
                'latency_s': 0.1}                             # configured 0.05


def _gnss(tmp, **kw):
  return validate.run('manifests/survey_quad.yaml', 'gnss', tmp / 'out', worlds=GNSS_WORLDS,
                      static_duration_s=GNSS_S, progress=lambda *_: None, **kw)


def test_gnss_shipped_profile_passes(tmp_path):
  s = _gnss(tmp_path)
  assert s['passed'], validate.render(s)
  names = {c['name'] for c in s['checks']}
  assert {'position_noise.horizontal', 'position_noise.vertical',
          'position_correlation.horizontal', 'position_correlation.vertical',
          'velocity_noise.horizontal', 'velocity_noise.vertical', 'velocity_noise.independence',
          'accuracy_reported', 'accuracy_consistency.horizontal',
          'accuracy_consistency.vertical', 'accuracy_consistency.speed', 'fix_consistency',
          'timing.period', 'timing.latency'} <= names
  assert all(c['passed'] is True for c in s['checks']), validate.render(s)   # none n/a
  assert (tmp_path / 'out' / 'timing.png').exists()


def test_gnss_misconfigured_device_fails_exactly_the_matching_checks(tmp_path):
  s = _gnss(tmp_path, perturb=GNSS_PERTURB)
  assert set(s['failed']) == {'position_noise.horizontal', 'position_correlation.vertical',
                              'velocity_noise.horizontal', 'accuracy_reported',
                              'fix_consistency', 'timing.latency'}, validate.render(s)


def _synthetic_gnss(rs, worlds, n, period, sig_h, tau_h, sig_v, tau_v, sig_vel):
  """Solutions of a static receiver from the SPEC §5 model in NumPy: AR(1) position errors
  (stationary start), white velocity errors, reported accuracies from the model."""
  def ar1(sig, tau, shape):
    phi = math.exp(-period / tau)
    x = np.empty(shape)
    x[:, 0] = sig * rs.standard_normal((shape[0],) + shape[2:])
    for k in range(1, shape[1]):
      x[:, k] = phi * x[:, k - 1] + sig * math.sqrt(1 - phi * phi) * rs.standard_normal(
          (shape[0],) + shape[2:])
    return x
  e = np.concatenate([ar1(sig_h, tau_h, (worlds, n, 2)), ar1(sig_v, tau_v, (worlds, n, 1))], -1)
  ev = rs.standard_normal((worlds, n, 3)) * [sig_vel, sig_vel, 1.5 * sig_vel]
  one = np.ones((worlds, n))
  return {'position_error_m': e, 'velocity_error_m_s': ev, 'fix_type': 3 * one,
          'horizontal_accuracy_m': sig_h * one, 'vertical_accuracy_m': sig_v * one,
          'speed_accuracy_m_s': sig_vel * one}


CFG = {'period_s': 1.0, 'horizontal_error_stddev_m': 2.0, 'horizontal_correlation_time_s': 20.0,
       'vertical_error_stddev_m': 3.0, 'vertical_correlation_time_s': 20.0,
       'horizontal_velocity_noise_stddev_m_s': 0.05,
       'vertical_velocity_noise_stddev_m_s': 0.075}


@pytest.fixture(scope='module')
def synthetic():
  return _synthetic_gnss(np.random.default_rng(3), 200, 200, 1.0, 2.0, 20.0, 3.0, 20.0, 0.05)


@pytest.mark.parametrize('field,factor,fails', [
    (None, 1.0, set()),
    ('horizontal_error_stddev_m', 2.0, {'position_noise.horizontal', 'accuracy_reported'}),
    ('vertical_error_stddev_m', 0.5, {'position_noise.vertical', 'accuracy_reported'}),
    ('horizontal_correlation_time_s', 2.0, {'position_correlation.horizontal'}),
    ('vertical_correlation_time_s', 0.5, {'position_correlation.vertical'}),
    ('vertical_velocity_noise_stddev_m_s', 2.0, {'velocity_noise.vertical'}),
])
def test_gnss_checks_fail_on_a_doubled_or_halved_configuration(synthetic, field, factor, fails):
  cfg = dict(CFG)
  if field:
    cfg[field] = CFG[field] * factor
  checks = [vgnss.gnss_position_noise_check('horizontal', synthetic['position_error_m'][..., :2],
                                               cfg, 1.0),
            vgnss.gnss_position_noise_check('vertical', synthetic['position_error_m'][..., 2:],
                                               cfg, 1.0),
            vgnss.gnss_correlation_check('horizontal', synthetic['position_error_m'][..., :2],
                                            cfg, 1.0),
            vgnss.gnss_correlation_check('vertical', synthetic['position_error_m'][..., 2:],
                                            cfg, 1.0)]
  checks += vgnss.gnss_velocity_checks(synthetic['velocity_error_m_s'],
                                          synthetic['position_error_m'], cfg)
  checks += vgnss.gnss_accuracy_checks(synthetic, cfg, 1.0)
  failed = {c.name for c in checks if c.passed is False}
  assert failed == fails, [(c.name, c.measured, c.configured, c.tolerance) for c in checks]


@pytest.mark.parametrize('scale,part', [(2.0, 'horizontal'), (0.5, 'vertical'),
                                        (2.0, 'speed')])
def test_gnss_accuracy_consistency_fails_when_the_reported_sigma_is_off(synthetic, scale, part):
  field = {'horizontal': 'horizontal_accuracy_m', 'vertical': 'vertical_accuracy_m',
           'speed': 'speed_accuracy_m_s'}[part]
  sol = dict(synthetic, **{field: synthetic[field] * scale})
  failed = {c.name for c in vgnss.gnss_accuracy_checks(sol, CFG, 1.0) if c.passed is False}
  assert failed == {'accuracy_reported', f'accuracy_consistency.{part}'}


def test_gnss_velocity_derived_from_position_fails_independence():
  rs = np.random.default_rng(4)
  s = _synthetic_gnss(rs, 100, 200, 1.0, 2.0, 20.0, 3.0, 20.0, 0.05)
  e = s['position_error_m']
  ev = s['velocity_error_m_s'].copy()
  ev[:, 1:] += 0.2 * np.diff(e, axis=1)       # a receiver whose velocity follows its position
  failed = {c.name for c in vgnss.gnss_velocity_checks(ev, e, CFG) if c.passed is False}
  assert 'velocity_noise.independence' in failed


def _fix_solutions(cfg, n=60, worlds=2):
  """Solutions of the outage copy as the SPEC §5 model says: fix outside the rig outage +
  reacquisition, the held last fix with the no-fix quality inside."""
  period = cfg['period_s']
  a, b = vgnss.gnss_outage_window(period)
  t = np.arange(n) * period
  none = (t >= a) & (t < b + cfg['reacquisition_s'])
  sol = {'sample_tick': np.broadcast_to(np.arange(n) * 10.0, (worlds, n)).copy()}
  sol['fix_type'] = np.where(none, 0.0, 3.0) * np.ones((worlds, 1))
  sol['satellites'] = np.where(none, 0.0, 12.0) * np.ones((worlds, 1))
  for f, v in (('hdop', 0.9), ('vdop', 1.3)):
    sol[f] = np.where(none, 99.99, v) * np.ones((worlds, 1))
  for f, v in (('horizontal_accuracy_m', 2.0), ('vertical_accuracy_m', 3.0),
               ('speed_accuracy_m_s', 0.05)):
    sol[f] = np.where(none, 9999.0, v) * np.ones((worlds, 1))
  lat = np.arange(n, dtype=np.float64) + 5e8
  held = np.maximum.accumulate(np.where(none, -1, np.arange(n)))
  lat = np.where(none, lat[np.maximum(held, 0)], lat)
  for f in ('latitude_e7', 'longitude_e7', 'height_m'):
    sol[f] = lat * np.ones((worlds, 1))
  sol['velocity_enu_m_s'] = np.repeat(sol['height_m'][..., None], 3, -1)
  return sol


def test_gnss_fix_consistency_catches_each_inconsistency():
  cfg = dict(CFG, period_s=0.2, reacquisition_s=1.0, satellites=12, satellites_no_fix=0,
             hdop=0.9, vdop=1.3, no_fix_accuracy_m=9999.0)
  good = _fix_solutions(cfg)
  dt = 0.02
  noise = {'fix_type': np.full((2, 60), 3.0)}          # the outage-free copy: all fixed
  assert vgnss.gnss_fix_check(noise, good, cfg, dt).passed
  assert vgnss.gnss_fix_check(good, good, cfg, dt).passed is False   # no-fix, no outage
  a, _ = vgnss.gnss_outage_window(0.2)
  inside = int(a / 0.2) + 2                   # a solution inside the outage
  for field, value in (('horizontal_accuracy_m', 2.0),   # a no-fix with a fix's accuracy
                       ('fix_type', 3.0), ('satellites', 12.0), ('latitude_e7', 1.0)):
    bad = {k: v.copy() for k, v in good.items()}
    bad[field][0, inside] = value
    assert vgnss.gnss_fix_check(noise, bad, cfg, dt).passed is False, field
  early = _fix_solutions(dict(cfg, reacquisition_s=0.4))    # reacquires too early
  assert vgnss.gnss_fix_check(noise, early, cfg, dt).passed is False
