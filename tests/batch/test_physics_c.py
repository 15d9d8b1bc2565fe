"""The open-loop physics backends (`fibril_mjx.batch.physics_c`): MuJoCo C through
`mujoco.rollout` (`physics='c'`) and recorded state logs (`--trajectory`).

References outside the code under test: MJX in the loop (the same device pipeline on MJX's
physics) for the turntable, and a MuJoCo C `mj_step` loop written here for the state log."""

import copy
import pathlib

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import fibril_mjx as fm
from fibril_mjx.batch import physics_c
from fibril_mjx.errors import FibrilError
from fibril_mjx.io import trajectory as traj_io
from fibril_mjx.batch.simulation import Controller, Options, Start

REPO = pathlib.Path(__file__).resolve().parents[2]
TURNTABLE = REPO / 'manifests' / 'ahrs_turntable.yaml'
N, T = 3, 120


@pytest.fixture(scope='module')
def sims():
  mj = fm.load(TURNTABLE)
  return mj, fm.Simulation(mj.built, physics='c')


@pytest.fixture(scope='module')
def runs(sims):
  mj, c = sims
  p, keys = mj.default_params(N), fm.world_keys(0, N)
  return mj.rollout(p, keys, T)[1], c.rollout(p, keys, T)[1]


def test_turntable_truth_agrees_with_mjx_to_float32_rounding(runs):
  """Stated tolerance: |c − mjx| ≤ 2e-5 · max(1, |x|) on every truth leaf (MuJoCo C in float64
  cast to float32 against MJX in float32, 120 ticks of a smooth contact-free model)."""
  mj, c = runs
  pairs = zip(jax.tree_util.tree_flatten_with_path(mj['truth'])[0], jax.tree.leaves(c['truth']))
  checked = 0
  for (path, a), b in pairs:
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, jax.tree_util.keystr(path)
    if a.dtype.kind == 'f':
      np.testing.assert_allclose(b, a, rtol=0, atol=2e-5 * max(1.0, float(np.abs(a).max())),
                                 err_msg=jax.tree_util.keystr(path))
      checked += 1
  assert checked >= 3   # orientation, angular velocity, linear acceleration


def test_turntable_samples_agree_within_one_output_step(runs):
  """Delivered samples: the same instants and validity, values within one output resolution
  step (a float32 rounding may cross a quantization boundary) of the MJX run."""
  mj, c = runs
  a, b = mj['sensor']['ahrs'], c['sensor']['ahrs']
  np.testing.assert_array_equal(np.asarray(a.new_data), np.asarray(b.new_data))
  np.testing.assert_array_equal(np.asarray(a.sample_tick), np.asarray(b.sample_tick))
  w_a, w_b = np.asarray(a.sample.angular_velocity), np.asarray(b.sample.angular_velocity)
  step = np.diff(np.unique(np.round(w_a, 7))).min()
  assert np.abs(w_a - w_b).max() <= step * 1.01
  assert np.mean(w_a == w_b) > 0.9


def test_a_world_is_bitwise_the_same_in_any_chunk_layout_and_with_shared_physics(sims):
  _, c = sims
  p, keys = c.default_params(4), fm.world_keys(3, 4)
  whole = c.rollout(p, keys, 40)[1]
  parts = c.rollout(p, keys, 40, options=Options(chunk_worlds=3))[1]
  alone = c.rollout(jax.tree.map(lambda x: x[2:3], p), keys[2:3], 40)[1]
  # the sensor-only turntable shares one C trajectory; one per world gives the same bits
  per_world = c.rollout(p, keys, 40, options=Options(share_physics=False))[1]
  for x, y, z, u in zip(jax.tree.leaves(whole), jax.tree.leaves(parts), jax.tree.leaves(alone),
                        jax.tree.leaves(per_world)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(x)[2:3], np.asarray(z))
    np.testing.assert_array_equal(np.asarray(x), np.asarray(u))


def test_a_controller_or_a_closed_loop_component_is_refused_in_one_line(sims):
  with pytest.raises(FibrilError) as e:
    fm.load(REPO / 'manifests' / 'leg_robstride.yaml', physics='c')
  msg = str(e.value)
  assert '\n' not in msg
  assert "component 'hip' (fibril_sim/motion_motor) closes a loop on physics" in msg
  assert "use physics='mjx'" in msg
  _, c = sims
  with pytest.raises(FibrilError, match='a controller closes the loop'):
    c.rollout(c.default_params(1), fm.world_keys(0, 1), 5,
              controller=Controller(lambda obs, carry: ({}, carry), init=jnp.zeros(())))
  with pytest.raises(FibrilError, match="physics 'gpu': unknown; choose one of mjx, c"):
    fm.Simulation(c.built, physics='gpu')


