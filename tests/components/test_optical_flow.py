"""`fibril_sim/optical_flow`: integrated flow, integrated body rates, quality and integration
time over each frame against a float64 reference built from MuJoCo C (`mj_objectVelocity`,
`mj_ray` for the height) and the named-stream draws, over a trajectory that crosses
saturation (body rate), the range limits and blur; flow scale on a pure translation
(closed form −v/h); the gyro error model of `body_rate_rad` (scale, bias, turn-on bias, white
rate noise) against the same float64 reference and, on a constant rotation over 256 worlds,
against its closed-form mean and variances; compiled out at its default; the shipped
PMW3901-class profile; config rules."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

import extero_helpers as eh
from ref_helpers import stream_key, write_manifest
from fibril_mjx.components.sensors import optical_flow
from fibril_mjx.errors import FibrilError

BASE = dict(fov_deg=42.0, resolution_px=35, min_range_m=0.08, max_range_m=3.0,
            max_flow_rate_rad_s=7.4, max_angular_rate_rad_s=6.0, period_s=0.01)


def make(**cfg):
  ctx, cat = eh.context()
  raw = {'site': 'flow', **BASE, **cfg}
  return optical_flow.build('flow0', {k: v for k, v in raw.items() if v is not None}, ctx, cat)


@pytest.fixture(scope='module')
def traj():
  """A rig translating and turning over the ground; it climbs above 3 m and spins past the
  angular-rate limit part of the time. Each tick is an independent C state (kinematics only)."""
  m = eh.model()
  n = 400
  t = np.arange(n) * eh.DT
  ds = []
  for k in range(n):
    h = 1.0 + 2.5 * max(0.0, math.sin(2 * math.pi * t[k] / 0.8))  # above 3 m for a while
    q = eh.random_quat(np.random.default_rng(k % 7), 0.15)
    w = (4.0 * math.sin(9 * t[k]), 7.0 * math.sin(5 * t[k]), 1.0)   # |ω_xy| up to ~7 rad/s
    ds.append(eh.state(m, pos=(0.5 * t[k], 0.0, h), quat=q, vel=(2.0, -1.0, 0.3), omega=w))
  return m, ds, eh.stack(m, ds)


def reference(m, ds, cfg, wk, due_ticks):
  """Float64 per-frame integrals of the modelled flow (module docstring of the component)."""
  rig = eh.mujoco.mj_name2id(m, eh.mujoco.mjtObj.mjOBJ_BODY, 'rig')
  tex = np.array(cfg.get('group_texture', [1.0] * 6))
  px_per_rad = cfg['resolution_px'] / math.radians(cfg['fov_deg'])
  rows = []
  for d in ds:
    p, R = eh.site_pose(m, d, 'flow')
    v, w = eh.site_velocity(m, d, 'flow')
    vs, ws = R.T @ v, R.T @ w
    dist, g, _ = eh.c_ray(m, d, p, R[:, 2], rig)
    dd = dist if dist > 0 else 1.0
    f = np.array([-vs[0] / dd - ws[1], -vs[1] / dd + ws[0]])
    q = 255.0 * float(cfg['min_range_m'] <= dist <= cfg['max_range_m'] and dist > 0
                      and math.hypot(ws[0], ws[1]) <= cfg['max_angular_rate_rad_s'])
    q *= tex[m.geom_group[g]] if g >= 0 else tex[0]
    q *= cfg.get('illumination', 1.0)
    e = cfg.get('exposure_s', 0.0)
    if e:
      q /= 1 + (np.linalg.norm(f) * e * px_per_rad / cfg.get('blur_half_quality_px', 1.0)) ** 2
    fm = np.clip(f, -cfg['max_flow_rate_rad_s'], cfg['max_flow_rate_rad_s']) if q > 0 else 0 * f
    rows.append((fm, ws, q, dist))
  out, start = [], 0
  for n, k in enumerate(due_ticks):
    seg = rows[start:k + 1]
    flow = sum(r[0] for r in seg) * eh.DT
    gyro = sum(r[1] for r in seg) * eh.DT
    qs = np.array([r[2] for r in seg])
    tracked = [r[3] for r in seg if r[2] > 0]
    sigma = cfg.get('noise_stddev_rad', 0.0) + cfg.get('noise_per_m_rad', 0.0) * (
        np.mean(tracked) if tracked else 0.0)
    key = stream_key(wk, 'flow0', 'noise')
    z = np.asarray(jax.random.normal(jax.random.fold_in(key, np.uint32(n)), (2,)), np.float64)
    out.append((flow + sigma * z, gyro, len(seg) * eh.DT, qs.mean()))
    start = k + 1
  return [np.array(x) for x in zip(*out)]


def test_frames_match_float64_reference(traj):
  m, ds, data = traj
  cfg = dict(BASE, noise_stddev_rad=2e-3, noise_per_m_rad=1.5e-3, exposure_s=0.004,
             blur_half_quality_px=1.5, illumination=0.8,
             group_texture=[0.6, 1.0, 1.0, 1.0, 1.0, 1.0])
  c = make(**cfg)
  wk = jax.random.PRNGKey(3)
  _, out, tr = eh.drive(c, data, wk=wk)
  due = [c.schedule.tick_of(k) for k in range(80) if c.schedule.tick_of(k) < len(ds)]
  flow, gyro, t_int, q = reference(m, ds, cfg, wk, due)
  nd = out.new_data
  s = out.sample
  assert nd.sum() == len(due)
  np.testing.assert_allclose(s.integration_time_s[nd], t_int, rtol=1e-6)
  np.testing.assert_allclose(s.body_rate_rad[nd], gyro, atol=2e-6)
  np.testing.assert_allclose(s.flow_rad[nd], flow, atol=2e-5)
  assert np.all(np.abs(s.quality[nd] - np.round(q)) <= 1)
  # the trajectory exercises every branch: full, reduced and zero quality frames
  assert (q == 0).any() and ((q > 0) & (q < 100)).any() and (q > 110).any()


GYRO = dict(gyro_scale=[1.02, 0.97, 1.01], gyro_bias_rad_s=[0.01, -0.02, 0.005],
            gyro_bias_turn_on_stddev_rad_s=[0.004, 0.004, 0.004],
            gyro_noise_density=[0.002, 0.003, 0.002])


def _draw(wk, source, n, shape):
  """Draw `n` of stream `source` of component `flow0`, float64 (the named-stream rule)."""
  key = stream_key(wk, 'flow0', source)
  return np.asarray(jax.random.normal(jax.random.fold_in(key, np.uint32(n)), shape), np.float64)


def test_gyro_error_model_matches_float64_reference(traj):
  """body_rate_rad = T·(k ⊙ ω̄ + b + b_on + N/√T·w) per frame, ω̄ the frame's mean of the
  sensor-frame rate (MuJoCo C), b_on draw 0 and w draw n of their streams; the flow is
  unchanged by the gyro terms."""
  m, ds, data = traj
  cfg = dict(BASE, noise_stddev_rad=2e-3, **GYRO)
  c = make(**cfg)
  wk = jax.random.PRNGKey(11)
  _, out, _ = eh.drive(c, data, wk=wk)
  due = [c.schedule.tick_of(k) for k in range(80) if c.schedule.tick_of(k) < len(ds)]
  flow, gyro, t_int, _ = reference(m, ds, cfg, wk, due)
  k, b = np.array(GYRO['gyro_scale']), np.array(GYRO['gyro_bias_rad_s'])
  b_on = np.array(GYRO['gyro_bias_turn_on_stddev_rad_s']) * _draw(wk, 'gyro_bias_turn_on', 0,
                                                                  (3,))
  N = np.array(GYRO['gyro_noise_density'])
  want = np.stack([T * (k * g / T + b + b_on + N / np.sqrt(T) * _draw(wk, 'gyro_noise', n, (3,)))
                   for n, (g, T) in enumerate(zip(gyro, t_int))])
  nd = out.new_data
  np.testing.assert_allclose(out.sample.body_rate_rad[nd], want, atol=3e-6)
  np.testing.assert_allclose(out.sample.flow_rad[nd], flow, atol=2e-5)
  assert np.abs(want - gyro).max() > 1e-3       # the terms are not negligible here


def test_gyro_error_statistics_closed_form():
  """A constant rotation, 256 worlds, 40 frames of T = 10 ms each: the rate error e = body_rate/T
  − k ⊙ ω has per-axis mean b, within-world variance N²/T and across-world variance of each
  world's mean σ_on² + N²/(T·F) (4 standard errors each)."""
  m = eh.model()
  d = eh.state(m, pos=(0.0, 0.0, 1.0), omega=(0.8, -0.5, 0.3))
  _, R = eh.site_pose(m, d, 'flow')
  w = R.T @ eh.site_velocity(m, d, 'flow')[1]
  data = eh.stack(m, [d] * 201)
  c = make(**GYRO)
  n = data.qpos.shape[0]
  due, idx = np.zeros(n, bool), np.zeros(n, np.int32)
  for j in range(41):
    due[c.schedule.tick_of(j)], idx[c.schedule.tick_of(j)] = True, j
  W = 256
  keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(2), i))(np.arange(W))
  run = jax.jit(jax.vmap(lambda wk: eh._drive(c, c.default_params(), data, due, idx, wk)[1][0]))
  out = jax.tree.map(np.asarray, run(keys))
  nd = out.new_data[0]
  T = out.sample.integration_time_s[:, nd][:, 1:]          # the first frame is one tick long
  assert np.allclose(T, 0.01, rtol=1e-5)
  e = out.sample.body_rate_rad[:, nd][:, 1:] / T[..., None] - np.array(GYRO['gyro_scale']) * w
  F = e.shape[1]
  N = np.array(GYRO['gyro_noise_density'])
  s_on = np.array(GYRO['gyro_bias_turn_on_stddev_rad_s'])
  var_mean = s_on ** 2 + N ** 2 / (0.01 * F)
  mean = e.mean(axis=(0, 1))
  np.testing.assert_array_less(np.abs(mean - GYRO['gyro_bias_rad_s']),
                               4 * np.sqrt(var_mean / W))
  within = ((e - e.mean(axis=1, keepdims=True)) ** 2).sum(axis=(0, 1)) / (W * (F - 1))
  np.testing.assert_array_less(np.abs(within / (N ** 2 / 0.01) - 1),
                               4 * np.sqrt(2 / (W * (F - 1))))
  across = e.mean(axis=1).var(axis=0, ddof=1)
  np.testing.assert_array_less(np.abs(across / var_mean - 1), 4 * np.sqrt(2 / (W - 1)))


