"""User-error messages (SPEC §1 principle 5, §3.1, §3.2, §4, §5.1).

Every rule is its own test case: it writes a small manifest (and, where needed, profile
catalogs and MJCF files) into `tmp_path`, loads it, and checks the parts of the one-line
message that a user needs: the file, the field path, the bad value and the rule.

Only host-side building happens here (parse, compile, bind); nothing is jitted, so the whole
file runs in seconds. The model is a tiny hinge with a site and the three AHRS sensors.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import mujoco
import pytest

import fibril_mjx
from fibril_mjx.builder import build as bld
from fibril_mjx.core import registry
from fibril_mjx.errors import ConfigError, ConfigErrors, FibrilError

from error_helpers import (FINITE, GE0, GT0, NO_VALUE, assert_line, assert_reported, load_error,  # noqa: F401
                           write)

pytestmark = pytest.mark.usefixtures('plain_messages')

REPO = pathlib.Path(__file__).resolve().parents[2]

TINY_XML = """\
<mujoco model="tiny">
  <option timestep="0.002"/>
  <worldbody>
    <body name="arm">
      <joint name="hinge" type="hinge" axis="0 0 1"/>
      <geom type="sphere" size="0.05" mass="0.1"/>
      <site name="imu"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="spin" joint="hinge" {actuator_attrs}/>
  </actuator>
  <sensor>
    <framequat name="quat" objtype="site" objname="imu"/>
    <gyro name="gyro" site="imu" {gyro_attrs}/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""

BASE_CONFIG = """\
      orientation_sensor: quat
      gyroscope_sensor: gyro
      accelerometer_sensor: accel
"""



# ------------------------------------------------------------------------- helpers


def write_model(tmp_path, name='tiny.xml', actuator_attrs='', gyro_attrs=''):
  return write(tmp_path / name, TINY_XML.format(actuator_attrs=actuator_attrs,
                                                gyro_attrs=gyro_attrs))


def ahrs_manifest(tmp_path, config_lines: str = '      period_s: 0.01\n', *,
                  base_config: str = BASE_CONFIG, top: str = '',
                  name='manifest.yaml') -> pathlib.Path:
  """A manifest with the tiny model and one `fibril_sim/ahrs` component.

  Args:
    config_lines: YAML lines added to the component config (indented 6 spaces).
    base_config: the sensor names (replace to drop one).
    top: YAML lines added at the top level.
  """
  if not (tmp_path / 'tiny.xml').exists():
    write_model(tmp_path)
  text = ('fibril_manifest: 1\n'
          'model: tiny.xml\n' + top +
          'components:\n'
          '  - id: ahrs\n'
          '    type: fibril_sim/ahrs\n'
          '    config:\n' + base_config + config_lines)
  return write(tmp_path / name, text)




# ----------------------------------------------------------------- the tiny model loads


def test_tiny_manifest_loads(tmp_path):
  sim = fibril_mjx.load(str(ahrs_manifest(tmp_path)))
  assert sim.dt == pytest.approx(0.002)
  assert [b.name for b in sim.components['ahrs'].sensors] == ['quat', 'gyro', 'accel']


# ------------------------------------------------------------------ §5.1 AHRS config rules


NONNEG_SCALARS = [
    'phase_s', 'latency_s', 'jitter_s',
    'orientation_bandwidth_hz', 'angular_velocity_bandwidth_hz',
    'linear_acceleration_bandwidth_hz', 'yaw_rate_bias_stddev_rad_s',
    'orientation_resolution_rad', 'angular_velocity_limit_rad_s',
    'linear_acceleration_limit_m_s2', 'angular_velocity_resolution',
    'linear_acceleration_resolution',
]

