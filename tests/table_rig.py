"""A table on four legs (a free torso with an `imu` site, four hinged legs, three position
actuators and a filtered one, a mocap body) with two keyframes, shared by test_keyframe.py and
test_site_sensors.py: `home` stands on the floor at rest, `tilted` sets every joint, velocity,
activation, control and mocap position away from zero."""

import pathlib

import numpy as np

from ref_helpers import write_manifest

DT = 0.004
HIP = 0.0    # rad, the legs in the `home` key (straight: splayed legs fight through friction)
# feet on the floor (hips 0.03 below the torso, capsule radius 0.02), sunk to the contacts'
# equilibrium penetration under the table's weight
TORSO_Z = 0.03 + 0.2 * np.cos(HIP) + 0.02 - 3.466e-4

LEGS = {'fl': (0.12, 0.08, 1), 'fr': (0.12, -0.08, 1), 'bl': (-0.12, 0.08, -1),
        'br': (-0.12, -0.08, -1)}


def xml() -> str:
  legs = '\n'.join(
      f'<body name="{n}" pos="{x} {y} -0.03"><joint name="{n}_hip" axis="0 1 0" range="-1 1"/>'
      f'<geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02" mass="0.1"/></body>'
      for n, (x, y, _) in LEGS.items())
  acts = '\n'.join(f'<position name="{n}_motor" joint="{n}_hip" kp="200" kv="2"/>'
                   for n in ('fl', 'fr', 'bl'))
  home = [0, 0, TORSO_Z, 1, 0, 0, 0] + [s * HIP for (_, _, s) in LEGS.values()]
  tilted = [0, 0, 0.4, np.cos(0.1), np.sin(0.1), 0, 0, 0.1, -0.2, 0.3, -0.4]
  ctrl = [s * HIP for (_, _, s) in LEGS.values()]
  q = lambda v: ' '.join(f'{x:.12g}' for x in v)
  return f"""<mujoco model="keyframe_table">
  <option timestep="{DT}" integrator="implicitfast"/>
  <worldbody>
    <geom name="floor" type="plane" size="3 3 0.1"/>
    <body name="torso" pos="0 0 0.5">
      <freejoint name="root"/>
      <geom type="box" size="0.15 0.1 0.03" mass="2"/>
      <site name="imu" pos="0.01 0 0.01"/>
      {legs}
    </body>
    <body name="target" mocap="true" pos="1 0 0.5">
      <geom type="sphere" size="0.03" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    {acts}
    <general name="br_motor" joint="br_hip" dyntype="filter" dynprm="0.02" gainprm="200"
             biastype="affine" biasprm="0 -200 -2"/>
  </actuator>
  <sensor>
    <accelerometer name="torso_accel" site="imu"/>
    <gyro name="torso_gyro" site="imu"/>
  </sensor>
  <keyframe>
    <key name="tilted" qpos="{q(tilted)}" qvel="0 0 0 0.2 0 0 0.1 0 0 0" act="0.1"
         ctrl="0.1 -0.2 0.3 -0.4" mpos="0 1 1"/>
    <key name="home" qpos="{q(home)}" act="{-HIP}" ctrl="{q(ctrl)}" mpos="0.5 0.5 1"/>
  </keyframe>
</mujoco>
"""


IMU = {'id': 'imu', 'type': 'fibril_sim/imu',
       'config': {'gyroscope_sensor': 'torso_gyro', 'accelerometer_sensor': 'torso_accel',
                  'period_s': DT, 'profiles': {'device': 'icm42688p_nominal'}}}
MOTOR = {'application_period_s': DT, 'feedback_period_s': DT, 'hold_when_uncommanded': True}


def manifest(tmp: pathlib.Path, keyframe='home', components=None, **extra) -> pathlib.Path:
  comps = components if components is not None else (
      [{'id': f'{n}_motor', 'type': 'fibril_sim/motor', 'config': {'actuator': f'{n}_motor',
                                                                   **MOTOR}}
       for n in ('fl', 'fr', 'bl')] + [IMU])
  if keyframe is not None:
    extra = {**extra, 'keyframe': keyframe}
  return write_manifest(tmp, xml(), comps, model='table.xml', **extra)
