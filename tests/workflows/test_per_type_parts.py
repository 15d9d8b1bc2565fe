"""What `validate`, `fit-profile` and the bag reader need of a type is a part of its registry entry
(`fibril_mjx/core/registry.py`), read by name — no table of types and no `type ==` branch in the
workflows: a type is supported where its entry has the part, a new type gets the behaviour by
registering one, and the one-line errors name the types that have it.
"""

from __future__ import annotations

import ast
import pathlib
import types

import numpy as np
import pytest
import yaml

import fibril_mjx
from fibril_mjx.core import registry
from fibril_mjx.errors import ConfigError, FibrilError
from fibril_mjx.io import bag_fields, mavlink_hil
from fibril_mjx.io import recording as rc
from fibril_mjx.workflows import fit_profile
from fibril_mjx.workflows.validate import inertial

PKG = pathlib.Path(fibril_mjx.__file__).resolve().parent


def test_no_type_string_is_compared_outside_the_components():
  """The count `type-string comparisons` of the simplicity figures: 18 before the parts."""
  hits = []
  for p in PKG.rglob('*.py'):
    if p.relative_to(PKG).parts[0] == 'components':
      continue
    for node in ast.walk(ast.parse(p.read_text())):
      if isinstance(node, ast.Compare) and any(
          isinstance(c, ast.Constant) and isinstance(c.value, str)
          and c.value.startswith(('fibril_sim/', 'fibril_mjx/'))
          for c in [node.left, *node.comparators]):
        hits.append(f'{p.relative_to(PKG)}:{node.lineno}')
  assert hits == []


def test_fit_profile_names_the_types_with_a_profile_fit(tmp_path):
  with pytest.raises(ConfigError, match=r"^--type: type = 'fibril_sim/gnss': fit-profile "
                     r"supports fibril_sim/ahrs, fibril_sim/imu$"):
    fit_profile.fit_profile(component_type='fibril_sim/gnss', component='g',
                            out=tmp_path / 'p.yaml', logs=fit_profile.Logs(static=['x.npz']))
  with pytest.raises(ConfigError, match=r"^--type: type = 'fibril_sim/ahrs': --thermal logs fit "
                     r"the thermal model of fibril_sim/imu$"):
    fit_profile.fit_profile(component_type='fibril_sim/ahrs', component='a',
                            out=tmp_path / 'p.yaml', logs=fit_profile.Logs(thermal=['x.npz']))


def test_a_type_with_a_profile_fit_part_is_fitted_by_it(tmp_path):
  """A new type's `profile_fit` is what fit-profile runs on its static logs; what it returns is
  the profile written."""
  seen = []

  def static(cid, recs, fig_dir, find_rest, power_ups, result):
    seen.append((cid, [r.sensor(cid)['value'].tolist() for r in recs], find_rest))
    return {'offset': 0.5}, [('offset', 0.5, 0.01, 'mean of the log')], [], [], 'none'
  t = np.arange(4) * 0.01
  rec = rc.write_recording(tmp_path / 'r.npz', rc.Recording({'t': {
      'value': np.array([0.4, 0.5, 0.6, 0.5]), rc.SAMPLE_TIME: t, rc.ARRIVAL_TIME: t}}))
  fibril_mjx.register('test/fit_toy', profile_fit=fit_profile.ProfileFit(static))
  try:
    fit_profile.fit_profile(component_type='test/fit_toy', component='t',
                            out=tmp_path / 'p.yaml', logs=fit_profile.Logs(static=[rec]),
                            options=fit_profile.FitOptions(find_rest=True))
    profile = yaml.safe_load((tmp_path / 'p.yaml').read_text())
  finally:
    registry.unregister('test/fit_toy')
  assert seen == [('t', [[0.4, 0.5, 0.6, 0.5]], True)]
  assert profile['component_types'] == ['test/fit_toy'] and profile['fields'] == {'offset': 0.5}


def test_the_inertial_record_of_a_type_chooses_its_channels_and_outputs():
  imu = inertial.device_from_config('i', 'fibril_sim/imu', {'period_s': 0.01})
  ahrs = inertial.device_from_config('a', 'fibril_sim/ahrs', {'period_s': 0.01})
  assert (imu.rig.orientation, imu.rig.random_walk, imu.rig.environment) == (False, True, True)
  assert (ahrs.rig.orientation, ahrs.rig.random_walk) == (True, False)
  assert ahrs.orientation_sigma is not None and imu.orientation_sigma is None
  with pytest.raises(FibrilError, match=r'^fibril_sim/barometer: not an inertial type \(its '
                     r'validation_rig is NavRig\)$'):
    inertial.device_from_config('b', 'fibril_sim/barometer', {'period_s': 0.01})


def test_a_bag_reader_of_a_type_replaces_the_shared_one():
  msg = types.SimpleNamespace(fluid_pressure=101325.0, variance=0.0)
  shared = bag_fields.READERS[bag_fields.SENSOR]['sensor_msgs/msg/FluidPressure']
  ctx = bag_fields.Ctx(bag_fields.TopicMap('sensor', 'x', '/p'), None)

  def read(ctype):
    rd = bag_fields.for_type('sensor', 'sensor_msgs/msg/FluidPressure', shared, ctype)
    return rd.read(msg, ctx)
  assert read('fibril_sim/barometer') == {'pressure_pa': 101325.0, 'variance': None}
  assert read('fibril_sim/airspeed') == {'differential_pressure_pa': 101325.0, 'variance': None}
  assert read(None) == read('fibril_sim/barometer')
  fibril_mjx.register('test/bag_toy', bag={'sensor_msgs/msg/FluidPressure': bag_fields.Reader(
      lambda m, c: {'depth_m': m.fluid_pressure / 9806.65})})
  try:
    assert read('test/bag_toy') == {'depth_m': pytest.approx(101325.0 / 9806.65)}
    assert bag_fields.for_type('command', 'sensor_msgs/msg/FluidPressure', shared,
                               'test/bag_toy') is shared     # a type's readers are sensor ones
  finally:
    registry.unregister('test/bag_toy')


def test_a_mavlink_source_prefers_the_type_that_feeds_it():
  """An AHRS has the IMU's rate fields too: the IMU source is the component whose type's
  `mavlink` part is 'imu', wherever it stands in the manifest."""
  fields = {'ahrs': ['angular_velocity', 'linear_acceleration', 'orientation'],
            'imu': ['angular_velocity', 'linear_acceleration'], 'baro': ['pressure_pa']}
  types_ = {'ahrs': 'fibril_sim/ahrs', 'imu': 'fibril_sim/imu', 'baro': 'fibril_sim/barometer'}
  assert mavlink_hil.select_sources(fields, types_) == {'imu': 'imu', 'baro': 'baro'}
  assert mavlink_hil.select_sources(fields, {}) == {'imu': 'ahrs', 'baro': 'baro'}  # no types
  fibril_mjx.register('test/imu_toy', mavlink='imu')
  try:
    assert mavlink_hil.select_sources({'a': fields['ahrs'], 't': fields['imu']},
                                      {'a': 'fibril_sim/ahrs', 't': 'test/imu_toy'}) == {
        'imu': 't'}
  finally:
    registry.unregister('test/imu_toy')
