"""Construction errors of the actuator components, assemblies, overlays and command scripts.

Each rule is one case: a small manifest (plus overlay / profile files where needed) is loaded
and the one-line message must name the file, the field path and the rule. Only host-side
building happens (parse, MjSpec edits, compile, bind); nothing is jitted.
"""

from __future__ import annotations

import pathlib
import textwrap

import pytest
import yaml

import fibril_mjx
from fibril_mjx.workflows import plan
from error_helpers import assert_line, load_error

pytestmark = pytest.mark.usefixtures('plain_messages')

VAL_XML = textwrap.dedent("""\
    <mujoco model="val">
      <compiler angle="radian"/>
      <option timestep="0.002"/>
      <include file="package://fibril_sim_models/mujoco/actuator_presets.xml"/>
      <default><geom type="sphere" size="0.05" mass="0.5" contype="0" conaffinity="0"/></default>
      <worldbody>
        <body name="free_b"><freejoint name="free"/><geom/></body>
        <body name="b1" pos="1 0 0"><joint name="h1" type="hinge" damping="0.1"/><geom/>
          <site name="imu"/></body>
        <body name="b2" pos="2 0 0"><joint name="h2" type="hinge"/><geom/></body>
      </worldbody>
      <tendon><fixed name="t1"><joint joint="h1" coef="1"/></fixed></tendon>
      <actuator>
        <position name="p1" class="fibril_sim_hw_robstride_operation_position" joint="h1"/>
        <velocity name="v1" class="fibril_sim_hw_robstride_operation_velocity" joint="h1"/>
        <motor name="m1" class="fibril_sim_hw_robstride_operation_feedforward" joint="h1"/>
        <motor name="mt" tendon="t1"/>
        <motor name="mfree" joint="free"/>
        <intvelocity name="iv" joint="h2" kp="5" actrange="-1 1"/>
        <general name="gen" joint="h2" gainprm="1" biasprm="0 -2 0" biastype="affine"/>
        <dcmotor name="dv" joint="h2" resistance="1" motorconst="0.1" input="voltage"/>
        <dcmotor name="dpv" joint="h2" resistance="1" motorconst="0.1" input="pos vel"
                 controller="1 0 0.1"/>
        <position name="p2" joint="h2" kp="1" ctrlrange="-1 1"/>
        <velocity name="v2" joint="h2" kv="1"/>
        <motor name="m2" joint="h2"/>
        <motor name="m1g" joint="h1" gear="2"/>
        <position name="pos1" joint="h1" kp="20"/>
        <velocity name="vel1" joint="h1" kv="2"/>
      </actuator>
      <sensor>
        <framequat name="quat" objtype="site" objname="imu"/>
        <gyro name="gyro" site="imu"/>
        <accelerometer name="accel" site="imu"/>
      </sensor>
    </mujoco>
    """)

MOTION = {'joint': 'h1', 'position_actuator': 'p1', 'velocity_actuator': 'v1',
          'feedforward_actuator': 'm1', 'application_period_s': 0.002}


def motor(actuator='pos1', cid='m', **config):
  return {'id': cid, 'type': 'fibril_sim/motor',
          'config': {'actuator': actuator, 'application_period_s': 0.002, **config}}


def motion(cid='mm', **config):
  return {'id': cid, 'type': 'fibril_sim/motion_motor', 'config': {**MOTION, **config}}


def scalar(actuator='m2', cid='s', **config):
  return {'id': cid, 'type': 'fibril_sim/scalar_actuator',
          'config': {'actuator': actuator, **config}}


AHRS = {'id': 'ahrs', 'type': 'fibril_sim/ahrs',
        'config': {'orientation_sensor': 'quat', 'gyroscope_sensor': 'gyro',
                   'accelerometer_sensor': 'accel', 'period_s': 0.01}}


