"""`fibril_mjx.error_models`: each term against a float64 NumPy model written here (the
Gauss–Markov recursion and its stationary variance and autocorrelation, the turn-on bias
distribution, white-noise and quantization variances, saturation flags and counts), what
`chain` derives (config fields, Params, State, streams, plan, stochastic fields), that a term
at its default is absent from the traced graph, and that `tune` now holds the rangefinder's
`noise_fraction` at zero (the field-name regex it replaces did not)."""

from __future__ import annotations

import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nav_helpers as nh
from ref_helpers import normals
from fibril_mjx import error_models as em
from fibril_mjx.components.sensors import (ahrs, barometer, camera, gnss, imu, inertial, lidar,
                                           magnetometer, optical_flow, rangefinder, thermal,
                                           vibration)
from fibril_mjx.mechanisms import faults
from fibril_mjx.workflows.tune import params as tune_params

WK = jax.random.PRNGKey(3)


def keys(cid, sources, shared=None):
  return faults.stream_keys(WK, cid, sources, shared)


def everything_on(_):
  return True


def nothing_on(_):
  return False


def run(chain, p, x0, n, streams, on=everything_on, period_s=0.1, **inputs):
  """`n` samples of `chain.apply` on a constant input: `(outputs (n, ...), final state)`."""
  st = chain.init(p, em.Ctx(on, streams, 0, period_s, inputs))
  out = []
  for k in range(n):
    st, x, _ = chain.apply(p, st, jnp.asarray(x0, jnp.float32),
                           em.Ctx(on, streams, k, period_s, inputs))
    out.append(np.asarray(x, np.float64))
  return np.stack(out), st


def P(**kw):
  return types.SimpleNamespace(**{k: jnp.asarray(v, jnp.float32) for k, v in kw.items()})


# ------------------------------------------------------------------------------ terms


def test_gauss_markov_matches_the_float64_recursion():
  """b[0] = σ z[0], b[k] = φ b[k−1] + σ √(1−φ²) z[k], φ = exp(−Δ/τ): the exact AR(1) of a
  first-order Gauss–Markov process, on the draws of its named stream."""
  term = em.gauss_markov('s', 'tau', 'drift', 'gm', (3,))
  c = em.chain(term)
  sigma, tau, dt, n = np.array([0.5, 1.0, 2.0]), 0.7, 0.1, 40
  out, _ = run(c, P(s=sigma, tau=tau), np.zeros(3), n, keys('dev', c.streams), period_s=dt)
  z = normals(WK, 'dev', 'drift', n, (3,))
  phi = np.exp(-dt / tau)
  b = np.empty_like(z)
  b[0] = sigma * z[0]
  for k in range(1, n):
    b[k] = phi * b[k - 1] + sigma * np.sqrt(1 - phi * phi) * z[k]
  np.testing.assert_allclose(out, b, rtol=1e-5, atol=1e-6)


def test_gauss_markov_stationary_variance_and_autocorrelation():
  """Over many worlds, Var b[k] = σ² at every k (stationary start) and the lag-1
  autocorrelation is φ = exp(−Δ/τ); tolerances from the sample size."""
  sigma, tau, dt, n, w = 2.0, 0.5, 0.1, 30, 4000
  c = em.chain(em.gauss_markov('s', 'tau', 'drift', 'gm'))
  p = P(s=sigma, tau=tau)

  def world(key):
    streams = faults.stream_keys(key, 'dev', c.streams)
    st = c.init(p, em.Ctx(everything_on, streams, 0, dt, {}))

    def step(st, k):
      st, x, _ = c.apply(p, st, jnp.float32(0.0), em.Ctx(everything_on, streams, k, dt, {}))
      return st, x
    return jax.lax.scan(step, st, jnp.arange(n))[1]
  b = np.asarray(jax.jit(jax.vmap(world))(jax.random.split(WK, w)), np.float64)   # (w, n)
  var = np.mean(b ** 2, axis=0)
  tol = 5 * sigma ** 2 * np.sqrt(2.0 / w)
  assert np.all(np.abs(var - sigma ** 2) < tol), var
  phi = np.exp(-dt / tau)
  rho = np.sum(b[:, 1:] * b[:, :-1]) / np.sum(b[:, :-1] ** 2)
  assert abs(rho - phi) < 5 * (1 - phi ** 2) / np.sqrt(w * (n - 1)), (rho, phi)


