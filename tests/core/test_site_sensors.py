"""Devices on a robot as it comes: an IMU or AHRS that names a site (`site: imu`) instead of
MuJoCo sensors gets them added on the MjSpec before compile, named `fibril_<id>_<what>`; the
robot's file is not touched, and they read exactly what the same sensors written into the
MJCF read (reference: the table's own `torso_gyro` / `torso_accel` on the same site, bound by
name beside them)."""

import hashlib

import mujoco
import numpy as np
import pytest

import fibril_mjx as fm
from fibril_mjx.errors import ConfigError
from fibril_mjx.workflows import plan

from table_rig import DT, manifest

NAMED = {'gyroscope_sensor': 'torso_gyro', 'accelerometer_sensor': 'torso_accel'}


def _imu(cid, **config):
  return {'id': cid, 'type': 'fibril_sim/imu', 'config': {'period_s': DT, **config}}


def _ahrs(cid, **config):
  return {'id': cid, 'type': 'fibril_sim/ahrs', 'config': {'period_s': DT, **config}}


def test_sensors_added_at_a_site_read_what_the_models_own_sensors_read(tmp_path):
  path = manifest(tmp_path, 'tilted', components=[
      _imu('imu_named', **NAMED), _imu('imu', site='imu'), _ahrs('ahrs', site='imu')])
  xml = tmp_path / 'table.xml'
  before = hashlib.sha256(xml.read_bytes()).hexdigest()
  sim = fm.load(path, physics='c')
  assert hashlib.sha256(xml.read_bytes()).hexdigest() == before   # the robot's file as it was
  m = sim.mj_model
  for name, kind in (('fibril_imu_gyro', 'GYRO'), ('fibril_imu_accel', 'ACCELEROMETER'),
                     ('fibril_ahrs_quat', 'FRAMEQUAT'), ('fibril_ahrs_gyro', 'GYRO'),
                     ('fibril_ahrs_accel', 'ACCELEROMETER')):
    sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, name)
    assert sid >= 0, name
    assert m.sensor_type[sid] == getattr(mujoco.mjtSensor, f'mjSENS_{kind}')
    assert m.site(m.sensor_objid[sid]).name == 'imu'
  text = plan.render(sim)
  assert ("sensors added to the model for components that name a site (the robot's file is "
          "unchanged): fibril_imu_gyro (gyro at site 'imu'); fibril_imu_accel (accelerometer "
          "at site 'imu'); fibril_ahrs_quat (framequat at site 'imu')") in text
  _, tr, _ = sim.rollout(sim.default_params(2), fm.world_keys(0, 2), 20)
  for k in ('angular_velocity', 'linear_acceleration', 'orientation'):
    ref = np.asarray(tr['truth']['imu_named'][k])
    assert np.abs(ref).max() > 0.01, k   # the tilted table tumbles: non-trivial readings
    np.testing.assert_array_equal(np.asarray(tr['truth']['imu'][k]), ref, err_msg=k)
    # the AHRS's attitude truth is its own framequat's, the IMU's its site probe's (float32)
    np.testing.assert_allclose(np.asarray(tr['truth']['ahrs'][k]), ref, rtol=0, atol=3e-7,
                               err_msg=k)


@pytest.mark.parametrize('config, path, message', [
    ({'site': 'imu_'}, 'components[0].config.site',
     " = 'imu_': no MuJoCo site of that name in the compiled model (did you mean 'imu'?); "
     "the model's sites: imu"),
    ({'site': 'imu', 'gyroscope_sensor': 'torso_gyro'}, 'components[0].config.gyroscope_sensor',
     " = 'torso_gyro': set beside site 'imu': name the MuJoCo sensors or the site, not both"),
    ({'accelerometer_sensor': 'torso_accel'}, 'components[0].config.gyroscope_sensor',
     ': required: the name of a MuJoCo gyro sensor; or set site: SITE instead, and the sensors '
     "are added (as fibril_imu_gyro, ...) without editing the robot's file"),
])
def test_binding_errors_name_the_field_and_the_way_out(tmp_path, config, path, message):
  with pytest.raises(ConfigError) as e:
    fm.load(manifest(tmp_path, None, components=[_imu('imu', **config)]))
  assert f'{path}{message}' in str(e.value), str(e.value)


def test_an_added_name_the_model_already_uses_is_refused(tmp_path):
  """A robot that already carries `fibril_imu_gyro` (e.g. a file that was once exported with
  the added sensors) is told to bind that sensor by name."""
  path = manifest(tmp_path, None, components=[_imu('imu', site='imu')])
  xml = tmp_path / 'table.xml'
  xml.write_text(xml.read_text().replace('name="torso_gyro"', 'name="fibril_imu_gyro"'))
  with pytest.raises(ConfigError, match=r"components\[0\].config.site = 'imu': the model already "
                     r"has a sensor named 'fibril_imu_gyro'.*bind the sensors by name"):
    fm.load(path)