def manifest(tmp: pathlib.Path, components, **top) -> pathlib.Path:
  (tmp / 'val.xml').write_text(VAL_XML)
  doc = {'fibril_manifest': 1, 'model': 'val.xml', **top, 'components': components}
  path = tmp / 'manifest.yaml'
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  return path


def expect(err, file, path, *fragments):
  """One line `file: path[ = value]: ...` containing the fragments in order."""
  line = assert_line(err, f'{file}: {path}', *fragments)
  rest = line[len(f'{file}: {path}'):]
  assert rest.startswith(' = ') or rest.startswith(': '), line
  return line


def gear(ratio):
  return {'type': 'gear_rotary', 'ratio': ratio}


def wheel(radius, **kw):
  return {'type': 'wheel', 'radius': radius, **kw}


C = 'components[0].config'

# (components, top-level manifest fields, field path, fragments of the rule)
CASES = {
    # ------------------------------------------------------------ fibril_sim/motor fields
    **{f'motor_forbidden_{f}': ([motor(**{f: 1})], {}, f'{C}.{f}',
                                ('not a fibril_sim/motor field', where))
       for f, where in (('kp', '<position kp>'), ('ki', '<dcmotor controller'),
                        ('kd', '<velocity kv>'), ('effort_limit', 'forcerange'),
                        ('motor', '<dcmotor> (resistance'), ('transmission', 'assemblies'),
                        ('driver', 'belongs to the MJCF actuator'))},
    'motor_scale_zero': ([motor(logical_units_per_joint_unit=0)], {},
                         f'{C}.logical_units_per_joint_unit', ('must be finite and non-zero',)),
    'motor_scale_nan': ([motor(logical_units_per_joint_unit=float('nan'))], {},
                        f'{C}.logical_units_per_joint_unit', ('finite number',)),
    'motor_period_missing': ([{'id': 'm', 'type': 'fibril_sim/motor',
                               'config': {'actuator': 'pos1'}}], {},
                             f'{C}.application_period_s', ('required field is missing',)),
    'motor_period_below_dt': ([motor(application_period_s=0.001)], {},
                              f'{C}.application_period_s', ('must be >= the physics timestep',)),
    'motor_loss_one': ([motor(command_loss_probability=1.0)], {},
                       f'{C}.command_loss_probability', ('less than 1',)),
    'motor_feedback_loss_one': ([motor(feedback_loss_probability=1.0)], {},
                                f'{C}.feedback_loss_probability', ('less than 1',)),
    'motor_feedback_loss_negative': ([motor(feedback_loss_probability=-0.1)], {},
                                     f'{C}.feedback_loss_probability',
                                     ('greater than or equal to 0',)),
    'motor_feedback_jitter_negative': ([motor(feedback_jitter_s=-0.001)], {},
                                       f'{C}.feedback_jitter_s', ('greater than or equal to 0',)),
    'motion_feedback_loss_one': ([motion(feedback_loss_probability=1.0)], {},
                                 f'{C}.feedback_loss_probability', ('less than 1',)),
    'motor_negative_limit': ([motor(command_velocity_limit=-1)], {},
                             f'{C}.command_velocity_limit', ('greater than 0',)),
    'motor_trajectory_needs_velocity_limit': (
        [motor(trajectory_acceleration_limit=5.0)], {}, f'{C}.trajectory_acceleration_limit',
        ('requires command_velocity_limit',)),
    'motor_duty_effort_on_position': (
        [motor(duty_effort_scale=1.0)], {}, f'{C}.duty_effort_scale',
        ("'pos1' (<position>) takes a position setpoint", 'duty_velocity_scale), not an effort')),
    'motor_duty_effort_on_velocity': (
        [motor('vel1', duty_effort_scale=1.0)], {}, f'{C}.duty_effort_scale',
        ('takes a velocity setpoint', 'not an effort')),
    'motor_duty_velocity_on_torque': (
        [motor('m2', duty_velocity_scale=1.0)], {}, f'{C}.duty_velocity_scale',
        ("'m2' (<motor>) takes an effort command", 'not a velocity setpoint')),
    'motor_velocity_limit_on_torque': (
        [motor('m2', command_velocity_limit=1.0)], {}, f'{C}.command_velocity_limit',
        ('no position or velocity setpoint to limit',)),
    'motor_trajectory_on_velocity': (
        [motor('vel1', command_velocity_limit=1.0, trajectory_acceleration_limit=2.0)], {},
        f'{C}.trajectory_acceleration_limit', ('need a position input',)),
    'motor_zero_duty_hold_on_velocity': (
        [motor('vel1', zero_duty_hold=True, duty_velocity_scale=1.0)], {},
        f'{C}.zero_duty_hold', ('needs a position input',)),
    'motor_hold_when_uncommanded_on_torque': (
        [motor('m2', hold_when_uncommanded=True)], {}, f'{C}.hold_when_uncommanded',
        ('needs a position input',)),
    'motor_zero_duty_hold_needs_duty_scale': (
        [motor(zero_duty_hold=True)], {}, f'{C}.zero_duty_hold',
        ('requires duty_velocity_scale',)),
    'motor_actuator_missing': ([motor('pos_1')], {}, f'{C}.actuator',
                               ("no MuJoCo actuator of that name", "(did you mean 'pos1'?)")),
    'motor_tendon_transmission': ([motor('mt')], {}, f'{C}.actuator',
                                  ("must drive a joint; 'mt' has a tendon transmission",)),
    'motor_free_joint': ([motor('mfree')], {}, f'{C}.actuator',
                         ("1-DoF hinge or slide joint", "free joint 'free'")),
    'motor_dcmotor_voltage': ([motor('dv')], {}, f'{C}.actuator',
                              ('input="voltage"', 'not a terminal voltage', 'input="vel"')),
    'motor_dcmotor_two_inputs': ([motor('dpv')], {}, f'{C}.actuator',
                                 ('input="pos vel"', 'one input, "pos" or "vel"')),
    'motor_intvelocity': ([motor('iv')], {}, f'{C}.actuator',
                          ("unsupported actuator 'iv'", 'INTEGRATOR')),
    'motor_general_affine': ([motor('gen')], {}, f'{C}.actuator',
                             ("unsupported actuator 'gen'", 'neither <position>')),
    # ------------------------------------------------------------ scalar_actuator
    'scalar_phase_without_period': ([scalar(application_phase_s=0.004)], {},
                                    f'{C}.application_phase_s', ('requires application_period_s',)),
    'scalar_strict_period': ([scalar(application_period_s=0.003)], {},
                             f'{C}.application_period_s',
                             ('quantization strict requires an integer multiple', '1.5 ticks')),
    'scalar_strict_phase': ([scalar(application_period_s=0.004, application_phase_s=0.001)], {},
                            f'{C}.application_phase_s', ('quantization strict', '0.5 ticks')),
    'scalar_strict_latency': ([scalar(latency_s=0.003, delivery_quantization='strict')], {},
                              f'{C}.latency_s', ('quantization strict', '1.5 ticks')),
    'scalar_saturation_order': ([scalar(saturation_min=1.0, saturation_max=0.5)], {},
                                f'{C}.saturation_max', ('must be >= saturation_min (1)',)),
    'scalar_negative_deadband': ([scalar(deadband=-0.1)], {}, f'{C}.deadband',
                                 ('greater than or equal to 0',)),
    'scalar_quantization_literal': ([scalar(delivery_quantization='nearest')], {},
                                    f'{C}.delivery_quantization',
                                    ("input should be 'next_boundary' or 'strict'",)),
    'scalar_unknown_field': ([scalar(deadbnd=0.1)], {}, f'{C}.deadbnd',
                             ("unknown field (did you mean 'deadband'?)",)),
    # ------------------------------------------------------------ motion_motor
    'motion_forbidden_kp': ([motion(kp=10)], {}, f'{C}.kp',
                            ('not a fibril_sim/motion_motor field', 'per packet')),
    'motion_joint_missing': ([motion(joint='h3')], {}, f'{C}.joint',
                             ('no MuJoCo joint of that name',)),
    'motion_wrong_channel_kind': ([motion(position_actuator='v1')], {},
                                  f'{C}.position_actuator', ('must name a <position> actuator',)),
    'motion_channel_other_joint': ([motion(velocity_actuator='v2')], {},
                                   f'{C}.velocity_actuator',
                                   ("'v2' drives joint 'h2'; all three channels must drive "
                                    "joint 'h1'",)),
    'motion_channel_ctrl_limited': ([motion(joint='h2', position_actuator='p2',
                                            velocity_actuator='v2', feedforward_actuator='m2')],
                                    {}, f'{C}.position_actuator',
                                    ("'p2' is ctrl- or force-limited", 'actuatorfrcrange')),
    'motion_different_gears': ([motion(feedforward_actuator='m1g')], {},
                               f'{C}.feedforward_actuator',
                               ('different gears', 'm1g: 2', 'assemblies entry')),
    # ------------------------------------------------------------ one driver per actuator
    'two_components_one_actuator': ([motor('m2', cid='a'), scalar('m2', cid='b')], {},
                                    'components[1].config.actuator',
                                    ("actuator already driven by component 'a'",)),
    # ------------------------------------------------------------ assemblies
    'assembly_component_missing': (
        [motor()], {'assemblies': [{'id': 'x', 'component': 'n', 'transmission': gear(2)}]},
        'assemblies[0].component', ('no component of that id',)),
    'assembly_component_type': (
        [scalar()], {'assemblies': [{'id': 'x', 'component': 's', 'transmission': gear(2)}]},
        'assemblies[0].component', ("assemblies bind fibril_sim/motion_motor or "
                                    "fibril_sim/motor components", 'fibril_sim/scalar')),
    'assembly_duplicate_id': (
        [motor(), motor('vel1', cid='n')],
        {'assemblies': [{'id': 'x', 'component': 'm', 'transmission': gear(2)},
                        {'id': 'x', 'component': 'n', 'transmission': gear(2)}]},
        'assemblies[1].id', ('assembly ids must be unique',)),
    'assembly_component_twice': (
        [motor()], {'assemblies': [{'id': 'x', 'component': 'm', 'transmission': gear(2)},
                                   {'id': 'y', 'component': 'm', 'transmission': gear(3)}]},
        'assemblies[1].component', ("already bound by assemblies[0] ('x')",)),
    'assembly_gear_rotary_without_ratio': (
        [motor()], {'assemblies': [{'id': 'x', 'component': 'm',
                                    'transmission': {'type': 'gear_rotary'}}]},
        'assemblies[0].transmission.ratio', ('required field is missing',)),
    'assembly_gear_rotary_with_radius': (
        [motor()], {'assemblies': [{'id': 'x', 'component': 'm',
                                    'transmission': {'type': 'gear_rotary', 'ratio': 2,
                                                     'radius': 0.1}}]},
        'assemblies[0].transmission.radius', ('has no radius',)),
    'assembly_wheel_without_radius': (
        [motor()], {'assemblies': [{'id': 'x', 'component': 'm',
                                    'transmission': {'type': 'wheel'}}]},
        'assemblies[0].transmission.radius', ('required field is missing (wheel)',)),
    'assembly_radius_not_positive': (
        [motor()], {'assemblies': [{'id': 'x', 'component': 'm', 'transmission': wheel(0)}]},
        'assemblies[0].transmission.radius', ('must be > 0',)),
    'assembly_ratio_zero': (
        [motor()], {'assemblies': [{'id': 'x', 'component': 'm', 'transmission': gear(0)}]},
        'assemblies[0].transmission.ratio', ('must be finite and non-zero',)),
    'assembly_actuator_count_zero': (
        [motor()], {'assemblies': [{'id': 'x', 'component': 'm', 'transmission': gear(2),
                                    'actuator_count': 0}]},
        'assemblies[0].actuator_count', ('greater than or equal to 1',)),
    'assembly_unknown_type': (
        [motor()], {'assemblies': [{'id': 'x', 'component': 'm',
                                    'transmission': {'type': 'belt', 'ratio': 2}}]},
        'assemblies[0].transmission.type', ("'gear_rotary', 'wheel' or 'pulley'",)),
    'assembly_unknown_key': (
        [motor()], {'assemblies': [{'id': 'x', 'component': 'm', 'transmission': gear(2),
                                    'actuators': 2}]},
        'assemblies[0].actuators', ("unknown field (did you mean 'actuator_count'?)",)),
    'assembly_mjcf_gear_conflict': (
        [motor('m1g')], {'assemblies': [{'id': 'x', 'component': 'm', 'transmission': gear(3)}]},
        'assemblies[0].transmission', ("actuator 'm1g' already sets gear 2 0 0 0 0 0",
                                       'declared once')),
    'assembly_duplicate_logical_scale': (
        [motor(logical_units_per_joint_unit=0.05)],
        {'assemblies': [{'id': 'x', 'component': 'm', 'transmission': wheel(0.05)}]},
        f'{C}.logical_units_per_joint_unit',
        ('already derived from assemblies[0] (wheel radius 0.05', 'defined in one place')),
    'assembly_wheel_on_motion_motor': (
        [motion()], {'assemblies': [{'id': 'x', 'component': 'mm', 'transmission': wheel(0.1)}]},
        'assemblies[0].transmission.type', ('no logical scale', 'gear_rotary')),
    # ------------------------------------------------------------ command_script
    'script_component_missing': (
        [motor()], {'command_script': [{'component': 'x', 'kind': 'position'}]},
        'command_script[0].component', ('no component of that id',)),
    'script_not_an_actuator': (
        [AHRS], {'command_script': [{'component': 'ahrs', 'kind': 'position'}]},
        'command_script[0].component', ("'ahrs' is a fibril_sim/ahrs, not an actuator",)),
    'script_kind_not_accepted': (
        [motor('m2')], {'command_script': [{'component': 'm', 'kind': 'velocity'}]},
        'command_script[0].kind', ("'m' (fibril_sim/motor) accepts effort commands",)),
    'script_trajectory_without_limit': (
        [motor()], {'command_script': [{'component': 'm', 'kind': 'trajectory'}]},
        'command_script[0].kind', ('accepts position, velocity commands',)),
    'script_gain_on_non_motion': (
        [motor()], {'command_script': [{'component': 'm', 'kind': 'position', 'kp': 3}]},
        'command_script[0].kp', ('only for kind motion',)),
    'script_negative_gain': (
        [motion()], {'command_script': [{'component': 'mm', 'kind': 'motion', 'kd': -1}]},
        'command_script[0].kd', ('must be >= 0',)),
    'script_twice': (
        [motor()], {'command_script': [{'component': 'm', 'kind': 'position'},
                                       {'component': 'm', 'kind': 'velocity'}]},
        'command_script[1].component', ('already scripted by command_script[0]',)),
    'script_unknown_kind': (
        [motor()], {'command_script': [{'component': 'm', 'kind': 'torque'}]},
        'command_script[0].kind', ("input should be 'position'",)),
}