# (config lines, field path below components[0].config, shown value, rule)
AHRS_CASES = {
    **{f'negative_{f}': (f'      period_s: 0.01\n      {f}: -0.5\n', f, '-0.5', GE0)
       for f in NONNEG_SCALARS},
    # Per-axis stds (path shows the axis).
    'negative_orientation_noise_stddev_rad': (
        '      period_s: 0.01\n      orientation_noise_stddev_rad: [0, 0, -0.5]\n',
        'orientation_noise_stddev_rad[2]', '-0.5', GE0),
    'negative_angular_velocity_noise_stddev': (
        '      period_s: 0.01\n      angular_velocity_noise_stddev: [-0.1, 0, 0]\n',
        'angular_velocity_noise_stddev[0]', '-0.1', GE0),
    'negative_linear_acceleration_noise_stddev': (
        '      period_s: 0.01\n      linear_acceleration_noise_stddev: [0, -0.1, 0]\n',
        'linear_acceleration_noise_stddev[1]', '-0.1', GE0),
    # Scales > 0 per axis.
    'zero_angular_velocity_scale_axis1': (
        '      period_s: 0.01\n      angular_velocity_scale: [1, 0, 1]\n',
        'angular_velocity_scale[1]', '0', GT0),
    'negative_linear_acceleration_scale_axis2': (
        '      period_s: 0.01\n      linear_acceleration_scale: [1, 1, -2.0]\n',
        'linear_acceleration_scale[2]', '-2.0', GT0),
    # |rho| < 1.
    'orientation_correlation_1': (
        '      period_s: 0.01\n      orientation_noise_correlation: [0, 1.0, 0]\n',
        'orientation_noise_correlation[1]', '1.0', 'input should be less than 1'),
    'angular_velocity_correlation_minus_1': (
        '      period_s: 0.01\n      angular_velocity_noise_correlation: [-1.0, 0, 0]\n',
        'angular_velocity_noise_correlation[0]', '-1.0', 'input should be greater than -1'),
    'linear_acceleration_correlation_1_5': (
        '      period_s: 0.01\n      linear_acceleration_noise_correlation: [0, 0, 1.5]\n',
        'linear_acceleration_noise_correlation[2]', '1.5', 'input should be less than 1'),
    # Yaw sign in {-1, 1}.
    'yaw_sign_half': ('      period_s: 0.01\n      orientation_yaw_sign: 0.5\n',
                      'orientation_yaw_sign', '0.5', 'must be -1.0 or 1.0'),
    'yaw_sign_zero': ('      period_s: 0.01\n      orientation_yaw_sign: 0\n',
                      'orientation_yaw_sign', '0', 'must be -1.0 or 1.0'),
    'yaw_sign_two': ('      period_s: 0.01\n      orientation_yaw_sign: -2.0\n',
                     'orientation_yaw_sign', '-2.0', 'must be -1.0 or 1.0'),
    # Non-finite values, written as YAML .nan / .inf.
    'nan_period_s': ('      period_s: .nan\n', 'period_s', 'nan', FINITE),
    'inf_latency_s': ('      period_s: 0.01\n      latency_s: .inf\n', 'latency_s', 'inf',
                      FINITE),
    'nan_bias_axis1': ('      period_s: 0.01\n      angular_velocity_bias: [0, .nan, 0]\n',
                       'angular_velocity_bias[1]', 'nan', FINITE),
    'minus_inf_bias_axis0': (
        '      period_s: 0.01\n      linear_acceleration_bias: [-.inf, 0, 0]\n',
        'linear_acceleration_bias[0]', '-inf', FINITE),
    'inf_scale_axis0': ('      period_s: 0.01\n      angular_velocity_scale: [.inf, 1, 1]\n',
                        'angular_velocity_scale[0]', 'inf', FINITE),
    'inf_noise_std_axis1': (
        '      period_s: 0.01\n      angular_velocity_noise_stddev: [0, .inf, 0]\n',
        'angular_velocity_noise_stddev[1]', 'inf', FINITE),
    'nan_yaw_sign': ('      period_s: 0.01\n      orientation_yaw_sign: .nan\n',
                     'orientation_yaw_sign', 'nan', FINITE),
    'nan_bandwidth': ('      period_s: 0.01\n      orientation_bandwidth_hz: .NaN\n',
                      'orientation_bandwidth_hz', 'nan', FINITE),
    # Vector of the wrong length / shape.
    'vector_too_long': ('      period_s: 0.01\n      angular_velocity_bias: [0, 0, 0, 0]\n',
                        'angular_velocity_bias', '[0, 0, 0, 0]',
                        'tuple should have at most 3 items after validation, not 4'),
    'vector_is_scalar': ('      period_s: 0.01\n      angular_velocity_scale: 2.0\n',
                         'angular_velocity_scale', '2.0', 'input should be a valid tuple'),
    # Transport.
    'loss_probability_1': ('      period_s: 0.01\n      loss_probability: 1.0\n',
                           'loss_probability', '1.0', 'input should be less than 1'),
    'loss_probability_negative': ('      period_s: 0.01\n      loss_probability: -0.1\n',
                                  'loss_probability', '-0.1', GE0),
    # Literals.
    'quantization_literal': ('      period_s: 0.01\n      quantization: nearest\n',
                             'quantization', "'nearest'",
                             "input should be 'next_boundary' or 'strict'"),
    'yaw_reference_literal': ('      period_s: 0.01\n      yaw_reference: north\n',
                              'yaw_reference', "'north'", "input should be 'initial' or 'world'"),
    # Wrong types.
    'period_s_string': ('      period_s: fast\n', 'period_s', "'fast'",
                        'input should be a valid number'),
    'sensor_name_list': ('      period_s: 0.01\n      gyroscope_sensor: [gyro]\n',
                         'gyroscope_sensor', "['gyro']", 'input should be a valid string'),
    # Period.
    'period_s_zero': ('      period_s: 0\n', 'period_s', '0', GT0),
    'period_s_negative': ('      period_s: -0.01\n', 'period_s', '-0.01', GT0),
    'period_s_below_dt': ('      period_s: 0.001\n', 'period_s', '0.001',
                          'must be >= the physics timestep dt = 0.002 s'),
    # quantization: strict shows the numbers.
    'strict_period_off_grid': (
        '      period_s: 0.003\n      quantization: strict\n', 'period_s', '0.003',
        'quantization strict requires an integer multiple of dt = 0.002 s (it is 1.5 ticks)'),
    'strict_phase_off_grid': (
        '      period_s: 0.01\n      phase_s: 0.001\n      quantization: strict\n', 'phase_s',
        '0.001',
        'quantization strict requires an integer multiple of dt = 0.002 s (it is 0.5 ticks)'),
    'strict_latency_off_grid': (
        '      period_s: 0.01\n      latency_s: 0.005\n      quantization: strict\n',
        'latency_s', '0.005',
        'quantization strict requires an integer multiple of dt = 0.002 s (it is 2.5 ticks)'),
    # Unknown key with a suggestion.
    'unknown_config_key': ('      period_s: 0.01\n      perod_s: 0.01\n', 'perod_s', '0.01',
                           "unknown field (did you mean 'period_s'?)"),
    'unknown_config_key_2': ('      period_s: 0.01\n      angular_velocity_bandwith_hz: 5\n',
                             'angular_velocity_bandwith_hz', '5',
                             "unknown field (did you mean 'angular_velocity_bandwidth_hz'?)"),
    # MuJoCo sensor names: missing (did you mean), wrong type.
    'gyroscope_sensor_missing': ('      period_s: 0.01\n      gyroscope_sensor: gyr\n',
                                 'gyroscope_sensor', "'gyr'",
                                 'no MuJoCo sensor of that name in the compiled model '
                                 "(did you mean 'gyro'?)"),
    'orientation_sensor_missing': ('      period_s: 0.01\n      orientation_sensor: quatt\n',
                                   'orientation_sensor', "'quatt'",
                                   "no MuJoCo sensor of that name in the compiled model "
                                   "(did you mean 'quat'?)"),
    'gyroscope_sensor_wrong_type': ('      period_s: 0.01\n      gyroscope_sensor: accel\n',
                                    'gyroscope_sensor', "'accel'",
                                    "must name a gyro sensor (dim 3); 'accel' is a "
                                    'accelerometer sensor'),
    'orientation_sensor_wrong_type': ('      period_s: 0.01\n      orientation_sensor: gyro\n',
                                      'orientation_sensor', "'gyro'",
                                      "must name a framequat sensor (dim 4); 'gyro' is a gyro "
                                      'sensor'),
    'accelerometer_sensor_wrong_type': (
        '      period_s: 0.01\n      accelerometer_sensor: quat\n', 'accelerometer_sensor',
        "'quat'", "must name a accelerometer sensor (dim 3); 'quat' is a framequat sensor"),
}


