"""`fibril_sim/camera`: pixel projections against OpenCV's `cv2.projectPoints` (third party),
visibility against a float64 reference with MuJoCo C's `mj_ray` for occlusion, rolling-shutter
row times, positions and motion blur against a float64 reference that solves the row-time
fixed point to convergence (poses extrapolated with SciPy's rotation-vector exponential and
MuJoCo C's `mj_objectVelocity`); pixel noise statistics; config rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import extero_helpers as eh
from ref_helpers import write_manifest
from fibril_mjx.components.sensors import camera
from fibril_mjx.errors import FibrilError

cv2 = pytest.importorskip('cv2')

W, H = 640, 480
INTR = dict(width_px=W, height_px=H, fx_px=420.0, fy_px=410.0, cx_px=318.5, cy_px=243.0)
DIST = (-0.28, 0.09, 0.0012, -0.0007, -0.012)


def make(**cfg):
  ctx, cat = eh.context()
  raw = {'site': 'cam', 'landmarks': eh.LANDMARKS, 'period_s': 0.04, **INTR, **cfg}
  return camera.build('cam0', raw, ctx, cat)


@pytest.fixture(scope='module')
def m():
  return eh.model()


def landmarks(m, d):
  ids = [eh.mujoco.mj_name2id(m, eh.mujoco.mjtObj.mjOBJ_SITE, n) for n in eh.LANDMARKS]
  return d.site_xpos[ids].copy()


def reference_visibility(m, d, uv, z, dist, margin=0.01):
  """In front, in image, monotonic radial distortion, no geom closer (C ray, rig excluded)."""
  p, R = eh.site_pose(m, d, 'cam')
  X = landmarks(m, d)
  xc = (X - p) @ R
  r2 = (xc[:, 0] ** 2 + xc[:, 1] ** 2) / xc[:, 2] ** 2
  k1, k2, _, _, k3 = dist
  mono = 1 + 3 * k1 * r2 + 5 * k2 * r2 ** 2 + 7 * k3 * r2 ** 3 > 0
  inside = (uv[:, 0] >= -0.5) & (uv[:, 0] <= W - 0.5) & (uv[:, 1] >= -0.5) & (uv[:, 1] <= H - 0.5)
  rig = eh.mujoco.mj_name2id(m, eh.mujoco.mjtObj.mjOBJ_BODY, 'rig')
  occ = []
  for x in X:
    L = np.linalg.norm(x - p)
    hit, _, _ = eh.c_ray(m, d, p, (x - p) / L, rig)
    occ.append(0 <= hit < L - margin)
  return (z > 0.01) & inside & mono & ~np.array(occ), np.array(occ)


@pytest.mark.parametrize('dist', [(0.0,) * 5, DIST])
def test_global_shutter_matches_opencv_projectpoints(m, dist):
  rng = np.random.default_rng(1)
  c = make(distortion=list(dist))
  for _ in range(3):
    d = eh.state(m, pos=(0.0, 0.2 * rng.normal(), 1.0 + 0.2 * rng.normal()),
                 quat=eh.random_quat(rng, 0.3))
    s = eh.acquire(c, eh.put(m, d))
    p, R = eh.site_pose(m, d, 'cam')
    X = landmarks(m, d)
    rvec, _ = cv2.Rodrigues(R.T)
    K = np.array([[INTR['fx_px'], 0, INTR['cx_px']], [0, INTR['fy_px'], INTR['cy_px']], [0, 0, 1]])
    uv, _ = cv2.projectPoints(X, rvec, -R.T @ p, K, np.array(dist))
    uv = uv[:, 0]
    z = ((X - p) @ R)[:, 2]
    front = z > 0.01
    # float32 of |uv| ≤ ~2000 px: a few 1e-4 px; distortion polynomials add a few ulp
    np.testing.assert_allclose(s.uv_px[front], uv[front], atol=2e-3, rtol=0)
    assert np.all(np.isnan(s.uv_px[~front]))
    np.testing.assert_allclose(s.depth_m, z, rtol=1e-5, atol=1e-5)
    vis, occ = reference_visibility(m, d, uv, z, dist)
    np.testing.assert_array_equal(s.visible, vis)
    np.testing.assert_allclose(s.row_time_s, 0.0)
    np.testing.assert_array_equal(s.blur_px, 0.0)
  assert occ[21] and vis.any() and (~vis).any()


def rolling_reference(m, d, dist, readout, exposure):
  """Converged fixed point of τ = v(τ)·ℓ + e/2 (float64), pixel coords and blur at it."""
  p, R = eh.site_pose(m, d, 'cam')
  v, w = eh.site_velocity(m, d, 'cam')
  X = landmarks(m, d)
  line = readout / H
  K = np.array([[INTR['fx_px'], 0, INTR['cx_px']], [0, INTR['fy_px'], INTR['cy_px']], [0, 0, 1]])

  def proj(x, tau):
    Rt = Rotation.from_rotvec(w * tau).as_matrix() @ R
    rvec, _ = cv2.Rodrigues(Rt.T)
    pt = p + v * tau
    uv, _ = cv2.projectPoints(x[None], rvec, -Rt.T @ pt, K, np.array(dist))
    return uv[0, 0], (Rt.T @ (x - pt))[2]

  uvs, taus, blurs = [], [], []
  for x in X:
    tau = exposure / 2
    for _ in range(60):
      uv, _ = proj(x, tau)
      tau = np.clip(uv[1], 0, H - 1) * line + exposure / 2
    uv, _ = proj(x, tau)
    assert abs(np.clip(uv[1], 0, H - 1) * line + exposure / 2 - tau) < 1e-12
    a, _ = proj(x, tau - exposure / 2)
    b, _ = proj(x, tau + exposure / 2)
    uvs.append(uv), taus.append(tau), blurs.append(b - a)
  return np.array(uvs), np.array(taus), np.array(blurs)


def test_rolling_shutter_row_times_and_blur_match_float64_reference(m):
  readout, exposure = 0.025, 0.008
  c = make(distortion=list(DIST), shutter='rolling', readout_time_s=readout,
           exposure_s=exposure, rolling_iterations=6)
  d = eh.state(m, pos=(0.0, 0.1, 1.1), quat=eh.random_quat(np.random.default_rng(4), 0.2),
               vel=(1.5, -2.0, 0.5), omega=(0.8, -1.2, 2.0))
  s = eh.acquire(c, eh.put(m, d))
  uv, tau, blur = rolling_reference(m, d, DIST, readout, exposure)
  front = np.isfinite(s.uv_px[:, 0])
  vis = s.visible
  assert vis.sum() >= 8
  # 6 substitutions contract by (|dv/dτ|·ℓ)^6 < 1e-6; float32 coordinates ~1e-4 px
  np.testing.assert_allclose(s.uv_px[front], uv[front], atol=3e-3, rtol=0)
  np.testing.assert_allclose(s.row_time_s[front], tau[front], atol=3e-3 * readout / H + 1e-8)
  np.testing.assert_allclose(s.blur_px[front], blur[front], atol=3e-3, rtol=1e-4)
  # the moving camera shifts the image: the rolling result differs from the instantaneous one
  g = eh.acquire(make(distortion=list(DIST)), eh.put(m, d))
  assert np.max(np.abs(g.uv_px[vis] - s.uv_px[vis])) > 1.0
  # rows at the bottom of the image are read later
  order = np.argsort(s.uv_px[vis, 1])
  assert np.all(np.diff(s.row_time_s[vis][order]) >= -1e-9)


def test_pixel_noise_std(m):
  sigma = 0.7
  c = make(pixel_noise_stddev_px=sigma, occlusion=False)
  d = eh.put(m, eh.state(m))
  ideal = eh.acquire(make(occlusion=False), d).uv_px
  import jax
  errs = np.concatenate([eh.acquire(c, d, n=k, wk=jax.random.PRNGKey(k)).uv_px - ideal
                         for k in range(40)])
  e = errs[np.isfinite(errs)]
  assert abs(e.std() / sigma - 1) < 5 / math.sqrt(2 * e.size)
  assert abs(e.mean()) < 5 * sigma / math.sqrt(e.size)


def test_dropped_frames_and_latency_through_the_cycle(m):
  c = make(loss_probability=0.3, latency_s=0.01, occlusion=False)
  d = eh.stack(m, [eh.state(m)] * 1000)
  _, out, _ = eh.drive(c, d)
  n_frames = len(range(0, 1000, 20))
  delivered = out.new_data.sum()
  assert abs(delivered / n_frames - 0.7) < 4 * math.sqrt(0.21 / n_frames)
  nd = out.new_data
  np.testing.assert_array_equal(np.flatnonzero(nd) - out.sample_tick[nd], 5)


def test_config_rules(tmp_path):
  import fibril_mjx

  def err(**cfg):
    c = {'site': 'cam', 'landmarks': ['lm0'], 'period_s': 0.04, **INTR, **cfg}
    path = write_manifest(tmp_path, eh.SCENE_XML, [{'id': 'cam0', 'type': camera.TYPE,
                                                     'config': c}],
                          model='scene.xml', name='m.yaml')
    with pytest.raises(FibrilError) as e:
      fibril_mjx.load(str(path))
    return str(e.value)
  P = 'components[0].config'
  assert f'{P}.readout_time_s = 0.0: must be > 0 with shutter: rolling' in err(shutter='rolling')
  assert f'{P}.readout_time_s = 0.01: must be 0 with shutter: global' in err(readout_time_s=0.01)
  assert f"{P}.landmarks[1] = 'nope': no MuJoCo site" in err(landmarks=['lm0', 'nope'])
  assert f'{P}.exposure_s = 0.05: readout_time_s + exposure_s must be ≤ period_s' in err(
      exposure_s=0.05)


def test_dropout_fault_and_per_world_focal_length(tmp_path):
  """Through the simulator: a dropout window delivers no frame; a per-world `fx_px` scales
  u − cx by the focal-length ratio (per-world Params, as campaigns sample them)."""
  import jax

  import fibril_mjx
  cfg = {'site': 'cam', 'landmarks': eh.LANDMARKS, 'period_s': 0.02, **INTR,
         'faults': [{'type': 'dropout', 'start_s': 0.1, 'end_s': 0.2}]}
  sim = fibril_mjx.load(str(write_manifest(
      tmp_path, eh.SCENE_XML, [{'id': 'cam0', 'type': camera.TYPE, 'config': cfg}],
      model='scene.xml', name='m.yaml')))
  p = sim.default_params(2)
  p['cam0'] = p['cam0']._replace(fx_px=jax.numpy.asarray([420.0, 504.0]))
  _, tr, _ = sim.rollout(p, fibril_mjx.world_keys(0, 2), 160)
  d = jax.tree.map(np.asarray, tr['sensor']['cam0'])
  t = d.sample_tick * eh.DT
  new = d.new_data                                   # (world, tick)
  assert new.sum(axis=1).min() > 0
  assert not np.any(new & (t >= 0.1 - 1e-9) & (t < 0.2 - 1e-9))
  assert np.any(new & (t >= 0.2 - 1e-9))
  k = np.flatnonzero(new[0] & new[1])[-1]
  vis = d.sample.visible[0, k] & d.sample.visible[1, k]
  du0 = d.sample.uv_px[0, k, vis, 0] - INTR['cx_px']
  du1 = d.sample.uv_px[1, k, vis, 0] - INTR['cx_px']
  big = np.abs(du0) > 20
  assert big.sum() >= 3
  np.testing.assert_allclose(du1[big] / du0[big], 504.0 / 420.0, rtol=1e-4)
