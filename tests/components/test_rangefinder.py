"""`fibril_sim/rangefinder`: distance noise with range and incidence dependence, out-of-range
flags (REP 117 ±inf) against an independent float64 NumPy reference; noise std against its
closed form; MuJoCo's ray through MJX; validation messages."""

from __future__ import annotations

import math

import numpy as np
import pytest

import nav_helpers as nh
from fibril_mjx.components.sensors import rangefinder

PERIOD = 0.01
STEP = 5


def make(**cfg):
  ctx, cat = nh.context()
  raw = {'rangefinder_sensor': 'range', 'period_s': PERIOD, 'max_range_m': 12.0, **cfg}
  return rangefinder.build('lidar', {k: v for k, v in raw.items() if v is not None}, ctx, cat)


def scenario(n):
  """Distance sweeping 0.05 … 14 m (and −1: no hit), tilt up to 40° off nadir."""
  t = np.arange(n) * nh.DT
  d = 7.0 + 7.0 * np.sin(1.1 * t)
  d[(np.arange(n) // 50) % 7 == 3] = -1.0
  tilt = np.radians(40.0) * np.abs(np.sin(0.6 * t))
  # site z axis points down at tilt: R = rot_x(π + tilt)
  xmat = np.stack([nh.rot_x(np.pi + a) for a in tilt])
  sd = np.zeros((n, nh.NSD))
  sd[:, nh.RANGE] = d
  return nh.data_seq(n, xmat=xmat, sensordata=sd), (d, tilt)


def reference(cfg, raw, wk=nh.WK):
  d, tilt = raw
  ks = np.arange(0, len(d), STEP)
  d, cos = d[ks], np.cos(tilt[ks])
  s0, f, gain = (cfg.get('noise_stddev_m', 0.0), cfg.get('noise_fraction', 0.0),
                 cfg.get('incidence_noise_gain', 0.0))
  sigma = (s0 + f * np.maximum(d, 0)) * (1 + gain * (1 / cos - 1))
  x = d + sigma * (nh.normals(wk, 'lidar', 'noise', len(ks)) if (s0 or f) else 0)
  if cfg.get('resolution_m', 0) > 0:
    x = cfg['resolution_m'] * np.round(x / cfg['resolution_m'])
  far = (d < 0) | (x > cfg.get('max_range_m', 12.0))
  if 'max_incidence_deg' in cfg:
    far |= cos < math.cos(math.radians(cfg['max_incidence_deg']))
  near = ~far & (x < cfg.get('min_range_m', 0.0))
  x = np.where(far, np.inf, np.where(near, -np.inf, x))
  return x, ~(far | near), sigma ** 2 + cfg.get('resolution_m', 0) ** 2 / 12


CASES = {
    'ideal': {},
    'noise': dict(noise_stddev_m=0.02, noise_fraction=0.01),
    'incidence': dict(noise_stddev_m=0.02, incidence_noise_gain=2.0, max_incidence_deg=30.0),
    'all': dict(noise_stddev_m=0.025, noise_fraction=0.005, incidence_noise_gain=1.0,
                max_incidence_deg=35.0, min_range_m=0.3, resolution_m=0.005),
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_equation_matches_reference(name):
  cfg = CASES[name]
  data, raw = scenario(3000)
  _, out, _, _ = nh.drive(make(**cfg), data)
  nd = out.new_data
  x, ok, var = reference(cfg, raw)
  got = out.sample.distance_m[nd]
  np.testing.assert_array_equal(out.sample.in_range[nd], ok)
  np.testing.assert_array_equal(np.isinf(got), np.isinf(x))
  np.testing.assert_array_equal(np.sign(got[np.isinf(x)]), np.sign(x[np.isinf(x)]))
  fin = np.isfinite(x)
  tol = 1e-4 + (cfg.get('resolution_m', 0) if name == 'all' else 0)
  assert np.mean(np.abs(got[fin] - x[fin]) > 1e-4) < 0.01 and np.all(
      np.abs(got[fin] - x[fin]) <= tol + 1e-5)
  np.testing.assert_allclose(out.sample.variance[nd], var, rtol=1e-4, atol=1e-9)
  assert (~ok).any() and ok.any()


def test_out_of_range_cases():
  """Too close → −inf, beyond max or no hit → +inf, each with in_range false."""
  sd = np.zeros((4 * STEP, nh.NSD))
  for i, d in enumerate([0.05, 5.0, 13.0, -1.0]):
    sd[i * STEP:(i + 1) * STEP, nh.RANGE] = d
  down = np.broadcast_to(nh.rot_x(np.pi), (4 * STEP, 3, 3))
  _, out, _, _ = nh.drive(make(min_range_m=0.1), nh.data_seq(4 * STEP, xmat=down, sensordata=sd))
  nd = out.new_data
  np.testing.assert_array_equal(out.sample.distance_m[nd], [-np.inf, 5.0, np.inf, np.inf])
  np.testing.assert_array_equal(out.sample.in_range[nd], [False, True, False, False])


def test_noise_std_grows_with_incidence_as_configured():
  s0, gain, tilt = 0.03, 1.5, math.radians(25)
  n = 20000
  sd = np.zeros((n * STEP, nh.NSD))
  sd[:, nh.RANGE] = 4.0
  xmat = np.broadcast_to(nh.rot_x(np.pi + tilt), (n * STEP, 3, 3))
  _, out, _, _ = nh.drive(make(noise_stddev_m=s0, incidence_noise_gain=gain),
                          nh.data_seq(n * STEP, xmat=xmat, sensordata=sd))
  e = out.sample.distance_m[out.new_data].astype(np.float64) - 4.0
  want = s0 * (1 + gain * (1 / math.cos(tilt) - 1))
  assert abs(e.std() / want - 1) < 5 / math.sqrt(2 * e.size)
  assert abs(e.mean()) < 5 * want / math.sqrt(e.size)


def test_mujoco_ray_through_mjx(tmp_path):
  """The MJX rangefinder of a site 1 m above the ground, looking down, through the simulator."""
  import jax

  import fibril_mjx
  comp = {'id': 'lidar', 'type': 'fibril_sim/rangefinder',
          'config': {'rangefinder_sensor': 'range', 'period_s': 0.01, 'max_range_m': 12.0}}
  sim = fibril_mjx.load(str(nh.manifest(tmp_path, [comp])))
  _, tr, _ = sim.rollout(sim.default_params(2), fibril_mjx.world_keys(0, 2), 20)
  tr = jax.tree.map(np.asarray, tr)
  d = tr['sensor']['lidar'].sample.distance_m[:, 0]
  np.testing.assert_allclose(d, 1.0, atol=1e-5)     # free fall: 1 m at tick 0
  np.testing.assert_allclose(tr['truth']['lidar']['incidence_rad'][:, 0], 0.0, atol=1e-3)


P = 'components[0].config'


def comp(**cfg):
  base = {'rangefinder_sensor': 'range', 'period_s': 0.01, 'max_range_m': 12.0}
  return {'id': 'lidar', 'type': 'fibril_sim/rangefinder',
          'config': {k: v for k, v in {**base, **cfg}.items() if v is not None}}


RULES = {
    'max_below_min': (comp(min_range_m=5.0, max_range_m=2.0), f'{P}.max_range_m', '2.0',
                      'must be > min_range_m = 5'),
    'max_missing': (comp(max_range_m=None), f'{P}.max_range_m', None,
                    'required field is missing'),
    'incidence_range': (comp(max_incidence_deg=95), f'{P}.max_incidence_deg', '95',
                        'input should be less than or equal to 90'),
    'sensor_type': (comp(rangefinder_sensor='vel'), f'{P}.rangefinder_sensor', "'vel'",
                    "must name a rangefinder sensor (dim 1); 'vel' is a velocimeter sensor"),
    'negative_fraction': (comp(noise_fraction=-0.1), f'{P}.noise_fraction', '-0.1',
                          'input should be greater than or equal to 0'),
}


@pytest.mark.parametrize('case', sorted(RULES))
def test_config_rule(tmp_path, case):
  c, path, value, rule = RULES[case]
  nh.assert_rule(tmp_path, [c], path, value, rule)


def test_profile_values():
  c = make(profiles={'device': 'tfmini_plus_nominal'}, period_s=None, max_range_m=None)
  assert (c.cfg.min_range_m, c.cfg.max_range_m, c.cfg.resolution_m) == (0.1, 12.0, 0.005)
