"""One tiny rig carrying one component of every registered type, every optional term off
(ideal: no error terms, latency 0, every period = dt), run through `fibril_mjx` and, for the
reference, through MuJoCo C (float64 `mj_forward` at every tick k with the controls of tick k,
then `mj_step`), for `tests/components/test_truth.py` (truth) and
`tests/physics/test_stamp_parity_extero.py` (samples at their stamp).

The rig: a free body (released with a linear and angular velocity, under gravity) carrying an
IMU site, a camera, a lidar, an optical-flow sensor and a tilted rangefinder over a floor, with
landmark sites and a wall in view; three independent joints far away drive a motor (effort
sine), a scalar actuator (value sine), a motion motor (impedance sine command) and a position
servo (released spinning, braked by its back-EMF). Integrator
Euler, so the motion motor's law `kp·(p* − q) + kd·(v* − q̇) + ff` is integrated as written
(`components/actuators/motion_motor.py`): MuJoCo C gets that law as `qfrc_applied` with the
motion motor's three channels zeroed (gain and bias 0), an independent copy of the dynamics.
"""

from __future__ import annotations

import copy
import functools
import math
import pathlib
import tempfile
import textwrap

import jax
import mujoco
import numpy as np
import ref_helpers
from fibril_mjx.batch.simulation import Start

DT = 0.002
TICKS = 40
EVERY_TICK = {'period_s': DT}
FIELD_UT = [20.0, 5.0, -40.0]
WIND = [-3.0, 1.5, 0.0]
ORIGIN = {'origin_latitude_deg': 47.0, 'origin_longitude_deg': 8.0, 'origin_height_m': 400.0}
QVEL0 = [0.8, -0.3, 0.2, 0.3, -0.2, 0.5]          # rig: world linear (m/s), body angular (rad/s)
MOT = {'amplitude': 0.3, 'frequency_hz': 3.0}      # motor effort sine (N·m)
SC = {'amplitude': 2.0, 'frequency_hz': 4.0}       # scalar actuator value sine (N)
MM = {'amplitude': 0.4, 'frequency_hz': 2.0, 'kp': 8.0, 'kd': 0.3, 'effort_ff': 0.1}
# position servo: scripted goal, firmware gains 0 (the command script carries kp / kd for
# motion commands only), so duty = 0 and the motor torque is the back-EMF brake −kt²·q̇/R of a
# joint released spinning at PS_QVEL0; every friction term off
PS = {'torque_constant': 0.2, 'resistance_ohm': 1.0}
PS_QVEL0 = 2.0
LANDMARKS = ['lm0', 'lm1', 'lm2', 'lm3']
LIDAR = {'horizontal_samples': 8, 'horizontal_min_deg': -180.0, 'horizontal_max_deg': 135.0,
         'vertical_samples': 2, 'vertical_min_deg': -30.0, 'vertical_max_deg': 0.0,
         'max_range_m': 30.0}
CAMERA = {'width_px': 320, 'height_px': 240, 'fx_px': 200.0, 'fy_px': 210.0, 'cx_px': 159.5,
          'cy_px': 119.5}

