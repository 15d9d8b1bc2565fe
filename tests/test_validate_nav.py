"""`fibril-mjx validate` for the navigation sensors: the static noise rig. The shipped device
profiles pass their own white-noise (+ quantization) check and a device whose noise differs
from its configuration fails, naming the check. Short records: the tolerance is 4 standard
errors of a std estimate, σ·4/√(2N), so a shorter run only widens it. A configured
Gauss–Markov term (the magnetometer here) gets its own rig and structure-function check."""

import json

import pytest
import yaml

from fibril_mjx import cli, validate

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
  field = validate.NAV_TYPES[ctype][0]
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
