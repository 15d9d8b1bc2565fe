"""A sample describes the state at its stamp (SPEC §4), checked against MuJoCo C.

The reference is MuJoCo C itself: a float64 `MjData` stepped with the same controls, with
`mj_forward` evaluated at every acquisition tick k; its `sensordata`, `qpos`, `site_xpos`, ...
are the state `x_k` with the controls of tick k. Every component is ideal (error terms off,
latency 0, period = dt), so its sample at tick k must equal a float64 NumPy function of that
reference state — written here, not taken from the code under test.

Tolerances: MJX runs in float32 against float64 C. Over the few hundred ticks compared the
float32 rounding of the state (relative ~1e-7 per operation) grows with the chaotic double
pendulum, so each quantity is compared to `TOL_REL` of its largest magnitude over the run (plus
the float32 spacing of its values). Every check also compares against the reference shifted by
one tick, which must be more than `SHIFT_MARGIN` times worse: a sample one tick stale (the
behaviour before the fix) fails it.
"""

import math
import pathlib
import textwrap

import jax
import mujoco
import numpy as np
import pytest
import yaml

import ref_helpers
import fibril_mjx
from fibril_mjx.batch.simulation import Controller, Options

DT = 0.002
TICKS = 300
TOL_REL = 1e-3        # of the quantity's range over the run (see above; measured <= 1e-4)
SHIFT_MARGIN = 5.0    # the one-tick-shifted reference must be at least this much worse
TORQUE_AMP, TORQUE_HZ = 0.5, 1.0
# Every rollout runs 2 worlds as one sub-batch of 2, the layout the default picks for 2 worlds;
# passing it (`ONE_SUB_BATCH`) spares each rig the LAPACK-size analysis, a trace of its step.
ONE_SUB_BATCH = {'options': Options(sub_batch=2)}

MODEL = textwrap.dedent("""\
    <mujoco model="sample_time">
      <option timestep="{dt}" integrator="{integrator}"/>
      <!-- MJX 3.17's rangefinder needs a material (see assets/examples/survey_quad.xml) -->
      <asset><material name="grey" rgba="0.5 0.5 0.5 1"/></asset>
      <worldbody>
        <geom name="floor" type="plane" size="5 5 0.1" material="grey"/>
        <body name="upper" pos="0 0 1.0" euler="0 50 0">
          <joint name="shoulder" type="hinge" axis="0 1 0" damping="0.01"/>
          <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="0.5" contype="0"
                conaffinity="0"/>
          <body name="lower" pos="0 0 -0.3">
            <joint name="elbow" type="hinge" axis="0 1 0" limited="true" range="-0.6 0.6"/>
            <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="0.3" contype="0"
                  conaffinity="0"/>
            <site name="tip" pos="0.01 0.02 -0.3"/>
            <site name="tip_down" pos="0 0 -0.3" zaxis="0.2 0 -1"/>
          </body>
        </body>
        <body name="ball" pos="0.6 0 0.12">
          <freejoint/>
          <geom type="sphere" size="0.05" mass="0.2"/>
          <site name="ball_imu" pos="0.01 0 0.02"/>
        </body>
      </worldbody>
      <actuator><motor name="shoulder_motor" joint="shoulder"/></actuator>
      <sensor>
        <framequat name="tip_quat" objtype="site" objname="tip"/>
        <gyro name="tip_gyro" site="tip"/>
        <accelerometer name="tip_acc" site="tip"/>
        <velocimeter name="tip_vel" site="tip"/>
        <rangefinder name="tip_range" site="tip_down"/>
        <gyro name="ball_gyro" site="ball_imu"/>
        <accelerometer name="ball_acc" site="ball_imu"/>
      </sensor>
    </mujoco>
    """)

FIELD_UT = [20.0, 5.0, -40.0]
ORIGIN = {'origin_latitude_deg': 47.0, 'origin_longitude_deg': 8.0, 'origin_height_m': 400.0}
EVERY_TICK = {'period_s': DT}


