"""`fibril_mjx.load(path, overrides=...)` (SPEC §8): the last layer, shown by `plan` with its
origin, validated with the same one-line errors; and `fibril-mjx plan --set`."""

from __future__ import annotations

import pathlib
import shutil

import numpy as np
import pytest
import yaml

import fibril_mjx
from fibril_mjx import cli
from fibril_mjx.workflows import plan
from fibril_mjx.errors import FibrilError
from fibril_mjx.config.overrides import parse_assignments

pytestmark = pytest.mark.usefixtures('plain_messages')

REPO = pathlib.Path(__file__).resolve().parents[2]
TURNTABLE = REPO / 'manifests' / 'ahrs_turntable.yaml'


def field(sim, cid, name):
  return dict(sim.components[cid].fields)[name]


@pytest.fixture(scope='module')
def overridden():
  return fibril_mjx.load(TURNTABLE, overrides={
      'components': [{'component': 'ahrs', 'field': 'period_s', 'value': 0.02},
                     {'component': 'ahrs', 'field': 'angular_velocity_bias',
                      'value': [0.001, 0.0, -0.002]}],
      'mjcf': [{'element': 'joint', 'name': 'yaw', 'attribute': 'damping', 'value': 0.3}]})


def test_component_field_override_is_the_last_layer(overridden):
  fv = field(overridden, 'ahrs', 'period_s')
  assert fv.value == 0.02 and fv.layer == 'override'
  assert (fv.file, fv.path) == ('overrides', 'components[0].value')
  # 0.02 s at dt 0.002 s: every 10th tick (the profile says 0.01 s, every 5th)
  assert overridden.components['ahrs'].schedule.period_ticks == 10
  p = overridden.default_params()['ahrs']
  bias = getattr(p, 'angular_velocity_bias', None)
  if bias is None:   # nested Params layout: params.angular_velocity.bias
    bias = p.angular_velocity.bias
  np.testing.assert_array_equal(np.asarray(bias), np.float32([0.001, 0.0, -0.002]))


def test_mjcf_override(overridden):
  m = overridden.mj_model
  import mujoco
  jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, 'yaw')
  assert m.dof_damping[m.jnt_dofadr[jid]] == pytest.approx(0.3)
  other = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, 'tilt')
  assert m.dof_damping[m.jnt_dofadr[other]] == pytest.approx(0.5)   # MJCF default untouched


def test_plan_shows_the_origin(overridden):
  text = plan.render(overridden)
  assert 'override (overrides)' in text
  assert 'mjcf joint yaw: damping = 0.3' in text
  assert 'component ahrs.period_s = 0.02' in text
  line = next(l for l in text.splitlines() if l.strip().startswith('period_s'))
  assert line.split() == ['period_s', '0.02', '<-', 'override', '(overrides:',
                          'components[0].value)']


def test_override_wins_over_config_profile_and_overlay(tmp_path):
  doc = yaml.safe_load(TURNTABLE.read_text())
  doc['components'][0]['config']['latency_s'] = 0.004            # instance config over profile
  doc['parameter_overlays'] = [{'file': 'cal.yaml'}]
  (tmp_path / 'cal.yaml').write_text(yaml.safe_dump({
      'fibril_overlay': 1, 'id': 'cal',
      'components': [{'component': 'ahrs', 'field': 'latency_s', 'value': 0.006}]}))
  (tmp_path / 'm.yaml').write_text(yaml.safe_dump(doc))
  sim = fibril_mjx.load(tmp_path / 'm.yaml')
  assert (field(sim, 'ahrs', 'latency_s').value, field(sim, 'ahrs', 'latency_s').layer) == (
      0.006, 'overlay')
  sim = fibril_mjx.load(tmp_path / 'm.yaml', overrides={
      'components': [{'component': 'ahrs', 'field': 'latency_s', 'value': 0.008}]})
  fv = field(sim, 'ahrs', 'latency_s')
  assert (fv.value, fv.layer) == (0.008, 'override')
  # period_s still from the device profile
  assert field(sim, 'ahrs', 'period_s').layer == 'device'


@pytest.mark.parametrize('overrides, message', [
    ({'components': [{'component': 'ahr', 'field': 'period_s', 'value': 0.02}]},
     "overrides: components[0].component = 'ahr': no component of that id in the manifest "
     "(did you mean 'ahrs'?)"),
    ({'components': [{'component': 'ahrs', 'field': 'perod_s', 'value': 0.02}]},
     "overrides: components[0].field = 'perod_s': unknown field for fibril_sim/ahrs "
     "(did you mean 'period_s'?)"),
    ({'components': [{'component': 'ahrs', 'field': 'period_s', 'value': -1}]},
     'overrides: components[0].value = -1: input should be greater than 0'),
    ({'components': [{'component': 'ahrs', 'field': 'period_s'}]},
     'overrides: components[0].value: required field is missing'),
    ({'mjcf': [{'element': 'joint', 'name': 'yawn', 'attribute': 'damping', 'value': 0.3}]},
     "overrides: mjcf[0].name = 'yawn': no joint of that name in the model (did you mean "
     "'yaw'?)"),
    ({'mjcf': [{'element': 'joint', 'name': 'yaw', 'attribute': 'dampin', 'value': 0.3}]},
     "overrides: mjcf[0].attribute = 'dampin': no numeric attribute of that name (did you "
     "mean 'damping'?)"),
    ({'mjcf': [{'element': 'joint', 'name': 'yaw', 'attribute': 'damping', 'value': 'x'}]},
     "overrides: mjcf[0].value = 'x': must be a number or a list of numbers for damping"),
    ({'component': []}, "overrides: component = []: unknown field (did you mean 'components'?)"),
    ([1], 'overrides = [1]: must be a mapping'),
])
def test_override_errors(overrides, message):
  with pytest.raises(FibrilError) as e:
    fibril_mjx.load(TURNTABLE, overrides=overrides)
  assert str(e.value) == message


def test_parse_assignments():
  assert parse_assignments(['ahrs.period_s=0.02', 'joint:yaw.damping=0.3',
                            'ahrs.angular_velocity_bias=[0, 0, 1.0e-3]']) == {
      'components': [{'component': 'ahrs', 'field': 'period_s', 'value': 0.02},
                     {'component': 'ahrs', 'field': 'angular_velocity_bias',
                      'value': [0, 0, 0.001]}],
      'mjcf': [{'element': 'joint', 'name': 'yaw', 'attribute': 'damping', 'value': 0.3}]}
  assert parse_assignments([]) is None
  for bad in ('ahrs=1', 'period_s', '.x=1', ':yaw.damping=1'):
    with pytest.raises(FibrilError) as e:
      parse_assignments([bad])
    assert str(e.value) == (f'--set {bad!r}: expected ID.FIELD=VALUE or '
                            'ELEMENT:NAME.ATTRIBUTE=VALUE')
  with pytest.raises(FibrilError) as e:
    parse_assignments(['ahrs.period_s=[1'])
  assert str(e.value) == "--set 'ahrs.period_s=[1': the value is not valid YAML"


def test_cli_plan_set(capsys):
  assert cli.main(['plan', str(TURNTABLE), '--set', 'ahrs.period_s=0.02',
                   '--set', 'joint:yaw.damping=0.3']) == 0
  out = capsys.readouterr().out
  assert 'override (overrides: components[0].value)' in out
  assert 'mjcf joint yaw: damping = 0.3' in out
  assert cli.main(['plan', str(TURNTABLE), '--set', 'ahrs.period_s=-1']) == 2
  assert capsys.readouterr().err.strip() == (
      'error: overrides: components[0].value = -1: input should be greater than 0')
