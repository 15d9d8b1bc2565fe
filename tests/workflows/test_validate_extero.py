"""`fibril-mjx validate` for `fibril_sim/optical_flow`, `fibril_sim/lidar` and
`fibril_sim/camera`, each on its shipped device profile. The PMW3901-class flow profile passes
its translation (flow scale −v/h, noise, quality) and rotation (saturation, rotational flow)
checks, and a device whose noise and angular-rate limit differ from the configuration fails
the noise and saturation checks, naming them; the RPLIDAR A1M8 profile (and a hand-written
configuration with reflectivity and an incidence limit) passes its static fan rig (return rate
vs incidence and range, range noise and bias), a perturbed noise and dropout fail; the
Raspberry Pi Camera v2 (IMX219) profile (and a distorted hand-written configuration) passes
its static landmark grid (reprojection against a float64 OpenCV-model projection, pixel noise,
row times, visibility) and its moving rig (the camera on a slide joint: reprojection, row
times and blur against the float64 rolling-shutter fixed point, itself checked against
`cv2.projectPoints` at the row time), a perturbed focal length and noise fail, and a perturbed
readout and exposure fail the moving rig though the still grid reprojects. Short records
(4 worlds x 3 s): the tolerances are standard errors of those sample sizes."""

import json

import numpy as np
import pytest
import yaml

from fibril_mjx import cli
from fibril_mjx.workflows.validate import camera_motion

XML = ('<mujoco><asset><material name="g" rgba="1 1 1 1"/></asset><worldbody>'
       '<geom type="plane" size="5 5 0.1" material="g"/><body pos="0 0 1">'
       '<joint type="hinge" axis="0 0 1"/><geom size="0.01" mass="1" contype="0" '
       'conaffinity="0"/><site name="s" zaxis="0 0 -1"/></body></worldbody></mujoco>')


