"""`fibril_sim/gnss`: antenna lever arm, Gauss–Markov position errors, independent velocity
errors and the geodetic output against an independent float64 NumPy reference (its own
ECEF → geodetic iteration); error statistics against closed forms; reported quality consistent
with the error; outages and reacquisition; common mode between receivers; validation."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nav_helpers as nh
from fibril_mjx.mechanisms import faults, geodesy
from fibril_mjx.components.sensors import gnss

PERIOD = 0.1
STEP = 50
ORIGIN = dict(origin_latitude_deg=52.2297, origin_longitude_deg=21.0122, origin_height_m=110.0)
A, F = 6378137.0, 1 / 298.257223563
E2 = F * (2 - F)


def make(cid='gnss', **cfg):
  ctx, cat = nh.context()
  raw = {'velocity_sensor': 'vel', 'period_s': PERIOD, **ORIGIN, **cfg}
  return gnss.build(cid, {k: v for k, v in raw.items() if v is not None}, ctx, cat)


# ------------------------------------------------------------------ independent geodesy

def ref_geodetic(enu, lat0_deg, lon0_deg, h0):
  """ENU around the origin → (lat_deg, lon_deg, h) in float64 by the textbook route."""
  la, lo = math.radians(lat0_deg), math.radians(lon0_deg)
  n0 = A / math.sqrt(1 - E2 * math.sin(la) ** 2)
  x0 = np.array([(n0 + h0) * math.cos(la) * math.cos(lo), (n0 + h0) * math.cos(la) * math.sin(lo),
                 (n0 * (1 - E2) + h0) * math.sin(la)])
  east = np.array([-math.sin(lo), math.cos(lo), 0.0])
  north = np.array([-math.sin(la) * math.cos(lo), -math.sin(la) * math.sin(lo), math.cos(la)])
  up = np.array([math.cos(la) * math.cos(lo), math.cos(la) * math.sin(lo), math.sin(la)])
  x = x0 + enu[..., :1] * east + enu[..., 1:2] * north + enu[..., 2:] * up
  p = np.hypot(x[..., 0], x[..., 1])
  lat = np.arctan2(x[..., 2], p * (1 - E2))
  for _ in range(30):
    n = A / np.sqrt(1 - E2 * np.sin(lat) ** 2)
    h = p / np.cos(lat) - n
    lat = np.arctan2(x[..., 2], p * (1 - E2 * n / (n + h)))
  n = A / np.sqrt(1 - E2 * np.sin(lat) ** 2)
  return np.degrees(lat), np.degrees(np.arctan2(x[..., 1], x[..., 0])), p / np.cos(lat) - n


def test_geodetic_output_within_3_km_of_the_origin():
  rs = np.random.default_rng(1)
  for lat0, lon0, h0 in [(52.2297, 21.0122, 110.0), (-33.86, 151.21, 20.0), (69.6, -18.9, 0.0),
                         (0.2, 179.95, 800.0)]:
    o = geodesy.Origin.build(lat0, lon0, h0)
    enu = rs.uniform(-1, 1, (300, 3)) * [3000.0, 3000.0, 400.0]
    lat, lon, h = jax.vmap(lambda x: geodesy.enu_to_geodetic_e7(o, x))(
        jnp.asarray(enu, jnp.float32))
    rl, ro, rh = ref_geodetic(enu, lat0, lon0, h0)
    assert np.abs(np.asarray(lat) - rl * 1e7).max() < 0.6           # rounding + float32
    dlon = (np.asarray(lon, np.float64) - ro * 1e7 + 1.8e9) % 3.6e9 - 1.8e9
    assert np.abs(dlon).max() < 0.6
    assert np.abs(np.asarray(h, np.float64) - rh).max() < 1e-3
    back = geodesy.geodetic_e7_to_enu(o, lat, lon, np.asarray(h, np.float64))
    assert np.abs(back[:, :2] - enu[:, :2]).max() < 0.012            # 1e-7 deg ≈ 1.1 cm
    assert np.abs(back[:, 2] - enu[:, 2]).max() < 1e-3


# ------------------------------------------------------------------ the measurement equation

def scenario(n):
  t = np.arange(n) * nh.DT
  xmat = np.stack([nh.rot_z(0.9 * ti) @ nh.rot_x(0.3 * np.sin(2 * ti)) for ti in t])
  xpos = np.stack([40 * np.sin(0.2 * t), 25 * t, 5 + np.sin(t)], 1)
  sd = np.zeros((n, nh.NSD))
  sd[:, nh.VEL] = np.stack([3 + np.sin(t), np.cos(2 * t), 0.2 * np.ones(n)], 1)
  sd[:, nh.GYRO] = np.stack([0.6 * np.cos(2 * t), 0.1 * np.ones(n), 0.9 * np.ones(n)], 1)
  return nh.data_seq(n, xmat=xmat, xpos=xpos, sensordata=sd), (xmat, xpos, sd)


def reference(cfg, raw, wk=nh.WK, cid='gnss'):
  xmat, xpos, sd = raw
  ks = np.arange(0, len(xpos), STEP)
  n = len(ks)
  lever = np.asarray(cfg.get('lever_arm_m', [0, 0, 0]), np.float64)
  r = xpos[ks] + np.einsum('kij,j->ki', xmat[ks], lever)
  v_site = sd[ks][:, nh.VEL] + np.cross(sd[ks][:, nh.GYRO], lever)
  v = np.einsum('kij,kj->ki', xmat[ks], v_site)
  err = np.zeros((n, 3))
  if cfg.get('horizontal_error_stddev_m', 0) > 0:
    phi = math.exp(-PERIOD / cfg['horizontal_correlation_time_s'])
    err[:, :2] = nh.gm_reference(nh.normals(wk, cid, 'horizontal_error', n, 2), phi,
                                 cfg['horizontal_error_stddev_m'])
  if cfg.get('vertical_error_stddev_m', 0) > 0:
    phi = math.exp(-PERIOD / cfg['vertical_correlation_time_s'])
    err[:, 2] = nh.gm_reference(nh.normals(wk, cid, 'vertical_error', n), phi,
                                cfg['vertical_error_stddev_m'])
  if cfg.get('common_mode_stream'):
    phi = math.exp(-PERIOD / cfg['common_mode_correlation_time_s'])
    x = nh.gm_reference(nh.normals(wk, cfg['common_mode_stream'], 'atmosphere', n, 3,
                                   shared=True), phi, 1.0)
    err += x * np.array([cfg['common_mode_horizontal_stddev_m'],
                         cfg['common_mode_horizontal_stddev_m'],
                         cfg['common_mode_vertical_stddev_m']])
  sv = np.array([cfg.get('horizontal_velocity_noise_stddev_m_s', 0)] * 2 +
                [cfg.get('vertical_velocity_noise_stddev_m_s', 0)])
  if np.any(sv > 0):
    v = v + sv * nh.normals(wk, cid, 'velocity_noise', n, 3)
  lat, lon, h = ref_geodetic(r + err, ORIGIN['origin_latitude_deg'],
                             ORIGIN['origin_longitude_deg'], ORIGIN['origin_height_m'])
  return lat * 1e7, lon * 1e7, h, v


FULL = dict(angular_velocity_sensor='gyro', lever_arm_m=[0.1, -0.05, 0.2],
            horizontal_error_stddev_m=2.0, horizontal_correlation_time_s=30.0,
            vertical_error_stddev_m=3.0, vertical_correlation_time_s=20.0,
            horizontal_velocity_noise_stddev_m_s=0.05, vertical_velocity_noise_stddev_m_s=0.08,
            common_mode_stream='sky', common_mode_horizontal_stddev_m=0.7,
            common_mode_vertical_stddev_m=1.1, common_mode_correlation_time_s=10.0)
CASES = {'truth_only': {}, 'lever_arm': dict(angular_velocity_sensor='gyro',
                                             lever_arm_m=[0.1, -0.05, 0.2]), 'full': FULL}


@pytest.mark.parametrize('name', sorted(CASES))
def test_equation_matches_reference(name):
  cfg = CASES[name]
  data, raw = scenario(2500)
  _, out, _, _ = nh.drive(make(**cfg), data)
  nd = out.new_data
  lat, lon, h, v = reference(cfg, raw)
  assert np.abs(out.sample.latitude_e7[nd] - lat).max() < 0.6
  assert np.abs(out.sample.longitude_e7[nd] - lon).max() < 0.6
  np.testing.assert_allclose(out.sample.height_m[nd], h, atol=2e-3)
  np.testing.assert_allclose(out.sample.velocity_enu_m_s[nd], v, atol=2e-5)
  assert np.all(out.sample.fix_type[nd] == 3)


# ------------------------------------------------------------------ statistics and quality

@pytest.fixture(scope='module')
def still_errors():
  """Reported-position errors of a receiver standing at the origin: `(worlds, n, 3)` ENU m."""
  cfg = dict(horizontal_error_stddev_m=2.0, horizontal_correlation_time_s=2.0,
             vertical_error_stddev_m=3.5, vertical_correlation_time_s=1.0,
             horizontal_velocity_noise_stddev_m_s=0.05, vertical_velocity_noise_stddev_m_s=0.08)
  c = make(**cfg)
  worlds, n = 64, 300
  _, out, _, _ = nh.drive_worlds(c, nh.data_seq(n * STEP), worlds)
  s = jax.tree.map(lambda x: x[:, ::STEP], out.sample)
  e = geodesy.geodetic_e7_to_enu(c.origin, s.latitude_e7, s.longitude_e7,
                                 s.height_m.astype(np.float64))
  return cfg, e, s


def test_position_error_std_and_correlation_time(still_errors):
  cfg, e, _ = still_errors
  for axes, sig, tau in (((0, 1), 2.0, 2.0), ((2,), 3.5, 1.0)):
    x = e[..., axes]
    phi = math.exp(-PERIOD / tau)
    n_eff = x.size * (1 - phi ** 2) / (1 + phi ** 2)
    assert abs(np.sqrt(np.mean(x ** 2)) / sig - 1) < 5 / math.sqrt(2 * n_eff) + 1e-3
    for k in (1, 5, 10):
      r = np.sum(x[:, :-k] * x[:, k:]) / np.sum(x[:, :-k] ** 2)
      nn = x[:, :-k].size
      assert abs(r - phi ** k) < 5 * nh.bartlett_sd(phi, k, nn), (axes, k, r)


def test_velocity_error_independent_of_position_error(still_errors):
  cfg, e, s = still_errors
  v = s.velocity_enu_m_s.astype(np.float64)
  np.testing.assert_allclose(v[..., :2].std(), 0.05, rtol=5 / math.sqrt(2 * v[..., :2].size))
  np.testing.assert_allclose(v[..., 2].std(), 0.08, rtol=5 / math.sqrt(2 * v[..., 2].size))
  # not the derivative of the position error: uncorrelated with its increments
  de = np.diff(e, axis=1)
  for i in range(3):
    r = np.corrcoef(v[:, 1:, i].ravel(), de[..., i].ravel())[0, 1]
    assert abs(r) < 5 / math.sqrt(de[..., i].size), (i, r)


def test_reported_accuracy_is_the_1_sigma_of_the_actual_error(still_errors):
  cfg, e, s = still_errors
  assert np.all(s.horizontal_accuracy_m == np.float32(2.0))
  assert np.all(s.vertical_accuracy_m == np.float32(3.5))
  inside = np.abs(e[..., 0]) <= s.horizontal_accuracy_m
  phi = math.exp(-PERIOD / 2.0)
  n_eff = inside.size * (1 - phi ** 2) / (1 + phi ** 2)
  p = math.erf(1 / math.sqrt(2))                   # 0.6827 for a 1σ bound
  assert abs(inside.mean() - p) < 5 * math.sqrt(p * (1 - p) / n_eff), inside.mean()


def test_outage_no_fix_held_position_and_reacquisition():
  cfg = dict(horizontal_error_stddev_m=2.0, horizontal_correlation_time_s=5.0,
             outage_start_s=[1.0], outage_end_s=[2.0], reacquisition_s=0.5,
             satellites=14, health_recovery_samples=0)
  data, raw = scenario(2000)
  _, out, health, _ = nh.drive(make(**cfg), data)
  nd = out.new_data
  s = jax.tree.map(lambda x: x[nd], out.sample)
  t = np.nonzero(nd)[0] * nh.DT
  off = (t >= 1.0 - 1e-9) & (t < 2.5 - 1e-9)
  assert np.all(s.fix_type[off] == 0) and np.all(s.fix_type[~off] == 3)
  assert np.all(s.horizontal_accuracy_m[off] >= 100) and np.all(s.hdop[off] > 20)
  assert np.all(s.satellites[off] == 0) and np.all(s.satellites[~off] == 14)
  last = np.nonzero(~off & (t < 1.0))[0][-1]
  assert np.all(s.latitude_e7[off] == s.latitude_e7[last])          # last fix held
  assert np.all(s.health[off] == faults.DEGRADED) and np.all(s.health[~off] == faults.HEALTHY)
  # consistency: never "no fix" with a fix's accuracy, never a fix with the no-fix accuracy
  assert not np.any((s.fix_type == 0) & (s.horizontal_accuracy_m < 100))
  assert not np.any((s.fix_type == 3) & (s.horizontal_accuracy_m >= 100))


def test_common_mode_between_two_receivers():
  cfg = dict(horizontal_error_stddev_m=1.0, horizontal_correlation_time_s=0.2,
             common_mode_stream='iono', common_mode_horizontal_stddev_m=2.0,
             common_mode_vertical_stddev_m=0.0, common_mode_correlation_time_s=0.3)
  data = nh.data_seq(400 * STEP)
  errs = []
  for cid in ('gnss_a', 'gnss_b'):
    c = make(cid, **cfg)
    _, out, _, _ = nh.drive_worlds(c, data, 16)
    s = jax.tree.map(lambda x: x[:, ::STEP], out.sample)
    errs.append(geodesy.geodetic_e7_to_enu(c.origin, s.latitude_e7, s.longitude_e7,
                                           s.height_m.astype(np.float64))[..., :2])
  a, b = errs
  rho = 4.0 / 5.0
  phi = math.exp(-PERIOD / 0.3)
  n_eff = a.size * (1 - phi ** 2) / (1 + phi ** 2)
  r = np.sum(a * b) / math.sqrt(np.sum(a * a) * np.sum(b * b))
  assert abs(r - rho) < 5 * (1 - rho ** 2) / math.sqrt(n_eff), r


# ------------------------------------------------------------------ validation, profile

P = 'components[0].config'


def comp(**cfg):
  base = {'velocity_sensor': 'vel', 'period_s': 0.2, **ORIGIN}
  return {'id': 'gnss', 'type': 'fibril_sim/gnss',
          'config': {k: v for k, v in {**base, **cfg}.items() if v is not None}}


RULES = {
    'outage_lengths': (comp(outage_start_s=[1.0, 3.0], outage_end_s=[2.0]), f'{P}.outage_end_s',
                       '[2.0]', 'needs one end per entry of outage_start_s (2)'),
    'outage_order': (comp(outage_start_s=[3.0], outage_end_s=[2.0]), f'{P}.outage_end_s[0]',
                     '2.0', 'must be > outage_start_s[0] = 3'),
    'lever_without_gyro': (comp(lever_arm_m=[0, 0, 0.1]), f'{P}.angular_velocity_sensor', None,
                           'required with a lever arm (the gyro on the site of velocity_sensor '
                           'gives ω for v + ω × l)'),
    'gyro_type': (comp(angular_velocity_sensor='vel2'), f'{P}.angular_velocity_sensor',
                  "'vel2'", "must name a gyro sensor (dim 3); 'vel2' is a velocimeter sensor"),
    'position_tau': (comp(horizontal_error_stddev_m=2.0), f'{P}.horizontal_correlation_time_s',
                     '0.0', 'must be > 0 where horizontal_error_stddev_m > 0 (Gauss–Markov '
                     'correlation time)'),
    'cm_stream': (comp(common_mode_vertical_stddev_m=1.0, common_mode_correlation_time_s=1.0),
                  f'{P}.common_mode_stream', 'None', 'must name a shared stream where a '
                  'common-mode stddev > 0'),
    'gyro_site': (comp(lever_arm_m=[0, 0, 0.1], angular_velocity_sensor='gyro2'),
                  f'{P}.angular_velocity_sensor', "'gyro2'", "must be on the site of "
                  "velocity_sensor ('s'); it is on 's2'"),
    'cm_tau': (comp(common_mode_stream='x', common_mode_horizontal_stddev_m=1.0),
               f'{P}.common_mode_correlation_time_s', '0.0', 'must be > 0 where a common-mode '
               'stddev > 0 (Gauss–Markov correlation time)'),
    'latitude': (comp(origin_latitude_deg=91.0), f'{P}.origin_latitude_deg', '91.0',
                 'input should be less than or equal to 89.9'),
    'origin_missing': (comp(origin_longitude_deg=None), f'{P}.origin_longitude_deg', None,
                       'required field is missing'),
    'satellites': (comp(satellites=3), f'{P}.satellites', '3',
                   'input should be greater than or equal to 4'),
    'no_fix_accuracy': (comp(no_fix_accuracy_m=0.5), f'{P}.no_fix_accuracy_m', '0.5',
                        'input should be greater than or equal to 100'),
    'nan_on_int_field': (comp(faults=[{'type': 'nan', 'start_s': 1.0}]),
                         f'{P}.faults[0].fields[0]', "'latitude_e7'", "a nan fault needs a "
                         "floating-point field; 'latitude_e7' is int32 (use sentinel or stuck)"),
}


@pytest.mark.parametrize('case', sorted(RULES))
def test_config_rule(tmp_path, case):
  c, path, value, rule = RULES[case]
  nh.assert_rule(tmp_path, [c], path, value, rule)


def test_profile_reports_the_derived_sigma():
  c = make(profiles={'device': 'neo_m8n_nominal'}, period_s=None)
  np.testing.assert_allclose(c.cfg.horizontal_error_stddev_m, 2.5 / 1.1774, rtol=1e-4)
  p = c.default_params()
  np.testing.assert_allclose(c.accuracy(p)[0], 2.1233, rtol=1e-6)


def test_truth_is_the_antenna_with_its_lever_arm():
  lever = np.array([0.1, -0.05, 0.2])
  data, (xmat, xpos, sd) = scenario(300)
  _, _, _, truth = nh.drive(make(angular_velocity_sensor='gyro', lever_arm_m=lever.tolist()),
                            data)
  np.testing.assert_allclose(truth['antenna_position_m'], xpos + xmat @ lever, atol=1e-4)
  v = np.einsum('kij,kj->ki', xmat, sd[:, nh.VEL] + np.cross(sd[:, nh.GYRO], lever))
  np.testing.assert_allclose(truth['antenna_velocity_m_s'], v, atol=1e-5)
