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
from fibril_mjx.core import registry
from fibril_mjx.workflows import validate
from fibril_mjx.workflows.validate import inertial

STATIC_S, WORLDS = 10.0, 8
SENSORS = {'fibril_sim/imu': ('gyroscope_sensor', 'accelerometer_sensor'),
           'fibril_sim/ahrs': ('orientation_sensor', 'gyroscope_sensor', 'accelerometer_sensor')}


def _shipped():
  """`[(label, type, profiles)]`: each device profile alone, each empirical profile on the
  device profile of its family (an empirical profile sets no period)."""
  profs = {}
  for f in sorted(pathlib.Path(paths.profiles_dir()).glob('*.yaml')):
    d = yaml.safe_load(f.read_text())
    types = [t for t in d['component_types']
             if isinstance(registry.get(t).validation_rig, inertial.Inertial)]
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


# The negative controls below run in `make test` at the smallest size that still separates the
# families: NEG_STATIC_S = 2 s of static record, NEG_WORLDS = 8. The perturbations act on the
# rate-table, Bode, range, timing and geometry rigs, whose record lengths are fixed by the
# rig plans (not by `static_duration_s`), so shortening the static record only widens the
# static checks' tolerances (they are derived from the record length) — the two static
# perturbations are still resolved: six_orientation's 0.05 m/s² accelerometer bias (with 2 s
# at 500 Hz per orientation the standard error of a mean is σ/√1000 ≈ 5e-4 m/s², two orders of
# magnitude below 0.05 m/s²) and a doubled gyro noise density (the white-noise tolerance the
# Allan check derives from a 2 s record is ±3.2 %; the doubled density reads 2.0 times the
# configured one, some 30 tolerances off). The world count stays at 8, as in the rest of this
# file: the Bode, range and timing checks average over worlds, and their margins were set at
# that count.
NEG_STATIC_S, NEG_WORLDS = 2.0, 8
ICM = ('icm', 'fibril_sim/imu', {'device': 'icm42688p_nominal'})
R6093U = ('r6093u', 'fibril_sim/ahrs', {'device': 'r6093u_nominal'})
# The controls' common configuration: the ICM-42688-P with every term a value-only control
# perturbs already on (a term at its default is compiled out, so switching one on is a new
# program): an accelerometer bias, a gyro scale error and a 200 Hz accelerometer filter, all
# configured — the checks model them. A perturbation of these (or of the noise densities and
# limits the profile sets) changes per-world Params values only: every such control, and this
# configuration unperturbed (`test_the_controls_configuration_passes`), runs the same two
# compiled programs (static and dynamic rig). The latency, FIFO and yaw-sign controls change
# static fields (queue length, read schedule, the sign), so each compiles its own rigs anyway
# and keeps the shipped profile as its configuration (the latency control with the
# accelerometer's saturation off: it also holds the range check's limit-0 branch).
BASE = {'linear_acceleration_bias': [0.01, 0.0, 0.0], 'angular_velocity_scale': [1.005, 1.0, 1.0],
        'linear_acceleration_bandwidth_hz': 200.0}


def test_the_controls_configuration_passes(tmp_path):
  """The controls' configuration (`BASE`), unperturbed, passes every check at the controls'
  size, so each control's failure is its perturbation's; with a configured accelerometer
  filter (Bode vs the configured first-order response), a configured bias and scale error."""
  m = _manifest(tmp_path, *ICM, **BASE)
  s = validate.run(m, 'dut', tmp_path / 'out', static_duration_s=NEG_STATIC_S,
                   worlds=NEG_WORLDS, progress=lambda *_: None)
  assert s['passed'], s['failed']
  by_name = {c['name']: c for c in s['checks']}
  assert by_name['bode.linear_acceleration']['configured']['bandwidth_hz'] == 200.0
  assert by_name['range.linear_acceleration']['configured'] > 0