def test_gyro_terms_compiled_out_at_default():
  """At their defaults the gyro terms are absent (the plan says so, `compiled_out` lists them)
  and body_rate_rad is the ideal integral (`test_frames_match_float64_reference`)."""
  c = make()
  names = set(GYRO)
  assert names <= set(c.compiled_out())
  assert sum('off (compiled out)' in line for line in optical_flow.GYRO.plan(c._on)) == 4
  on = make(gyro_noise_density=[0.001, 0.0, 0.0])
  assert 'gyro_noise_density' not in on.compiled_out()
  assert names - {'gyro_noise_density'} <= set(on.compiled_out())


def test_pure_translation_flow_scale():
  """Level, 1.5 m above the ground, 1 m/s along the sensor's x: ḟ_x = −v/h exactly."""
  m = eh.model()
  h, v = 1.5, 1.0
  d = eh.state(m, pos=(0.0, 0.0, h + 0.02), vel=(0.0, 0.0, 0.0))
  # flow site: zaxis (0, 0, −1) → site x = world x? read it back and move along it
  _, R = eh.site_pose(m, d, 'flow')
  d = eh.state(m, pos=(0.0, 0.0, h + 0.02), vel=tuple(v * R[:, 0]))
  c = make(period_s=0.01)
  _, out, _ = eh.drive(c, eh.stack(m, [d] * 26))
  nd = out.new_data
  f = out.sample.flow_rad[nd][1:] / out.sample.integration_time_s[nd][1:, None]
  np.testing.assert_allclose(f[:, 0], -v / h, rtol=1e-5)
  np.testing.assert_allclose(f[:, 1], 0.0, atol=1e-6)
  assert np.all(out.sample.quality[nd] == 255)


def test_profile_loads():
  c = make(profiles={'device': 'pmw3901_nominal'}, **{k: None for k in BASE})
  assert c.cfg.fov_deg == 42.0 and c.cfg.max_flow_rate_rad_s == 7.4
  assert c.cfg.min_range_m == 0.08


def test_config_rules(tmp_path):
  import fibril_mjx

  def err(**cfg):
    path = write_manifest(tmp_path, eh.SCENE_XML,
                          [{'id': 'f', 'type': optical_flow.TYPE,
                            'config': {'site': 'flow', **BASE, **cfg}}],
                          model='scene.xml', name='m.yaml')
    with pytest.raises(FibrilError) as e:
      fibril_mjx.load(str(path))
    return str(e.value)
  P = 'components[0].config'
  assert f'{P}.exposure_s = 0.02: must be ≤ period_s = 0.01' in err(exposure_s=0.02)
  assert f'{P}.max_range_m = 0.05: must be > min_range_m = 0.08' in err(max_range_m=0.05)
  assert f'{P}.illumination' in err(illumination=1.5)