def components():
  return [
      {'id': 'shoulder', 'type': 'fibril_sim/motor',
       'config': {'actuator': 'shoulder_motor', 'application_period_s': DT,
                  'feedback_period_s': DT}},
      {'id': 'imu', 'type': 'fibril_sim/imu',
       'config': {'gyroscope_sensor': 'tip_gyro', 'accelerometer_sensor': 'tip_acc',
                  **EVERY_TICK}},
      {'id': 'ahrs', 'type': 'fibril_sim/ahrs',
       'config': {'orientation_sensor': 'tip_quat', 'gyroscope_sensor': 'tip_gyro',
                  'accelerometer_sensor': 'tip_acc', 'yaw_reference': 'world', **EVERY_TICK}},
      {'id': 'ball_imu', 'type': 'fibril_sim/imu',
       'config': {'gyroscope_sensor': 'ball_gyro', 'accelerometer_sensor': 'ball_acc',
                  **EVERY_TICK}},
      {'id': 'mag', 'type': 'fibril_sim/magnetometer',
       'config': {'site': 'tip', 'earth_field_ut': FIELD_UT, **EVERY_TICK}},
      {'id': 'baro', 'type': 'fibril_sim/barometer', 'config': {'site': 'tip', **EVERY_TICK}},
      {'id': 'pitot', 'type': 'fibril_sim/airspeed',
       'config': {'velocity_sensor': 'tip_vel', **EVERY_TICK}},
      {'id': 'gnss', 'type': 'fibril_sim/gnss',
       'config': {'velocity_sensor': 'tip_vel', **ORIGIN, **EVERY_TICK}},
      {'id': 'range', 'type': 'fibril_sim/rangefinder',
       'config': {'rangefinder_sensor': 'tip_range', 'max_range_m': 10.0, **EVERY_TICK}},
      {'id': 'ekf', 'type': 'fibril_mjx/attitude_ekf',
       'config': {'imu': 'imu', 'estimator': 'quaternion',
                  'gyro_noise_density': [1e-3, 1e-3, 1e-3],
                  'accel_noise_stddev_m_s2': [0.5, 0.5, 0.5]}},
  ]


def write_manifest(tmp: pathlib.Path, integrator: str) -> pathlib.Path:
  return ref_helpers.write_manifest(
      tmp, MODEL.format(dt=DT, integrator=integrator), components(),
      command_script=[{'component': 'shoulder', 'kind': 'effort', 'amplitude': TORQUE_AMP,
                       'frequency_hz': TORQUE_HZ, 'period_s': DT}])


def c_reference(xml_path: pathlib.Path, ticks: int) -> dict:
  """MuJoCo C, float64: the state at every tick k = 0 … ticks with the controls of tick k,
  from `mj_forward` at that state (then `mj_step` to the next)."""
  m = mujoco.MjModel.from_xml_path(str(xml_path))
  d = mujoco.MjData(m)
  sid = {n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, n)
         for n in ('tip_quat', 'tip_gyro', 'tip_acc', 'tip_vel', 'tip_range', 'ball_gyro',
                   'ball_acc')}
  tip = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, 'tip')

  def read(name):
    i = sid[name]
    return d.sensordata[m.sensor_adr[i]:m.sensor_adr[i] + m.sensor_dim[i]].copy()

  out = {k: [] for k in ('quat', 'gyro', 'acc', 'vel', 'range', 'ball_gyro', 'ball_acc',
                         'qpos', 'qvel', 'force', 'tip_pos', 'tip_mat')}
  for k in range(ticks + 1):
    d.ctrl[0] = TORQUE_AMP * math.sin(2 * math.pi * TORQUE_HZ * k * DT)
    mujoco.mj_forward(m, d)
    out['quat'].append(read('tip_quat'))
    out['gyro'].append(read('tip_gyro'))
    out['acc'].append(read('tip_acc'))
    out['vel'].append(read('tip_vel'))
    out['range'].append(read('tip_range'))
    out['ball_gyro'].append(read('ball_gyro'))
    out['ball_acc'].append(read('ball_acc'))
    out['qpos'].append(d.qpos[0])
    out['qvel'].append(d.qvel[0])
    out['force'].append(d.actuator_force[0])
    out['tip_pos'].append(d.site_xpos[tip].copy())
    out['tip_mat'].append(d.site_xmat[tip].reshape(3, 3).copy())
    mujoco.mj_step(m, d)
  return {k: np.asarray(v, np.float64) for k, v in out.items()}


