"""`fibril_sim/lidar`: ideal beam distances and incidence angles against MuJoCo C's `mj_ray`
(distance and surface normal, float64) on planes, boxes, spheres, cylinders and capsules;
the skewed scan of a moving sensor against a float64 reference that extrapolates the pose per
beam (SciPy's rotation-vector exponential, MuJoCo C's `mj_objectVelocity`); noise, resolution
and range limits against a float64 model fed with the named-stream draws; the no-return
rate against its closed form (binomial tolerances); config rules."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import extero_helpers as eh
from ref_helpers import stream_key, write_manifest
from fibril_mjx.components.sensors import lidar
from fibril_mjx.errors import FibrilError

PATTERN = dict(horizontal_samples=72, vertical_samples=5, vertical_min_deg=-30.0,
               vertical_max_deg=10.0, horizontal_min_deg=-180.0, horizontal_max_deg=175.0)


def make(**cfg):
  ctx, cat = eh.context()
  raw = {'site': 'lidar', 'period_s': 0.1, 'max_range_m': 30.0, **PATTERN, **cfg}
  return lidar.build('lidar0', raw, ctx, cat)


@pytest.fixture(scope='module')
def m():
  return eh.model()


def directions():
  az = np.radians(np.linspace(-180.0, 175.0, 72))
  el = np.radians(np.linspace(-30.0, 10.0, 5))
  return np.array([[math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)]
                   for a in az for e in el])


def reference_geometry(m, d, sweep=0.0):
  """Per beam (float64): C ray distance, cos incidence (C normal), hit geom group."""
  p, R = eh.site_pose(m, d, 'lidar')
  v, w = eh.site_velocity(m, d, 'lidar')
  rig = eh.mujoco.mj_name2id(m, eh.mujoco.mjtObj.mjOBJ_BODY, 'rig')
  out = []
  for b, u in enumerate(directions()):
    tau = (b // 5) * sweep / 72
    o = p + v * tau
    vec = Rotation.from_rotvec(w * tau).as_matrix() @ R @ u
    dist, g, n = eh.c_ray(m, d, o, vec, rig)
    out.append((dist, -n @ vec if g >= 0 else 1.0, m.geom_group[g] if g >= 0 else 0))
  return [np.array(x) for x in zip(*out)]


def ideal(c, data):
  """The component's ideal geometry of one scan, as its truth reports it after an acquisition."""
  def f(x):
    p = c.default_params()
    st, _ = c.acquire(p, c.init(p, jax.random.PRNGKey(0)), x, 0, 0)
    return c.truth(st, x)
  return jax.tree.map(np.asarray, jax.jit(f)(data))


def test_ideal_ranges_and_incidence_match_mujoco_c_ray(m):
  c = make()
  rng = np.random.default_rng(2)
  hit_groups = set()
  for _ in range(3):
    d = eh.state(m, pos=(0.3 * rng.normal(), 0.3 * rng.normal(), 1.0),
                 quat=eh.random_quat(rng, 0.25))
    s = eh.acquire(c, eh.put(m, d))
    tr = ideal(c, eh.put(m, d))
    dist, cos, grp = reference_geometry(m, d)
    hit = dist >= 0
    np.testing.assert_array_equal(tr['range_m'] >= 0, hit)
    np.testing.assert_allclose(tr['range_m'][hit], dist[hit], rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.cos(tr['incidence_rad'][hit]), cos[hit], atol=2e-4)
    ok = hit & (dist <= 30.0)
    np.testing.assert_array_equal(s.beam_valid, ok)
    np.testing.assert_allclose(s.range_m[ok], dist[ok], rtol=2e-5, atol=2e-5)
    assert np.all(s.range_m[~ok] == np.inf)
    hit_groups |= set(grp[hit].tolist())
  assert hit_groups >= {0, 1, 2, 3, 4}   # plane, box, sphere, cylinder, capsule


def test_sweep_skews_the_scan_of_a_moving_sensor(m):
  sweep = 0.08
  c = make(sweep_time_s=sweep)
  d = eh.state(m, quat=eh.random_quat(np.random.default_rng(8), 0.1), vel=(3.0, 1.0, 0.2),
               omega=(0.1, 0.2, 4.0))
  tr = ideal(c, eh.put(m, d))
  got = np.asarray(tr['range_m'])
  dist, _, _ = reference_geometry(m, d, sweep)
  still, _, _ = reference_geometry(m, d, 0.0)
  hit = dist >= 0
  np.testing.assert_array_equal(got >= 0, hit)
  np.testing.assert_allclose(got[hit], dist[hit], rtol=5e-5, atol=5e-5)
  assert np.max(np.abs(dist[hit & (still >= 0)] - still[hit & (still >= 0)])) > 0.1
  s = eh.acquire(c, eh.put(m, d))
  np.testing.assert_allclose(s.beam_time_s, np.repeat(np.arange(72) * sweep / 72, 5), atol=1e-9)