def _base_without(field):
  return ''.join(line + '\n' for line in BASE_CONFIG.splitlines()
                 if not line.strip().startswith(field + ':'))


@pytest.mark.parametrize('case', sorted(AHRS_CASES), ids=str)
def test_ahrs_config_rule(tmp_path, case):
  lines, field, value, rule = AHRS_CASES[case]
  base = BASE_CONFIG
  if field in ('gyroscope_sensor', 'orientation_sensor', 'accelerometer_sensor') and (
      f'{field}:' in lines):
    base = _base_without(field)
  manifest = ahrs_manifest(tmp_path, lines, base_config=base)
  err = load_error(manifest)
  assert_reported(err, manifest, f'components[0].config.{field}', value, rule)


@pytest.mark.parametrize('field', ['orientation_sensor', 'gyroscope_sensor',
                                   'accelerometer_sensor', 'period_s'])
def test_ahrs_required_field_missing(tmp_path, field):
  # period_s is required only because no profile sets it here.
  manifest = ahrs_manifest(tmp_path, '' if field == 'period_s' else '      period_s: 0.01\n',
                           base_config=_base_without(field))
  err = load_error(manifest)
  kind, suffix = {'orientation_sensor': ('framequat', 'quat'), 'gyroscope_sensor': ('gyro', 'gyro'),
                  'accelerometer_sensor': ('accelerometer', 'accel')}.get(field, (None, None))
  # a sensor name is required unless the AHRS names a site instead (the way out, said)
  rule = ('required field is missing' if kind is None else
          f'required: the name of a MuJoCo {kind} sensor; or set site: SITE instead, and the '
          f'sensors are added (as fibril_ahrs_{suffix}, ...) without editing the robot\'s file')
  assert_reported(err, manifest, f'components[0].config.{field}', NO_VALUE, rule)


def test_period_s_not_required_when_a_profile_sets_it(tmp_path):
  manifest = ahrs_manifest(tmp_path, '      profiles: {device: r6093u_nominal}\n')
  sim = fibril_mjx.load(str(manifest))
  assert sim.components['ahrs'].cfg.period_s == 0.01


def test_vector_too_short_names_the_vector_and_value(tmp_path):
  manifest = ahrs_manifest(tmp_path, '      period_s: 0.01\n      angular_velocity_bias: [0, 0]\n')
  err = load_error(manifest)
  line = assert_line(err, f'{manifest}: components[0].config.angular_velocity_bias', '[0, 0]')
  assert 'required field is missing' not in line
  assert line.endswith('must have 3 items, got 2')


def test_several_config_problems_are_all_reported(tmp_path):
  manifest = ahrs_manifest(
      tmp_path, '      period_s: -1\n      jitter_s: -1\n      perod: 1\n')
  err = load_error(manifest)
  assert isinstance(err, ConfigErrors)
  assert len(err.errors) == 3 == len(str(err).splitlines())
  assert_reported(err, manifest, 'components[0].config.period_s', '-1', GT0)
  assert_reported(err, manifest, 'components[0].config.jitter_s', '-1', GE0)
  assert_reported(err, manifest, 'components[0].config.perod', '1',
                  "unknown field (did you mean 'period_s'?)")


def test_sensor_wrong_dimension(tmp_path):
  """MuJoCo gives gyro/framequat/accelerometer fixed dims, so a manifest cannot reach the
  dimension rule; it is checked on the binding itself."""
  m = mujoco.MjModel.from_xml_path(str(write_model(tmp_path)))
  ctx = bld.BuildContext(m, 0.002, 'manifest.yaml', 'components[0].config')
  with pytest.raises(ConfigError) as info:
    ctx.sensor('gyroscope_sensor', 'gyro', mujoco.mjtSensor.mjSENS_GYRO, 4)
  assert str(info.value) == ("manifest.yaml: components[0].config.gyroscope_sensor = 'gyro': "
                             "must name a gyro sensor of dim 4; 'gyro' has dim 3")
  b = ctx.sensor('gyroscope_sensor', 'gyro', mujoco.mjtSensor.mjSENS_GYRO, 3)
  assert (b.type, b.dim, b.site) == ('gyro', 3, 'imu')


# --------------------------------------------------------------- §3.1 manifest top level