def expected(ref: dict) -> dict:
  """The ideal samples of every component at each tick, float64, from the C state."""
  rot = ref['tip_mat']
  v_world = np.einsum('kij,kj->ki', rot, ref['vel'])
  u = ref['vel'][:, 0]
  z = ref['tip_pos'][:, 2]
  q = ref['quat'] * np.where(ref['quat'][:, :1] < 0, -1.0, 1.0)   # w >= 0, as the AHRS
  isa_exponent = 9.80665 * 0.0289644 / (8.31432 * 0.0065)
  return {
      ('imu', 'angular_velocity'): ref['gyro'],
      ('imu', 'linear_acceleration'): ref['acc'],
      ('ahrs', 'orientation'): q,
      ('ahrs', 'angular_velocity'): ref['gyro'],
      ('ahrs', 'linear_acceleration'): ref['acc'],
      ('ball_imu', 'angular_velocity'): ref['ball_gyro'],
      ('ball_imu', 'linear_acceleration'): ref['ball_acc'],
      ('shoulder', 'position'): ref['qpos'],
      ('shoulder', 'velocity'): ref['qvel'],
      ('shoulder', 'applied_effort'): ref['force'],
      ('mag', 'magnetic_field_ut'): np.einsum('kji,j->ki', rot, np.asarray(FIELD_UT)),
      ('baro', 'pressure_pa'): 101325.0 * (1 - 0.0065 * z / 288.15) ** isa_exponent,
      ('pitot', 'differential_pressure_pa'): 0.5 * 1.225 * u * np.abs(u),
      ('gnss', 'velocity_enu_m_s'): v_world,
      ('gnss', 'height_m'): ORIGIN['origin_height_m'] + z,
      ('range', 'distance_m'): ref['range'][:, 0],
  }


def spacing(x: np.ndarray) -> float:
  """float32 spacing at the largest |value| of `x`."""
  return float(np.spacing(np.float32(np.max(np.abs(x)))))