@pytest.mark.parametrize('case', sorted(CASES), ids=str)
def test_construction_rule(tmp_path, case):
  comps, top, path, fragments = CASES[case]
  m = manifest(tmp_path, comps, **top)
  err = load_error(m)
  expect(err, m, path, *fragments)


# ------------------------------------------------------------------------ profile origin


def test_duplicate_scale_from_a_profile_names_the_profile(tmp_path):
  prof = tmp_path / 'profiles'
  prof.mkdir()
  (prof / 'odd.yaml').write_text(yaml.safe_dump({
      'id': 'odd_scale', 'kind': 'device', 'component_types': ['fibril_sim/motor'],
      'provenance': {'source': 'test'}, 'fields': {'logical_units_per_joint_unit': 0.1}}))
  comp = motor()
  comp['config']['profiles'] = {'device': 'odd_scale'}
  m = manifest(tmp_path, [comp], profile_paths=['profiles'],
               assemblies=[{'id': 'x', 'component': 'm', 'transmission': wheel(0.05)}])
  err = load_error(m)
  expect(err, prof / 'odd.yaml', 'fields.logical_units_per_joint_unit',
         'already derived from assemblies[0]')


# ------------------------------------------------------------------------ overlays


def overlay(tmp, doc, name='cal.yaml'):
  (tmp / name).write_text(yaml.safe_dump({'fibril_overlay': 1, 'id': name.split('.')[0],
                                          **doc}, sort_keys=False))
  return tmp / name