def test_mjx_only_inputs_are_refused_on_mujoco_c_in_one_line(sims):
  """An `mjx.Model` (a whole model, MJX's) and a start `mjx.Data` cannot reach MuJoCo C: one
  line each, before anything runs."""
  mjx_sim, c = sims
  p, keys = c.default_params(1), fm.world_keys(0, 1)
  with pytest.raises(FibrilError, match=r"physics 'c': model= must be a mapping of per-world "
                     r"MJCF fields \{field: \(nworld, ...\)\} \(an mjx.Model is MJX's\)"):
    c.rollout(p, keys, 2, model=mjx_sim.mx)
  with pytest.raises(FibrilError, match=r"physics 'c': start data0 is an mjx.Data \(MJX's\); "
                     r"use physics='mjx'"):
    c.rollout(p, keys, 2, start=Start(data0=mjx_sim.data0))


def _c_log(m: mujoco.MjModel, ctrl: np.ndarray):
  """A state log made by MuJoCo C itself: `mj_step` with `ctrl[k]` at tick k."""
  d = mujoco.MjData(m)
  qpos, qvel = [], []
  for k in range(ctrl.shape[0]):
    qpos.append(d.qpos.copy())
    qvel.append(d.qvel.copy())
    d.ctrl[:] = ctrl[k]
    mujoco.mj_step(m, d)
  return np.array(qpos), np.array(qvel)


def test_a_log_recorded_from_mujoco_c_replays_to_the_samples_of_the_c_run(sims, runs, tmp_path):
  _, c = sims
  m = c.mj_model
  ctrl = np.asarray(jax.vmap(lambda k: c.actuator_script.ctrl(
      jnp.zeros(m.nu, jnp.float32), k, c.dt))(jnp.arange(T + 1)), np.float64)
  qpos, qvel = _c_log(m, ctrl)
  path = tmp_path / 'log.npz'
  np.savez(path, qpos=qpos, qvel=qvel, ctrl=ctrl)
  log = traj_io.load(path, m)
  p, keys = c.default_params(N), fm.world_keys(0, N)
  _, replay = physics_c.simulation_rollout(c, p, keys, T, trajectory=log)
  for x, y in zip(jax.tree.leaves(runs[1]['sensor']), jax.tree.leaves(replay['sensor'])):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  # Positions only: velocities are backward differences of the positions, which is what
  # MuJoCo's semi-implicit Euler integrated, so the gyro truth agrees from tick 1 on (to the
  # float64 rounding of a difference over dt, then float32).
  np.savez(tmp_path / 'pos.npz', qpos=qpos, ctrl=ctrl)
  _, pos_only = physics_c.simulation_rollout(c, p, keys, T,
                                             trajectory=traj_io.load(tmp_path / 'pos.npz', m))
  g_c = np.asarray(runs[1]['truth']['ahrs']['angular_velocity'])[:, 1:]
  g_p = np.asarray(pos_only['truth']['ahrs']['angular_velocity'])[:, 1:]
  assert np.abs(g_p - g_c).max() < 1e-5 * np.abs(g_c).max()


def test_a_log_with_qacc_replays_its_own_accelerations(sims, runs, tmp_path):
  """`qacc` in the log reaches the frames (`mj_inverse`): the accelerations MuJoCo C computed
  at each state of its own rollout (`d.qacc` of each `mj_step`) give the `c` run's truth to
  float32 rounding; zero accelerations give another accelerometer (the servos' angular
  accelerations are gone) and the same gyro; the run says which gave `sensordata`."""
  from fibril_mjx.workflows import run as runmod
  _, c = sims
  m = c.mj_model
  ctrl = np.asarray(jax.vmap(lambda k: c.actuator_script.ctrl(
      jnp.zeros(m.nu, jnp.float32), k, c.dt))(jnp.arange(T + 1)), np.float64)
  d = mujoco.MjData(m)
  log = {'qpos': [], 'qvel': [], 'ctrl': ctrl}
  qacc = []
  for k in range(T + 1):
    log['qpos'].append(d.qpos.copy())
    log['qvel'].append(d.qvel.copy())
    d.ctrl[:] = ctrl[k]
    mujoco.mj_step(m, d)           # forward (qacc of this state), then integrate
    qacc.append(d.qacc.copy())
  log = {k: np.asarray(v) for k, v in log.items()}
  qacc = np.asarray(qacc)
  p, keys = c.default_params(N), fm.world_keys(0, N)
  _, own = physics_c.simulation_rollout(c, p, keys, T, trajectory={**log, 'qacc': qacc})
  for a, b in zip(jax.tree.leaves(runs[1]['truth']), jax.tree.leaves(own['truth'])):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert np.all(np.abs(a - b) <= 2e-5 * np.maximum(1, np.abs(a)))
  _, still = physics_c.simulation_rollout(c, p, keys, T,
                                          trajectory={**log, 'qacc': np.zeros_like(qacc)})
  acc = lambda r: np.asarray(r['truth']['ahrs']['linear_acceleration'])   # noqa: E731
  gyro = lambda r: np.asarray(r['truth']['ahrs']['angular_velocity'])     # noqa: E731
  assert np.abs(acc(still) - acc(own)).max() > 1e-3
  np.testing.assert_array_equal(gyro(still), gyro(own))
  np.savez(tmp_path / 'qacc.npz', **log, qacc=qacc)
  assert runmod._load(TURNTABLE, 'jax', 'auto', tmp_path / 'qacc.npz')[2].endswith(
      'sensordata by mj_inverse with its qacc')