def compare(name, got, want, tol_rel=TOL_REL, atol=1e-6):
  """Max error of `got` vs `want` (ticks × ...) and vs `want` one tick late; asserts both.

  The tolerance is `tol_rel` of the quantity's range over the run, plus 4 float32 spacings
  at its largest magnitude (its storage rounding), plus `atol` (in its unit) for quantities
  that stay near zero. The stale check runs where one tick of motion is resolvable in float32
  (more than 20 spacings)."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  ulp = spacing(want)
  tol = tol_rel * float(np.ptp(want, axis=0).max()) + 4 * ulp + atol
  err = float(np.max(np.abs(got - want)))
  stale = float(np.max(np.abs(got[1:] - want[:-1])))   # a sample carrying x_{k-1}
  print(f'{name:40s} err {err:10.3g}  tol {tol:10.3g}  one-tick-stale {stale:10.3g}')
  assert err <= tol, f'{name}: max error {err:.3g} > tolerance {tol:.3g}'
  if stale > 20 * ulp + atol:
    assert stale > SHIFT_MARGIN * err, (f'{name}: the one-tick-stale reference is not clearly '
                                        f'worse ({stale:.3g} vs {err:.3g})')
  return err, stale


@pytest.fixture(scope='module')
def rigs(tmp_path_factory):
  """`rigs(integrator) -> (directory, Simulation)` of the full manifest, built once per
  integrator for the whole file (the controller test reuses the Euler one: its reset program
  too)."""
  built = {}

  def get(integrator):
    if integrator not in built:
      tmp = tmp_path_factory.mktemp(f'st_{integrator}')
      built[integrator] = tmp, fibril_mjx.load(write_manifest(tmp, integrator))
    return built[integrator]
  return get


@pytest.fixture(scope='module', params=['Euler', 'implicitfast', 'RK4'])
def run(request, rigs):
  tmp, sim = rigs(request.param)
  _, trace, _ = sim.rollout(sim.default_params(2), fibril_mjx.world_keys(0, 2), TICKS,
                            **ONE_SUB_BATCH)
  trace = jax.tree.map(lambda x: np.asarray(x)[0], trace)
  return sim, trace, c_reference(tmp / 'model.xml', TICKS)


def test_every_component_samples_the_state_at_its_stamp(run):
  sim, trace, ref = run
  want = expected(ref)
  failed = []
  for (cid, field), w in want.items():
    d = trace['sensor'][cid]
    assert np.all(d.new_data) and np.array_equal(d.sample_tick, np.arange(TICKS + 1)), cid
    got = getattr(d.sample, field)
    if field == 'orientation':
      got = got * np.where(got[:, :1] < 0, -1.0, 1.0)
    try:
      compare(f'{cid}.{field}', got, w)
    except AssertionError as e:
      failed.append(str(e))
  assert not failed, '\n'.join(failed)


def test_truth_and_estimator_truth_at_the_stamp(run):
  _, trace, ref = run
  q = ref['quat'] * np.where(ref['quat'][:, :1] < 0, -1.0, 1.0)
  for cid in ('ekf', 'ahrs'):
    t = np.asarray(trace['truth'][cid]['orientation'], np.float64)
    t = t * np.where(t[:, :1] < 0, -1.0, 1.0)
    compare(f'truth/{cid}.orientation', t, q)
  compare('truth/shoulder.position', trace['truth']['shoulder']['position'], ref['qpos'])
  compare('truth/baro.site_z_m', trace['truth']['baro']['site_z_m'], ref['tip_pos'][:, 2],
          tol_rel=2e-4)


def test_first_samples_are_not_duplicated(run):
  """Tick 0 and tick 1 describe different states (before the fix both carried x_0)."""
  _, trace, ref = run
  for cid in ('imu', 'ahrs'):   # released from rest: 0 at tick 0, moving at tick 1
    w = np.asarray(trace['sensor'][cid].sample.angular_velocity, np.float64)
    assert np.max(np.abs(w[0])) < 1e-6 and np.max(np.abs(w[1])) > 1e-3, cid
    np.testing.assert_allclose(w[1], ref['gyro'][1], rtol=1e-3, atol=1e-6)
  v = trace['sensor']['shoulder'].sample.velocity
  assert v[0] == pytest.approx(0.0, abs=1e-7) and v[1] == pytest.approx(ref['qvel'][1], rel=1e-3)


HINGE = textwrap.dedent("""\
    <mujoco model="hinge">
      <option timestep="0.01" integrator="Euler"/>
      <worldbody>
        <body name="arm">
          <joint name="j" type="hinge" axis="0 0 1"/>
          <geom type="box" size="0.1 0.1 0.1" mass="1" contype="0" conaffinity="0"/>
          <site name="s"/>
        </body>
      </worldbody>
      <actuator><motor name="m" joint="j"/></actuator>
      <sensor><gyro name="gyro" site="s"/><accelerometer name="acc" site="s"/></sensor>
    </mujoco>
    """)


def test_free_hinge_delivers_omega_k_at_tick_k(tmp_path):
  """The issue's first paragraph: an ideal IMU on a free hinge under a constant torque."""
  (tmp_path / 'hinge.xml').write_text(HINGE)
  doc = {'fibril_manifest': 1, 'model': 'hinge.xml',
         'actuator_script': [{'actuator': 'm', 'amplitude': 0.0, 'offset': 0.005,
                              'frequency_hz': 1.0}],
         'components': [{'id': 'imu', 'type': 'fibril_sim/imu',
                         'config': {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'acc',
                                    'period_s': 0.01}}]}
  (tmp_path / 'm.yaml').write_text(yaml.safe_dump(doc))
  sim = fibril_mjx.load(tmp_path / 'm.yaml')
  _, tr, _ = sim.rollout(sim.default_params(2), fibril_mjx.world_keys(0, 2), 8,
                         **ONE_SUB_BATCH)
  got = np.asarray(tr['sensor']['imu'].sample.angular_velocity[0, :, 2], np.float64)
  m = mujoco.MjModel.from_xml_path(str(tmp_path / 'hinge.xml'))
  inertia_z = m.body_inertia[1, 2]
  omega = 0.005 / inertia_z * DT_HINGE * np.arange(9)   # omega_k = k·dt·τ/I (semi-implicit Euler)
  np.testing.assert_allclose(got, omega, rtol=1e-5, atol=1e-7)
  assert got[1] != got[0]


DT_HINGE = 0.01


