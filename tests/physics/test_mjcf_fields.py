"""fibril_mjx.physics.mjcf_fields: `ELEMENT:NAME.ATTRIBUTE` → (mjx.Model field, index), checked
against the values written in the XML (each attribute gets a distinct value, so a wrong id,
dof address or entry reads another number)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from fibril_mjx.physics import mjcf_fields

XML = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1" friction="0.7 0.011 0.0012"/>
    <body name="ball" pos="0 0 1">
      <freejoint name="free"/>
      <geom type="sphere" size="0.1" mass="2.5"/>
      <body name="arm" pos="0 0 -0.2">
        <joint name="swivel" type="ball" damping="0.25"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.1" size="0.01" mass="0.4"/>
        <body name="tip">
          <joint name="hinge" type="hinge" axis="0 1 0" damping="0.125" armature="0.03"
                 stiffness="4.5"/>
          <joint name="slide" type="slide" axis="1 0 0" frictionloss="0.0625"/>
          <geom name="tipgeom" type="sphere" size="0.02" mass="0.05" friction="0.3 0.02 0.003"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <general name="motor" joint="hinge" gainprm="11 12 13" biasprm="0 -21 -22" gear="3"/>
  </actuator>
</mujoco>
"""


@pytest.fixture(scope='module')
def m():
  return mujoco.MjModel.from_xml_string(XML)


def _at(m, located):
  field, index = located
  return np.asarray(getattr(m, field)[index], np.float64)


def test_parse_key():
  assert mjcf_fields.parse_key('joint:yaw.damping') == mjcf_fields.Key('joint', 'yaw', 'damping')
  assert mjcf_fields.parse_key('actuator:motor.gainprm[2]') == mjcf_fields.Key(
      'actuator', 'motor', 'gainprm', 2)
  for bad in ('joint.yaw.damping', 'joint:yaw', ':yaw.damping', 'joint:yaw.damping[x]', ''):
    assert mjcf_fields.parse_key(bad) is None, bad


def test_names_and_ids(m):
  assert mjcf_fields.object_id(m, 'joint', 'hinge') == 2
  assert mjcf_fields.object_id(m, 'joint', 'nope') == -1
  assert mjcf_fields.object_names(m, 'joint') == ['free', 'swivel', 'hinge', 'slide']
  assert mjcf_fields.object_names(m, 'geom') == ['floor', '', '', 'tipgeom']   # unnamed: ''
  assert mjcf_fields.object_names(m, 'actuator') == ['motor']


def test_joint_attributes_index_every_dof_of_the_joint(m):
  oid = lambda n: mjcf_fields.object_id(m, 'joint', n)  # noqa: E731
  # free joint: dofs 0..5 (damping 0 in the XML), ball: 6..8, hinge: 9, slide: 10
  assert mjcf_fields.model_index(m, 'joint', oid('free'), 'damping') == (
      'dof_damping', (slice(0, 6),))
  np.testing.assert_array_equal(_at(m, mjcf_fields.model_index(m, 'joint', oid('swivel'),
                                                               'damping')), [0.25] * 3)
  assert mjcf_fields.model_index(m, 'joint', oid('hinge'), 'damping') == ('dof_damping', (9,))
  assert _at(m, mjcf_fields.model_index(m, 'joint', oid('hinge'), 'damping')) == 0.125
  assert _at(m, mjcf_fields.model_index(m, 'joint', oid('hinge'), 'armature')) == 0.03
  assert _at(m, mjcf_fields.model_index(m, 'joint', oid('hinge'), 'stiffness')) == 4.5
  assert _at(m, mjcf_fields.model_index(m, 'joint', oid('slide'), 'frictionloss')) == 0.0625
  assert [mjcf_fields.joint_dofs(m, oid(n)) for n in ('free', 'swivel', 'hinge', 'slide')] == [
      6, 3, 1, 1]


def test_body_geom_actuator(m):
  b = mjcf_fields.object_id(m, 'body', 'ball')
  assert _at(m, mjcf_fields.model_index(m, 'body', b, 'mass')) == pytest.approx(2.5)
  assert _at(m, mjcf_fields.model_index(m, 'body', b, 'inertia')).shape == (3,)
  g = mjcf_fields.object_id(m, 'geom', 'tipgeom')
  np.testing.assert_array_equal(_at(m, mjcf_fields.model_index(m, 'geom', g, 'friction')),
                                [0.3, 0.02, 0.003])
  assert _at(m, mjcf_fields.model_index(m, 'geom', g, 'friction', entry=1)) == 0.02
  a = mjcf_fields.object_id(m, 'actuator', 'motor')
  assert _at(m, mjcf_fields.model_index(m, 'actuator', a, 'gainprm')) == 11
  np.testing.assert_array_equal(
      _at(m, mjcf_fields.model_index(m, 'actuator', a, 'gainprm', count=2)), [11, 12])
  assert _at(m, mjcf_fields.model_index(m, 'actuator', a, 'biasprm', entry=2)) == -22
  assert _at(m, mjcf_fields.model_index(m, 'actuator', a, 'gear')) == 3


def test_attributes_without_a_compiled_array_are_none(m):
  assert mjcf_fields.model_index(m, 'joint', 2, 'range') is None
  assert mjcf_fields.model_index(m, 'geom', 0, 'size') is None
  assert mjcf_fields.model_index(m, 'site', 0, 'pos') is None
