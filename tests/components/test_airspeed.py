"""`fibril_sim/airspeed`: differential pressure from the air-relative velocity along the probe
axis (wind separate), probe lag, offset, range and quantization against an independent float64
NumPy reference; noise against its closed form; validation messages."""

from __future__ import annotations

import math

import numpy as np
import pytest

import nav_helpers as nh
from fibril_mjx.components.sensors import airspeed

PERIOD = 0.01
STEP = 5


def make(**cfg):
  ctx, cat = nh.context()
  raw = {'velocity_sensor': 'vel', 'period_s': PERIOD, **cfg}
  return airspeed.build('pitot', {k: v for k, v in raw.items() if v is not None}, ctx, cat)


def scenario(n):
  t = np.arange(n) * nh.DT
  xmat = np.stack([nh.rot_z(0.7 * ti) @ nh.rot_x(0.2 * np.sin(ti)) for ti in t])
  sd = np.zeros((n, nh.NSD))
  u = 12 + 10 * np.sign(np.sin(3.0 * t))        # steps: the probe lag is visible
  sd[:, nh.VEL] = np.stack([u, 2 * np.sin(2 * t), -0.5 * np.ones(n)], 1)
  return nh.data_seq(n, xmat=xmat, sensordata=sd), (xmat, sd)


def reference(cfg, raw, wk=nh.WK):
  xmat, sd = raw
  wind = np.asarray(cfg.get('wind_m_s', [0, 0, 0]), np.float64)
  rho = cfg.get('air_density_kg_m3', 1.225)
  v = sd[:, nh.VEL] - np.einsum('kji,j->ki', xmat, wind)
  u = v[:, 0]
  q = 0.5 * rho * u * np.abs(u)
  tau = cfg.get('response_time_s', 0.0)
  if tau > 0:
    a = 1 - math.exp(-nh.DT / tau)
    f = np.empty_like(q)
    f[0] = q[0]
    for k in range(1, len(q)):
      f[k] = f[k - 1] + a * (q[k] - f[k - 1])
    q = f
  ks = np.arange(0, len(q), STEP)
  x = q[ks] + cfg.get('offset_pa', 0.0)
  if cfg.get('noise_stddev_pa', 0) > 0:
    x = x + cfg['noise_stddev_pa'] * nh.normals(wk, 'pitot', 'noise', len(ks))
  flag = np.zeros(len(ks), bool)
  if cfg.get('range_pa', 0) > 0:
    flag = np.abs(x) > cfg['range_pa']
    x = np.clip(x, -cfg['range_pa'], cfg['range_pa'])
  if cfg.get('resolution_pa', 0) > 0:
    x = cfg['resolution_pa'] * np.round(x / cfg['resolution_pa'])
  return x, flag


CASES = {
    'ideal': {},
    'wind_density': dict(wind_m_s=[-4.0, 2.0, 0.5], air_density_kg_m3=1.1),
    'lag': dict(response_time_s=0.04),
    'all': dict(wind_m_s=[-4.0, 2.0, 0.5], response_time_s=0.04, offset_pa=3.0,
                noise_stddev_pa=1.5, range_pa=300.0, resolution_pa=1.052121),
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_equation_matches_reference(name):
  cfg = CASES[name]
  data, raw = scenario(1500)
  _, out, _, _ = nh.drive(make(**cfg), data)
  nd = out.new_data
  x, flag = reference(cfg, raw)
  np.testing.assert_allclose(out.sample.differential_pressure_pa[nd], x, atol=1e-2 + 1e-4 *
                             np.abs(x).max())
  np.testing.assert_array_equal(out.sample.saturated[nd], flag)
  if name == 'all':
    assert flag.any()


def test_only_the_axial_component_is_sensed():
  """Sideslip: a velocity along the probe's y axis gives no differential pressure."""
  sd = np.zeros((10, nh.NSD))
  sd[:, nh.VEL] = [0.0, 15.0, 0.0]
  _, out, _, _ = nh.drive(make(), nh.data_seq(10, sensordata=sd))
  assert np.all(out.sample.differential_pressure_pa == 0)


def test_wind_is_separate_from_the_probe():
  """Standing still in a 10 m/s head wind (world −x) reads ½ρ·10²."""
  _, out, _, truth = nh.drive(make(wind_m_s=[-10.0, 0, 0]), nh.data_seq(10))
  np.testing.assert_allclose(out.sample.differential_pressure_pa[0], 0.5 * 1.225 * 100,
                             rtol=1e-6)
  assert np.all(truth['probe_ground_speed_m_s'] == 0)


def test_noise_std_and_variance():
  sig, res = 2.0, 0.5
  _, out, _, _ = nh.drive_worlds(make(noise_stddev_pa=sig, resolution_pa=res),
                                 nh.data_seq(2000 * STEP), 8)
  x = out.sample.differential_pressure_pa[:, ::STEP].astype(np.float64)
  want = math.sqrt(sig ** 2 + res ** 2 / 12)
  assert abs(x.std() / want - 1) < 5 / math.sqrt(2 * x.size)
  np.testing.assert_allclose(out.sample.variance[0, -1], want ** 2, rtol=1e-5)


P = 'components[0].config'


def comp(**cfg):
  return {'id': 'pitot', 'type': 'fibril_sim/airspeed',
          'config': {k: v for k, v in {'velocity_sensor': 'vel', 'period_s': 0.01,
                                       **cfg}.items() if v is not None}}


RULES = {
    'sensor_type': (comp(velocity_sensor='range'), f'{P}.velocity_sensor', "'range'",
                    "must name a velocimeter sensor (dim 3); 'range' is a rangefinder sensor"),
    'sensor_missing': (comp(velocity_sensor=None), f'{P}.velocity_sensor', None,
                       'required: the name of a MuJoCo velocimeter sensor; or set site: SITE '
                       'instead'),
    'density': (comp(air_density_kg_m3=0), f'{P}.air_density_kg_m3', '0',
                'input should be greater than 0'),
    'negative_lag': (comp(response_time_s=-0.1), f'{P}.response_time_s', '-0.1',
                     'input should be greater than or equal to 0'),
    'wind_length': (comp(wind_m_s=[1, 2]), f'{P}.wind_m_s', '[1, 2]', 'must have 3 items'),
}


@pytest.mark.parametrize('case', sorted(RULES))
def test_config_rule(tmp_path, case):
  c, path, value, rule = RULES[case]
  nh.assert_rule(tmp_path, [c], path, value, rule)


def test_profile_resolution_follows_the_transfer_function():
  c = make(profiles={'device': 'ms4525do_nominal'}, period_s=None)
  psi = 6894.757
  np.testing.assert_allclose(c.cfg.resolution_pa, 2 * psi / (0.8 * 16383), rtol=1e-6)
  assert c.cfg.range_pa == psi