TOP_CASES = {
    # (manifest text, path, shown value, rule)
    'unknown_top_level_key': ('fibril_manifest: 1\nmodel: tiny.xml\ncomponets: []\n',
                              'componets', '[]', "unknown field (did you mean 'components'?)"),
    'unknown_top_level_key_2': ('fibril_manifest: 1\nmodel: tiny.xml\npackges: {}\n',
                                'packges', '{}', "unknown field (did you mean 'packages'?)"),
    'unknown_component_entry_key': (
        'fibril_manifest: 1\nmodel: tiny.xml\n'
        'components: [{id: a, type: fibril_sim/ahrs, confg: {}}]\n',
        'components[0].confg', '{}', "unknown field (did you mean 'config'?)"),
    'unknown_actuator_script_key': (
        'fibril_manifest: 1\nmodel: tiny.xml\nactuator_script: [{actuator: spin, amplitud: 1}]\n',
        'actuator_script[0].amplitud', '1', "unknown field (did you mean 'amplitude'?)"),
    'schema_version_2': ('fibril_manifest: 2\nmodel: tiny.xml\n', 'fibril_manifest', '2',
                         'input should be 1'),
    'schema_version_string': ('fibril_manifest: one\nmodel: tiny.xml\n', 'fibril_manifest',
                              "'one'", 'input should be 1'),
    'missing_fibril_manifest': ('model: tiny.xml\n', 'fibril_manifest', NO_VALUE,
                                'required field is missing'),
    'missing_model': ('fibril_manifest: 1\n', 'model', NO_VALUE, 'required field is missing'),
    'components_not_a_list': ('fibril_manifest: 1\nmodel: tiny.xml\ncomponents: {}\n',
                              'components', '{}', 'input should be a valid list'),
    'packages_not_a_mapping': ('fibril_manifest: 1\nmodel: tiny.xml\npackages: [a]\n',
                               'packages', "['a']", 'input should be a valid dictionary'),
    'model_not_a_string': ('fibril_manifest: 1\nmodel: [tiny.xml]\n', 'model', "['tiny.xml']",
                           'input should be a valid string'),
    'component_config_null': (
        'fibril_manifest: 1\nmodel: tiny.xml\n'
        'components: [{id: a, type: fibril_sim/ahrs, config: null}]\n',
        'components[0].config', 'None', 'input should be a valid dictionary'),
    'component_id_empty': ("fibril_manifest: 1\nmodel: tiny.xml\n"
                           "components: [{id: '', type: fibril_sim/ahrs}]\n",
                           'components[0].id', "''", 'string should have at least 1 character'),
    'component_type_missing': ('fibril_manifest: 1\nmodel: tiny.xml\ncomponents: [{id: a}]\n',
                               'components[0].type', NO_VALUE, 'required field is missing'),
    'duplicate_component_ids': (
        'fibril_manifest: 1\nmodel: tiny.xml\ncomponents:\n'
        '  - {id: ahrs, type: fibril_sim/ahrs}\n  - {id: imu, type: fibril_sim/ahrs}\n'
        '  - {id: ahrs, type: fibril_sim/ahrs}\n',
        'components[2].id', "'ahrs'", 'component ids must be unique'),
    'unknown_component_type': (
        'fibril_manifest: 1\nmodel: tiny.xml\ncomponents: [{id: a, type: fibril_sim/ahrz}]\n',
        'components[0].type', "'fibril_sim/ahrz'",
        "unknown component type (did you mean 'fibril_sim/ahrs'?); known types: "
        + ', '.join(registry.types())),
    'actuator_script_missing_actuator': (
        'fibril_manifest: 1\nmodel: tiny.xml\nactuator_script: [{actuator: spn}]\n',
        'actuator_script[0].actuator', "'spn'",
        "no MuJoCo actuator of that name (did you mean 'spin'?)"),
    'actuator_script_waveform': (
        'fibril_manifest: 1\nmodel: tiny.xml\n'
        'actuator_script: [{actuator: spin, waveform: triangle}]\n',
        'actuator_script[0].waveform', "'triangle'", "input should be 'sine' or 'square'"),
    'actuator_script_negative_frequency': (
        'fibril_manifest: 1\nmodel: tiny.xml\n'
        'actuator_script: [{actuator: spin, frequency_hz: -1}]\n',
        'actuator_script[0].frequency_hz', '-1', GE0),
    'assemblies_component_missing': (
        'fibril_manifest: 1\nmodel: tiny.xml\n'
        'assemblies: [{id: leg_axis, component: leg, transmission: {type: gear_rotary}}]\n',
        'assemblies[0].component', "'leg'", 'no component of that id'),
    'parameter_overlays_file_missing': (
        'fibril_manifest: 1\nmodel: tiny.xml\nparameter_overlays: [{file: cal.yaml}]\n',
        'parameter_overlays[0].file', "'cal.yaml'", 'file not found ('),
    'packages_dir_missing': (
        'fibril_manifest: 1\nmodel: tiny.xml\npackages: {mine: ./nodir}\n',
        'packages.mine', "'./nodir'", 'directory not found ('),
    'packages_shadow_builtin': (
        'fibril_manifest: 1\nmodel: tiny.xml\npackages: {fibril_sim_models: .}\n',
        'packages.fibril_sim_models', "'.'", 'a built-in package of that name exists'),
    'profile_paths_dir_missing': (
        'fibril_manifest: 1\nmodel: tiny.xml\nprofile_paths: [./nodir]\n',
        'profile_paths[0]', "'./nodir'", 'directory not found ('),
}


@pytest.mark.parametrize('case', sorted(TOP_CASES), ids=str)
def test_manifest_rule(tmp_path, case):
  text, path, value, rule = TOP_CASES[case]
  write_model(tmp_path)
  manifest = write(tmp_path / 'manifest.yaml', text)
  err = load_error(manifest)
  assert_reported(err, manifest, path, value, rule)


def test_manifest_not_a_mapping(tmp_path):
  manifest = write(tmp_path / 'manifest.yaml', '- fibril_manifest: 1\n')
  err = load_error(manifest)
  assert str(err) == f"{manifest} = [{{'fibril_manifest': 1}}]: must be a mapping"


def test_empty_manifest_lists_every_missing_field(tmp_path):
  manifest = write(tmp_path / 'manifest.yaml', '# nothing\n')
  err = load_error(manifest)
  assert str(err).splitlines() == [f'{manifest}: fibril_manifest: required field is missing',
                                   f'{manifest}: model: required field is missing']


def test_manifest_not_found(tmp_path):
  missing = tmp_path / 'nope.yaml'
  err = load_error(missing)
  assert str(err) == f'{missing}: manifest not found'


