"""`fibril-mjx validate`: every shipped IMU/AHRS profile passes its own virtual test rigs, and
a deliberately mismatched device fails, naming the check. Short records (the tolerances are
derived from the record length, so shorter runs only widen them)."""

import json
import pathlib
import re

import numpy as np
import pytest
import yaml

from fibril_mjx import cli
from fibril_mjx.config import paths
from fibril_mjx.workflows import validate

STATIC_S, WORLDS = 10.0, 8
SENSORS = {'fibril_sim/imu': ('gyroscope_sensor', 'accelerometer_sensor'),
           'fibril_sim/ahrs': ('orientation_sensor', 'gyroscope_sensor', 'accelerometer_sensor')}


def _shipped():
  """`[(label, type, profiles)]`: each device profile alone, each empirical profile on the
  device profile of its family (an empirical profile sets no period)."""
  profs = {}
  for f in sorted(pathlib.Path(paths.profiles_dir()).glob('*.yaml')):
    d = yaml.safe_load(f.read_text())
    types = [t for t in d['component_types'] if t in validate.SUPPORTED]
    if types:
      profs[d['id']] = (d['kind'], types[0])
  out = []
  for pid, (kind, t) in profs.items():
    if kind == 'device':
      out.append((pid, t, {'device': pid}))
    else:
      dev = [p for p, (k, tt) in profs.items() if k == 'device' and tt == t
             and p.split('_')[0] == pid.split('_')[0]]
      out.append((pid, t, {'device': dev[0], kind: pid}))
  return out


def _manifest(tmp, label, ctype, profiles, **config):
  xml = ('<mujoco><worldbody><body><joint type="hinge" axis="0 0 1"/>'
         '<geom size="0.01" mass="1"/><site name="s"/></body></worldbody><sensor>'
         '<gyro name="g" site="s"/><accelerometer name="a" site="s"/>'
         '<framequat name="q" objtype="site" objname="s"/></sensor></mujoco>')
  (tmp / 'm.xml').write_text(xml)
  names = {'orientation_sensor': 'q', 'gyroscope_sensor': 'g', 'accelerometer_sensor': 'a'}
  cfg = {'profiles': profiles, **{k: names[k] for k in SENSORS[ctype]}, **config}
  doc = {'fibril_manifest': 1, 'model': 'm.xml',
         'components': [{'id': 'dut', 'type': ctype, 'config': cfg}]}
  p = tmp / f'{label}.yaml'
  p.write_text(yaml.safe_dump(doc))
  return p


def _term_on(configured) -> bool:
  try:
    return bool(np.any(np.asarray(configured, dtype=float) != 0))
  except (TypeError, ValueError):
    return True


@pytest.mark.parametrize('label, ctype, profiles', _shipped(), ids=[s[0] for s in _shipped()])
def test_shipped_profile_passes(tmp_path, label, ctype, profiles):
  m = _manifest(tmp_path, label, ctype, profiles)
  s = validate.run(m, 'dut', tmp_path / 'out', static_duration_s=STATIC_S, worlds=WORLDS,
                   progress=lambda *_: None)
  print(validate.render(s))
  assert s['passed'], s['failed']
  # "passed" means no FAIL; an n/a (not resolvable) is no pass. Only the Allan bias-instability
  # and random-walk coefficients may be n/a (a 10 s record shows no slope 0 or +1/2); every
  # other check decides, and each n/a whose term the configuration turns on is counted here.
  na = [c for c in s['checks'] if c['passed'] is None]
  na_on = [c['name'] for c in na if _term_on(c['configured'])]
  print(f'{len(na)} n/a checks, {len(na_on)} with the term on: {na_on}')
  for c in na:
    assert re.fullmatch(r'static_allan\.\w+\.[BK]\.[xyz]', c['name']), c['name']
  names = {c['name'].split('.')[0] for c in s['checks']}
  assert {'static_allan', 'six_orientation', 'rate_table', 'range', 'bode', 'timing',
          'geometry'} <= names
  assert (tmp_path / 'out' / 'summary.txt').exists()
  assert (tmp_path / 'out' / 'bode_angular_velocity.png').exists()


def test_doubled_noise_density_fails_naming_the_check(tmp_path, capsys):
  m = _manifest(tmp_path, 'icm', 'fibril_sim/imu', {'device': 'icm42688p_nominal'})
  code = cli.main(['validate', str(m), '--component', 'dut', '--out', str(tmp_path / 'o'),
                   '--static-duration', str(STATIC_S), '--worlds', str(WORLDS),
                   '--perturb', 'angular_velocity_noise_density=[9.7738e-5, 9.7738e-5, 9.7738e-5]'])
  assert code == 1
  s = json.loads((tmp_path / 'o' / 'summary.json').read_text())
  # exactly the gyro's Allan check (the channel and its three white-noise coefficients)
  assert sorted(s['failed']) == ['static_allan.angular_velocity',
                                 'static_allan.angular_velocity.N.x',
                                 'static_allan.angular_velocity.N.y',
                                 'static_allan.angular_velocity.N.z'], s['failed']
  assert 'static_allan.angular_velocity' in capsys.readouterr().out