def test_a_timed_log_is_resampled_onto_the_ticks_and_bad_logs_name_the_rule(sims, tmp_path):
  _, c = sims
  m = c.mj_model
  t = np.linspace(0.0, 0.1, 11)
  qpos = np.outer(t, np.ones(m.nq))
  np.savez(tmp_path / 'timed.npz', qpos=qpos, time=t)
  log = traj_io.load(tmp_path / 'timed.npz', m)
  assert log['qpos'].shape == (51, m.nq)
  np.testing.assert_allclose(log['qpos'][:, 0], np.arange(51) * c.dt, atol=1e-12)
  np.testing.assert_allclose(log['qvel'][:, 0], 1.0, atol=1e-9)
  np.savez(tmp_path / 'wide.npz', qpos=np.zeros((5, m.nq + 1)))
  with pytest.raises(fm.ConfigError, match=rf'qpos.*expected shape \(5, {m.nq}\)'):
    traj_io.load(tmp_path / 'wide.npz', m)
  np.savez(tmp_path / 'none.npz', qvel=np.zeros((5, m.nv)))
  with pytest.raises(fm.ConfigError, match='a state log needs qpos'):
    traj_io.load(tmp_path / 'none.npz', m)


def test_wheeled_base_runs_on_mujoco_c():
  """Contacts, dcmotor wheels (MuJoCo C's own dcmotor) and four motor components."""
  c = fm.load(REPO / 'manifests' / 'wheeled_base.yaml', physics='c')
  final, tr, _ = c.rollout(c.default_params(2), fm.world_keys(0, 2), 60)
  assert np.all(np.asarray(final.diverged) < 0)
  fb = tr['sensor']['wheel_fl']
  assert np.asarray(fb.new_data).sum() > 10
  v = np.asarray(tr['truth']['wheel_fl']['velocity'])[:, -1]
  assert np.all(v > 0.05)   # the command script drives it forward


def _c_gyro(m: mujoco.MjModel, ctrl: np.ndarray, adr: int) -> np.ndarray:
  """The gyro of every tick from a MuJoCo C `mj_step` loop (sensordata of `x_k`, `ctrl_k`)."""
  d = mujoco.MjData(m)
  out = []
  for k in range(ctrl.shape[0]):
    d.ctrl[:] = ctrl[k]
    mujoco.mj_step(m, d)
    out.append(d.sensordata[adr:adr + 3].copy())
  return np.array(out)


def test_per_world_mjcf_fields_reach_mujoco_c(sims):
  """`model={'dof_damping': (n, nv)}` builds per-world MjModels: each world's gyro truth equals
  a MuJoCo C loop on a model with that damping (float32 rounding)."""
  _, c = sims
  m = c.mj_model
  damp = np.stack([m.dof_damping, 4.0 * m.dof_damping + 0.05])
  _, tr, _ = c.rollout(c.default_params(2), fm.world_keys(0, 2), T, model={'dof_damping': damp})
  ctrl = np.asarray(jax.vmap(lambda k: c.actuator_script.ctrl(
      jnp.zeros(m.nu, jnp.float32), k, c.dt))(jnp.arange(T + 1)), np.float64)
  adr = c.components['ahrs'].sensors[1].adr
  got = np.asarray(tr['truth']['ahrs']['angular_velocity'])
  for w in range(2):
    mw = copy.copy(m)
    mw.dof_damping[:] = damp[w]
    ref = _c_gyro(mw, ctrl, adr)
    np.testing.assert_allclose(got[w], ref, atol=2e-5 * max(1.0, np.abs(ref).max()))
  assert np.abs(got[0] - got[1]).max() > 1e-3   # the damping did change the motion