@pytest.mark.parametrize('text, line, problem', [
    ('fibril_manifest: 1\nmodel: tiny.xml\n  bad: indent\n', 3,
     'mapping values are not allowed here'),
    ('fibril_manifest: 1\nmodel: tiny.xml\ncomponents: [\n  {id: a\n', 5,
     "expected ',' or '}'"),
    ('fibril_manifest: 1\nmodel: "tiny.xml\n', 3, 'found unexpected end of stream'),
], ids=['bad_indent', 'unclosed_flow', 'unclosed_quote'])
def test_invalid_yaml_in_manifest(tmp_path, text, line, problem):
  manifest = write(tmp_path / 'manifest.yaml', text)
  err = load_error(manifest)
  assert len(str(err).splitlines()) == 1
  assert_line(err, f'{manifest}: line {line}: invalid YAML: ', problem)


# ------------------------------------------------------------------ package:// and files


def test_model_unknown_package(tmp_path):
  manifest = write(tmp_path / 'manifest.yaml',
                   'fibril_manifest: 1\nmodel: package://nopkg/robot.xml\n')
  err = load_error(manifest)
  assert_line(err, f"{manifest}: model: 'package://nopkg/robot.xml': ",
              "unknown package 'nopkg'; known packages: fibril_sim_models")


def test_model_unknown_package_lists_manifest_packages(tmp_path):
  (tmp_path / 'pkg').mkdir()
  manifest = write(tmp_path / 'manifest.yaml',
                   'fibril_manifest: 1\nmodel: package://mypgk/robot.xml\n'
                   'packages: {mypkg: ./pkg}\n')
  err = load_error(manifest)
  assert_line(err, f"{manifest}: model: 'package://mypgk/robot.xml': ",
              "unknown package 'mypgk'; known packages: fibril_sim_models, mypkg")


def test_model_uri_escaping_root_with_dotdot(tmp_path):
  write_model(tmp_path)
  (tmp_path / 'pkg').mkdir()
  manifest = write(tmp_path / 'manifest.yaml',
                   'fibril_manifest: 1\nmodel: package://mypkg/../tiny.xml\n'
                   'packages: {mypkg: ./pkg}\n')
  err = load_error(manifest)
  assert_line(err, f"{manifest}: model: 'package://mypkg/../tiny.xml': ",
              f'the URI escapes its package root {(tmp_path / "pkg").resolve()}')


def test_builtin_uri_escaping_root_with_dotdot(tmp_path):
  manifest = write(tmp_path / 'manifest.yaml',
                   'fibril_manifest: 1\nmodel: package://fibril_sim_models/../pyproject.toml\n')
  err = load_error(manifest)
  assert_line(err, f"{manifest}: model: 'package://fibril_sim_models/../pyproject.toml': ",
              'the URI escapes its package root')


def test_model_uri_escaping_root_through_symlink(tmp_path):
  write_model(tmp_path)
  (tmp_path / 'pkg').mkdir()
  try:
    (tmp_path / 'pkg' / 'link.xml').symlink_to(tmp_path / 'tiny.xml')
  except OSError as e:
    pytest.skip(f'cannot create a symlink here: {e}')
  manifest = write(tmp_path / 'manifest.yaml',
                   'fibril_manifest: 1\nmodel: package://mypkg/link.xml\n'
                   'packages: {mypkg: ./pkg}\n')
  err = load_error(manifest)
  assert_line(err, f"{manifest}: model: 'package://mypkg/link.xml': ",
              'the URI escapes its package root')


def test_model_package_file_missing(tmp_path):
  manifest = write(tmp_path / 'manifest.yaml',
                   'fibril_manifest: 1\nmodel: package://fibril_sim_models/nothere.xml\n')
  err = load_error(manifest)
  assert_line(err, f"{manifest}: model: 'package://fibril_sim_models/nothere.xml': ",
              'file not found (', 'nothere.xml)')


def test_model_relative_file_missing(tmp_path):
  manifest = write(tmp_path / 'manifest.yaml', 'fibril_manifest: 1\nmodel: robot.xml\n')
  err = load_error(manifest)
  assert_line(err, f"{manifest}: model: 'robot.xml': ",
              f'file not found ({(tmp_path / "robot.xml").resolve()})')


def test_unknown_package_inside_mjcf(tmp_path):
  robot = write(tmp_path / 'robot.xml',
                '<mujoco>\n  <include file="package://nopkg/parts.xml"/>\n</mujoco>\n')
  manifest = write(tmp_path / 'manifest.yaml', 'fibril_manifest: 1\nmodel: robot.xml\n')
  err = load_error(manifest)
  assert_line(err, f"{robot.resolve()}: 'package://nopkg/parts.xml': ",
              "unknown package 'nopkg'")


def test_missing_file_inside_mjcf(tmp_path):
  robot = write(tmp_path / 'robot.xml',
                '<mujoco>\n  <include file="package://fibril_sim_models/nothere.xml"/>\n'
                '</mujoco>\n')
  manifest = write(tmp_path / 'manifest.yaml', 'fibril_manifest: 1\nmodel: robot.xml\n')
  err = load_error(manifest)
  assert_line(err, f"{robot.resolve()}: 'package://fibril_sim_models/nothere.xml': ",
              'file not found')


def test_package_uri_cycle_is_an_error(tmp_path):
  write(tmp_path / 'pkg' / 'loop.xml',
        '<mujoco>\n  <include file="package://mypkg/loop.xml"/>\n</mujoco>\n')
  manifest = write(tmp_path / 'manifest.yaml',
                   'fibril_manifest: 1\nmodel: package://mypkg/loop.xml\n'
                   'packages: {mypkg: ./pkg}\n')
  err = load_error(manifest)
  assert 'package:// references nest deeper than 16 (a cycle?)' in str(err)
  assert not list(tmp_path.rglob('*fibril-*.xml')), 'temporary copies left behind'


# -------------------------------------------------- MJCF timing that MJX silently ignores