MODEL = textwrap.dedent("""\
    <mujoco model="truth_rig">
      <compiler angle="radian"/>
      <option timestep="{dt}" integrator="Euler"/>
      <include file="package://fibril_sim_models/mujoco/actuator_presets.xml"/>
      <!-- MJX 3.17's rangefinder needs a material (see assets/examples/survey_quad.xml) -->
      <asset><material name="grey" rgba="0.5 0.5 0.5 1"/></asset>
      <default><geom contype="0" conaffinity="0"/></default>
      <worldbody>
        <geom name="floor" type="plane" size="30 30 0.1" material="grey"/>
        <geom name="wall" type="box" pos="6 0 1" size="0.2 3 1" material="grey"/>
        <site name="lm0" pos="3 0.5 1.2"/>
        <site name="lm1" pos="2.5 -0.4 0.8"/>
        <site name="lm2" pos="4 0.3 1.4"/>
        <site name="lm3" pos="3.5 -0.6 1.1"/>
        <body name="rig" pos="0 0 1">
          <freejoint/>
          <geom type="box" size="0.05 0.05 0.02" mass="1" material="grey"/>
          <site name="imu" pos="0.01 0.02 0.005" euler="0.1 0.2 0.3"/>
          <site name="cam" pos="0.05 0 0" zaxis="1 0 0"/>
          <site name="lidar" pos="0 0 0.03"/>
          <site name="flow" pos="0 0.02 -0.02" zaxis="0 0 -1"/>
          <site name="down" pos="0 0 -0.02" zaxis="0.2 0 -1"/>
        </body>
        <body name="b_mot" pos="0 40 1"><joint name="j_mot" type="hinge" axis="0 1 0" damping="0.05"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
        <body name="b_sc" pos="2 40 1"><joint name="j_sc" type="slide" axis="1 0 0"/>
          <geom type="sphere" size="0.05" mass="1"/></body>
        <body name="b_mm" pos="4 40 1"><joint name="j_mm" type="hinge" axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.02" mass="1"/></body>
        <body name="b_ps" pos="6 40 1"><joint name="j_ps" type="hinge" axis="0 0 1"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
      </worldbody>
      <actuator>
        <motor name="a_mot" joint="j_mot"/>
        <motor name="a_sc" joint="j_sc"/>
        <position name="mm_p" class="fibril_sim_hw_robstride_operation_position" joint="j_mm"/>
        <velocity name="mm_v" class="fibril_sim_hw_robstride_operation_velocity" joint="j_mm"/>
        <motor name="mm_f" class="fibril_sim_hw_robstride_operation_feedforward" joint="j_mm"/>
        <motor name="a_ps" joint="j_ps"/>
      </actuator>
      <sensor>
        <gyro name="gyro" site="imu"/>
        <accelerometer name="acc" site="imu"/>
        <framequat name="quat" objtype="site" objname="imu"/>
        <velocimeter name="vel" site="imu"/>
        <rangefinder name="range" site="down"/>
      </sensor>
    </mujoco>
    """)


def components():
  """Every registered component type once, ideal."""
  return [
      {'id': 'mot', 'type': 'fibril_sim/motor',
       'config': {'actuator': 'a_mot', 'application_period_s': DT, 'feedback_period_s': DT}},
      {'id': 'sc', 'type': 'fibril_sim/scalar_actuator',
       'config': {'actuator': 'a_sc', 'application_period_s': DT}},
      {'id': 'mm', 'type': 'fibril_sim/motion_motor',
       'config': {'joint': 'j_mm', 'position_actuator': 'mm_p', 'velocity_actuator': 'mm_v',
                  'feedforward_actuator': 'mm_f', 'application_period_s': DT,
                  'feedback_period_s': DT}},
      {'id': 'ps', 'type': 'fibril_sim/position_servo',
       'config': {'actuator': 'a_ps', 'application_period_s': DT, 'feedback_period_s': DT,
                  **PS}},
      {'id': 'enc', 'type': 'fibril_sim/encoder', 'config': {'joint': 'j_mot', **EVERY_TICK}},
      {'id': 'imu', 'type': 'fibril_sim/imu',
       'config': {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'acc', **EVERY_TICK}},
      {'id': 'ahrs', 'type': 'fibril_sim/ahrs',
       'config': {'orientation_sensor': 'quat', 'gyroscope_sensor': 'gyro',
                  'accelerometer_sensor': 'acc', 'yaw_reference': 'world', **EVERY_TICK}},
      {'id': 'mag', 'type': 'fibril_sim/magnetometer',
       'config': {'site': 'imu', 'earth_field_ut': FIELD_UT, **EVERY_TICK}},
      {'id': 'baro', 'type': 'fibril_sim/barometer', 'config': {'site': 'imu', **EVERY_TICK}},
      {'id': 'pitot', 'type': 'fibril_sim/airspeed',
       'config': {'velocity_sensor': 'vel', 'wind_m_s': WIND, **EVERY_TICK}},
      {'id': 'gnss', 'type': 'fibril_sim/gnss',
       'config': {'velocity_sensor': 'vel', **ORIGIN, **EVERY_TICK}},
      {'id': 'range', 'type': 'fibril_sim/rangefinder',
       'config': {'rangefinder_sensor': 'range', 'max_range_m': 10.0, **EVERY_TICK}},
      {'id': 'ekf', 'type': 'fibril_mjx/attitude_ekf',
       'config': {'imu': 'imu', 'estimator': 'quaternion',
                  'gyro_noise_density': [1e-3, 1e-3, 1e-3],
                  'accel_noise_stddev_m_s2': [0.5, 0.5, 0.5]}},
      {'id': 'cam', 'type': 'fibril_sim/camera',
       'config': {'site': 'cam', 'landmarks': LANDMARKS, **CAMERA, **EVERY_TICK}},
      {'id': 'lidar', 'type': 'fibril_sim/lidar', 'config': {'site': 'lidar', **LIDAR,
                                                             **EVERY_TICK}},
      {'id': 'flow', 'type': 'fibril_sim/optical_flow',
       'config': {'site': 'flow', 'fov_deg': 42.0, 'resolution_px': 35, 'max_range_m': 10.0,
                  'max_flow_rate_rad_s': 100.0, 'max_angular_rate_rad_s': 100.0,
                  **EVERY_TICK}},
  ]