def test_a_campaign_on_mujoco_c_records_its_backend_and_replays_a_row(tmp_path):
  from fibril_mjx.workflows import replay
  from fibril_mjx.workflows.campaign import execute, spec
  path = REPO / 'manifests' / 'campaigns' / 'ahrs_robustness.yaml'
  out = tmp_path / 'mc'
  meta = execute.run(path, out, spec.Overrides(worlds=6, duration_s=0.1, chunk_worlds=4),
                     progress=False)
  assert meta['options']['physics'] == 'c'
  assert meta['physics_choice'].startswith('auto: open loop on a CPU host')
  assert 'physics c (auto: open loop' in (out / 'summary.txt').read_text()
  res = replay.replay(out, 5, tmp_path / 'r5')
  assert res['equal_to_campaign_row'] is True


def test_campaign_physics_field_is_validated(tmp_path):
  from fibril_mjx.workflows.campaign import spec
  text = (REPO / 'manifests' / 'campaigns' / 'ahrs_robustness.yaml').read_text()
  bad = tmp_path / 'bad.yaml'
  bad.write_text(text.replace('fibril_campaign: 1', 'fibril_campaign: 1\nphysics: gpu')
                 .replace('manifest: ../ahrs_turntable.yaml',
                          f'manifest: {TURNTABLE}'))
  with pytest.raises(FibrilError) as e:
    spec.read(bad)
  assert "physics = 'gpu': must be auto, mjx or c (the physics backend)" in str(e.value)


def test_run_writes_the_backend_and_replays_a_log_through_the_cli_path(sims, tmp_path):
  """`fibril-mjx run` (the workflow): auto picks `c` for the open-loop turntable and says why;
  `--trajectory` of a log MuJoCo C made gives the samples of the `c` run."""
  import json
  from fibril_mjx.workflows import run as runmod
  _, c = sims
  s = runmod.run(TURNTABLE, worlds=2, seed=0, duration_s=0.1, out=tmp_path / 'c',
                 options=runmod.RunOptions(physics='auto'))
  meta = json.loads((tmp_path / 'c' / 'meta.json').read_text())
  assert s['physics'] == meta['physics'] == 'c'
  assert meta['physics_choice'].startswith('auto: open loop on a CPU host')
  assert 'physics backend: c (auto: open loop' in (tmp_path / 'c' / 'summary.txt').read_text()
  m = c.mj_model
  n_ticks = s['ticks']
  ctrl = np.asarray(jax.vmap(lambda k: c.actuator_script.ctrl(
      jnp.zeros(m.nu, jnp.float32), k, c.dt))(jnp.arange(n_ticks + 1)), np.float64)
  qpos, qvel = _c_log(m, ctrl)
  np.savez(tmp_path / 'log.npz', qpos=qpos, qvel=qvel, ctrl=ctrl)
  t = runmod.run(TURNTABLE, worlds=2, seed=0, duration_s=0.1, out=tmp_path / 't',
                 options=runmod.RunOptions(trajectory=tmp_path / 'log.npz'))
  assert t['physics'] == 'trajectory'
  assert ('sensordata by mj_forward (accelerations of the modelled forces)'
          in (tmp_path / 't' / 'summary.txt').read_text())
  a, b = np.load(tmp_path / 'c' / 'trace.npz'), np.load(tmp_path / 't' / 'trace.npz')
  sensors = [k for k in a.files if k.startswith('sensor/')]
  assert sensors
  for k in sensors:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  with pytest.raises(FibrilError, match='cannot be combined with --physics mjx'):
    runmod.run(TURNTABLE, worlds=2, seed=0, duration_s=0.1, out=tmp_path / 'x',
               options=runmod.RunOptions(physics='mjx', trajectory=tmp_path / 'log.npz'))


def _pgs_pendulum() -> str:
  """The MJCF of a damped pendulum with an IMU site, solved by PGS (which MJX lacks)."""
  spec = mujoco.MjSpec()
  spec.option.timestep, spec.option.solver = 0.002, mujoco.mjtSolver.mjSOL_PGS
  arm = spec.worldbody.add_body(name='arm', pos=[0, 0, 1])
  arm.add_joint(name='hinge', type=mujoco.mjtJoint.mjJNT_HINGE, axis=[0, 1, 0], damping=0.01)
  arm.add_geom(type=mujoco.mjtGeom.mjGEOM_CAPSULE, fromto=[0, 0, 0, 0, 0, -0.3],
               size=[0.02, 0, 0], mass=0.4, contype=0, conaffinity=0)
  arm.add_site(name='imu', pos=[0, 0, -0.3])
  for name, kind in (('gyro', mujoco.mjtSensor.mjSENS_GYRO),
                     ('accel', mujoco.mjtSensor.mjSENS_ACCELEROMETER)):
    spec.add_sensor(name=name, type=kind, objtype=mujoco.mjtObj.mjOBJ_SITE, objname='imu')
  spec.compile()
  return spec.to_xml()