MJCF_TIMING_CASES = {
    'actuator_delay_nsample': ('delay="0.01" nsample="10"', '', 'actuator', 'spin',
                               'latency_s / command_latency_s (and application_period_s)'),
    'actuator_nsample': ('nsample="4"', '', 'actuator', 'spin',
                         'latency_s / command_latency_s (and application_period_s)'),
    'sensor_delay_nsample': ('', 'delay="0.01" nsample="10"', 'sensor', 'gyro',
                             "latency_s, period_s and phase_s fields"),
    'sensor_interval': ('', 'interval="0.01"', 'sensor', 'gyro',
                        "latency_s, period_s and phase_s fields"),
    'sensor_nsample': ('', 'nsample="3"', 'sensor', 'gyro',
                       "latency_s, period_s and phase_s fields"),
}


@pytest.mark.parametrize('case', sorted(MJCF_TIMING_CASES), ids=str)
def test_mjcf_timing_attributes_rejected(tmp_path, case):
  act, sen, kind, name, fields = MJCF_TIMING_CASES[case]
  model = write_model(tmp_path, actuator_attrs=act, gyro_attrs=sen)
  err = load_error(ahrs_manifest(tmp_path))
  assert_line(err, f'{model.resolve()}: {kind} {name!r} uses delay/nsample',
              'which MJX ignores silently; remove it from the MJCF', fields)


def test_mjcf_delay_without_history_is_a_mujoco_error(tmp_path):
  """MuJoCo itself refuses `delay` without `nsample`; the error is still one clean line."""
  model = write_model(tmp_path, actuator_attrs='delay="0.01"')
  err = load_error(ahrs_manifest(tmp_path))
  assert_line(err, f'{model.resolve()}: MuJoCo cannot ', 'delay > 0 without a history buffer')


def test_mjcf_syntax_error_hides_resolved_copies(tmp_path):
  write(tmp_path / 'pkg' / 'broken.xml', '<mujoco>\n  <worldbody>\n</mujoco>\n')
  robot = write(tmp_path / 'robot.xml',
                '<mujoco>\n  <include file="package://mypkg/broken.xml"/>\n</mujoco>\n')
  manifest = write(tmp_path / 'manifest.yaml', 'fibril_manifest: 1\nmodel: robot.xml\n'
                   'packages: {mypkg: ./pkg}\n')
  err = load_error(manifest)
  assert len(str(err).splitlines()) == 1
  assert_line(err, f'{robot.resolve()}: MuJoCo cannot load the model: ')
  assert '.fibril-' not in str(err)
  assert not list(tmp_path.rglob('*fibril-*.xml')), 'temporary copies left behind'


# ------------------------------------------------------------------------ §3.2 profiles

PROFILE = """\
id: {id}
kind: {kind}
component_types: [{types}]
provenance: {{source: "test"}}
fields: {fields}
"""


def write_profile(folder: pathlib.Path, pid, kind='device', fields='{}',
                  types='fibril_sim/ahrs', name=None) -> pathlib.Path:
  return write(folder / (name or f'{pid}.yaml'),
               PROFILE.format(id=pid, kind=kind, types=types, fields=fields))


def profile_manifest(tmp_path, profiles: str, extra='') -> pathlib.Path:
  return ahrs_manifest(tmp_path, f'      profiles: {profiles}\n' + extra,
                       top='profile_paths: [./catalog]\n')


def test_bad_value_from_profile_is_reported_against_the_profile(tmp_path):
  prof = write_profile(tmp_path / 'catalog', 'bad_dev',
                       fields='{period_s: 0.01, angular_velocity_limit_rad_s: -1}')
  err = load_error(profile_manifest(tmp_path, '{device: bad_dev}'))
  assert_reported(err, prof.resolve(), 'fields.angular_velocity_limit_rad_s', '-1', GE0)


def test_bad_vector_axis_from_profile_is_reported_against_the_profile(tmp_path):
  prof = write_profile(tmp_path / 'catalog', 'bad_emp', kind='empirical',
                       fields='{angular_velocity_noise_correlation: [0.5, 1.0, 0.5]}')
  err = load_error(profile_manifest(tmp_path, '{empirical: bad_emp}', '      period_s: 0.01\n'))
  assert_reported(err, prof.resolve(), 'fields.angular_velocity_noise_correlation[1]', '1.0',
                  'input should be less than 1')


def test_non_finite_value_from_profile(tmp_path):
  prof = write_profile(tmp_path / 'catalog', 'nan_dev', fields='{period_s: .nan}')
  err = load_error(profile_manifest(tmp_path, '{device: nan_dev}'))
  assert_reported(err, prof.resolve(), 'fields.period_s', 'nan', FINITE)


def test_period_below_dt_from_profile(tmp_path):
  prof = write_profile(tmp_path / 'catalog', 'fast_dev', fields='{period_s: 0.001}')
  err = load_error(profile_manifest(tmp_path, '{device: fast_dev}'))
  assert_reported(err, prof.resolve(), 'fields.period_s', '0.001',
                  'must be >= the physics timestep dt = 0.002 s')
  # the way out: the instance config overrides the profile, or a smaller timestep keeps the rate
  assert ("must be >= the physics timestep dt = 0.002 s: set it in the component's config (it "
          "overrides the profile) to 0.002 s or a multiple, or run the model at a timestep <= "
          "0.001 s (MJCF <option timestep>) to keep this rate") in str(err), str(err)


def test_period_below_dt_in_the_config_names_the_way_out(tmp_path):
  err = load_error(ahrs_manifest(tmp_path, '      period_s: 0.001\n'))
  assert ("config.period_s = 0.001: must be >= the physics timestep dt = 0.002 s: set it to "
          "0.002 s or a multiple, or run the model at a timestep <= 0.001 s (MJCF <option "
          "timestep>) to keep this rate") in str(err), str(err)