def test_controller_on_a_latency_0_sample_sees_the_current_tick(rigs):
  """A controller closing the loop on latency-0 motor feedback sees the state of the tick it is
  called after: its command, issued at the next tick, matches a MuJoCo C loop that reads
  `qpos_k` after `mj_forward` at tick k and applies its command from tick k + 1.

  The full Euler rig (its build and reset program shared with the test above): the controller
  replaces the command script from tick 1 on, and the script's tick-0 torque is
  `TORQUE_AMP · sin(0) = 0`, the C loop's first control."""
  tmp, sim = rigs('Euler')
  gain = 2.0
  from fibril_mjx.components.actuators.motor import command as cmd

  def controller(obs, carry):
    fb = obs['sensor']['shoulder']
    return {'shoulder': cmd('effort', -gain * fb.sample.position)}, carry

  n = 150
  _, trace, _ = sim.rollout(sim.default_params(2), fibril_mjx.world_keys(0, 2), n,
                            controller=Controller(controller), **ONE_SUB_BATCH)
  got = np.asarray(trace['sensor']['shoulder'].sample.position[0], np.float64)

  m = mujoco.MjModel.from_xml_path(str(tmp / 'model.xml'))
  d = mujoco.MjData(m)
  want, u = [], 0.0
  for _ in range(n + 1):
    d.ctrl[0] = u
    mujoco.mj_forward(m, d)
    want.append(d.qpos[0])
    u = -gain * d.qpos[0]            # seen after tick k, applied from tick k + 1
    mujoco.mj_step(m, d)
  want = np.asarray(want)
  compare('controller loop position', got, want)


DCMOTOR = textwrap.dedent("""\
    <mujoco model="dc_arm">
      <option timestep="0.002" integrator="{integrator}"/>
      <worldbody>
        <body name="arm">
          <joint name="hinge" type="hinge" axis="0 1 0" damping="0.01"/>
          <geom type="capsule" size="0.02" fromto="0 0 0 0.3 0 0" mass="1" contype="0"
                conaffinity="0"/>
          <site name="tip" pos="0.3 0 0"/>
        </body>
      </worldbody>
      <actuator><dcmotor name="motor" joint="hinge" resistance="2" motorconst="0.1"/></actuator>
      <sensor><gyro name="gyro" site="tip"/><accelerometer name="acc" site="tip"/></sensor>
    </mujoco>
    """)


@pytest.mark.parametrize('integrator', ['Euler', 'implicitfast'])
def test_dcmotor_path_samples_the_state_at_its_stamp(tmp_path, integrator):
  """The dcmotor path (evaluated in JAX, split into forward and integration like MJX's):
  an ideal IMU on a dcmotor-driven arm against MuJoCo C with `mj_forward` at each stamp."""
  (tmp_path / 'dc.xml').write_text(DCMOTOR.format(integrator=integrator))
  volts, hz = 3.0, 2.0
  doc = {'fibril_manifest': 1, 'model': 'dc.xml',
         'actuator_script': [{'actuator': 'motor', 'amplitude': volts, 'frequency_hz': hz}],
         'components': [{'id': 'imu', 'type': 'fibril_sim/imu',
                         'config': {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'acc',
                                    'period_s': 0.002}}]}
  (tmp_path / 'm.yaml').write_text(yaml.safe_dump(doc))
  sim = fibril_mjx.load(tmp_path / 'm.yaml')
  assert sim.dcmotor is not None
  n = 200
  _, tr, _ = sim.rollout(sim.default_params(2), fibril_mjx.world_keys(0, 2), n,
                         **ONE_SUB_BATCH)
  m = mujoco.MjModel.from_xml_path(str(tmp_path / 'dc.xml'))
  d = mujoco.MjData(m)
  gyro, acc = [], []
  for k in range(n + 1):
    d.ctrl[0] = volts * math.sin(2 * math.pi * hz * k * 0.002)
    mujoco.mj_forward(m, d)
    gyro.append(d.sensordata[0:3].copy())
    acc.append(d.sensordata[3:6].copy())
    mujoco.mj_step(m, d)
  s = tr['sensor']['imu'].sample
  compare('dcmotor imu.angular_velocity', np.asarray(s.angular_velocity[0]), np.asarray(gyro))
  compare('dcmotor imu.linear_acceleration', np.asarray(s.linear_acceleration[0]),
          np.asarray(acc))