def test_turn_on_bias_distribution_and_redraw():
  """b_on = σ·z, z draw 0 of `bias_turn_on` per episode: N(0, σ²) across worlds; a device
  reset redraws it from draw `index`; it is constant across samples."""
  sigma, w = np.array([0.3, 1.0, 3.0]), 5000
  c = em.chain(em.turn_on_bias('s', (3,)))
  p = P(s=sigma)

  def world(key):
    return c.init(p, em.Ctx(everything_on, faults.stream_keys(key, 'dev', c.streams), 0, 0.1,
                            {}))['turn_on']
  b = np.asarray(jax.vmap(world)(jax.random.split(WK, w)), np.float64)
  assert np.all(np.abs(b.mean(0)) < 5 * sigma / np.sqrt(w))
  assert np.all(np.abs(b.var(0) - sigma ** 2) < 5 * sigma ** 2 * np.sqrt(2.0 / w))
  streams = keys('dev', c.streams)
  out, st = run(c, p, np.ones(3), 5, streams)
  z = normals(WK, 'dev', 'bias_turn_on', 3, (3,))
  np.testing.assert_allclose(out, np.broadcast_to(1.0 + sigma * z[0], (5, 3)), rtol=1e-6)
  st2 = c.redraw(p, st, em.Ctx(everything_on, streams, 0, 0.1, {}), 2)
  np.testing.assert_allclose(st2['turn_on'], sigma * z[2], rtol=1e-6)


def test_random_walk_variance_grows_linearly():
  """b[0] = 0, b[k] = b[k−1] + K√Δ z[k]: the float64 recursion on the stream's draws, and
  Var b[k] = K²·kΔ across worlds."""
  k_rw, dt, n, w = 0.3, 0.05, 25, 4000
  c = em.chain(em.random_walk('k', 'walk', 'rw'))
  out, _ = run(c, P(k=k_rw), 0.0, n, keys('dev', c.streams), period_s=dt)
  z = normals(WK, 'dev', 'walk', n)
  ref = np.concatenate([[0.0], np.cumsum(k_rw * np.sqrt(dt) * z[1:])])
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-7)

  def world(key):
    streams = faults.stream_keys(key, 'dev', c.streams)

    def step(st, i):
      st, x, _ = c.apply(P(k=k_rw), st, jnp.float32(0.0),
                         em.Ctx(everything_on, streams, i, dt, {}))
      return st, x
    return jax.lax.scan(step, c.zero_state(), jnp.arange(n))[1]
  b = np.asarray(jax.jit(jax.vmap(world))(jax.random.split(WK, w)), np.float64)
  expected = k_rw ** 2 * np.arange(n) * dt
  assert b[:, 0].max() == 0.0
  assert np.all(np.abs(b[:, 1:].var(0) - expected[1:]) < 5 * expected[1:] * np.sqrt(2.0 / w))


def test_common_mode_is_shared_between_sensors_naming_its_stream():
  """Two sensors naming one shared stream see the same unit process, each with its scale;
  the process is the unit Gauss–Markov recursion of the shared stream."""
  c = em.chain(em.common_mode('cm', 'tau', 'weather', 'common', 'stream'))
  cfg = types.SimpleNamespace(stream='site')
  dt, tau, n = 0.1, 1.0, 20
  outs = []
  for cid, scale in (('a', 2.0), ('b', 5.0)):
    streams = faults.stream_keys(WK, cid, c.streams, c.shared_streams(cfg))
    outs.append(run(c, P(cm=scale, tau=tau), 0.0, n, streams, period_s=dt)[0] / scale)
  np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)
  z = normals(WK, 'site', 'weather', n, shared=True)
  phi, u = np.exp(-dt / tau), np.empty(n)
  u[0] = z[0]
  for k in range(1, n):
    u[k] = phi * u[k - 1] + np.sqrt(1 - phi * phi) * z[k]
  np.testing.assert_allclose(outs[0], u, rtol=1e-5, atol=1e-6)


def test_white_noise_per_axis_scales_and_variance():
  """σ given per axis by a tuple of fields (GNSS: horizontal, horizontal, vertical): the draw
  is σ·w on the stream, and the declared variance is σ²."""
  c = em.chain(em.white_noise(('h', 'h', 'v'), 'velocity_noise', (3,)))
  p = P(h=0.2, v=0.5)
  out, _ = run(c, p, np.zeros(3), 4, keys('rx', c.streams))
  sig = np.array([0.2, 0.2, 0.5])
  np.testing.assert_allclose(out, sig * normals(WK, 'rx', 'velocity_noise', 4, (3,)),
                             rtol=1e-6)
  np.testing.assert_allclose(c.variance(p, em.Ctx(everything_on, {}, 0, 0.1, {}), (3,)),
                             sig ** 2, rtol=1e-6)
  assert c.params == ('h', 'v') and c.stochastic_fields() == ('h', 'v')