@pytest.fixture(scope='module')
def manifest(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('flow')
  (tmp / 'm.xml').write_text(XML)
  doc = {'fibril_manifest': 1, 'model': 'm.xml',
         'components': [{'id': 'dut', 'type': 'fibril_sim/optical_flow',
                         'config': {'profiles': {'device': 'pmw3901_nominal'}, 'site': 's'}}]}
  (tmp / 'm.yaml').write_text(yaml.safe_dump(doc))
  return tmp


def _validate(tmp, name, *perturb):
  out = tmp / name
  args = ['validate', str(tmp / 'm.yaml'), '--component', 'dut', '--out', str(out),
          '--static-duration', '3', '--worlds', '4']
  for p in perturb:
    args += ['--perturb', p]
  cli.main(args)
  return json.loads((out / 'summary.json').read_text())


def test_shipped_profile_passes(manifest):
  s = _validate(manifest, 'nominal')
  names = {c['name']: c['passed'] for c in s['checks']}
  assert names == {'flow_scale': True, 'flow_noise': True, 'quality': True,
                   'saturation_quality': True, 'rotation_flow': True}, s['checks']
  assert s['passed']


def test_perturbed_noise_and_rate_limit_fail(manifest):
  s = _validate(manifest, 'perturbed', 'noise_stddev_rad=0.0015', 'max_angular_rate_rad_s=10')
  assert not s['passed']
  assert {'flow_noise', 'saturation_quality'} <= set(s['failed']), s['failed']
  assert 'flow_scale' not in s['failed']


LIDAR = {'site': 's', 'period_s': 0.02, 'horizontal_samples': 16, 'max_range_m': 12.0,
         'min_range_m': 0.15, 'noise_stddev_m': 0.02, 'noise_fraction': 0.005,
         'resolution_m': 0.005, 'dropout_probability': 0.05, 'reference_range_m': 2.5,
         'group_reflectivity': [0.8, 0.3, 0.9, 1.0, 1.0, 1.0], 'max_incidence_deg': 65.0}


@pytest.fixture(scope='module')
def lidar_manifest(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('lidar')
  (tmp / 'm.xml').write_text(XML)
  doc = {'fibril_manifest': 1, 'model': 'm.xml',
         'components': [{'id': 'dut', 'type': 'fibril_sim/lidar', 'config': LIDAR}]}
  (tmp / 'm.yaml').write_text(yaml.safe_dump(doc))
  return tmp


def _profile_manifest(tmp, ctype, config):
  (tmp / 'm.xml').write_text(XML)
  doc = {'fibril_manifest': 1, 'model': 'm.xml',
         'components': [{'id': 'dut', 'type': ctype, 'config': config}]}
  (tmp / 'm.yaml').write_text(yaml.safe_dump(doc))
  return tmp


def test_lidar_shipped_profile_passes_and_perturbed_noise_and_dropout_fail(tmp_path):
  tmp = _profile_manifest(tmp_path, 'fibril_sim/lidar',
                          {'profiles': {'device': 'rplidar_a1m8_nominal'}, 'site': 's'})
  s = _validate(tmp, 'nominal')
  assert {c['name']: c['passed'] for c in s['checks']} == {
      'lidar_return_rate': True, 'lidar_range_noise': True, 'lidar_range_bias': True}, s['checks']
  assert s['passed']
  # twice the range noise and 30 % dropout; the bias check's tolerance follows the configured
  # σ, so the wider noise may trip it too
  s = _validate(tmp, 'perturbed', 'noise_fraction=0.01', 'dropout_probability=0.3')
  assert not s['passed']
  assert {'lidar_return_rate', 'lidar_range_noise'} <= set(s['failed']), s['failed']


def test_lidar_config_passes_and_perturbed_noise_and_dropout_fail(lidar_manifest):
  s = _validate(lidar_manifest, 'nominal')
  assert s['passed'], s['checks']
  assert {c['name'] for c in s['checks']} == {'lidar_return_rate', 'lidar_range_noise',
                                              'lidar_range_bias'}
  s = _validate(lidar_manifest, 'perturbed', 'noise_stddev_m=0.04', 'dropout_probability=0.3')
  assert {'lidar_return_rate', 'lidar_range_noise'} <= set(s['failed']), s['failed']
  assert 'lidar_range_bias' not in s['failed']


CAMERA = {'site': 's', 'landmarks': ['s'], 'period_s': 0.02, 'width_px': 640, 'height_px': 480,
          'fx_px': 460.0, 'fy_px': 455.0, 'cx_px': 319.5, 'cy_px': 239.5,
          'distortion': [-0.28, 0.08, 0.001, -0.0005, -0.01], 'shutter': 'rolling',
          'readout_time_s': 0.015, 'exposure_s': 0.004, 'pixel_noise_stddev_px': 0.3}


@pytest.fixture(scope='module')
def camera_manifest(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('camera')
  (tmp / 'm.xml').write_text(XML)
  doc = {'fibril_manifest': 1, 'model': 'm.xml',
         'components': [{'id': 'dut', 'type': 'fibril_sim/camera', 'config': CAMERA}]}
  (tmp / 'm.yaml').write_text(yaml.safe_dump(doc))
  return tmp


def test_camera_config_passes_and_perturbed_focal_length_and_noise_fail(camera_manifest):
  s = _validate(camera_manifest, 'nominal')
  assert s['passed'], s['checks']
  assert {c['name'] for c in s['checks']} == CAMERA_CHECKS
  s = _validate(camera_manifest, 'perturbed', 'fx_px=462', 'pixel_noise_stddev_px=0.4')
  assert {'camera_reprojection', 'camera_pixel_noise'} <= set(s['failed']), s['failed']
  assert not {'camera_row_time', 'camera_moving_row_time'} & set(s['failed'])


CAMERA_CHECKS = {'camera_reprojection', 'camera_pixel_noise', 'camera_row_time',
                 'camera_visibility', 'camera_moving_reprojection', 'camera_moving_row_time',
                 'camera_moving_blur'}


@pytest.fixture(scope='module')
def rpi_camera(tmp_path_factory):
  return _profile_manifest(tmp_path_factory.mktemp('rpi_camera'), 'fibril_sim/camera',
                           {'profiles': {'device': 'rpi_camera_v2_imx219_nominal'},
                            'site': 's', 'landmarks': ['s']})


def test_camera_shipped_profile_passes_and_perturbed_focal_and_noise_fail(rpi_camera):
  s = _validate(rpi_camera, 'nominal')
  assert {c['name']: c['passed'] for c in s['checks']} == dict.fromkeys(CAMERA_CHECKS, True), \
      s['checks']
  assert s['passed']
  # +0.2 % focal length (≈ 1.4 px at the static grid's edge) and 0.4 px noise
  s = _validate(rpi_camera, 'perturbed', 'fx_px=1360', 'pixel_noise_stddev_px=0.4')
  assert {'camera_reprojection', 'camera_pixel_noise', 'camera_moving_reprojection'} <= \
      set(s['failed']), s['failed']
  assert not {'camera_row_time', 'camera_moving_row_time', 'camera_visibility'} & \
      set(s['failed'])


def test_camera_moving_rig_catches_readout_and_exposure(rpi_camera):
  """A 25 ms readout (configured 23.3 ms) and 6 ms exposure (5 ms): the static grid still
  reprojects (a still camera's pixels do not depend on row times), the moving rig's
  reprojection, row times and blur do not; so do the static row times."""
  s = _validate(rpi_camera, 'perturbed_timing', 'readout_time_s=0.025', 'exposure_s=0.006')
  assert set(s['failed']) == {'camera_row_time', 'camera_moving_reprojection',
                              'camera_moving_row_time', 'camera_moving_blur'}, s['failed']


def test_moving_reference_is_opencv_at_the_row_time():
  """The moving rig's float64 reference: each landmark's pixel is `cv2.projectPoints` of the
  camera at p₀ + v·τ*, and τ* is the rolling-shutter fixed point of that pixel's row."""
  cv2 = pytest.importorskip('cv2')
  cfg = dict(CAMERA, period_s=0.02)
  _, _, pts = camera_motion.moving_rig(cfg, {}, 2.0)
  p0 = np.array([0.1, -0.3, -0.4])
  vel = np.array([0.3, 1.5, 2.0])
  uv, tau, blur, vis = camera_motion.reference(cfg, pts, p0, vel)
  assert vis.all()
  K = np.array([[cfg['fx_px'], 0, cfg['cx_px']], [0, cfg['fy_px'], cfg['cy_px']], [0, 0, 1]])
  R = camera_motion.R_CAM
  rvec, _ = cv2.Rodrigues(R.T)
  dist = np.array(cfg['distortion'])

  def cv(X, t):
    p = p0 + vel * t
    return cv2.projectPoints(X[None], rvec, -R.T @ p, K, dist)[0].reshape(2)
  line = cfg['readout_time_s'] / cfg['height_px']
  half = 0.5 * cfg['exposure_s']
  for i, X in enumerate(pts):
    ref = cv(X, tau[i])
    np.testing.assert_allclose(uv[i], ref, atol=1e-9)
    np.testing.assert_allclose(tau[i], ref[1] * line + half, atol=1e-12)
    np.testing.assert_allclose(blur[i], cv(X, tau[i] + half) - cv(X, tau[i] - half), atol=1e-9)
  # the motion matters: τ* differs from the still camera's row time by > 1 µs
  still = camera_motion.reference(cfg, pts, p0, 0 * vel)[1]
  assert np.abs(tau - still).max() > 1e-6