def test_strict_latency_from_profile_is_reported_against_the_profile(tmp_path):
  # r6093u_nominal: latency 0.00677 s = 3.385 ticks of 2 ms.
  from fibril_mjx.config import paths
  manifest = ahrs_manifest(tmp_path, '      profiles: {device: r6093u_nominal}\n'
                           '      quantization: strict\n')
  err = load_error(manifest)
  assert_reported(err, paths.profiles_dir() / 'r6093u_nominal.yaml', 'fields.latency_s',
                  '0.00677', 'quantization strict requires an integer multiple of dt = 0.002 s '
                  '(it is 3.385 ticks)')


def test_strict_phase_in_manifest_with_period_from_profile(tmp_path):
  manifest = ahrs_manifest(tmp_path, '      profiles: {device: r6093u_nominal}\n'
                           '      latency_s: 0.004\n      quantization: strict\n'
                           '      phase_s: 0.001\n')
  err = load_error(manifest)
  assert_reported(err, manifest, 'components[0].config.phase_s', '0.001',
                  '(it is 0.5 ticks)')


def test_two_profile_layers_setting_the_same_field(tmp_path):
  write_profile(tmp_path / 'catalog', 'dev_a', fields='{period_s: 0.01}')
  emp = write_profile(tmp_path / 'catalog', 'emp_b', kind='empirical',
                      fields='{period_s: 0.02}')
  err = load_error(profile_manifest(tmp_path, '{device: dev_a, empirical: emp_b}'))
  assert_reported(err, emp.resolve(), 'fields.period_s', '0.02',
                  "set by both device profile 'dev_a' and empirical profile 'emp_b'; a field "
                  'may come from one profile layer only (override it in the instance config '
                  'instead)')


def test_instance_config_may_override_a_profile_field(tmp_path):
  write_profile(tmp_path / 'catalog', 'dev_a', fields='{period_s: 0.01}')
  sim = fibril_mjx.load(str(profile_manifest(tmp_path, '{device: dev_a}',
                                             '      period_s: 0.02\n')))
  assert sim.components['ahrs'].cfg.period_s == 0.02


@pytest.mark.parametrize('layer, pid, rule', [
    ('device', 'r6093u_nominl', 'unknown profile; available device profiles for '
     'fibril_sim/ahrs: r6093u_nominal'),
    ('empirical', 'r6093u_emprical', 'unknown profile; available empirical profiles for '
     'fibril_sim/ahrs: r6093u_empirical'),
    ('transport', 'fast_link', 'unknown profile; available transport profiles for '
     'fibril_sim/ahrs: (none)'),
], ids=['device', 'empirical', 'transport'])
def test_unknown_profile_id_lists_available_ids(tmp_path, layer, pid, rule):
  manifest = ahrs_manifest(tmp_path, f'      profiles: {{{layer}: {pid}}}\n')
  err = load_error(manifest)
  assert_reported(err, manifest, f'components[0].config.profiles.{layer}', repr(pid), rule)


def test_unknown_profile_id_lists_project_catalog_ids(tmp_path):
  write_profile(tmp_path / 'catalog', 'unit_7', kind='empirical')
  write_profile(tmp_path / 'catalog', 'unit_3', kind='empirical')
  write_profile(tmp_path / 'catalog', 'unit_9_motor', kind='empirical', types='fibril_sim/motor')
  manifest = profile_manifest(tmp_path, '{empirical: unit_5}')
  err = load_error(manifest)
  assert_reported(err, manifest, 'components[0].config.profiles.empirical', "'unit_5'",
                  'unknown profile; available empirical profiles for fibril_sim/ahrs: '
                  'r6093u_empirical, unit_3, unit_7')


def test_profile_of_the_wrong_kind(tmp_path):
  manifest = ahrs_manifest(tmp_path, '      profiles: {device: r6093u_empirical}\n')
  err = load_error(manifest)
  assert_reported(err, manifest, 'components[0].config.profiles.device', "'r6093u_empirical'",
                  "profile 'r6093u_empirical' is of kind 'empirical'; available device "
                  'profiles for fibril_sim/ahrs: r6093u_nominal')


def test_profile_for_another_component_type(tmp_path):
  manifest = ahrs_manifest(tmp_path, '      profiles: {transport: robstride_can_5ms}\n')
  err = load_error(manifest)
  assert_reported(err, manifest, 'components[0].config.profiles.transport',
                  "'robstride_can_5ms'", "profile 'robstride_can_5ms' is not for "
                  'fibril_sim/ahrs; available transport profiles for fibril_sim/ahrs: (none)')


def test_unknown_profile_layer(tmp_path):
  manifest = ahrs_manifest(tmp_path, '      profiles: {devise: r6093u_nominal}\n')
  err = load_error(manifest)
  assert_reported(err, manifest, 'components[0].config.profiles.devise', NO_VALUE,
                  "unknown profile layer (did you mean 'device'?); layers: device, empirical, "
                  'transport')


def test_profiles_not_a_mapping(tmp_path):
  manifest = ahrs_manifest(tmp_path, '      profiles: [r6093u_nominal]\n')
  err = load_error(manifest)
  assert_reported(err, manifest, 'components[0].config.profiles', "['r6093u_nominal']",
                  'must be a mapping of layer to profile id')


def test_profile_id_not_a_string(tmp_path):
  manifest = ahrs_manifest(tmp_path, '      period_s: 0.01\n      profiles: {device: [a]}\n')
  err = load_error(manifest)
  assert_line(err, f'{manifest}: components[0].config.profiles.device', "['a']",
              'must be a profile id (a string)')


def test_profile_file_with_unknown_top_level_key(tmp_path):
  prof = write(tmp_path / 'catalog' / 'typo.yaml',
               'id: typo\nkind: device\ncomponent_types: [fibril_sim/ahrs]\n'
               'provenance: {source: test}\nfileds: {period_s: 0.01}\n')
  err = load_error(profile_manifest(tmp_path, '{device: typo}'))
  assert_reported(err, prof.resolve(), 'fileds', "{'period_s': 0.01}",
                  "unknown field (did you mean 'fields'?)")
  assert_reported(err, prof.resolve(), 'fields', NO_VALUE, 'required field is missing')