def draws(world_key, source, n, shape, uniform=False):
  k = stream_key(world_key, 'lidar0', source)
  f = jax.random.uniform if uniform else jax.random.normal
  return np.asarray(f(jax.random.fold_in(k, np.uint32(n)), shape), np.float64)


def test_noise_resolution_and_limits_match_reference(m):
  cfg = dict(noise_stddev_m=0.03, noise_fraction=0.004, resolution_m=0.01, min_range_m=2.1,
             max_range_m=6.0)
  c = make(**cfg)
  d = eh.state(m)
  wk = jax.random.PRNGKey(9)
  dist, _, _ = reference_geometry(m, d)
  for n in (0, 7):
    s = eh.acquire(c, eh.put(m, d), n=n, wk=wk)
    z = draws(wk, 'noise', n, (360,))
    x = dist + (0.03 + 0.004 * np.maximum(dist, 0)) * z
    x = 0.01 * np.round(x / 0.01)
    far = (dist < 0) | (x > 6.0)
    near = ~far & (x < 2.1)
    ref = np.where(far, np.inf, np.where(near, -np.inf, x))
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(s.beam_valid, fin)
    np.testing.assert_array_equal(s.range_m[~fin], ref[~fin])
    # a float32 value on a rounding boundary may land on the neighbouring step
    err = np.abs(s.range_m[fin] - ref[fin])
    assert np.all(err <= 0.01 + 1e-5) and np.mean(err > 1e-5) < 0.02
    assert near.any() and far.any() and fin.any()


def test_no_return_rate_follows_incidence_range_and_reflectivity(m):
  refl = (0.9, 0.5, 1.0, 1.0, 1.0, 1.0)
  p0, r_ref = 0.05, 4.0
  c = make(dropout_probability=p0, reference_range_m=r_ref, group_reflectivity=list(refl),
           max_incidence_deg=80.0, period_s=eh.DT)
  d = eh.state(m)
  K = 600
  _, out, _ = eh.drive(c, eh.stack(eh.model(), [d] * K))
  dist, cos, grp = reference_geometry(m, d)
  hit = dist >= 0
  prob = np.where(hit, (1 - p0) * np.minimum(1, np.array(refl)[grp] * np.clip(cos, 0, 1)
                                             * (r_ref / np.maximum(dist, 1e-6)) ** 2), 0.0)
  prob = np.where(cos >= math.cos(math.radians(80.0)), prob, 0.0)
  prob = np.where(dist <= 30.0, prob, 0.0)
  frac = out.sample.beam_valid[out.new_data].mean(axis=0)
  k = out.new_data.sum()
  tol = 5 * np.sqrt(prob * (1 - prob) / k) + 1e-9
  assert np.all(np.abs(frac - prob) <= tol)
  # the model spans the whole range: certain, rare and impossible returns all occur
  assert (prob > 0.9).any() and ((prob > 0.05) & (prob < 0.5)).any() and (prob == 0).any()


def test_config_rules(tmp_path):
  import fibril_mjx

  def err(**cfg):
    c = {'site': 'lidar', 'period_s': 0.1, 'max_range_m': 30.0, 'horizontal_samples': 8, **cfg}
    path = write_manifest(tmp_path, eh.SCENE_XML, [{'id': 'l', 'type': lidar.TYPE, 'config': c}],
                          model='scene.xml', name='m.yaml')
    with pytest.raises(FibrilError) as e:
      fibril_mjx.load(str(path))
    return str(e.value)
  P = 'components[0].config'
  assert f'{P}.sweep_time_s = 0.2: must be ≤ period_s = 0.1' in err(sweep_time_s=0.2)
  assert f'{P}.max_range_m = 1.0: must be > min_range_m = 2' in err(min_range_m=2.0,
                                                                    max_range_m=1.0)
  assert f"{P}.site = 'nope': no MuJoCo site" in err(site='nope')
  assert f'{P}.group_reflectivity' in err(group_reflectivity=[1.5, 1, 1, 1, 1, 1])
