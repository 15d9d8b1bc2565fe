"""Tutorial: add an IMU and an AHRS to your own MJCF robot (docs/tutorials/imu-ahrs.md).

A two-joint arm written here as plain MJCF gets an IMU site with MuJoCo's `gyro`,
`accelerometer` and `framequat` sensors. A manifest then declares three device models on it:
a raw ICM-42688-P (`fibril_sim/imu`, built-in profile `icm42688p_nominal`), a quaternion EKF
running on that IMU (`fibril_mjx/attitude_ekf`: your own AHRS) and a packaged AHRS module
(`fibril_sim/ahrs`, the Microinfinity R6093U profiles). It runs a batch of worlds through the
Python API and plots truth vs what each device delivered.

    .venv/bin/python examples/tutorial_imu_ahrs.py --out out/tutorials/imu_ahrs
    .venv/bin/python examples/tutorial_imu_ahrs.py --small      # the test suite's size
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np

import fibril_mjx

# 1. The robot: any MJCF. The device models read physics only through MuJoCo sensors, so the
# IMU is a site plus the three sensors a manifest binds by name.
ROBOT_XML = """
<mujoco model="two_joint_arm">
  <option timestep="0.002" integrator="implicitfast"/>
  <default><joint damping="0.3" armature="0.01"/><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <geom type="cylinder" size="0.08 0.02" rgba="0.4 0.4 0.45 1"/>
    <body name="shoulder" pos="0 0 0.05">
      <joint name="pan" type="hinge" axis="0 0 1"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.2" size="0.03" mass="0.5"/>
      <body name="upper_arm" pos="0 0 0.2">
        <joint name="lift" type="hinge" axis="0 1 0" range="-90 90"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.025" mass="0.4"/>
        <site name="imu" pos="0.25 0 0.03" size="0.01"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position name="pan_servo" joint="pan" kp="40" kv="4"/>
    <position name="lift_servo" joint="lift" kp="60" kv="5" ctrlrange="-1.2 1.2"/>
  </actuator>
  <sensor>
    <gyro name="imu_gyro" site="imu"/>
    <accelerometer name="imu_accel" site="imu"/>
    <framequat name="imu_quat" objtype="site" objname="imu"/>
  </sensor>
</mujoco>
"""

# 2. The manifest: the devices, by type and profile, bound to the sensors above by name.
MANIFEST_YAML = """
fibril_manifest: 1
model: two_joint_arm.xml                 # relative to this file
actuator_script:                         # open-loop drive of the servos
  - {actuator: pan_servo, waveform: sine, amplitude: 1.5, frequency_hz: 0.2}
  - {actuator: lift_servo, waveform: sine, amplitude: 0.8, frequency_hz: 0.35}
components:
  - id: imu                              # a raw MEMS IMU, datasheet values with sources
    type: fibril_sim/imu
    config:
      profiles: {device: icm42688p_nominal}
      gyroscope_sensor: imu_gyro
      accelerometer_sensor: imu_accel
      angular_velocity_bias_turn_on_stddev: [3.5e-3, 3.5e-3, 3.5e-3]   # ASSUMPTION 0.2 deg/s
  - id: ekf                              # your AHRS: a quaternion EKF on the IMU's samples
    type: fibril_mjx/attitude_ekf
    config:
      imu: imu
      estimator: quaternion
      gyro_noise_density: [4.8869e-5, 4.8869e-5, 4.8869e-5]   # the profile's density
      accel_noise_stddev_m_s2: [2.0, 2.0, 2.0]                # the arm's own acceleration
  - id: ahrs                             # a packaged AHRS module (processed outputs)
    type: fibril_sim/ahrs
    config:
      profiles: {device: r6093u_nominal, empirical: r6093u_empirical}
      orientation_sensor: imu_quat
      gyroscope_sensor: imu_gyro
      accelerometer_sensor: imu_accel
"""


def roll_pitch_deg(q):
  """Roll and pitch (deg) of unit quaternions `q` (..., 4), w first."""
  w, x, y, z = np.moveaxis(np.asarray(q, np.float64), -1, 0)
  roll = np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
  pitch = np.arcsin(np.clip(2 * (w * y - z * x), -1, 1))
  return np.degrees(roll), np.degrees(pitch)


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', default='out/tutorials/imu_ahrs')
  ap.add_argument('--small', action='store_true', help='tiny sizes (the test suite runs this)')
  args = ap.parse_args(argv)
  worlds, seconds = (2, 2.0) if args.small else (64, 10.0)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / 'two_joint_arm.xml').write_text(ROBOT_XML)
  (out / 'arm.yaml').write_text(MANIFEST_YAML)

  # 3. Load (validate, compile, bind names to indices) and roll out a batch of worlds.
  sim = fibril_mjx.load(out / 'arm.yaml', physics='c')
  n_ticks = int(round(seconds / sim.dt))
  params = sim.default_params(n_worlds=worlds)
  keys = fibril_mjx.world_keys(seed=0, n_worlds=worlds)
  _, trace, _ = sim.rollout(params, keys, n_ticks=n_ticks)

  # 4. Delivered samples vs truth. Every output is held between deliveries; new_data marks the
  # ticks on which a new sample arrived.
  t = np.arange(n_ticks + 1) * sim.dt
  imu = trace['sensor']['imu']
  gyro = np.asarray(imu.sample.angular_velocity)[0]
  gyro_true = np.asarray(trace['truth']['imu']['angular_velocity'])[0]
  ekf_q = np.asarray(trace['sensor']['ekf'].sample.orientation)
  ahrs_q = np.asarray(trace['sensor']['ahrs'].sample.orientation)
  true_q = np.asarray(trace['truth']['ekf']['orientation'])
  _, p_true = roll_pitch_deg(true_q)
  _, p_ekf = roll_pitch_deg(ekf_q)
  _, p_ahrs = roll_pitch_deg(ahrs_q)
  half = t > seconds / 2          # after the EKF's initial convergence
  err = {'ekf': np.sqrt(np.mean((p_ekf - p_true)[:, half] ** 2, axis=1)),
         'ahrs': np.sqrt(np.mean((p_ahrs - p_true)[:, half] ** 2, axis=1))}
  for k, v in err.items():
    print(f'{k}: pitch error RMS over {worlds} worlds: median {np.median(v):.3f} deg, '
          f'max {v.max():.3f} deg')

  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
  ax[0].plot(t, gyro[:, 1] - gyro_true[:, 1], lw=0.4, label='delivered − truth')
  ax[0].axhline(float(np.asarray(trace['truth']['imu']['angular_velocity_bias'])[0, 0, 1]),
                color='k', lw=1, label='turn-on bias (truth)')
  ax[0].set(xlabel='time [s]', ylabel='rad/s', title='ICM-42688-P gyro y error, world 0')
  ax[1].plot(t, p_true[0], 'k', lw=1, label='truth')
  ax[1].plot(t, p_ekf[0], lw=0.8, label='EKF on the IMU')
  ax[1].plot(t, p_ahrs[0], lw=0.8, label='R6093U AHRS')
  ax[1].set(xlabel='time [s]', ylabel='pitch [deg]', title='attitude, world 0')
  ax[2].hist([err['ekf'], err['ahrs']], bins=12, label=['EKF', 'R6093U'])
  ax[2].set(xlabel='pitch error RMS [deg]', ylabel='worlds', title=f'across {worlds} worlds')
  for a in ax:
    a.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(out / 'figure.png', dpi=80)
  print(f'wrote {out / "figure.png"}')
  return {k: float(np.median(v)) for k, v in err.items()}


if __name__ == '__main__':
  main()
