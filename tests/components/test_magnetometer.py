"""`fibril_sim/magnetometer`: the measurement equation against an independent float64 NumPy
reference (same named-stream draws), noise terms against closed forms, common mode between two
instances, truth yaw kept apart from the measured field, validation messages."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nav_helpers as nh
from fibril_mjx.components.sensors import magnetometer

PERIOD = 0.01
STEP = 5


class Fb(NamedTuple):
  current: jax.Array


class Out(NamedTuple):
  sample: Fb


class FakeMotor:
  """Stands for an earlier component whose delivered feedback has a `current`."""
  type = 'test/motor'

  def default_params(self):
    return ()

  def init(self, p, key):
    return ()

  def output(self, s):
    return Out(Fb(jnp.float32(0.0)))


def make(cid='mag', **cfg):
  ctx, cat = nh.context(built={'mot': FakeMotor()}, entries=(('mot', 'test/motor'),
                                                              (cid, magnetometer.TYPE)))
  raw = {'site': 's', 'period_s': PERIOD, **cfg}
  if 'declination_deg' not in raw and 'earth_field_ut' not in raw:
    raw['earth_field_ut'] = [12.0, 18.0, -42.0]
  return magnetometer.build(cid, raw, ctx, cat)


def attitudes(n, seed=0):
  """Random smooth attitudes (yaw turning, roll/pitch wobbling), `(n, 3, 3)`."""
  t = np.arange(n) * nh.DT
  rs = np.random.default_rng(seed)
  ph = rs.uniform(0, 6, 3)
  return np.stack([nh.rot_z(0.8 * ti + ph[0]) @ nh.rot_x(0.4 * math.sin(1.3 * ti + ph[1]))
                   for ti in t])


ALL = dict(hard_iron_ut=[3.0, -2.0, 1.0], soft_iron=[[1.05, 0.02, 0.0], [0.02, 0.97, 0.01],
                                                     [0.0, 0.01, 1.01]],
           current_components=['mot'], current_coefficients_ut_per_a=[[0.5, -0.2, 1.0]],
           current_lag_s=0.03, noise_stddev_ut=[0.3, 0.3, 0.4],
           bias_turn_on_stddev_ut=[1.0, 2.0, 0.5], bias_instability_stddev_ut=[0.2, 0.2, 0.3],
           bias_correlation_time_s=0.5, common_mode_stream='anomaly',
           common_mode_stddev_ut=[0.4, 0.4, 0.6], common_mode_correlation_time_s=0.2,
           range_ut=40.0, resolution_ut=0.015)


def reference(cfg, xmat, current, wk=nh.WK, cid='mag'):
  """Independent float64 implementation of the module docstring, per acquisition."""
  n_ticks = len(xmat)
  ks = np.arange(0, n_ticks, STEP)
  n = len(ks)
  g = lambda k, d: np.asarray(cfg.get(k, d), np.float64)  # noqa: E731
  if 'declination_deg' in cfg:
    d, i, f = (math.radians(cfg['declination_deg']), math.radians(cfg['inclination_deg']),
               cfg['intensity_ut'])
    b = np.array([f * math.cos(i) * math.sin(d), f * math.cos(i) * math.cos(d),
                  -f * math.sin(i)])
  else:
    b = g('earth_field_ut', [12.0, 18.0, -42.0])
  world = np.broadcast_to(b, (n, 3)).copy()
  if np.any(g('common_mode_stddev_ut', [0, 0, 0]) > 0):
    phi = math.exp(-PERIOD / cfg['common_mode_correlation_time_s'])
    x = nh.gm_reference(nh.normals(wk, cfg['common_mode_stream'], 'external_field', n, 3,
                                   shared=True), phi, 1.0)
    world += g('common_mode_stddev_ut', 0) * x
  m = np.einsum('kji,kj->ki', xmat[ks], world)          # Rᵀ·B
  m = m @ g('soft_iron', np.eye(3)).T + g('hard_iron_ut', [0, 0, 0])
  if 'current_components' in cfg:
    tau = cfg.get('current_lag_s', 0.0)
    y = np.zeros(n_ticks)
    a = 1 - math.exp(-nh.DT / tau) if tau > 0 else 1.0
    prev = 0.0
    for k in range(n_ticks):
      prev = prev + a * (current[k] - prev)
      y[k] = prev
    m += y[ks, None] * g('current_coefficients_ut_per_a', 0)[0]
  if np.any(g('bias_turn_on_stddev_ut', [0, 0, 0]) > 0):
    m += g('bias_turn_on_stddev_ut', 0) * nh.normals(wk, cid, 'bias_turn_on', 1, 3)[0]
  if np.any(g('bias_instability_stddev_ut', [0, 0, 0]) > 0):
    phi = math.exp(-PERIOD / cfg['bias_correlation_time_s'])
    m += nh.gm_reference(nh.normals(wk, cid, 'bias_instability', n, 3), phi,
                         g('bias_instability_stddev_ut', 0))
  if np.any(g('noise_stddev_ut', [0, 0, 0]) > 0):
    m += g('noise_stddev_ut', 0) * nh.normals(wk, cid, 'noise', n, 3)
  flags = np.zeros_like(m, bool)
  if cfg.get('range_ut', 0) > 0:
    flags = np.abs(m) > cfg['range_ut']
    m = np.clip(m, -cfg['range_ut'], cfg['range_ut'])
  if cfg.get('resolution_ut', 0) > 0:
    m = cfg['resolution_ut'] * np.round(m / cfg['resolution_ut'])
  return m, flags


def run(c, xmat, current=None):
  n = len(xmat)
  env = None
  if c.current_ids:
    env = {'mot': Out(Fb(jnp.asarray(current, jnp.float32)))}
  return nh.drive(c, nh.data_seq(n, xmat=xmat), env=env)


CASES = {
    'earth_only': {},
    'dii': dict(declination_deg=-7.5, inclination_deg=64.0, intensity_ut=49.0),
    'iron': dict(hard_iron_ut=ALL['hard_iron_ut'], soft_iron=ALL['soft_iron']),
    'current_lag': dict(current_components=['mot'], current_coefficients_ut_per_a=[[0.5, -0.2,
                                                                                    1.0]],
                        current_lag_s=0.03),
    'current_no_lag': dict(current_components=['mot'],
                           current_coefficients_ut_per_a=[[0.5, -0.2, 1.0]]),
    'range_resolution': dict(range_ut=30.0, resolution_ut=0.015),
    'everything': ALL,
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_equation_matches_reference(name):
  cfg = CASES[name]
  c = make(**cfg)
  n = 600
  xmat = attitudes(n)
  current = 5.0 + 4.0 * np.sign(np.sin(np.arange(n) * nh.DT * 7.0))   # steps: lag visible
  _, out, _, _ = run(c, xmat, current)
  got = out.sample.magnetic_field_ut[out.new_data]
  ref, flags = reference(cfg, xmat, current)
  tol = 1e-4 + (cfg.get('resolution_ut', 0) if name == 'everything' else 0)
  np.testing.assert_allclose(got, ref, atol=max(tol, 2e-4))
  if 'range_ut' in cfg:
    assert flags.any()
    np.testing.assert_array_equal(out.sample.saturated[out.new_data], flags)


def test_declination_inclination_intensity_and_heading():
  """A level sensor turned to yaw ψ reads the horizontal field at heading ψ + declination east
  of north: `atan2(−m_y, m_x)` relative to east-of-north conventions, checked numerically."""
  c = make(declination_deg=10.0, inclination_deg=60.0, intensity_ut=50.0)
  b = np.asarray(c.default_params().earth_field_ut, np.float64)
  np.testing.assert_allclose(np.linalg.norm(b), 50.0, rtol=1e-6)
  np.testing.assert_allclose(math.degrees(math.atan2(-b[2], np.linalg.norm(b[:2]))), 60.0,
                             atol=1e-4)
  np.testing.assert_allclose(math.degrees(math.atan2(b[0], b[1])), 10.0, atol=1e-4)
  yaw = 0.7
  _, out, _, truth = run(c, np.broadcast_to(nh.rot_z(yaw), (10, 3, 3)))
  m = out.sample.magnetic_field_ut[0]
  # field direction in the world from the measurement and the true yaw, back to declination
  w = nh.rot_z(yaw) @ m
  np.testing.assert_allclose(math.degrees(math.atan2(w[0], w[1])), 10.0, atol=1e-3)
  np.testing.assert_allclose(truth['yaw_rad'][0], yaw, atol=1e-6)


def test_truth_yaw_separate_from_the_current_disturbance():
  """A throttle change without motion moves the measured field, never the truth yaw."""
  cfg = dict(current_components=['mot'], current_coefficients_ut_per_a=[[5.0, 0.0, 0.0]])
  c = make(**cfg)
  n = 200
  xmat = np.broadcast_to(nh.rot_z(0.3), (n, 3, 3))
  current = np.where(np.arange(n) < 100, 0.0, 10.0)
  _, out, _, truth = run(c, xmat, current)
  m = out.sample.magnetic_field_ut
  assert abs(m[150, 0] - m[50, 0] - 50.0) < 1e-3
  np.testing.assert_allclose(truth['yaw_rad'], 0.3, atol=1e-6)
  np.testing.assert_allclose(truth['magnetic_field_ut'][150], truth['magnetic_field_ut'][50])
  np.testing.assert_allclose(truth['current_a'][150], 10.0)


def test_white_noise_std_and_variance_field():
  sig = np.array([0.3, 0.5, 0.8])
  c = make(noise_stddev_ut=sig.tolist(), resolution_ut=0.01)
  n = 20000 * STEP
  _, out, _, truth = run(c, np.broadcast_to(np.eye(3), (n, 3, 3)))
  e = (out.sample.magnetic_field_ut[out.new_data] - np.array([12.0, 18.0, -42.0])).astype(
      np.float64)
  want = np.sqrt(sig ** 2 + 0.01 ** 2 / 12)
  np.testing.assert_allclose(e.std(0), want, rtol=5 / math.sqrt(2 * len(e)))
  np.testing.assert_allclose(out.sample.variance[-1], want ** 2, rtol=1e-5)


def test_gauss_markov_bias_std_and_autocorrelation():
  sig, tau = 0.5, 0.1
  c = make(bias_instability_stddev_ut=[sig] * 3, bias_correlation_time_s=tau)
  worlds, n = 32, 1000
  _, out, _, _ = nh.drive_worlds(c, nh.data_seq(n * STEP), worlds)
  b = (out.sample.magnetic_field_ut[:, ::STEP] - np.array([12.0, 18.0, -42.0])).astype(
      np.float64)
  phi = math.exp(-PERIOD / tau)
  n_eff = worlds * n * 3 * (1 - phi ** 2) / (1 + phi ** 2)
  assert abs(np.sqrt(np.mean(b ** 2)) / sig - 1) < 5 / math.sqrt(2 * n_eff)
  for k in (1, 5, 10):
    r = np.sum(b[:, :-k] * b[:, k:]) / np.sum(b[:, :-k] ** 2)
    assert abs(r - phi ** k) < 5 * nh.bartlett_sd(phi, k, worlds * (n - k) * 3), (k, r)


def test_turn_on_bias_dispersion_across_worlds():
  sig = np.array([1.0, 2.0, 0.5])
  c = make(bias_turn_on_stddev_ut=sig.tolist())
  worlds = 2000
  _, out, _, _ = nh.drive_worlds(c, nh.data_seq(20), worlds)
  b = out.sample.magnetic_field_ut[:, 0] - np.array([12.0, 18.0, -42.0])
  np.testing.assert_allclose(np.sqrt(np.mean(b.astype(np.float64) ** 2, 0)), sig,
                             rtol=5 / math.sqrt(2 * worlds))
  assert np.all(out.sample.magnetic_field_ut[:, 15] == out.sample.magnetic_field_ut[:, 0])


def _errors(cid, stream, worlds, n, sig_c, sig_n, tau):
  c = make(cid=cid, common_mode_stream=stream, common_mode_stddev_ut=[sig_c] * 3,
           common_mode_correlation_time_s=tau, noise_stddev_ut=[sig_n] * 3)
  _, out, _, _ = nh.drive_worlds(c, nh.data_seq(n * STEP), worlds)
  return (out.sample.magnetic_field_ut[:, ::STEP] - np.array([12.0, 18.0, -42.0])).astype(
      np.float64)


def test_common_mode_cross_correlation():
  """Two magnetometers naming one shared stream: their errors correlate with
  ρ = σ_c² / (σ_c² + σ_n²); the shared part is identical; another stream name: ρ ≈ 0."""
  sig_c, sig_n, tau = 1.0, 0.5, 0.02
  worlds, n = 16, 2000
  a = _errors('mag_a', 'anomaly', worlds, n, sig_c, sig_n, tau)
  b = _errors('mag_b', 'anomaly', worlds, n, sig_c, sig_n, tau)
  other = _errors('mag_c', 'elsewhere', worlds, n, sig_c, sig_n, tau)
  rho = sig_c ** 2 / (sig_c ** 2 + sig_n ** 2)
  phi = math.exp(-PERIOD / tau)
  n_eff = a.size * (1 - phi ** 2) / (1 + phi ** 2)
  r_ab = np.sum(a * b) / math.sqrt(np.sum(a * a) * np.sum(b * b))
  r_ac = np.sum(a * other) / math.sqrt(np.sum(a * a) * np.sum(other * other))
  assert abs(r_ab - rho) < 5 * (1 - rho ** 2) / math.sqrt(n_eff), r_ab
  assert abs(r_ac) < 5 / math.sqrt(n_eff), r_ac
  # the difference holds only the independent noise: variance 2σ_n²
  d = a - b
  assert abs(d.var() / (2 * sig_n ** 2) - 1) < 5 * math.sqrt(2 / d.size)


def test_shared_stream_is_a_function_of_the_world_only():
  """The common process depends on (seed, world, stream name), not on the component id."""
  cfg = dict(common_mode_stream='s1', common_mode_stddev_ut=[1.0] * 3,
             common_mode_correlation_time_s=0.1)
  a = nh.drive(make(cid='one', **cfg), nh.data_seq(100))[1].sample.magnetic_field_ut
  b = nh.drive(make(cid='two', **cfg), nh.data_seq(100))[1].sample.magnetic_field_ut
  np.testing.assert_array_equal(a, b)


def test_jit_eager_and_gradient():
  c = make(hard_iron_ut=[1.0, 2.0, 3.0], soft_iron=ALL['soft_iron'])
  p0 = c.default_params()
  d = nh.data_seq(1, xmat=attitudes(1))
  d = jax.tree.map(lambda x: x[0], d)

  def f(soft):
    st = c.init(p0._replace(soft_iron=soft), nh.WK)
    return jnp.sum(c.acquire(p0._replace(soft_iron=soft), st, d, 0, 0)[1].magnetic_field_ut)
  g = np.asarray(jax.grad(f)(p0.soft_iron))
  x = np.asarray(d.site_xmat[0]).T @ np.array([12.0, 18.0, -42.0])
  np.testing.assert_allclose(g, np.broadcast_to(x, (3, 3)), rtol=1e-5)


# ------------------------------------------------------------------ validation

def comp(**cfg):
  base = {'site': 's', 'period_s': 0.01, 'earth_field_ut': [10, 20, -40]}
  return {'id': 'mag', 'type': 'fibril_sim/magnetometer',
          'config': {k: v for k, v in {**base, **cfg}.items() if v is not None}}


MOTOR = {'id': 'mot', 'type': 'fibril_sim/motor',
         'config': {'actuator': 'spin', 'application_period_s': 0.002}}
P = 'components[0].config'

RULES = {
    'both_field_forms': (comp(declination_deg=1.0, inclination_deg=60, intensity_ut=50),
                         f'{P}.earth_field_ut', '[10.0, 20.0, -40.0]', 'give earth_field_ut or '
                         'declination_deg/inclination_deg/intensity_ut, not both'),
    'no_field': (comp(earth_field_ut=None, declination_deg=3.0), f'{P}.earth_field_ut', None,
                 'required unless declination_deg, inclination_deg and intensity_ut are all '
                 'given'),
    'inclination_range': (comp(earth_field_ut=None, declination_deg=0, inclination_deg=95,
                               intensity_ut=50), f'{P}.inclination_deg', '95',
                          'input should be less than or equal to 90'),
    'negative_noise': (comp(noise_stddev_ut=[0, -1, 0]), f'{P}.noise_stddev_ut[1]', '-1',
                       'input should be greater than or equal to 0'),
    'site_missing': (comp(site='mag'), f'{P}.site', "'mag'",
                     'no MuJoCo site of that name in the compiled model'),
    'gm_tau': (comp(bias_instability_stddev_ut=[0.1, 0, 0]), f'{P}.bias_correlation_time_s',
               '0.0', 'must be > 0 where bias_instability_stddev_ut > 0 (Gauss–Markov '
               'correlation time)'),
    'cm_tau': (comp(common_mode_stream='a', common_mode_stddev_ut=[0.1, 0, 0]),
               f'{P}.common_mode_correlation_time_s', '0.0', 'must be > 0 where '
               'common_mode_stddev_ut > 0 (Gauss–Markov correlation time)'),
    'cm_stream': (comp(common_mode_stddev_ut=[0.1, 0, 0], common_mode_correlation_time_s=1.0),
                  f'{P}.common_mode_stream', 'None', 'must name a shared stream where '
                  'common_mode_stddev_ut > 0'),
    'coeff_count': (comp(current_components=['mot']), f'{P}.current_coefficients_ut_per_a', '[]',
                    'needs one [x, y, z] per entry of current_components (1)'),
    'current_unknown': (comp(current_components=['motr'],
                             current_coefficients_ut_per_a=[[1, 0, 0]]),
                        f'{P}.current_components[0]', "'motr'",
                        'no other component of that id in the manifest'),
    'range_negative': (comp(range_ut=-1), f'{P}.range_ut', '-1',
                       'input should be greater than or equal to 0'),
}


@pytest.mark.parametrize('case', sorted(RULES))
def test_config_rule(tmp_path, case):
  c, path, value, rule = RULES[case]
  nh.assert_rule(tmp_path, [c], path, value, rule)


def test_current_component_must_be_listed_before(tmp_path):
  c = comp(current_components=['mot'], current_coefficients_ut_per_a=[[1, 0, 0]])
  nh.assert_rule(tmp_path, [c, MOTOR], f'{P}.current_components[0]', "'mot'",
                 'must name a component listed before this one')


def test_current_component_needs_a_current(tmp_path):
  other = comp(id=None)
  other['id'] = 'mag0'
  c = comp(current_components=['mag0'], current_coefficients_ut_per_a=[[1, 0, 0]])
  nh.assert_rule(tmp_path, [other, c], 'components[1].config.current_components[0]', "'mag0'",
                 "must name a component whose feedback has a current (e.g. fibril_sim/motor); "
                 "'mag0' is a fibril_sim/magnetometer")


def test_shared_stream_needs_equal_timing(tmp_path):
  shared = dict(common_mode_stream='a', common_mode_stddev_ut=[0.1, 0.1, 0.1],
                common_mode_correlation_time_s=1.0)
  first = comp(**shared)
  second = comp(**shared, period_s=0.02)
  second['id'] = 'mag2'
  nh.assert_rule(tmp_path, [first, second], 'components[1].config.period_s', '0.02',
                 "must equal 0.01 of component 'mag', which shares common_mode_stream 'a' (a "
                 'shared error process is drawn at the same instants)')


def test_motor_current_reaches_the_field(tmp_path):
  """Through the simulator: a motor's delivered current feedback moves the field."""
  import fibril_mjx
  c = comp(current_components=['mot'], current_coefficients_ut_per_a=[[2.0, 0, 0]])
  mot = dict(MOTOR)
  mot['config'] = {**MOTOR['config'], 'feedback_current_per_force': 10.0}
  path = nh.manifest(tmp_path, [mot, c], extra={'command_script': [
      {'component': 'mot', 'kind': 'velocity', 'offset': 50.0, 'period_s': 0.002}]})
  sim = fibril_mjx.load(str(path))
  p = sim.default_params(2)
  _, tr, _ = sim.rollout(p, fibril_mjx.world_keys(0, 2), 50)
  cur = np.asarray(tr['truth']['mag']['current_a'])[..., 0]
  fb = np.asarray(tr['sensor']['mot'].sample.current)
  assert np.abs(cur).max() > 0.1
  np.testing.assert_allclose(cur, fb, rtol=1e-6, atol=1e-6)   # no lag configured


def test_varied_field_is_compiled_in_at_its_default():
  """A field named for per-world variation takes effect although its manifest value is the
  default (SPEC §1.2 switch honours `vary`)."""
  ctx, cat = nh.context(vary={'noise_stddev_ut', 'hard_iron_ut'})
  c = magnetometer.build('mag', {'site': 's', 'period_s': PERIOD,
                                 'earth_field_ut': [12.0, 18.0, -42.0]}, ctx, cat)
  assert c.uses('noise_stddev_ut') and c.uses('hard_iron_ut') and not c.uses('range_ut')
  p = c.default_params()
  p = p._replace(noise_stddev_ut=jnp.array([0.5, 0.5, 0.5]),
                 hard_iron_ut=jnp.array([1.0, 2.0, 3.0]))
  _, out, _, _ = nh.drive(c, nh.data_seq(50), params=p)
  m = out.sample.magnetic_field_ut[0]
  z = nh.normals(nh.WK, 'mag', 'noise', 1, 3)[0]
  np.testing.assert_allclose(m, np.array([13.0, 20.0, -39.0]) + 0.5 * z, atol=1e-5)