def test_a_model_mjx_cannot_step_is_refused_by_mjx_and_runs_on_mujoco_c(tmp_path):
  """`solver="PGS"` (MJX has CG and Newton only): `physics='mjx'` refuses the model at the
  load, naming the file and MJX's reason; `physics='c'` makes no MJX model and runs it, its
  gyro truth that of a MuJoCo C `mj_step` loop written here (float32 rounding)."""
  xml = _pgs_pendulum()
  (tmp_path / 'pgs.xml').write_text(xml)
  man = tmp_path / 'pgs.yaml'
  man.write_text('fibril_manifest: 1\nmodel: pgs.xml\ncomponents:\n'
                 '  - {id: imu, type: fibril_sim/imu, config: {gyroscope_sensor: gyro, '
                 'accelerometer_sensor: accel, period_s: 0.004}}\n')
  with pytest.raises(FibrilError) as e:
    fm.load(man)
  assert str(tmp_path / 'pgs.xml') in str(e.value)
  assert 'MJX cannot step this model' in str(e.value) and 'PGS' in str(e.value)
  c = fm.load(man, physics='c')
  assert 'mx' not in vars(c.built)   # the MJX model was never made
  n = 200
  qpos0 = np.array([0.6])
  _, tr, _ = c.rollout(c.default_params(1), fm.world_keys(0, 1), n,
                       start=Start(qpos_offset=qpos0[None]))
  m = mujoco.MjModel.from_xml_string(xml)
  d = mujoco.MjData(m)
  d.qpos[:] = qpos0
  ref = []
  for _ in range(n + 1):
    mujoco.mj_step(m, d)
    ref.append(d.sensordata[0:3].copy())
  got = np.asarray(tr['truth']['imu']['angular_velocity'])[0]
  ref = np.array(ref)
  assert np.abs(ref).max() > 0.5   # it swings
  np.testing.assert_allclose(got, ref, atol=2e-5 * np.abs(ref).max())


def test_an_actuators_tick_0_control_reaches_mujoco_c(tmp_path):
  """A motor whose command arrives at tick 0 (ideal transport, applied every tick) writes a
  non-zero `ctrl_0`: MuJoCo C's first step must run with it. Reference: a MuJoCo C `mj_step`
  loop written here, driven by the controls the in-loop (MJX) pipeline applied at each tick;
  the gyro truth agrees to float32 rounding. (Pass 1 once returned the placeholder frame's
  zero for tick 0: the yaw rate of tick 1 was then 0.1 rad/s short.)"""
  from conftest import ahrs_entry, write_rig
  motor = {'id': 'mot', 'type': 'fibril_sim/motor',
           'config': {'actuator': 'yaw_motor', 'application_period_s': 0.002,
                      'feedback_period_s': 0.002}}
  script = [{'component': 'mot', 'kind': 'velocity', 'offset': 0.4, 'amplitude': 0.1,
             'frequency_hz': 2.0, 'period_s': 0.002}]
  path = write_rig(tmp_path, [motor, ahrs_entry(period_s=0.002)], script=[],
                   extra={'command_script': script})
  c, mj = fm.load(path, physics='c'), fm.load(path)
  p, keys, ticks = c.default_params(2), fm.world_keys(0, 2), 6
  _, tr, _ = c.rollout(p, keys, ticks)
  st = mj.reset(p, keys)
  ctrl = [np.asarray(st.ctrl)[0]]
  for _ in range(ticks):
    st, _ = mj.step(p, st)
    ctrl.append(np.asarray(st.ctrl)[0])
  ctrl = np.asarray(ctrl, np.float64)
  assert np.abs(ctrl[0]).max() > 0.1   # the case under test: a control at tick 0
  m = c.mj_model
  ref = _c_gyro(m, ctrl, c.components['ahrs'].sensors[1].adr)
  got = np.asarray(tr['truth']['ahrs']['angular_velocity'])
  for w in range(2):
    np.testing.assert_allclose(got[w], ref, atol=2e-5 * max(1.0, np.abs(ref).max()))