def write_manifest(tmp: pathlib.Path) -> pathlib.Path:
  return ref_helpers.write_manifest(
      tmp, MODEL.format(dt=DT), components(),
      command_script=[
             {'component': 'mot', 'kind': 'effort', **MOT, 'period_s': DT},
             {'component': 'sc', 'kind': 'value', **SC, 'period_s': DT},
             {'component': 'mm', 'kind': 'motion', 'waveform': 'sine', **MM, 'period_s': DT},
             {'component': 'ps', 'kind': 'position', 'amplitude': 0.3, 'frequency_hz': 1.0,
              'period_s': DT}])


def sine(spec, t):
  """`(value, d value / dt)` of a sine drive at `t` (s), closed form."""
  w = 2 * math.pi * spec['frequency_hz']
  return spec['amplitude'] * math.sin(w * t), spec['amplitude'] * w * math.cos(w * t)


def lidar_directions() -> np.ndarray:
  """`(beams, 3)` beam directions in the lidar site frame (azimuth-major), as the docs of
  `components/sensors/lidar.py` state them."""
  az = np.deg2rad(np.linspace(LIDAR['horizontal_min_deg'], LIDAR['horizontal_max_deg'],
                              LIDAR['horizontal_samples']))
  el = np.deg2rad(np.linspace(LIDAR['vertical_min_deg'], LIDAR['vertical_max_deg'],
                              LIDAR['vertical_samples']))
  return np.array([[math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)]
                   for a in az for e in el])


def _ray(m, d, pnt, vec, body):
  """MuJoCo C's ray from `pnt` along `vec` (its own `body` excluded): `(distance or −1, normal)`."""
  g = np.zeros(1, np.int32)
  n = np.zeros(3)
  dist = mujoco.mj_ray(m, d, np.asarray(pnt, np.float64), np.asarray(vec, np.float64), None, 1,
                       body, g, n)
  return dist, n