# Each perturbation below moves one property of the simulated device away from the
# configuration the checks use; exactly that family's check fails. (A gyro scale error, a
# narrower gyro limit or a lower gyro bandwidth each fail rate_table and range together: both
# read the same rate-table plateaus. A filter on a channel with a limit also fails its range
# check: the range sine's slope turns the filter's lag into errors far above the margin; with
# that channel's saturation off, only its Bode check sees the filter.)
#
# These negative controls run in `make test` at the smallest size that still separates the
# families: NEG_STATIC_S = 2 s of static record, NEG_WORLDS = 8. The perturbations act on the
# rate-table, Bode, range, timing and geometry rigs, whose record lengths are fixed by the
# rig plans (not by `static_duration_s`), so shortening the static record only widens the
# static checks' tolerances (they are derived from the record length) — the one family whose
# perturbation is a static one, six_orientation's 0.05 m/s² accelerometer bias, is still
# resolved: with 2 s at 1 kHz per orientation the standard error of a mean is σ/√2000, two
# orders of magnitude below 0.05 m/s². The world count stays at 8, as in the rest of this
# file: the Bode, range and timing checks average over worlds, and their margins were set at
# that count. (Each perturbation switches a term on, so each case compiles its own rigs;
# the persistent compilation cache makes the warm runs cheap.)
NEG_STATIC_S, NEG_WORLDS = 2.0, 8
ICM = ('icm', 'fibril_sim/imu', {'device': 'icm42688p_nominal'})
R6093U = ('r6093u', 'fibril_sim/ahrs', {'device': 'r6093u_nominal'})


@pytest.mark.parametrize('device, config, perturb, failed', [
    (ICM, {}, {'latency_s': 0.004}, ['timing.latency']),
    (ICM, {}, {'linear_acceleration_bias': [0.05, 0.0, 0.0]},
     ['six_orientation.linear_acceleration.bias']),
    (ICM, {}, {'angular_velocity_scale': [1.02, 1.0, 1.0]},
     ['range.angular_velocity', 'rate_table.angular_velocity.gain']),
    # a 20 % wider accelerometer limit: the centripetal samples between the two limits
    # (the rate table reaches 1.3x the configured limit) are not flagged
    (ICM, {}, {'linear_acceleration_limit': 188.29}, ['range.linear_acceleration']),
    # a 100 Hz accelerometer filter the configuration does not have (its saturation off)
    (ICM, {'linear_acceleration_limit': 0.0}, {'linear_acceleration_bandwidth_hz': 100.0},
     ['bode.linear_acceleration']),
    # the AHRS: the shipped -1 yaw sign turned to +1
    (R6093U, {}, {'orientation_yaw_sign': 1.0}, ['geometry.yaw_sign']),
    # FIFO delivery (validate/fifo_timing.py): the device's reads arrive 2 ms later
    (ICM, {'delivery': 'fifo', 'fifo_read_period_s': 0.01, 'fifo_read_phase_s': 0.003,
           'fifo_read_delay_s': 0.002, 'fifo_read_max': 8}, {'fifo_read_delay_s': 0.004},
     ['timing.batch', 'timing.latency']),
], ids=['timing', 'six_orientation', 'rate_table', 'range', 'bode', 'geometry_ahrs', 'fifo'])
def test_a_perturbation_fails_exactly_its_check(tmp_path, device, config, perturb, failed):
  m = _manifest(tmp_path, *device, **config)
  s = validate.run(m, 'dut', tmp_path / 'out', static_duration_s=NEG_STATIC_S,
                   worlds=NEG_WORLDS, perturb=perturb, progress=lambda *_: None)
  assert not s['passed'] and sorted(s['failed']) == failed, s['failed']


def test_a_configured_limit_of_zero_still_passes(tmp_path):
  """The Bode control above configures the accelerometer with saturation off: unperturbed,
  that configuration passes (so the failure there is the perturbation's)."""
  m = _manifest(tmp_path, *ICM, linear_acceleration_limit=0.0)
  s = validate.run(m, 'dut', tmp_path / 'out', static_duration_s=NEG_STATIC_S,
                   worlds=NEG_WORLDS, progress=lambda *_: None)
  assert s['passed'], s['failed']


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
  m = _manifest(tmp_path, 'icm', 'fibril_sim/imu', {'device': 'icm42688p_nominal'})
  code = cli.main(['validate', str(m), '--component', 'nope', '--out', str(tmp_path / 'o')])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1 and 'nope' in err[0] and str(m) in err[0]
  assert not (tmp_path / 'o').exists()