OVERLAY_CASES = {
    'overlay_element_missing': ({'mjcf': [{'element': 'joint', 'name': 'h_1',
                                           'attribute': 'damping', 'value': 0.2}]},
                                'mjcf[0].name', ("no joint of that name in the model",
                                                 "(did you mean 'h1'?)")),
    'overlay_element_kind': ({'mjcf': [{'element': 'jiont', 'name': 'h1',
                                        'attribute': 'damping', 'value': 0.2}]},
                             'mjcf[0].element', ("input should be 'body'",)),
    'overlay_attribute_missing': ({'mjcf': [{'element': 'joint', 'name': 'h1',
                                             'attribute': 'dampng', 'value': 0.2}]},
                                  'mjcf[0].attribute', ("no numeric attribute of that name",
                                                        "(did you mean 'damping'?)")),
    'overlay_value_shape': ({'mjcf': [{'element': 'actuator', 'name': 'pos1',
                                       'attribute': 'gear', 'value': [1, 2]}]},
                            'mjcf[0].value', ('gear has 6 values',)),
    'overlay_value_not_finite': ({'mjcf': [{'element': 'joint', 'name': 'h1',
                                            'attribute': 'damping', 'value': float('nan')}]},
                                 'mjcf[0].value', ('must be finite',)),
    'overlay_component_missing': ({'components': [{'component': 'x', 'field': 'safe_command',
                                                   'value': 1}]},
                                  'components[0].component', ('no component of that id',)),
    'overlay_unknown_field': ({'components': [{'component': 'm', 'field': 'safe_comand',
                                               'value': 1}]},
                              'components[0].field', ('unknown field for fibril_sim/motor',
                                                      "(did you mean 'safe_command'?)")),
    'overlay_forbidden_field': ({'components': [{'component': 'm', 'field': 'kp', 'value': 1}]},
                                'components[0].field', ('not a fibril_sim/motor field',
                                                        '<position kp>')),
    'overlay_invalid_value': ({'components': [{'component': 'm', 'field': 'command_latency_s',
                                               'value': -1}]},
                              'components[0].value', ('greater than or equal to 0',)),
    'overlay_version': ({'fibril_overlay': 2}, 'fibril_overlay', ('input should be 1',)),
}


