"""docs/tutorials/menagerie.md at its small size: the Unitree Go2 of MuJoCo Menagerie as it
comes (its XML is upstream's, by SHA-256), started from its `home` keyframe with an IMU on its
`imu` site. References outside the code under test: the SHA-256 of the upstream file, MuJoCo
C's `mj_resetDataKeyframe`, g, and the campaign's / RL env's own draws."""

from __future__ import annotations

import hashlib
import pathlib

from _load import example

GO2 = pathlib.Path(__file__).resolve().parents[2] / 'assets/examples/menagerie/unitree_go2'
UPSTREAM_SHA256 = {   # google-deepmind/mujoco_menagerie unitree_go2/, see the folder's README
    'go2_mjx.xml': 'fe2619482dbef508155cb71a85360281bfab026b6a7087094ee3089f71dee388',
    'scene_mjx.xml': '59ecdb5d028b370c009425caf784fd1fbea77e2d70ea0c44c9135c60609941c0',
}


def test_the_robots_xml_is_upstreams():
  for name, sha in UPSTREAM_SHA256.items():
    assert hashlib.sha256((GO2 / name).read_bytes()).hexdigest() == sha, name


def test_menagerie_go2_from_its_keyframe(tmp_path):
  res = example('tutorial_menagerie').main(['--small', '--out', str(tmp_path)])
  # tick 0 is MuJoCo C's keyframe state (float32 MJX data)
  assert res['tick0_max_dev'] < 1e-6, res
  # standing at the keyframe: the feet settle 1.6 cm in the first 0.1 s (MuJoCo C alone: up
  # to 5.2 m/s^2 off g), then the IMU reads g within 0.5 m/s^2 (C alone: 0.31); from qpos0
  # the robot drops 0.2 m onto straight legs: 52 m/s^2 off (MuJoCo C, measured by hand)
  assert res['keyframe_max_dev'] < 8.0, res
  assert res['keyframe_settled_max_dev'] < 0.5, res
  assert res['campaign_tick0_max_dev'] < 1e-3, res   # encoder resolution 3.8e-4 rad
  assert res['rl_reset_max_dev'] < 1e-6, res
  for name, sha in UPSTREAM_SHA256.items():   # the run did not rewrite the robot's file
    assert hashlib.sha256((GO2 / name).read_bytes()).hexdigest() == sha, name
