"""Every built-in sensor writes its Params and State as NamedTuple declarations in its own module
(a reader finds each field), holding every Params and State field of its error model; a State
missing one is refused when the sensor is built (`base.check_declared`)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import NamedTuple

import pytest

import fibril_mjx
from fibril_mjx import error_models as em
from fibril_mjx.components import base
from fibril_mjx.components.sensors import barometer, thermal, vibration
from ref_helpers import write_manifest

MODULES = ('ahrs', 'airspeed', 'barometer', 'camera', 'encoder', 'gnss', 'imu', 'lidar',
           'magnetometer', 'optical_flow', 'rangefinder')


@pytest.mark.parametrize('name', MODULES)
def test_params_and_state_are_declared_in_the_module(name):
  mod = importlib.import_module(f'fibril_mjx.components.sensors.{name}')
  src = inspect.getsource(mod)
  assert src.count('\nclass Params(NamedTuple):\n') == 1
  assert ('\nclass State(NamedTuple):\n' in src
          or '\nState = base.SensorState' in src and mod.State is base.SensorState)
  sensor = next(v for v in vars(mod).values()
                if isinstance(v, type) and issubclass(v, base.SensorBase)
                and v.__module__ == mod.__name__)
  assert sensor.params_type is mod.Params and sensor.state_type is mod.State
  nested = thermal.PARAM_FIELDS + vibration.PARAM_FIELDS   # Params.thermal, Params.vibration
  assert set(mod.ERRORS.params) <= set(mod.Params._fields + nested)
  assert mod.Params._fields[-1] == 'faults'
  chain_state = mod.ERRORS.state if isinstance(mod.ERRORS, em.Chain) else ()
  assert {'streams', *chain_state, 'queue', 'held', 'faults'} <= set(mod.State._fields)


XML = """<mujoco><worldbody><body><freejoint/><geom size="0.1" mass="1"/>
  <site name="s"/></body></worldbody></mujoco>"""


@pytest.fixture(scope='module')
def built(tmp_path_factory):
  comp = {'id': 'baro', 'type': 'fibril_sim/barometer',
          'config': {'site': 's', 'period_s': 0.01, 'bias_instability_stddev_pa': 1.0,
                     'bias_correlation_time_s': 10.0, 'common_mode_stddev_pa': 2.0,
                     'common_mode_correlation_time_s': 60.0, 'common_mode_stream': 'weather'}}
  path = write_manifest(tmp_path_factory.mktemp('baro'), XML, [comp])
  return fibril_mjx.load(path).components['baro']


def test_the_plan_names_a_shared_common_mode_stream(built):
  """The common-mode term's stream, read off the error model (`describe_errors`)."""
  lines = built.describe()
  assert 'common-mode stream: weather' in lines
  assert lines.index('common-mode stream: weather') < lines.index('error model:')


def test_a_state_without_a_field_of_the_error_model_is_a_one_line_error(built):

  class NoDrift(NamedTuple):
    streams: dict
    turn_on: object
    common: object
    clip_count: object
    queue: object
    held: object
    faults: object

  @dataclasses.dataclass(frozen=True)
  class Bad(barometer.Barometer):
    state_type = NoDrift
  with pytest.raises(TypeError, match=rf'^{__name__}\.Bad: state_type NoDrift lacks field\(s\) '
                     r'gm \(its error model.s; fields: streams, turn_on, common, clip_count, '
                     r'queue, held, faults\)$'):
    Bad(**{f.name: getattr(built, f.name) for f in dataclasses.fields(built)})
