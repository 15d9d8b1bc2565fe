"""`tune` fits a continuous actuator latency by gradients: recordings made here by MuJoCo C
(`mujoco.mj_step`) with the command delayed 1.4 ticks in NumPy (each tick's ctrl the mean of
the held command over the tick), the encoder angle with NumPy noise; the fit starts at 0.5 and
at 2.0 ticks and must land within 0.1 tick of 1.4. Plus the tune-file rules of a latency
parameter by their messages.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import yaml

from fibril_mjx.errors import ConfigError
from fibril_mjx.io import recording
from fibril_mjx.workflows import tune
import latency_rig
from latency_rig import arm_xml

DT, TICKS, HOLD, TORQUE, NOISE = 0.002, 200, 4, 0.1, 1e-4
TRUE_TICKS, DAMPING = 1.4, 0.02


def c_recording(seed):
  return latency_rig.delayed_steps_recording(
      arm_xml(DAMPING), seed,
      lambda u, t: {'motor': {'value': u, 'issued': np.ones(len(u), bool), 'time_s': t}},
      amplitude=TORQUE, latency_ticks=TRUE_TICKS, ticks=TICKS, hold=HOLD, dt=DT, noise=NOISE,
      meta={'source': 'MuJoCo C mj_step, NumPy delayed command (tests)'})


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('latency_tune')
  (tmp / 'arm.xml').write_text(arm_xml(0.03))
  man = {'fibril_manifest': 1, 'model': 'arm.xml', 'components': [
      {'id': 'motor', 'type': 'fibril_sim/scalar_actuator',
       'config': {'actuator': 'motor', 'latency_s': 0.001, 'latency_mode': 'continuous'}},
      {'id': 'encoder', 'type': 'fibril_sim/encoder',
       'config': {'joint': 'hinge', 'period_s': DT}}]}
  (tmp / 'm.yaml').write_text(yaml.safe_dump(man))
  recording.write_recording(tmp / 'rec.npz', c_recording(7))
  return tmp


def write_tune(tmp, latency: dict, name='tune.yaml'):
  spec = {'fibril_tune': 1, 'manifest': 'm.yaml', 'train': ['rec.npz'],
          'parameters': [{'component': 'motor', 'field': 'latency_s', **latency},
                         {'mjcf': 'joint:hinge.damping', 'bounds': [0.005, 0.1], 'log': True,
                          'init': 0.03}],
          'loss': [{'component': 'encoder', 'field': 'position', 'weight': 1 / NOISE}],
          'optimizer': {'method': 'gauss_newton', 'iterations': 30, 'gradients': 'fd'}}
  (tmp / name).write_text(yaml.safe_dump(spec))
  return tmp / name


@pytest.mark.parametrize('start_ticks', [0.5, 2.0])
def test_tune_recovers_1p4_ticks_within_a_tenth(rig, start_ticks):
  path = write_tune(rig, {'bounds': [0.0, 0.008], 'init': start_ticks * DT})
  res = tune.tune(path, progress=False)
  est = dict(zip(res.names, res.estimate))
  got = est["motor.latency_s"] / DT
  print(f"start {start_ticks} ticks -> {got:.4f} ticks, damping {est['joint:hinge.damping']:.5f}")
  assert abs(got - TRUE_TICKS) < 0.1, (start_ticks, got)
  assert abs(est['joint:hinge.damping'] - DAMPING) < 0.05 * DAMPING, est


@pytest.mark.parametrize('latency, rule', [
    ({'bounds': [-0.002, 0.008]}, 'bounds = [-0.002, 0.008]: a latency needs bounds >= 0 s'),
])
def test_latency_parameter_rules(rig, latency, rule):
  with pytest.raises(ConfigError) as e:
    tune.make_problem(tune.read_tune_file(write_tune(rig, latency, 'bad.yaml')),
                      progress=False)
  assert rule in str(e.value), str(e.value)


def test_a_whole_tick_latency_points_to_continuous_mode(rig):
  man = yaml.safe_load((rig / 'm.yaml').read_text())
  del man['components'][0]['config']['latency_mode']
  (rig / 'm_tick.yaml').write_text(yaml.safe_dump(man))
  path = write_tune(rig, {'bounds': [0.0, 0.008]}, 'tick.yaml')
  spec = yaml.safe_load(path.read_text())
  spec['manifest'] = 'm_tick.yaml'
  path.write_text(yaml.safe_dump(spec))
  with pytest.raises(ConfigError) as e:
    tune.make_problem(tune.read_tune_file(path), progress=False)
  assert ("parameters[0].field = 'latency_s': a whole-tick latency of this component is "
          'static: give it latency_mode: continuous to fit it by gradients') in str(e.value), \
      str(e.value)


def test_the_example_tune_file_fits_its_recordings():
  """`manifests/tuning/latency_arm_tune.yaml` on its committed recordings (made by
  `make_latency_recordings.py`, true latency in their meta) from 0.5 tick."""
  path = pathlib.Path(__file__).resolve().parents[2] / 'manifests/tuning/latency_arm_tune.yaml'
  res = tune.tune(path, progress=False)
  truth = recording.read_recording(path.parent / 'recordings/latency_arm_train_0.npz')
  est = dict(zip(res.names, res.estimate))
  assert abs(est['motor.latency_s'] / DT - truth.meta['latency_ticks']) < 0.1, est
