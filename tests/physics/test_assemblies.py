"""Assemblies find the channels a component type binds in the registry (`assembly_channels`,
registered with the type), not in a table of their own: a type registered here with two
channel fields is bound like the built-in motors, and a type without the part is refused by
a message that lists the registered types."""

from __future__ import annotations

import types

import mujoco
import pytest

from fibril_mjx.builder import build   # registers the built-in types
from fibril_mjx.core import registry
from fibril_mjx.errors import ConfigError
from fibril_mjx.physics import assemblies

XML = """
<mujoco>
  <worldbody>
    <body><joint name="h" type="hinge"/><geom size="0.1" mass="1"/></body>
  </worldbody>
  <actuator>
    <motor name="a" joint="h"/><motor name="b" joint="h"/><motor name="c" joint="h"/>
  </actuator>
</mujoco>
"""


@pytest.fixture
def geared():
  registry.register('test/geared', assembly_channels=('drive', 'brake'))
  yield 'test/geared'
  registry.unregister('test/geared')


def _manifest(ctype: str):
  comp = types.SimpleNamespace(id='g', type=ctype, config={'drive': 'a', 'brake': 'b'})
  gear = types.SimpleNamespace(type='gear_rotary', ratio=2.5, radius=None)
  asm = types.SimpleNamespace(id='x', component='g', transmission=gear, actuator_count=1)
  return types.SimpleNamespace(path='m.yaml', model=types.SimpleNamespace(components=[comp],
                                                                          assemblies=[asm]))


def test_an_assembly_writes_its_gear_into_the_channels_the_type_registers(geared):
  spec = mujoco.MjSpec.from_string(XML)
  out = assemblies.apply_assemblies(_manifest(geared), spec, build.assembly_channels())
  assert out['g'].channels == ('a', 'b') and out['g'].gear == 2.5
  assert [spec.actuator(n).gear[0] for n in 'abc'] == [2.5, 2.5, 1.0]


def test_a_type_without_channels_is_refused_naming_the_registered_types(geared):
  with pytest.raises(ConfigError) as info:
    assemblies.apply_assemblies(_manifest('test/plain'), mujoco.MjSpec.from_string(XML),
                                build.assembly_channels())
  bindable = ' or '.join(registry.types('assembly_channels'))
  assert {'fibril_sim/motor', 'fibril_sim/motion_motor', 'test/geared'} <= set(
      registry.types('assembly_channels'))
  assert str(info.value) == (f"m.yaml: assemblies[0].component = 'g': assemblies bind "
                             f"{bindable} components; 'g' is a test/plain")
