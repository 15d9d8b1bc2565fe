"""The manifest's `keyframe`: every world starts from one of the model's `<key>`s exactly as
MuJoCo C's `mj_resetDataKeyframe` leaves it, on MJX and on MuJoCo C; campaign `initial:`
variations are offsets from it.

References outside the code under test: `mujoco.mj_resetDataKeyframe` + `mj_forward` on the
compiled model, and a table on four legs that must stand still when started from its key."""

import mujoco
import numpy as np
import pytest
import yaml

import fibril_mjx as fm
from fibril_mjx.batch import physics_c
from fibril_mjx.errors import ConfigError

from table_rig import DT, IMU, LEGS
from table_rig import manifest as _manifest


def _c_keyframe(m: mujoco.MjModel, name: str) -> mujoco.MjData:
  d = mujoco.MjData(m)
  mujoco.mj_resetDataKeyframe(m, d, mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, name))
  mujoco.mj_forward(m, d)
  return d


@pytest.fixture(scope='module')
def table(tmp_path_factory):
  """The table at `home`, an IMU on its torso; no actuator component: every actuator holds the
  key's ctrl."""
  return fm.load(_manifest(tmp_path_factory.mktemp('kf'), components=[IMU]))


def test_every_world_starts_from_the_keyframe_as_mujoco_c_resets_it(tmp_path):
  """qpos, qvel, act, mocap at tick 0 (MJX in the loop) and the state MuJoCo C's rollout
  starts from equal `mj_resetDataKeyframe`'s; the actuator no component drives starts at the
  key's ctrl, the position motors hold the key's joint angles."""
  name = 'tilted'   # every joint, velocity, activation and control away from zero
  sim = fm.load(_manifest(tmp_path, name))
  m = sim.mj_model
  ref = _c_keyframe(m, name)
  st = sim.reset(sim.default_params(2), fm.world_keys(0, 2))
  d = st.data
  for w in range(2):
    np.testing.assert_allclose(np.asarray(d.qpos[w]), ref.qpos, atol=1e-6)
    np.testing.assert_allclose(np.asarray(d.qvel[w]), ref.qvel, atol=1e-6)
    np.testing.assert_allclose(np.asarray(d.act[w]), ref.act, atol=1e-6)
    np.testing.assert_allclose(np.asarray(d.mocap_pos[w]), ref.mocap_pos, atol=1e-6)
    ctrl = np.asarray(st.ctrl[w])
    np.testing.assert_allclose(ctrl[3], ref.ctrl[3], atol=1e-6)   # no component: the key's
    np.testing.assert_allclose(ctrl[:3], ref.qpos[7:10], atol=1e-6)   # motors hold the pose
  kid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, name)
  s0 = physics_c.initial_states(m, 2, keyframe=kid)
  sref = np.zeros(mujoco.mj_stateSize(m, physics_c._STATE))
  mujoco.mj_getState(m, ref, sref, physics_c._STATE)
  np.testing.assert_array_equal(s0, np.tile(sref, (2, 1)))


def test_mujoco_c_rollout_starts_at_the_keyframe(tmp_path):
  """The C backend: every joint (encoders' truth) at the key's qpos at tick 0, then as a
  MuJoCo C `mj_step` loop from `mj_resetDataKeyframe` with the key's ctrl held (no component
  drives an actuator: each keeps the key's control, as in the MJX loop)."""
  enc = [{'id': f'{n}_enc', 'type': 'fibril_sim/encoder',
          'config': {'joint': f'{n}_hip', 'period_s': DT}} for n in LEGS]
  c = fm.load(_manifest(tmp_path, 'tilted', components=enc), physics='c')
  ref = _c_keyframe(c.mj_model, 'tilted')
  ticks = 20
  _, tr, _ = c.rollout(c.default_params(2), fm.world_keys(0, 2), ticks)
  want = []
  for _ in range(ticks + 1):
    want.append(ref.qpos[7:11].copy())
    mujoco.mj_step(c.mj_model, ref)
  want = np.asarray(want)
  assert np.abs(want[-1] - want[0]).max() > 0.05   # the tilted table moves
  for i, n in enumerate(LEGS):
    got = np.asarray(tr['truth'][f'{n}_enc']['position'])
    np.testing.assert_allclose(got[:, 0], want[0, i], atol=1e-6)
    np.testing.assert_allclose(got, np.broadcast_to(want[:, i], got.shape), atol=1e-5,
                               err_msg=n)