@pytest.mark.parametrize('case', sorted(OVERLAY_CASES), ids=str)
def test_overlay_rule(tmp_path, case):
  doc, path, fragments = OVERLAY_CASES[case]
  ov = overlay(tmp_path, doc)
  m = manifest(tmp_path, [motor()], parameter_overlays=[{'file': 'cal.yaml'}])
  err = load_error(m)
  expect(err, ov.resolve(), path, *fragments)


def test_overlay_file_missing(tmp_path):
  m = manifest(tmp_path, [motor()], parameter_overlays=[{'file': 'nope.yaml'}])
  err = load_error(m)
  expect(err, m, 'parameter_overlays[0].file', 'file not found')


# ------------------------------------------------------------------------ what they apply


def test_assembly_writes_gear_into_every_channel_and_scale_into_the_plan(tmp_path):
  m = manifest(tmp_path, [motion(), motor('m2', cid='w', feedback_current_per_force=2.0)],
               assemblies=[{'id': 'hip', 'component': 'mm', 'transmission': gear(2.5)},
                           {'id': 'drive', 'component': 'w', 'actuator_count': 2,
                            'transmission': wheel(0.04, ratio=3.0)}])
  sim = fibril_mjx.load(m)
  for name, g in (('p1', 2.5), ('v1', 2.5), ('m1', 2.5), ('m2', 3.0), ('pos1', 1.0)):
    assert sim.mj_model.actuator(name).gear[0] == g, name
  w = sim.components['w']
  assert (w.cfg.logical_units_per_joint_unit, w.actuator_count, w.binding.gear) == (0.04, 2, 3.0)
  assert sim.default_params()['w'].logical_units_per_joint_unit == pytest.approx(0.04)
  text = plan.render(sim)
  assert ('hip: gear_rotary (ratio 2.5) -> component mm; resolved gear 2.5 written to p1, v1, '
          'm1') in text
  assert 'drive: wheel (ratio 3, radius 0.04) -> component w; resolved gear 3' in text
  assert 'logical scale 0.04 logical units per joint unit (from assemblies[1]: wheel radius ' \
         '0.04); actuator count 2' in text
  assert 'current = 2 x actuator_force / 2' in text
  assert 'logical_units_per_joint_unit   0.04  <- assembly drive (assemblies[1])' in text