def test_doubled_noise_density_fails_naming_the_check(tmp_path, capsys):
  m = _manifest(tmp_path, *ICM, **BASE)
  code = cli.main(['validate', str(m), '--component', 'dut', '--out', str(tmp_path / 'o'),
                   '--static-duration', str(NEG_STATIC_S), '--worlds', str(NEG_WORLDS),
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
# read the same rate-table plateaus. A filter whose lag differs from the configured one on a
# channel with a limit can also fail its range check: the range check filters the truth with
# the configured filter, and the centripetal ramp through the limit, ≈ 540 m/s³, turns a lag
# difference into an error — 0.43 m/s² for 100 Hz where 200 Hz is configured, above the
# 0.133 m/s² margin, so whether a sample lands in that band is chance of the sample grid. The
# Bode control's 190 Hz where 200 Hz is configured lags 42 µs more: 0.023 m/s² at the limit,
# far inside the margin, while the Bode check sees |H| 0.718 for the configured 0.736 at the
# 190 Hz tone: a complex error of 0.025, about 16 times its tolerance of 0.0016.)
@pytest.mark.parametrize('device, config, perturb, failed', [
    # a 4 ms latency the configuration does not have; this configuration also turns the
    # accelerometer's saturation off (limit 0), so the range check's limit-0 branch (no
    # flags) passes here (the other controls' configuration, BASE, keeps the limit)
    (ICM, {'linear_acceleration_limit': 0.0}, {'latency_s': 0.004}, ['timing.latency']),
    (ICM, BASE, {'linear_acceleration_bias': [0.06, 0.0, 0.0]},
     ['six_orientation.linear_acceleration.bias']),
    (ICM, BASE, {'angular_velocity_scale': [1.025, 1.0, 1.0]},
     ['range.angular_velocity', 'rate_table.angular_velocity.gain']),
    # a 20 % wider accelerometer limit: the centripetal samples between the two limits
    # (the rate table reaches 1.3x the configured limit) are not flagged
    (ICM, BASE, {'linear_acceleration_limit': 188.29}, ['range.linear_acceleration']),
    # a 190 Hz accelerometer filter where the configuration has 200 Hz
    (ICM, BASE, {'linear_acceleration_bandwidth_hz': 190.0},
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


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
  m = _manifest(tmp_path, 'icm', 'fibril_sim/imu', {'device': 'icm42688p_nominal'})
  code = cli.main(['validate', str(m), '--component', 'nope', '--out', str(tmp_path / 'o')])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1 and 'nope' in err[0] and str(m) in err[0]
  assert not (tmp_path / 'o').exists()


def test_the_placed_device_reads_each_site_as_mujoco_c_does(tmp_path):
  """The IMU / AHRS rigs carry one device and move its sensors from site to site per group of
  worlds (`common.placements`): group j's truth is what MuJoCo C's own sensors on site j
  read (the rig's MJCF with a gyro and an accelerometer added on every site, `mj_forward`
  with no device code, under the rig's tick-0 controls), for the static poses and the dynamic
  rig's sites at tick 0."""
  import mujoco
  from fibril_mjx.batch import physics_c
  from fibril_mjx.mechanisms.rng import world_keys
  from fibril_mjx.workflows.validate import common, inertial
  m = _manifest(tmp_path, *R6093U)
  ctype, cfg = validate.resolved_config(m, 'dut')
  dev = inertial.device_from_config('dut', ctype, cfg)
  worlds = 2
  for rig, (xml, doc, places) in {
      'static': inertial.static_rig(dev, {}),
      'dynamic': inertial.dynamic_rig(dev, inertial.dynamic_plan(dev), {})}.items():
    sim = common.rig_simulation(common.write_rig(tmp_path, rig, xml, doc), placed=True)
    assert len(sim.built.components) == 1
    n = len(places) * worlds
    _, tr, _ = sim.rollout(sim.default_params(n), world_keys(0, n), 1,
                           model=common.placements(sim.mj_model, list(places.values()), worlds))
    truth = common.by_place(tr['truth'][common.DUT], places, worlds)
    ref_xml = xml.replace('</sensor>', ''.join(
        f'<gyro name="rg_{s}" site="{s}"/><accelerometer name="ra_{s}" site="{s}"/>'
        for s in places.values()) + '</sensor>')
    ref = mujoco.MjModel.from_xml_string(ref_xml)
    d = mujoco.MjData(ref)
    d.ctrl[:] = physics_c.script_ctrl(sim.built, 0)[0]
    mujoco.mj_forward(ref, d)
    for place, site in places.items():
      for field, name in (('linear_acceleration', 'ra'), ('angular_velocity', 'rg')):
        want = d.sensor(f'{name}_{site}').data
        got = np.asarray(truth[place][field])[:, 0]
        assert np.allclose(got, want, rtol=1e-6, atol=1e-6), (rig, place, field, got, want)
    # the static poses are told apart by gravity: +g on the up axis of each
    if rig == 'static':
      for place, (_, axis, sign) in inertial.POSES.items():
        assert sign * np.asarray(truth[place]['linear_acceleration'])[0, 0, axis] > 9.8