def c_reference(mj_model: mujoco.MjModel, ticks: int = TICKS) -> dict:
  """MuJoCo C, float64, on a copy of the simulator's compiled model (its probe sensors
  included) with the motion motor's channels zeroed and its law applied as `qfrc_applied`:
  every quantity the tests compare, per tick `0 … ticks`."""
  m = copy.deepcopy(mj_model)
  for name in ('mm_p', 'mm_v', 'mm_f'):
    a = m.actuator(name).id
    m.actuator_gainprm[a] = 0.0
    m.actuator_biasprm[a] = 0.0
  d = mujoco.MjData(m)
  d.qvel[:6] = QVEL0
  sid = lambda n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, n)   # noqa: E731
  sens = lambda n: (m.sensor_adr[m.sensor(n).id], m.sensor_dim[m.sensor(n).id])  # noqa: E731
  jnt = {j: (m.jnt_qposadr[m.joint(j).id], m.jnt_dofadr[m.joint(j).id])
         for j in ('j_mot', 'j_sc', 'j_mm', 'j_ps')}
  d.qvel[jnt['j_ps'][1]] = PS_QVEL0
  rig = m.body('rig').id
  dirs = lidar_directions()
  out: dict = {}

  def put(k, v):
    out.setdefault(k, []).append(np.array(v, np.float64))

  for k in range(ticks + 1):
    t = k * DT
    d.ctrl[m.actuator('a_mot').id] = sine(MOT, t)[0]
    d.ctrl[m.actuator('a_sc').id] = sine(SC, t)[0]
    p_star, v_star = sine(MM, t)
    qa, da = jnt['j_mm']
    law = MM['kp'] * (p_star - d.qpos[qa]) + MM['kd'] * (v_star - d.qvel[da]) + MM['effort_ff']
    d.qfrc_applied[:] = 0.0
    d.qfrc_applied[da] = law
    kt, res = PS['torque_constant'], PS['resistance_ohm']
    ps_torque = -kt * kt * d.qvel[jnt['j_ps'][1]] / res
    d.ctrl[m.actuator('a_ps').id] = ps_torque
    mujoco.mj_forward(m, d)
    for n in ('gyro', 'acc', 'quat', 'vel', 'range'):
      a, dim = sens(n)
      put(n, d.sensordata[a:a + dim])
    for n in ('imu', 'cam', 'lidar', 'flow', 'down'):
      put(f'{n}_pos', d.site_xpos[sid(n)])
      put(f'{n}_mat', d.site_xmat[sid(n)].reshape(3, 3))
    put('landmarks', [d.site_xpos[sid(n)] for n in LANDMARKS])
    for j, (qa_, da_) in jnt.items():
      put(f'{j}_q', d.qpos[qa_])
      put(f'{j}_qd', d.qvel[da_])
      put(f'{j}_qfrc_actuator', d.qfrc_actuator[da_])
    put('mm_law', law)
    put('ps_torque', ps_torque)
    put('mm_p_star', p_star)
    # the flow and camera sites' velocity in their own frame ([ω, v], mj_objectVelocity local)
    for n in ('flow', 'cam'):
      res = np.zeros(6)
      mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, sid(n), res, 1)
      put(f'{n}_w_local', res[:3])
      put(f'{n}_v_local', res[3:])
    rf = d.site_xmat[sid('flow')].reshape(3, 3)
    put('flow_dist', _ray(m, d, d.site_xpos[sid('flow')], rf[:, 2], rig)[0])
    rl = d.site_xmat[sid('lidar')].reshape(3, 3)
    dist, cos = [], []
    for u in dirs:
      vec = rl @ u
      dd, nrm = _ray(m, d, d.site_xpos[sid('lidar')], vec, rig)
      dist.append(dd)
      cos.append(-float(nrm @ vec) if dd >= 0 else 1.0)
    put('lidar_range', dist)
    put('lidar_cos', cos)
    mujoco.mj_step(m, d)
  return {k: np.asarray(v) for k, v in out.items()}


@functools.lru_cache(maxsize=1)
def run():
  """`(sim, trace of world 0 (NumPy), C reference)`: one compile per test process."""
  import fibril_mjx
  tmp = pathlib.Path(tempfile.mkdtemp(prefix='truth_rig_'))
  sim = fibril_mjx.load(write_manifest(tmp))
  nv = sim.mj_model.nv
  qvel = np.zeros((2, nv), np.float32)
  qvel[:, :6] = QVEL0
  qvel[:, sim.mj_model.jnt_dofadr[sim.mj_model.joint('j_ps').id]] = PS_QVEL0
  _, trace, _ = sim.rollout(sim.default_params(2), fibril_mjx.world_keys(0, 2), TICKS,
                            start=Start(qvel_offset=qvel))
  trace = jax.tree.map(lambda x: np.asarray(x)[0], trace)
  return sim, trace, c_reference(sim.mj_model)


def canonical(q):
  """Unit quaternions `(..., 4)` with w ≥ 0."""
  q = np.asarray(q, np.float64)
  return q * np.where(q[..., :1] < 0, -1.0, 1.0)


def mat_quat(mats) -> np.ndarray:
  """`(T, 4)` quaternions (w ≥ 0) of rotation matrices `(T, 3, 3)`, by MuJoCo C."""
  out = []
  for r in mats:
    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, np.ascontiguousarray(r).ravel())
    out.append(q)
  return canonical(out)


def compare(name, got, want, tol_rel=1e-3, atol=1e-6):
  """Asserts max |got − want| ≤ `tol_rel` × the range of `want` over the run + 4 float32
  spacings at its largest magnitude + `atol` (MJX / the device pipeline run in float32
  against float64 C; the same rule as `tests/physics/test_sample_time.py`). Returns the error."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  assert got.shape == want.shape, (name, got.shape, want.shape)
  ulp = float(np.spacing(np.float32(np.max(np.abs(want))))) if want.size else 0.0
  flat = want.reshape(want.shape[0], -1)
  tol = tol_rel * float(np.ptp(flat, axis=0).max()) + 4 * ulp + atol
  err = float(np.max(np.abs(got - want))) if want.size else 0.0
  print(f'{name:44s} err {err:10.3g}  tol {tol:10.3g}')
  assert err <= tol, f'{name}: max error {err:.3g} > tolerance {tol:.3g}'
  return err