def test_a_table_started_at_its_keyframe_stands_and_its_accelerometer_reads_g(table):
  """From `home` (feet on the floor, the actuators at the key's ctrl) the table stays level
  and the IMU's specific force at g within its noise once the contacts have settled (0.1 s:
  MJX's capsule-plane contacts sink a little further than the key's, under 1 m/s^2 at the
  first tick; from `qpos0` the table drops 0.25 m onto its feet, tens of m/s^2)."""
  n, g, settle = 75, 9.81, 25
  _, tr, _ = table.rollout(table.default_params(1), fm.world_keys(0, 1), n)
  truth = np.linalg.norm(np.asarray(tr['truth']['imu']['linear_acceleration'])[0], axis=-1)
  sample = np.linalg.norm(np.asarray(tr['sensor']['imu'].sample.linear_acceleration)[0], axis=-1)
  assert np.abs(truth - g).max() < 1.0, np.abs(truth - g).max()
  truth, sample = truth[settle:], sample[settle:]
  assert np.abs(truth - g).max() < 0.02, np.abs(truth - g).max()
  # ICM-42688-P profile: 6.86e-4 m/s^2/sqrt(Hz) white noise, sampled at 250 Hz: sigma 0.008
  # m/s^2 per axis; 0.02 of physics + 5 sigma
  assert np.abs(np.median(sample) - g) < 0.02, np.median(sample)
  assert np.abs(sample - g).max() < 0.06, np.abs(sample - g).max()
  q = np.asarray(tr['truth']['imu']['orientation'])[0]
  assert np.abs(q[:, 0]).min() > 0.9999   # level all along


def test_an_unknown_keyframe_is_named_with_the_models_keys(tmp_path):
  with pytest.raises(ConfigError) as e:
    fm.load(_manifest(tmp_path, 'hom'))
  msg = str(e.value)
  assert "keyframe = 'hom': no keyframe of that name in the model (did you mean 'home'?)" in msg
  assert "the model's keyframes: 'tilted', 'home'" in msg


def test_campaign_initial_offsets_add_to_the_keyframe_and_the_whole_pose_is_one_entry(tmp_path):
  """`initial:qpos` with a per-joint spread (every hinge, model order, one entry) and
  `initial:qpos.fl_hip` on top: at tick 0 each joint (encoder truth, MuJoCo C backend) is the
  key's angle plus the world's sampled offsets; a list of the wrong length names the count."""
  from fibril_mjx.workflows.campaign import engine, spec
  enc = [{'id': f'{n}_enc', 'type': 'fibril_sim/encoder',
          'config': {'joint': f'{n}_hip', 'period_s': DT}} for n in LEGS]
  _manifest(tmp_path, 'tilted', components=enc)
  std = [0.01, 0.02, 0.03, 0.04]
  doc = {'fibril_campaign': 1, 'manifest': 'manifest.yaml', 'worlds': 4, 'seed': 1,
         'duration_s': 2 * DT, 'physics': 'c',
         'vary': {'initial:qpos': {'dist': 'normal', 'mean': 0.0, 'std': std},
                  'initial:qpos.fl_hip': {'dist': 'uniform', 'low': 0.1, 'high': 0.2}},
         'metrics': []}
  path = tmp_path / 'campaign.yaml'
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  plan = engine.Plan(spec.read(path))
  worlds = np.arange(4)
  samples = plan.sample(worlds)
  _, flat = plan.run_worlds(worlds, samples, trace=True)
  pose, fl = samples['initial:qpos'][0], samples['initial:qpos.fl_hip'][0]
  assert pose.shape == (4, 4) and np.all(np.abs(pose).std(axis=0) > 0)
  key = _c_keyframe(plan.sim.mj_model, 'tilted').qpos[7:]
  for i, n in enumerate(LEGS):
    want = key[i] + pose[:, i] + (fl if n == 'fl' else 0.0)
    np.testing.assert_allclose(np.asarray(flat[f'truth/{n}_enc/position'])[:, 0], want,
                               atol=1e-6, err_msg=n)
  doc['vary']['initial:qpos']['std'] = std[:3]
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  with pytest.raises(ConfigError, match=r"vary.initial:qpos = 3: one value or a per-joint list "
                     r"of 4 \(the hinge and slide joints in model order: fl_hip, fr_hip, bl_hip, "
                     r"br_hip\)"):
    engine.Plan(spec.read(path))
