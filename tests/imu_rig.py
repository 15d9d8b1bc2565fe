"""A tiny MJX rig shared by test_imu.py and test_attitude_ekf.py (built and compiled once).

Six static sites on the world body, each with a different axis pointing up (six-orientation
accelerometer test); a static site tilted 30° in roll (EKF convergence); a body spinning about
world z at a constant commanded rate with an off-axis site (centripetal term). No contacts.
"""

from __future__ import annotations

import functools
import pathlib
import tempfile
import textwrap

import yaml

# site name -> (xyaxes, the site axis that points up, its sign)
STATIC = {
    'px': ('0 0 1 0 1 0', 0, 1.0),
    'mx': ('0 0 -1 0 1 0', 0, -1.0),
    'py': ('1 0 0 0 0 1', 1, 1.0),
    'my': ('1 0 0 0 0 -1', 1, -1.0),
    'pz': ('1 0 0 0 1 0', 2, 1.0),
    'mz': ('1 0 0 0 -1 0', 2, -1.0),
}
SPIN_RATE = 6.0                      # rad/s commanded
SPIN_SITE_POS = (0.08, 0.03, 0.01)   # m, in the spinning body
TILT_ROLL_DEG = 30.0
DT = 0.002
TICKS = 600
G = 9.81


def _xml() -> str:
  # MuJoCo C leaves sensors on static bodies (the world and bodies welded to it) at zero, MJX
  # evaluates them; the "static" sites sit on a body with a hinge about the vertical through its
  # centre of mass, which gravity never turns, so both agree.
  sites = '\n'.join(f'      <site name="s_{n}" xyaxes="{ax}"/>' for n, (ax, _, _) in STATIC.items())
  sensors = '\n'.join(f'    <gyro name="g_{n}" site="s_{n}"/>\n'
                      f'    <accelerometer name="a_{n}" site="s_{n}"/>'
                      for n in list(STATIC) + ['tilt', 'spin'])
  x, y, z = SPIN_SITE_POS
  return textwrap.dedent(f"""\
      <mujoco model="imu_rig">
        <option timestep="{DT}" integrator="implicitfast" gravity="0 0 -{G}"/>
        <worldbody>
          <body name="bench">
            <joint name="bench_yaw" type="hinge" axis="0 0 1"/>
            <geom type="box" size="0.05 0.05 0.01" mass="1" contype="0" conaffinity="0"/>
      {sites}
            <site name="s_tilt" euler="{TILT_ROLL_DEG} 0 0"/>
          </body>
          <body name="spinner">
            <joint name="spin" type="hinge" axis="0 0 1"/>
            <geom type="cylinder" size="0.1 0.01" mass="1" contype="0" conaffinity="0"/>
            <site name="s_spin" pos="{x} {y} {z}"/>
          </body>
        </worldbody>
        <actuator>
          <velocity name="spin_motor" joint="spin" kv="5"/>
        </actuator>
        <sensor>
      {sensors}
        </sensor>
      </mujoco>
      """)


def imu_entry(name, **config):
  return {'id': f'imu_{name}', 'type': 'fibril_sim/imu',
          'config': {'gyroscope_sensor': f'g_{name}', 'accelerometer_sensor': f'a_{name}',
                     'period_s': DT, **config}}


# The tilted IMU: an ICM-42688-P-like noise budget (profile values) plus a gyro bias.
TILT_IMU = dict(profiles={'device': 'icm42688p_nominal'},
                angular_velocity_bias=[0.004, -0.003, 0.002])
EKF = dict(imu='imu_tilt', initial_attitude='fixed', initial_attitude_stddev_rad=[0.6, 0.6, 0.6],
           gyro_noise_density=[5e-5] * 3, gyro_bias_random_walk=[1e-5] * 3,
           accel_noise_stddev_m_s2=[0.02] * 3, initial_gyro_bias_stddev_rad_s=[0.01] * 3)


def manifest_doc() -> dict:
  comps = [imu_entry(n) for n in STATIC]
  comps.append(imu_entry('spin'))
  comps.append(imu_entry('tilt', **TILT_IMU))
  comps.append({'id': 'ekf_q', 'type': 'fibril_mjx/attitude_ekf',
                'config': {**EKF, 'estimator': 'quaternion'}})
  comps.append({'id': 'ekf_rpy', 'type': 'fibril_mjx/attitude_ekf',
                'config': {**EKF, 'estimator': 'rpy'}})
  comps.append({'id': 'ekf_truth', 'type': 'fibril_mjx/attitude_ekf',
                'config': {**EKF, 'initial_attitude': 'truth'}})
  return {'fibril_manifest': 1, 'model': 'imu_rig.xml',
          'actuator_script': [{'actuator': 'spin_motor', 'amplitude': 0.0,
                               'offset': SPIN_RATE}],
          'components': comps}


@functools.lru_cache(maxsize=None)
def sim():
  """The compiled rig `Simulation` (one per test session)."""
  import fibril_mjx
  d = pathlib.Path(tempfile.mkdtemp(prefix='imu_rig_'))
  (d / 'imu_rig.xml').write_text(_xml())
  (d / 'manifest.yaml').write_text(yaml.safe_dump(manifest_doc(), sort_keys=False))
  return fibril_mjx.load(str(d / 'manifest.yaml'))


@functools.lru_cache(maxsize=None)
def rollout(first_world: int = 0, worlds: int = 2):
  """`(trace, sim)` of `worlds` worlds from global index `first_world`, TICKS ticks, NumPy."""
  import jax
  import numpy as np

  import fibril_mjx
  s = sim()
  keys = fibril_mjx.world_keys(0, worlds, first_world)
  _, trace, _ = s.rollout(s.default_params(worlds), keys, TICKS)
  return jax.tree.map(np.asarray, trace)