def test_white_noise_of_the_signals_shape():
  """`shape=None` (a beam or landmark count known only once the sensor is built): one draw of
  the signal's shape, σ·w on the stream, with a scalar config field."""
  c = em.chain(em.white_noise('s', 'noise', shape=None))
  out, _ = run(c, P(s=0.3), np.full((4, 2), 2.0), 3, keys('cam', c.streams))
  np.testing.assert_allclose(out, 2.0 + 0.3 * normals(WK, 'cam', 'noise', 3, (4, 2)),
                             rtol=1e-6)
  assert [f.default for f in c.config] == [0.0]


def test_ar1_noise_shares_the_white_noise_draw():
  """An inertial channel's white noise and AR(1) residual read one ξ per sample: x + σ_w ξ[k] +
  n[k], n[0] = σ ξ[0], n[k] = ρ n[k−1] + σ √(1−ρ²) ξ[k]; the residual declares no stream of
  its own, and its variance is σ²."""
  c = em.chain(em.white_noise('w', 'noise', (3,)),
               em.ar1_noise('s', 'rho', 'noise', 'ar', (3,), owns_stream=False))
  assert c.streams == ('noise',) and c.stochastic_fields() == ('w', 's')
  sw, sigma, rho, n = 0.1, np.array([0.3, 0.6, 0.9]), 0.8, 30
  out, _ = run(c, P(w=sw, s=sigma, rho=rho), np.ones(3), n, keys('imu', c.streams))
  z = normals(WK, 'imu', 'noise', n, (3,))
  ar = np.empty_like(z)
  ar[0] = sigma * z[0]
  for k in range(1, n):
    ar[k] = rho * ar[k - 1] + sigma * np.sqrt(1 - rho * rho) * z[k]
  np.testing.assert_allclose(out, 1.0 + sw * z + ar, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(c.variance(P(w=sw, s=sigma, rho=rho),
                                        em.Ctx(everything_on, {}, 0, 0.1, {}), (3,)),
                             sw ** 2 + sigma ** 2, rtol=1e-6)


def test_saturation_quantization_flags_counts_and_variance():
  """Clip to ±L with per-element flags and cumulative counts, then round to q; the declared
  variance is q²/12."""
  c = em.chain(em.saturation('limit', shape=(3,)), em.quantization('q'))
  p = P(limit=1.0, q=0.25)
  ctx = em.Ctx(everything_on, {}, 0, 0.1, {})
  st = c.init(p, ctx)
  x = np.array([-1.7, 0.33, 1.2])
  for _ in range(2):
    st, y, flags = c.apply(p, st, jnp.asarray(x, jnp.float32), ctx)
  np.testing.assert_allclose(y, 0.25 * np.round(np.clip(x, -1, 1) / 0.25), rtol=1e-6)
  np.testing.assert_array_equal(flags, np.abs(x) > 1)
  np.testing.assert_array_equal(st['clip_count'], 2 * (np.abs(x) > 1))
  np.testing.assert_allclose(c.variance(p, ctx), 0.25 ** 2 / 12, rtol=1e-6)


def test_chain_flags_are_the_union_of_its_terms():
  """Two terms that both limit the value in one sample, on different elements: the chain's
  flags are their union (a later term flagging other elements keeps the earlier flags)."""
  c = em.chain(em.saturation('a', 'count_a', (3,)), em.saturation('b', 'count_b', (3,)))
  p = P(a=[1.0, 10.0, 10.0], b=[10.0, 0.2, 10.0])
  ctx = em.Ctx(everything_on, {}, 0, 0.1, {})
  st, y, flags = c.apply(p, c.init(p, ctx), jnp.asarray([-1.7, 0.33, 1.2], jnp.float32), ctx)
  np.testing.assert_allclose(y, [-1.0, 0.2, 1.2], rtol=1e-6)
  np.testing.assert_array_equal(flags, [True, True, False])
  np.testing.assert_array_equal(st['count_a'], [1, 0, 0])
  np.testing.assert_array_equal(st['count_b'], [0, 1, 0])


def test_lowpass_matches_the_float64_recursion_and_starts_at_the_first_value():
  """y[0] = x[0], y[k] = y[k−1] + α (x[k] − y[k−1]), α = 1 − exp(−2π f_c Δ); its state is its
  output."""
  c = em.chain(em.lowpass('bw', 'filter', (3,)))
  bw, dt = 5.0, 0.01
  x = np.random.default_rng(5).normal(size=(6, 3))
  st = c.init(P(bw=bw), em.Ctx(everything_on, {}, 0, dt, {}))
  out = []
  for k, v in enumerate(x):
    st, y, _ = c.apply(P(bw=bw), st, jnp.asarray(v, jnp.float32),
                       em.Ctx(everything_on, {}, k, dt, {}))
    out.append(np.asarray(y, np.float64))
  np.testing.assert_array_equal(st['filter'], out[-1])
  a, ref = 1 - np.exp(-2 * np.pi * bw * dt), [x[0]]
  for v in x[1:]:
    ref.append(ref[-1] + a * (v - ref[-1]))
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_quaternion_lowpass_stays_unit_and_in_the_hemisphere_of_its_state():
  """An attitude low-pass: the input taken in the hemisphere of the state (q and −q are one
  attitude), the output renormalized; it starts at the identity."""
  c = em.chain(em.lowpass('bw', 'q', (4,), quaternion=True))
  assert c.zero_state()['q'].tolist() == [1.0, 0.0, 0.0, 0.0]
  bw, dt = 5.0, 0.01
  prev = np.array([0.9, 0.1, -0.3, 0.2]) / np.linalg.norm([0.9, 0.1, -0.3, 0.2])
  x = np.array([0.8, 0.2, -0.2, 0.3]) / np.linalg.norm([0.8, 0.2, -0.2, 0.3])
  st = {'q': jnp.asarray(prev, jnp.float32)}
  _, y, _ = c.apply(P(bw=bw), st, jnp.asarray(-x, jnp.float32),
                    em.Ctx(everything_on, {}, 3, dt, {}))
  a = 1 - np.exp(-2 * np.pi * bw * dt)
  want = prev + a * (x - prev)
  np.testing.assert_allclose(y, want / np.linalg.norm(want), rtol=1e-5, atol=1e-6)


def test_gain_with_cross_axis_terms_and_what_it_reads():
  """`(diag(k) + M)·x` where the cross-axis field is on, `k ⊙ x` where only the scale is; the
  Params read in the graph follow: M only where it is on, k wherever the term is."""
  term = em.gain('k', (3,), cross='m')
  c = em.chain(term)
  k, m = np.array([1.02, 0.97, 1.5]), np.array([[0, 0.01, -0.02], [0.03, 0, 0], [0, 0.01, 0]])
  x = np.array([0.7, -1.3, 2.1])
  out, _ = run(c, P(k=k, m=m), x, 1, {}, on=lambda f: f == 'm')
  np.testing.assert_allclose(out[0], (np.diag(k) + m) @ x, rtol=1e-6)
  out, _ = run(c, P(k=k, m=m), x, 1, {}, on=lambda f: f == 'k')
  np.testing.assert_allclose(out[0], k * x, rtol=1e-6)
  assert c.reads(lambda f: f == 'k') == ('k',)
  assert c.reads(lambda f: f == 'm') == ('k', 'm')
  assert c.reads(nothing_on) == ()


def test_first_order_lag_starts_at_the_first_value():
  """y[0] = x[0], y[k] = y[k−1] + (1 − e^(−Δ/τ)) (x[k] − y[k−1])."""
  c = em.chain(em.first_order_lag('tau'))
  dt, tau = 0.01, 0.05
  x = np.array([3.0, 1.0, 1.0, 2.0, -1.0])
  st = c.init(P(tau=tau), em.Ctx(everything_on, {}, 0, dt, {}))
  out = []
  for v in x:
    st, y, _ = c.apply(P(tau=tau), st, jnp.float32(v), em.Ctx(everything_on, {}, 0, dt, {}))
    out.append(float(y))
  a, ref = 1 - np.exp(-dt / tau), [x[0]]
  for v in x[1:]:
    ref.append(ref[-1] + a * (v - ref[-1]))
  np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_sinusoids_match_the_float64_sum_of_lines():
  """`x + Σ_k A[k, a]·sin(φ[k, a])` at the sample's angles (`ctx.inputs`), and off (its field
  at the default) the chain leaves x unchanged."""
  c = em.chain(em.sinusoids('amp'))
  g = np.random.default_rng(4)
  amp, x0 = g.normal(size=(3, 3)), np.array([0.5, -1.0, 2.0])
  angles = g.uniform(-10.0, 10.0, size=(3, 3))
  out, _ = run(c, P(amp=amp), x0, 1, {}, angles=jnp.asarray(angles, jnp.float32))
  want = x0 + np.sum(amp * np.sin(angles), axis=0)
  np.testing.assert_allclose(out[0], want, rtol=0, atol=1e-5 * (1 + np.abs(amp).sum()))
  off, _ = run(c, P(amp=amp), x0, 1, {}, on=nothing_on, angles=jnp.asarray(angles))
  np.testing.assert_array_equal(off[0], x0.astype(np.float32))
  assert c.params == ('amp',) and c.stochastic_fields() == () and c.streams == ()


def test_gain_scales_per_axis_and_defaults_to_one():
  """`k ⊙ x` per axis (float64 product), default (1, 1, 1) so that a sensor leaves it out; before
  a bias in a chain, the bias is not scaled."""
  c = em.chain(em.gain('k', (3,)), em.constant_bias('b', (3,)))
  assert {f.name: f.default for f in c.config}['k'] == (1.0, 1.0, 1.0)
  x = np.array([0.7, -1.3, 2.1])
  out, _ = run(c, P(k=[1.02, 0.97, 1.5], b=[0.1, 0.0, -0.2]), x, 1, {})
  np.testing.assert_allclose(out[0], np.array([1.02, 0.97, 1.5]) * x + [0.1, 0.0, -0.2],
                             rtol=1e-6)
  assert c.plan(lambda f: f == 'b')[0] == '  scale factor [deterministic] (k): off (compiled out)'


# ------------------------------------------------------------------------------ chain


def test_chain_derives_config_params_state_streams_and_plan():
  c = em.chain(em.chain(em.turn_on_bias('b_on', (3,)), em.constant_bias('b', (3,))),
               em.gauss_markov('gm_s', 'gm_tau', 'drift', 'gm', (3,)),
               em.white_noise('w', shape=(3,)), em.quantization('q'))
  assert [t.name for t in c.terms] == ['turn-on bias', 'constant bias', 'Gauss–Markov drift',
                                       'white noise', 'quantization']
  assert c.params == ('b_on', 'b', 'gm_s', 'gm_tau', 'w', 'q')
  assert c.state == ('turn_on', 'gm')
  assert c.streams == ('bias_turn_on', 'drift', 'noise')
  assert c.stochastic_fields() == ('b_on', 'gm_s', 'w')
  assert {f.name: f.default for f in c.config} == {
      'b_on': (0.0,) * 3, 'b': (0.0,) * 3, 'gm_s': (0.0,) * 3, 'gm_tau': 0.0, 'w': (0.0,) * 3,
      'q': 0.0}
  plan = c.plan(lambda f: f == 'w')
  assert plan[3] == '  white noise [stochastic] (w): on'
  assert plan[0] == '  turn-on bias [slow] (b_on): off (compiled out)'


def test_with_errors_adds_the_chains_fields_after_the_sensors_own_and_refuses_a_clash():
  class Own(faults.DeviceConfig):
    joint: str

  chain = em.chain(em.constant_bias('offset_rad'), em.white_noise('noise_stddev_rad'))

  class Declared(em.with_errors(Own, chain)):
    """A declared config model."""

  fields = list(Declared.model_fields)
  assert fields[:len(faults.DeviceConfig.model_fields)] == list(faults.DeviceConfig.model_fields)
  assert fields[-3:] == ['joint', 'offset_rad', 'noise_stddev_rad']
  cfg = Declared(joint='hinge', period_s=0.01, noise_stddev_rad=0.1)
  assert (cfg.offset_rad, cfg.noise_stddev_rad) == (0.0, 0.1)
  assert Declared.model_json_schema()['description'] == 'A declared config model.'

  class Clash(faults.DeviceConfig):
    offset_rad: float = 1.0

  with pytest.raises(ValueError, match=r"fields both in the sensor and its error model: "
                                       r"\['offset_rad'\]"):
    em.with_errors(Clash, chain)


def test_drift_fields_are_the_slow_terms_that_move_within_an_episode():
  """A static rig removes the drift (Gauss–Markov, random walk, common mode) but keeps the
  per-episode turn-on bias (constant in an episode: the per-world mean removes it) and the
  white noise it measures."""
  c = em.chain(em.turn_on_bias('b_on'), em.gauss_markov('gm_s', 'tau', 'drift', 'gm'),
               em.random_walk('k', 'walk', 'rw'),
               em.common_mode('cm', 'cm_tau', 'weather', 'common', 'cm_stream'),
               em.white_noise('w'), em.quantization('q'))
  assert c.drift_fields() == ('gm_s', 'k', 'cm')
  assert c.stochastic_fields() == ('b_on', 'gm_s', 'k', 'cm', 'w')


def test_reads_are_the_switches_on_and_the_params_they_bring():
  """The Params in the graph: a term's switches that are on, and its other params (a
  Gauss–Markov correlation time, an AR(1) correlation) wherever the term is on."""
  c = em.chain(em.gauss_markov('s', 'tau', 'drift', 'gm'), em.ar1_noise('n', 'rho', 'ar', 'ar'),
               em.quantization('q'))
  assert c.reads(lambda f: f in ('s', 'q')) == ('s', 'tau', 'q')
  assert c.reads(lambda f: f == 'n') == ('n', 'rho')


def test_partition_declares_its_chains_together():
  """Chains on separate signal paths (each its own state, names may repeat across paths):
  their streams, Params, stochastic fields and plan lines by label; no counters at the top."""
  def path(ch):
    return em.chain(em.turn_on_bias(f'{ch}_b', (3,), f'{ch}_bias_turn_on', 'turn_on'),
                    em.white_noise(f'{ch}_w', f'{ch}_noise', (3,)),
                    em.saturation(f'{ch}_limit', 'clip_count', (3,)))
  part = em.partition(gyro=path('gyro'), accel=path('accel'))
  assert part.streams == ('gyro_bias_turn_on', 'gyro_noise', 'accel_bias_turn_on',
                          'accel_noise')
  assert part.params == ('gyro_b', 'gyro_w', 'gyro_limit', 'accel_b', 'accel_w', 'accel_limit')
  assert part.stochastic_fields() == ('gyro_b', 'gyro_w', 'accel_b', 'accel_w')
  assert part.drift_fields() == () and part.counters == ()
  plan = part.plan(lambda f: f == 'accel_w')
  assert plan[0] == '  gyro:' and plan[4] == '  accel:'
  assert plan[6] == '    white noise [stochastic] (accel_w): on'
  with pytest.raises(ValueError, match='stream is drawn by two terms'):
    em.partition(a=path('gyro'), b=path('gyro'))
  with pytest.raises(TypeError, match='not a chain'):
    em.partition(a=em.white_noise('w'))


def test_chain_fails_loudly_on_conflicts():
  with pytest.raises(ValueError, match='stream is drawn by two terms'):
    em.chain(em.white_noise('a'), em.white_noise('b'))
  with pytest.raises(ValueError, match="state field 'gm' declared twice"):
    em.chain(em.gauss_markov('a', 't', 's1', 'gm', (3,)), em.gauss_markov('b', 'u', 's2', 'gm'))
  with pytest.raises(TypeError, match='not an error term'):
    em.chain(em.white_noise('a'), 'noise')


def test_a_term_at_its_default_is_absent_from_the_graph():
  """Switched off, no random draw and no arithmetic of the term is traced: the jaxpr of the
  chain is the identity on x."""
  c = em.chain(em.turn_on_bias('b_on'), em.gauss_markov('s', 'tau', 'drift', 'gm'),
               em.white_noise('w'))
  p = P(b_on=1.0, s=1.0, tau=1.0, w=1.0)
  streams = keys('dev', c.streams)

  def f(on, x):
    st = c.init(p, em.Ctx(on, streams, 0, 0.1, {}))
    return c.apply(p, st, x, em.Ctx(on, streams, 1, 0.1, {}))[1]
  off = str(jax.make_jaxpr(lambda x: f(nothing_on, x))(jnp.float32(1.0)))
  on = str(jax.make_jaxpr(lambda x: f(everything_on, x))(jnp.float32(1.0)))
  assert 'random_bits' not in off and 'threefry' not in off and ' add ' not in off, off
  assert 'random_bits' in on or 'threefry' in on, on


# ------------------------------------------------------------------------------ sensors


@pytest.mark.parametrize('module, own', [(barometer, ()), (magnetometer, ()), (gnss, ()),
                                         (rangefinder, ()), (lidar, ('return',)),
                                         (camera, ()), (optical_flow, ())])
def test_ported_sensors_read_params_state_streams_off_their_chain(module, own):
  e = module.ERRORS
  assert module.Params._fields[-1] == 'faults'
  assert set(e.params) <= set(module.Params._fields)
  assert set(e.state) <= set(module.State._fields)
  assert module.SOURCES == e.streams + own + ('delivery_jitter', 'delivery_loss')
  model = module.CONFIG_MODEL.model_fields
  for f in e.config:
    assert model[f.name].default == f.default, f.name


def test_stream_names_are_unchanged():
  """The draws stay bitwise the same: every stream keeps its name."""
  assert set(barometer.SOURCES) == {'noise', 'bias_turn_on', 'bias_instability', 'weather',
                                    'delivery_jitter', 'delivery_loss'}
  assert set(magnetometer.SOURCES) == {'noise', 'bias_turn_on', 'bias_instability',
                                       'external_field', 'delivery_jitter', 'delivery_loss'}
  assert set(gnss.SOURCES) == {'horizontal_error', 'vertical_error', 'velocity_noise',
                               'atmosphere', 'delivery_jitter', 'delivery_loss'}
  assert set(rangefinder.SOURCES) == {'noise', 'delivery_jitter', 'delivery_loss'}
  assert set(lidar.SOURCES) == {'noise', 'return', 'delivery_jitter', 'delivery_loss'}
  assert set(camera.SOURCES) == {'noise', 'delivery_jitter', 'delivery_loss'}
  # the flow's gyro error model added two streams of its own; the flow's kept its name
  assert set(optical_flow.SOURCES) == {'noise', 'gyro_bias_turn_on', 'gyro_noise',
                                       'delivery_jitter', 'delivery_loss'}
  assert thermal.SOURCES == ('temperature_noise',)


def test_ahrs_orientation_and_vibration_read_streams_and_fields_off_their_chains():
  """The AHRS's orientation (low-pass, AR(1) residual, yaw-rate bias, resolution) and the IMU's
  vibration keep their stream names (so their draws stay bitwise the same) and the fields `tune`
  holds at zero, read off `ORIENTATION` / `vibration.ERRORS`."""
  assert ahrs.ORIENTATION.streams == ('orientation_noise', 'yaw_rate_bias')
  assert set(ahrs.SOURCES) == {'orientation_noise', 'angular_velocity_noise',
                               'linear_acceleration_noise', 'yaw_rate_bias', 'delivery_jitter',
                               'delivery_loss'}
  assert set(ahrs.ORIENTATION.params) <= set(ahrs.Params._fields)
  assert set(ahrs.ORIENTATION.state) <= set(ahrs.State._fields)
  assert ahrs.ORIENTATION.stochastic_fields() == ('orientation_noise_stddev_rad',
                                                  'yaw_rate_bias_stddev_rad_s')
  assert vibration.SOURCES == ('angular_velocity_vibration_floor',
                               'linear_acceleration_vibration_floor')
  assert vibration.STOCHASTIC == ('angular_velocity_vibration_floor_stddev',
                                  'linear_acceleration_vibration_floor_stddev')
  for ch, c in vibration.ERRORS.items():
    assert set(c.params) <= set(vibration.PARAM_FIELDS), ch
    model = vibration.VibrationConfig.model_fields
    for f in c.config:
      assert model[f.name].default == f.default, f.name


@pytest.mark.parametrize('module, old', [
    (lidar, {'noise_stddev_m', 'noise_fraction'}), (camera, {'pixel_noise_stddev_px'}),
    (optical_flow, {'noise_stddev_rad', 'noise_per_m_rad'})])
def test_chain_derived_stochastic_fields_cover_the_old_declaration(module, old):
  """`tune` holds at least the fields the sensor once declared by hand."""
  assert old <= set(module.ERRORS.stochastic_fields())


def test_thermal_delivered_channel_reads_its_fields_off_its_chain():
  """The delivered temperature's noise and resolution: config fields, Params and the field
  `tune` holds at zero (as declared by hand before) come from its chain."""
  assert thermal.STOCHASTIC == ('temperature_noise_stddev_c',)
  assert thermal.PARAM_FIELDS[-2:] == thermal.DELIVERED.params
  model = thermal.ThermalConfig.model_fields
  for f in thermal.DELIVERED.config:
    assert model[f.name].default == f.default, f.name


OLD_REGEX = re.compile(r'(stddev|noise_density|random_walk|jitter|loss_probability)')


def test_tune_holds_the_rangefinders_noise_fraction_at_zero():
  """`tune` holds every field of a random draw at zero, read off the error model: the
  rangefinder's `noise_fraction` (σ ∝ range) is one, though its name matched none of the
  patterns of the regex this replaces."""
  ctx, cat = nh.context()
  c = rangefinder.build('lidar', {'rangefinder_sensor': 'range', 'period_s': 0.01,
                                  'max_range_m': 12.0, 'noise_stddev_m': 0.02,
                                  'noise_fraction': 0.01, 'incidence_noise_gain': 1.0}, ctx, cat)
  assert set(c.stochastic_fields()) == {'noise_stddev_m', 'noise_fraction'}
  assert not OLD_REGEX.search('noise_fraction')       # what the name-based rule missed
  zeroed = tune_params.stochastic_overrides(types.SimpleNamespace(components={'lidar': c}), set())
  assert {z['field'] for z in zeroed} == {'noise_stddev_m', 'noise_fraction'}
  assert all(z['value'] == 0.0 for z in zeroed)
  with pytest.raises(Exception, match='stochastic term cannot be fitted'):
    tune_params.stochastic_overrides(types.SimpleNamespace(components={'lidar': c}),
                               {('lidar', 'noise_fraction')})


@pytest.mark.parametrize('name', inertial.UNITS)
def test_inertial_channel_streams_and_state_are_unchanged(name):
  """The chain of a rate channel draws the streams it always drew, keeps its state in the
  `ChannelState` fields of the same names and reads the sensor's manifest fields (Params by
  manifest name, no channel-field rename)."""
  terms = ('noise', 'bias_turn_on', 'bias_instability', 'random_walk', 'narrowband')
  for module, streams in ((imu, terms), (ahrs, ('noise',))):
    c = module.RATES[name].chain
    assert set(c.streams) == {f'{name}_{t}' for t in streams}
    assert set(c.state) <= set(inertial.ChannelState._fields)
    assert set(c.params) == set(module.RATE_FIELDS[name].values())
    assert set(c.params) <= set(module.Params._fields)
    assert set(c.params) <= set(module.CONFIG_MODEL.model_fields)
  roles = {'noise_density', 'bias_turn_on_stddev', 'bias_instability_stddev', 'random_walk',
           'narrowband_stddev'}
  assert set(imu.RATES[name].chain.stochastic_fields()) == {f'{name}_{r}' for r in roles}
  assert imu.RATES[name].chain.drift_fields() == (f'{name}_bias_instability_stddev',
                                                  f'{name}_random_walk',
                                                  f'{name}_narrowband_stddev')
  assert ahrs.RATES[name].chain.stochastic_fields() == (f'{name}_noise_stddev',)


def test_imu_and_ahrs_declare_everything_through_their_error_model():
  """The fields `tune` holds at zero (once written by hand: `OWN_STOCHASTIC`, overrides of
  `stochastic_fields`) are read off the partition of their chains; the streams are those they
  always drew."""
  assert set(imu.ERRORS.stochastic_fields()) == {
      f'{ch}_{r}' for ch in imu.CHANNELS for r in ('noise_density', 'bias_turn_on_stddev',
                                                   'bias_instability_stddev', 'random_walk',
                                                   'narrowband_stddev')
  } | set(thermal.STOCHASTIC) | set(vibration.STOCHASTIC)
  assert set(imu.SOURCES) == {f'{ch}_{t}' for ch in imu.CHANNELS for t in (
      'noise', 'bias_turn_on', 'bias_instability', 'random_walk', 'narrowband')} | {
          'delivery_jitter',
                                                                        'delivery_loss'}
  assert ahrs.ERRORS.stochastic_fields() == (
      'orientation_noise_stddev_rad', 'yaw_rate_bias_stddev_rad_s',
      'angular_velocity_noise_stddev', 'linear_acceleration_noise_stddev') + thermal.STOCHASTIC


def test_validate_zeroes_the_drift_terms_read_off_each_chain():
  """The static noise rig sets to zero what the sensor's chain calls drift (the table this
  replaces listed the same fields by hand), and leaves a per-episode bias and the noise."""
  from fibril_mjx.core import registry
  from fibril_mjx.workflows.validate import nav
  want = {'fibril_sim/magnetometer': {'bias_instability_stddev_ut', 'common_mode_stddev_ut'},
          'fibril_sim/barometer': {'bias_instability_stddev_pa', 'common_mode_stddev_pa'},
          'fibril_sim/airspeed': set(), 'fibril_sim/rangefinder': set()}
  for ctype, fields in want.items():
    assert set(registry.get(ctype).validation_rig.errors.drift_fields()) == fields, ctype
  cfg = {'period_s': 0.02, 'site': 'x', 'bias_turn_on_stddev_pa': 3.0, 'noise_stddev_pa': 1.0,
         'bias_instability_stddev_pa': 2.0, 'bias_correlation_time_s': 50.0}
  _, doc, _ = nav.nav_rig(registry.get('fibril_sim/barometer').validation_rig,
                         'fibril_sim/barometer', cfg, {})
  c = doc['components'][0]['config']
  assert c['bias_instability_stddev_pa'] == 0.0
  assert c['bias_turn_on_stddev_pa'] == 3.0 and c['noise_stddev_pa'] == 1.0
