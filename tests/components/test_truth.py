"""Every component type's truth (`truth/<id>/<field>`) equals an independent value with every
optional term off: MuJoCo C's float64 state at that tick (`mj_forward`, its `sensordata`,
site poses, joint state and forces, `mj_ray`) or a closed form written here (the scripted
commands, the motion motor's impedance law, the position servo's back-EMF brake, ½ρu|u|, the
Earth field in site axes, zero error states).

The rig (`tests/truth_rig.py`) carries one component of every registered type; the list of
types is taken from the registry, so a new type without a reference here fails
`test_every_registered_type_is_covered`. This check would have caught the airspeed truth
`lagged_pressure_pa` stuck at 0 with `response_time_s` at its default 0 (issue #46).

Tolerances (`truth_rig.compare`): 1e-3 of the quantity's range over the run + 4 float32
spacings + an absolute floor, as in `tests/physics/test_sample_time.py` (MJX and the device
pipeline in float32 against float64 C over 40 ticks).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import truth_rig as rig

from fibril_mjx import components as _components
from fibril_mjx.core import registry

@pytest.fixture(scope='module')
def run():
  return rig.run()


def expected(ref: dict) -> dict:
  """`{component type: {(component id, truth field): reference (T, ...)}}`, float64."""
  T = rig.TICKS + 1
  t = np.arange(T) * rig.DT
  zeros3 = np.zeros((T, 3))
  r_imu = ref['imu_mat']
  q_imu = rig.mat_quat(r_imu)
  v_site = ref['vel']                                    # velocimeter: site axes
  u = (v_site - np.einsum('kji,j->ki', r_imu, rig.WIND))[:, 0]
  z = ref['imu_pos'][:, 2]
  mot = np.array([rig.sine(rig.MOT, x)[0] for x in t])
  sc = np.array([rig.sine(rig.SC, x)[0] for x in t])
  down = ref['down_mat']
  # flow: v, ω in the flow site frame, d along its +z (C's ray)
  v_f, w_f, d_f = ref['flow_v_local'], ref['flow_w_local'], ref['flow_dist']
  flow = np.stack([-v_f[:, 0] / d_f - w_f[:, 1], -v_f[:, 1] / d_f + w_f[:, 0]], axis=1)
  return {
      'fibril_sim/imu': {
          ('imu', 'angular_velocity'): ref['gyro'],
          ('imu', 'linear_acceleration'): ref['acc'],
          ('imu', 'orientation'): q_imu,
          ('imu', 'angular_velocity_bias'): zeros3,
          ('imu', 'linear_acceleration_bias'): zeros3},
      'fibril_sim/ahrs': {
          ('ahrs', 'orientation'): rig.canonical(ref['quat']),
          ('ahrs', 'angular_velocity'): ref['gyro'],
          ('ahrs', 'linear_acceleration'): ref['acc']},
      'fibril_sim/magnetometer': {
          ('mag', 'magnetic_field_ut'): np.einsum('kji,j->ki', r_imu, rig.FIELD_UT),
          ('mag', 'yaw_rad'): np.arctan2(r_imu[:, 1, 0], r_imu[:, 0, 0]),
          ('mag', 'bias_ut'): zeros3},
      'fibril_sim/barometer': {
          ('baro', 'site_z_m'): z,
          ('baro', 'bias_pa'): np.zeros(T)},
      'fibril_sim/airspeed': {
          ('pitot', 'probe_ground_speed_m_s'): v_site[:, 0],
          ('pitot', 'lagged_pressure_pa'): 0.5 * 1.225 * u * np.abs(u)},
      'fibril_sim/gnss': {
          ('gnss', 'antenna_position_m'): ref['imu_pos'],
          ('gnss', 'antenna_velocity_m_s'): np.einsum('kij,kj->ki', r_imu, v_site),
          ('gnss', 'position_error_m'): zeros3},
      'fibril_sim/rangefinder': {
          ('range', 'distance_m'): ref['range'][:, 0],
          # the site's z axis against the floor's normal (0, 0, 1): cos θ = −R[2, 2]
          ('range', 'incidence_rad'): np.arccos(np.clip(-down[:, 2, 2], -1, 1))},
      'fibril_mjx/attitude_ekf': {('ekf', 'orientation'): q_imu},
      'fibril_sim/camera': {
          ('cam', 'position_m'): ref['cam_pos'],
          ('cam', 'rotation'): ref['cam_mat'],
          ('cam', 'landmarks_m'): ref['landmarks']},
      'fibril_sim/lidar': {
          ('lidar', 'range_m'): ref['lidar_range'],
          ('lidar', 'incidence_rad'): np.arccos(np.clip(ref['lidar_cos'], -1, 1)),
          ('lidar', 'position_m'): ref['lidar_pos']},
      'fibril_sim/optical_flow': {
          ('flow', 'flow_rate_rad_s'): flow,
          ('flow', 'angular_rate_rad_s'): w_f,
          ('flow', 'distance_m'): d_f},
      'fibril_sim/motor': {
          ('mot', 'position'): ref['j_mot_q'],
          ('mot', 'velocity'): ref['j_mot_qd'],
          ('mot', 'applied_effort'): ref['j_mot_qfrc_actuator'],
          ('mot', 'setpoint'): mot,
          ('mot', 'tracking_error'): mot - ref['j_mot_qfrc_actuator'],
          ('mot', 'joint_position'): ref['j_mot_q']},
      'fibril_sim/scalar_actuator': {
          ('sc', 'applied'): sc,
          ('sc', 'command'): sc},
      'fibril_sim/encoder': {
          ('enc', 'position'): ref['j_mot_q'],
          ('enc', 'velocity'): ref['j_mot_qd']},
      'fibril_sim/position_servo': {
          ('ps', 'position'): ref['j_ps_q'],
          ('ps', 'velocity'): ref['j_ps_qd'],
          ('ps', 'applied_effort'): ref['ps_torque'],
          ('ps', 'duty'): np.zeros(T),
          ('ps', 'motor_torque'): ref['ps_torque'],
          ('ps', 'friction_torque'): np.zeros(T)},
      'fibril_sim/motion_motor': {
          ('mm', 'position'): ref['j_mm_q'],
          ('mm', 'velocity'): ref['j_mm_qd'],
          ('mm', 'applied_effort'): ref['mm_law'],
          ('mm', 'reference'): ref['mm_p_star'],
          ('mm', 'commanded_effort'): ref['mm_law'],
          ('mm', 'tracking_error'): ref['mm_p_star'] - ref['j_mm_q']},
  }


def test_every_registered_type_is_covered():
  registry.discover(_components)
  covered = set(_TYPES)
  assert sorted(registry.types()) == sorted(covered), (
      'a component type without an independent truth reference here: '
      f'{sorted(set(registry.types()) - covered)}')
  built = {c['type'] for c in rig.components()}
  assert built == covered


_TYPES = ('fibril_sim/imu', 'fibril_sim/ahrs', 'fibril_sim/magnetometer', 'fibril_sim/barometer',
          'fibril_sim/airspeed', 'fibril_sim/gnss', 'fibril_sim/rangefinder',
          'fibril_mjx/attitude_ekf', 'fibril_sim/camera', 'fibril_sim/lidar',
          'fibril_sim/optical_flow', 'fibril_sim/motor', 'fibril_sim/scalar_actuator',
          'fibril_sim/motion_motor', 'fibril_sim/position_servo', 'fibril_sim/encoder')


@pytest.mark.parametrize('ctype', _TYPES)
def test_truth_equals_an_independent_value_with_every_term_off(run, ctype):
  _, trace, ref = run
  failed = []
  for (cid, field), want in expected(ref)[ctype].items():
    got = np.asarray(trace['truth'][cid][field], np.float64)
    if field == 'orientation':
      got = rig.canonical(got)
    try:
      rig.compare(f'truth/{cid}.{field}', got, want)
    except AssertionError as e:
      failed.append(str(e))
  health = trace['truth'][next(iter(expected(ref)[ctype]))[0]].get('health')
  if health is not None:
    assert np.all(np.asarray(health) == 0), ctype   # faults.HEALTHY
  assert not failed, '\n'.join(failed)


def test_the_rig_moves_every_truth():
  """The references are not trivially constant: each compared quantity that should move does
  (so equality with zero-error states is not equality of two constants)."""
  _, _, ref = rig.run()
  e = expected(ref)
  for ctype, fields in e.items():
    for (cid, field), want in fields.items():
      if field.endswith('_bias') or field in ('bias_ut', 'bias_pa', 'position_error_m', 'duty',
                                                'friction_torque',
                                                'landmarks_m', 'tracking_error'):
        continue
      assert np.ptp(np.asarray(want, np.float64).reshape(len(want), -1), axis=0).max() > 0, (
          cid, field)
  u_max = float(np.max(np.abs(e['fibril_sim/airspeed'][('pitot', 'lagged_pressure_pa')])))
  assert u_max > 1.0, u_max      # Pa: the airspeed truth is well away from 0
  assert math.isfinite(u_max)