def test_profile_file_with_unknown_field(tmp_path):
  prof = write_profile(tmp_path / 'catalog', 'typo_dev', fields='{perod_s: 0.01}')
  err = load_error(profile_manifest(tmp_path, '{device: typo_dev}', '      period_s: 0.01\n'))
  assert_reported(err, prof.resolve(), 'fields.perod_s', NO_VALUE,
                  "unknown field for fibril_sim/ahrs (did you mean 'period_s'?)")


@pytest.mark.parametrize('text, path, value, rule', [
    ('id: p\nkind: calibration\ncomponent_types: [fibril_sim/ahrs]\nprovenance: {}\n'
     'fields: {}\n', 'kind', "'calibration'", "input should be 'device', 'empirical' or "
     "'transport'"),
    ('id: p\nkind: device\ncomponent_types: []\nprovenance: {}\nfields: {}\n',
     'component_types', '[]', 'list should have at least 1 item'),
    ('id: p\nkind: device\ncomponent_types: [fibril_sim/ahrs]\nfields: {}\n',
     'provenance', NO_VALUE, 'required field is missing'),
    ('id: p\nkind: device\ncomponent_types: [fibril_sim/ahrs]\nprovenance: {}\nfields: 3\n',
     'fields', '3', 'input should be a valid dictionary'),
], ids=['kind_literal', 'no_component_types', 'no_provenance', 'fields_not_mapping'])
def test_profile_file_rule(tmp_path, text, path, value, rule):
  prof = write(tmp_path / 'catalog' / 'p.yaml', text)
  err = load_error(profile_manifest(tmp_path, '{}', '      period_s: 0.01\n'))
  assert_reported(err, prof.resolve(), path, value, rule)


def test_profile_id_defined_twice(tmp_path):
  prof = write_profile(tmp_path / 'catalog', 'r6093u_nominal', name='copy.yaml')
  err = load_error(profile_manifest(tmp_path, '{}', '      period_s: 0.01\n'))
  assert_line(err, f"{prof.resolve()}: id = 'r6093u_nominal': ",
              'profile id already defined in', 'r6093u_nominal.yaml')


def test_invalid_yaml_in_profile(tmp_path):
  prof = write(tmp_path / 'catalog' / 'broken.yaml', 'id: broken\nkind: [device\n')
  err = load_error(profile_manifest(tmp_path, '{}', '      period_s: 0.01\n'))
  assert_line(err, f'{prof.resolve()}: line 3: invalid YAML: ')


# ------------------------------------------------------------------------------ the CLI


def run_plan(tmp_path, manifest) -> subprocess.CompletedProcess:
  """`python -m fibril_mjx.cli plan MANIFEST` in its own process (what a user runs)."""
  env = dict(os.environ, FIBRIL_MJX_CACHE=str(tmp_path / 'jax_cache'), JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, '-m', 'fibril_mjx.cli', 'plan', str(manifest)],
                        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def plan_here(capsys, manifest) -> subprocess.CompletedProcess:
  """The same command through `cli.main` in this process (one interpreter start per command
  is what `run_plan` adds; the first test below keeps it)."""
  from fibril_mjx import cli
  code = cli.main(['plan', str(manifest)])
  out, err = capsys.readouterr()
  return subprocess.CompletedProcess(['plan', str(manifest)], code, out, err)


def test_cli_reports_every_problem_on_its_own_line(tmp_path):
  write_model(tmp_path)
  bad = write(tmp_path / 'bad.yaml', 'fibril_manifest: 2\nmodle: tiny.xml\ncomponents: {}\n')
  r = run_plan(tmp_path, bad)
  assert r.returncode == 2, r.stderr
  assert 'Traceback' not in r.stderr
  assert r.stdout == ''
  lines = r.stderr.splitlines()
  assert sorted(lines) == sorted([
      f'error: {bad}: fibril_manifest = 2: input should be 1',
      f'error: {bad}: model: required field is missing',
      f"error: {bad}: modle = 'tiny.xml': unknown field (did you mean 'model'?)",
      f'error: {bad}: components = {{}}: input should be a valid list',
  ]), r.stderr


def test_cli_component_errors(tmp_path, capsys):
  manifest = ahrs_manifest(tmp_path, '      period_s: 0.001\n', name='bad.yaml')
  r = plan_here(capsys, manifest)
  assert r.returncode == 2, r.stderr
  assert 'Traceback' not in r.stderr
  assert r.stderr.splitlines() == [
      f'error: {manifest}: components[0].config.period_s = 0.001: must be >= the physics '
      'timestep dt = 0.002 s: set it to 0.002 s or a multiple, or run the model at a timestep '
      '<= 0.001 s (MJCF <option timestep>) to keep this rate']


@pytest.mark.parametrize('kind', ['missing_file', 'invalid_yaml', 'mjcf_delay'])
def test_cli_file_errors(tmp_path, capsys, kind):
  if kind == 'missing_file':
    manifest = tmp_path / 'bad.yaml'
  elif kind == 'invalid_yaml':
    manifest = write(tmp_path / 'bad.yaml', 'fibril_manifest: 1\nmodel: tiny.xml\n  x: 1\n')
  else:
    write_model(tmp_path, gyro_attrs='interval="0.01"')
    manifest = ahrs_manifest(tmp_path, name='bad.yaml')
  r = plan_here(capsys, manifest)
  assert r.returncode == 2, r.stderr
  assert 'Traceback' not in r.stderr
  lines = r.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), r.stderr


def test_cli_plan_of_a_good_manifest_exits_0(tmp_path, capsys):
  r = plan_here(capsys, ahrs_manifest(tmp_path))
  assert r.returncode == 0, r.stderr
  assert 'period 0.01 s = 5 ticks' in r.stdout
