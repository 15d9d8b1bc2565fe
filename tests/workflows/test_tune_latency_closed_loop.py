"""`tune` fits a continuous command latency where a loop is closed on the physics: a
`fibril_sim/motor` in position mode drives a `<position kp kv>` actuator, whose servo law
`kp·(ctrl − q) − kv·q̇` MuJoCo closes on the joint state every step. The recordings are made
here by MuJoCo C (`mujoco.mj_step`) with the ctrl computed in float64 NumPy from the delayed
position commands (`ctrl_j = f·u_{j−n−1} + (1−f)·u_{j−n}`, 1.4 ticks: n = 1, f = 0.4, every
tick), the encoder angle with NumPy noise; the fit (latency and hinge damping) starts at 0.5
and at 2.5 ticks and must land within 0.1 tick of 1.4 (`gradients: exact`, through MJX:
`gradients: fd` runs MuJoCo C open loop and refuses the position motor, tested below).

The motor's continuous `command_latency_s` is an ordinary parameter of the fit: before the
fix `tune` took it for a whole-tick searched latency (its transport exists) and refused the
file; `resolve_params` now searches only latencies that are not Params fields.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from fibril_mjx.errors import FibrilError
from fibril_mjx.io import recording
from fibril_mjx.workflows import tune
import latency_rig

DT, TICKS, HOLD, AMPLITUDE, NOISE = 0.002, 200, 4, 0.5, 1e-4
TRUE_TICKS, DAMPING = 1.4, 0.02
POSITION = 1   # `MotorCommand.kind` of a position command (motor_config.KINDS)
XML = """\
<mujoco model="servo_arm">
  <option timestep="0.002" integrator="implicitfast"/>
  <worldbody>
    <body name="arm">
      <joint name="hinge" type="hinge" axis="0 0 1" damping="{damping}" armature="0.001"/>
      <geom type="capsule" fromto="0 0 0 0.1 0 0" size="0.01" mass="0.05" contype="0"
            conaffinity="0"/>
    </body>
  </worldbody>
  <actuator><position name="servo" joint="hinge" kp="2.0" kv="0.02"/></actuator>
</mujoco>
"""


def c_recording(seed, latency_ticks=TRUE_TICKS):
  """Random position steps (held `HOLD` ticks) through the NumPy delay into MuJoCo C."""
  def commands(u, t):
    n = len(u)
    return {'motor': {'kind': np.full(n, POSITION, np.int32), 'value': u,
                      'encoder_reset': np.zeros(n, bool),
                      'encoder_position': np.zeros(n, np.float32), 'time_s': t}}
  return latency_rig.delayed_steps_recording(
      XML.format(damping=DAMPING), seed, commands, amplitude=AMPLITUDE,
      latency_ticks=latency_ticks, ticks=TICKS, hold=HOLD, dt=DT, noise=NOISE,
      meta={'source': 'MuJoCo C mj_step, NumPy delayed position command (tests)',
            'latency_ticks': latency_ticks})


def make_rig(tmp, latency_ticks=TRUE_TICKS):
  (tmp / 'arm.xml').write_text(XML.format(damping=0.03))
  man = {'fibril_manifest': 1, 'model': 'arm.xml', 'components': [
      {'id': 'motor', 'type': 'fibril_sim/motor',
       'config': {'actuator': 'servo', 'application_period_s': DT,
                  'command_latency_s': 0.001, 'command_latency_mode': 'continuous'}},
      {'id': 'encoder', 'type': 'fibril_sim/encoder',
       'config': {'joint': 'hinge', 'period_s': DT}}]}
  (tmp / 'm.yaml').write_text(yaml.safe_dump(man))
  recording.write_recording(tmp / 'rec.npz', c_recording(7, latency_ticks))
  return tmp


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
  return make_rig(tmp_path_factory.mktemp('servo_latency_tune'))


def write_tune(tmp, start_ticks, gradients, name='tune.yaml'):
  spec = {'fibril_tune': 1, 'manifest': 'm.yaml', 'train': ['rec.npz'],
          'parameters': [{'component': 'motor', 'field': 'command_latency_s',
                          'bounds': [0.0, 0.008], 'init': start_ticks * DT},
                         {'mjcf': 'joint:hinge.damping', 'bounds': [0.005, 0.1], 'log': True,
                          'init': 0.03}],
          'loss': [{'component': 'encoder', 'field': 'position', 'weight': 1 / NOISE}],
          'optimizer': {'method': 'gauss_newton', 'iterations': 30, 'gradients': gradients}}
  (tmp / name).write_text(yaml.safe_dump(spec))
  return tmp / name


def fit(path):
  res = tune.tune(path, progress=False)
  est = dict(zip(res.names, res.estimate))
  return est['motor.command_latency_s'] / DT, est['joint:hinge.damping']


@pytest.mark.parametrize('start_ticks', [0.5, 2.5])
def test_tune_recovers_1p4_ticks_through_a_closed_servo_loop(rig, start_ticks):
  got, damping = fit(write_tune(rig, start_ticks, 'exact'))
  print(f'start {start_ticks} ticks -> {got:.4f} ticks, damping {damping:.5f}')
  assert abs(got - TRUE_TICKS) < 0.1, (start_ticks, got)
  assert abs(damping - DAMPING) < 0.05 * DAMPING, damping


def test_fd_refuses_the_position_motor_naming_the_closed_loop(rig):
  """MuJoCo C rolls the physics out after the controls, which a position input cannot give
  (it reads the joint when it holds): a one-line error naming the component."""
  with pytest.raises(FibrilError) as e:
    tune.make_problem(tune.read_tune_file(write_tune(rig, 0.5, 'fd', 'fd.yaml')),
                      progress=False)
  msg = str(e.value)
  assert "optimizer.gradients = 'fd': fd runs the physics on MuJoCo C open loop" in msg, msg
  assert "component 'motor' (fibril_sim/motor) closes a loop on physics: position input" \
      in msg, msg
  assert msg.endswith('use gradients: exact (or auto)') and '\n' not in msg, msg
