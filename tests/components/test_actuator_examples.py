"""The actuator example manifests plan and run with `fibril-mjx` (plots written)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import fibril_mjx
from fibril_mjx.workflows import plan, run as runner

REPO = pathlib.Path(__file__).resolve().parents[2]
WHEELED = REPO / 'manifests' / 'wheeled_base.yaml'
LEG = REPO / 'manifests' / 'leg_robstride.yaml'


def test_wheeled_base_plan_shows_the_resolved_actuator_contract():
  sim = fibril_mjx.load(WHEELED)
  text = plan.render(sim)
  for wheel in ('fl', 'fr', 'rl', 'rr'):
    assert (f'wheel_{wheel}_axis: wheel (ratio 1, radius 0.05) -> component wheel_{wheel}; '
            f'resolved gear 1 written to wheel_{wheel}_motor') in text
  assert ('actuator: wheel_fl_motor (actuator 0, ctrl[0]), transmission input dcmotor '
          'input="vel", joint wheel_fl (hinge') in text
  assert ('ctrl semantic: velocity; force range [-6, 6] (actuator); joint-effort range '
          '[-6, 6]') in text
  assert ('logical scale 0.05 logical units per joint unit (from assemblies[0]: wheel radius '
          '0.05); actuator count 1') in text
  assert 'native dcmotor parameters of wheel_fl_motor (MJCF):' in text
  assert ('input="vel", gear 1, resistance 0.194 ohm, motorconst 0.3 N*m/A, inductance '
          '9.7e-05 H') in text
  assert 'controller: kp 0, ki 0, kd 0.5, slewmax 0, imax 0, vmax 24' in text
  assert 'command_latency_s              0.000135  <- transport profile can_fast_path_1khz' in text
  assert ('feedback_current_per_force     3.33333  <- device profile robomaster_m3508_p19'
          in text)
  assert sim.dcmotor is not None and len(sim.dcmotor.actuator_id) == 4


def test_leg_plan_shows_gear_in_all_three_channels():
  sim = fibril_mjx.load(LEG)
  text = plan.render(sim)
  assert ('hip_axis: gear_rotary (ratio 2.5) -> component hip; resolved gear 2.5 written to '
          'hip_position, hip_velocity, hip_feedforward') in text
  assert 'joint-effort range [-35, 35] (forcerange x gear ∩ joint actuatorfrcrange' in text
  assert 'accepted commands: position, velocity, trajectory' in text


@pytest.mark.parametrize('manifest, ids', [
    (LEG, ('hip', 'knee')),
    (WHEELED, ('wheel_fl', 'wheel_fr', 'wheel_rl', 'wheel_rr', 'ahrs')),
], ids=['leg_robstride', 'wheeled_base'])
def test_example_runs_and_writes_plots(tmp_path, monkeypatch, manifest, ids):
  monkeypatch.setenv('FIBRIL_MJX_NO_PROGRESS', '1')
  out = tmp_path / 'out'
  summary = runner.run(manifest, worlds=2, seed=0, duration_s=0.03, out=out,
                       options=runner.RunOptions(segments=1))
  for cid in ids:
    assert (out / f'{cid}.png').stat().st_size > 10_000
    assert cid in summary['components']
  trace = np.load(out / 'trace.npz')
  first = ids[0]
  assert np.all(np.isfinite(trace[f'truth/{first}/position']))
  # the manifest's command_script drove the actuators (the runner passes no commands)
  assert summary['components'][first]['metrics']['feedback_delivered']['mean'] > 0
  if manifest == WHEELED:
    assert np.max(trace['truth/wheel_fl/velocity']) > 0.1   # wheels turning, m/s