def test_overlays_apply_in_order_to_mjcf_and_component_fields(tmp_path):
  overlay(tmp_path, {'provenance': {'fitted_with': 'test'},
                     'mjcf': [{'element': 'joint', 'name': 'h1', 'attribute': 'damping',
                               'value': 0.3},
                              {'element': 'joint', 'name': 'h2', 'attribute': 'armature',
                               'value': 0.07}],
                     'components': [{'component': 'm', 'field': 'safe_command',
                                     'value': 0.5}]}, 'a.yaml')
  overlay(tmp_path, {'mjcf': [{'element': 'joint', 'name': 'h1', 'attribute': 'damping',
                               'value': 0.4}],
                     'components': [{'component': 'm', 'field': 'safe_command',
                                     'value': 0.25}]}, 'b.yaml')
  comp = motor(safe_command=0.1)
  m = manifest(tmp_path, [comp], parameter_overlays=[{'file': 'a.yaml'}, {'file': 'b.yaml'}])
  sim = fibril_mjx.load(m)
  h1 = sim.mj_model.joint('h1').dofadr[0]
  assert sim.mj_model.dof_damping[h1] == pytest.approx(0.4)
  assert sim.mj_model.dof_armature[sim.mj_model.joint('h2').dofadr[0]] == pytest.approx(0.07)
  assert sim.components['m'].cfg.safe_command == 0.25
  text = plan.render(sim)
  assert 'parameter_overlays (applied in order' in text
  assert 'mjcf joint h1: damping = 0.4' in text
  assert f"safe_command                   0.25  <- overlay b ({tmp_path / 'b.yaml'}: " \
         'components[0].value)' in text
  # the nominal MJCF file is never rewritten
  assert 'damping="0.1"' in (tmp_path / 'val.xml').read_text()


def test_command_script_is_in_the_plan(tmp_path):
  m = manifest(tmp_path, [motion()], command_script=[
      {'component': 'mm', 'kind': 'motion', 'amplitude': 0.5, 'frequency_hz': 1.0, 'kp': 20,
       'kd': 1, 'period_s': 0.004}])
  text = plan.render(fibril_mjx.load(m))
  assert 'mm: motion = 0 + sine amplitude 0.5, 1 Hz, phase 0 rad, kp 20, kd 1; issued at ' \
         'period 0.004 s = 2 ticks' in text
