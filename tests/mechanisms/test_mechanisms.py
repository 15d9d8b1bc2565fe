"""Shared mechanisms against exact / NumPy references: schedules, delivery queue, RNG, signal."""

import dataclasses
import math
import subprocess
import sys
import zlib
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fibril_mjx.mechanisms import rng
from fibril_mjx.mechanisms import schedule as sch
from fibril_mjx.mechanisms import signal as sig
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.errors import ConfigError, field_origin

O = field_origin('m.yaml', 'c')

N_TICKS = 10_000_000


def _scan_schedule(s: sch.Schedule, n_ticks: int) -> np.ndarray:
  """Runs the traced schedule over every tick; returns the ticks flagged due, in order."""
  def body(st, tick):
    due, n, st = sch.advance(s, st, tick)
    return st, (due, n)

  @jax.jit
  def run():
    return jax.lax.scan(body, sch.init(s), jnp.arange(n_ticks, dtype=jnp.int32))

  st, (due, n) = run()
  due, n = np.asarray(due), np.asarray(n)
  ticks = np.nonzero(due)[0]
  np.testing.assert_array_equal(n[ticks], np.arange(len(ticks)))  # indices 0, 1, 2, ...
  return ticks


@pytest.mark.parametrize('period_s, phase_s, dt', [
    ('0.003', '0.0013', '0.002'),   # 1.5 ticks with a phase of 0.65 ticks
    ('0.01', '0', '0.002'),         # exactly 5 ticks
    ('0.0033333333333333335', '0.001', '0.001'),  # 1/300 s: 10/3 ticks (float of 1/300)
])
def test_schedule_exact_over_1e7_ticks(period_s, phase_s, dt):
  s = sch.Schedule.build(float(period_s), float(phase_s), float(dt), 'next_boundary',
                         origin=O)
  got = _scan_schedule(s, N_TICKS)
  # Exact reference: instants t_n = phase + n·period as fractions of dt, next tick boundary.
  p, ph, d = (Fraction(x).limit_denominator(10**6) for x in (period_s, phase_s, dt))
  per, pha = p / d, ph / d
  n = np.arange(len(got) + 2, dtype=np.int64)
  ref = -((-(pha.numerator * per.denominator + n * per.numerator * pha.denominator))
          // (per.denominator * pha.denominator))
  ref = ref[ref < N_TICKS]
  np.testing.assert_array_equal(got, ref)
  assert len(got) == len(ref) > N_TICKS / float(per) - 2


def test_strict_schedule_accepts_multiples_and_rejects_others():
  s = sch.Schedule.build(0.01, 0.004, 0.002, 'strict', origin=O)
  assert (s.period_ticks, s.phase_ticks) == (5, 2)
  with pytest.raises(ConfigError, match=r'c\.period_s = 0\.003: quantization strict requires '
                     r'an integer multiple of dt = 0\.002 s \(it is 1\.5 ticks\)'):
    sch.Schedule.build(0.003, 0.0, 0.002, 'strict', origin=O)
  with pytest.raises(ConfigError, match=r'c\.phase_s = 0\.001: .*\(it is 0\.5 ticks\)'):
    sch.Schedule.build(0.01, 0.001, 0.002, 'strict', origin=O)
  with pytest.raises(ConfigError, match=r'c\.period_s = 0\.001: must be >= the physics '
                     r'timestep dt = 0\.002 s'):
    sch.Schedule.build(0.001, 0.0, 0.002, 'next_boundary', origin=O)


# ------------------------------------------------------------------ transport

def _run_transport(tr: tp.Transport, period_ticks: int, n_ticks: int, seed=0):
  """Acquire every `period_ticks` ticks (sample value = its sequence), deliver every tick."""
  wk = jax.random.PRNGKey(seed)
  js, ls = rng.stream_key(wk, 'c', 'delivery_jitter'), rng.stream_key(wk, 'c', 'delivery_loss')

  def body(carry, tick):
    q, held = carry
    acq = tick % period_ticks == 0
    n = tick // period_ticks
    q = jax.lax.cond(acq, lambda q: tp.send(tr, q, n.astype(jnp.float32), n, tick, js, ls),
                     lambda q: q, q)
    q, held = tp.receive(tr, q, held, tick)
    return (q, held), held

  @jax.jit
  def run():
    q, held = tp.init(tr, jnp.float32(-1))
    return jax.lax.scan(body, (q, held), jnp.arange(n_ticks, dtype=jnp.int32))

  (q, _), held = run()
  return q, jax.tree.map(np.asarray, held)


def test_transport_latency_exact_without_jitter():
  tr = tp.Transport.build(0.007, 0.0, 0.0, 0.01, 0.002, 'next_boundary', origin=O)
  assert tr.latency_ticks == 4 and tr.capacity == 2
  q, held = _run_transport(tr, 5, 1000)
  new = held.new_data
  np.testing.assert_array_equal(np.nonzero(new)[0], np.arange(4, 1000, 5))
  np.testing.assert_array_equal(held.arrival_tick[new] - held.sample_tick[new], 4)
  np.testing.assert_array_equal(held.sample[new], held.sequence[new])
  assert int(q.overflow) == 0 and int(q.lost) == 0
  assert not held.valid[:4].any() and held.valid[4:].all()


def test_transport_jitter_never_reorders_and_respects_latency():
  tr = tp.Transport.build(0.01, 0.01, 0.0, 0.004, 0.002, 'next_boundary', origin=O)
  q, held = _run_transport(tr, 2, 20000)
  new = held.new_data
  seq = held.sequence[new]
  assert np.all(np.diff(seq) > 0), 'delivered sequence numbers must increase'
  assert np.all(np.diff(held.arrival_tick[new]) > 0)
  assert np.all(held.arrival_tick[new] >= held.sample_tick[new])
  # Jitter makes some deliveries bunch up: later samples overtake nothing, they wait.
  assert (np.diff(seq) > 1).any(), 'bunched deliveries show as sequence gaps'
  assert int(q.overflow) == 0


def test_transport_loss_rate_and_visible_gaps():
  p_loss, n_acq = 0.2, 10000
  tr = tp.Transport.build(0.0, 0.0, p_loss, 0.002, 0.002, 'next_boundary', origin=O)
  q, held = _run_transport(tr, 1, n_acq)
  lost = int(q.lost)
  sd = math.sqrt(n_acq * p_loss * (1 - p_loss))
  assert abs(lost - n_acq * p_loss) < 5 * sd, (lost, n_acq * p_loss, sd)
  seq = held.sequence[held.new_data]
  assert len(seq) == n_acq - lost
  gaps = np.diff(np.concatenate([[-1], seq])) - 1
  assert gaps.sum() + (n_acq - 1 - seq[-1]) == lost  # every lost sample is a visible gap


def test_transport_overflow_is_counted():
  tr = tp.Transport.build(0.02, 0.0, 0.0, 0.002, 0.002, 'next_boundary', origin=O)
  small = dataclasses.replace(tr, capacity=3)
  q, held = _run_transport(small, 1, 200)
  assert int(q.overflow) > 0
  q2, _ = _run_transport(tr, 1, 200)
  assert int(q2.overflow) == 0


def test_strict_transport_latency_must_be_whole_ticks():
  with pytest.raises(ConfigError, match=r'c\.latency_s = 0\.003: quantization strict'):
    tp.Transport.build(0.003, 0.0, 0.0, 0.01, 0.002, 'strict', origin=O)


# ------------------------------------------------------------------ RNG

def test_name_hash_is_crc32_and_stable_across_processes():
  assert rng.name_hash('angular_velocity_noise') == zlib.crc32(b'angular_velocity_noise')
  code = 'from fibril_mjx.mechanisms import rng; print(int(rng.name_hash("ahrs")))'
  outs = {subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         env={'PYTHONHASHSEED': str(s), 'PATH': ''}).stdout.strip()
          for s in (1, 2)}
  assert outs == {str(zlib.crc32(b'ahrs'))}


def test_stream_key_follows_the_spec_formula():
  wk = rng.world_keys(7, 5)[3]
  ref = jax.random.fold_in(jax.random.fold_in(
      jax.random.fold_in(jax.random.PRNGKey(7), np.uint32(3)),
      np.uint32(zlib.crc32(b'imu'))), np.uint32(zlib.crc32(b'yaw_rate_bias')))
  np.testing.assert_array_equal(rng.stream_key(wk, 'imu', 'yaw_rate_bias'), ref)
  # world keys depend on the global index only, not on the batch they are made in
  np.testing.assert_array_equal(rng.world_keys(7, 2, 3), rng.world_keys(7, 5)[3:5])


# ------------------------------------------------------------------ signal

def test_lowpass_and_ar1_against_numpy_float64():
  rs = np.random.default_rng(0)
  x = rs.normal(size=200)
  z = rs.normal(size=200)
  f, dt, rho, sigma = 3.0, 0.01, 0.7, 0.4
  alpha = 1 - math.exp(-2 * math.pi * f * dt)
  y_ref, n_ref = [x[0]], [sigma * z[0]]
  for k in range(1, 200):
    y_ref.append(y_ref[-1] + alpha * (x[k] - y_ref[-1]))
    n_ref.append(rho * n_ref[-1] + sigma * math.sqrt(1 - rho * rho) * z[k])

  def body(c, xz):
    y, n, first = c
    y = sig.lowpass(y, xz[0], sig.lowpass_alpha(f, dt), first)
    n = sig.ar1(n, xz[1], rho, sigma, first)
    return (y, n, False), (y, n)

  _, (y, n) = jax.lax.scan(body, (0.0, 0.0, True), jnp.stack([x, z], 1).astype(jnp.float32))
  np.testing.assert_allclose(y, y_ref, atol=2e-6)
  np.testing.assert_allclose(n, n_ref, atol=2e-6)


def test_saturate_and_quantize():
  x = jnp.array([-3.0, -0.26, 0.24, 2.9])
  y, flags = sig.saturate(x, 2.5)
  np.testing.assert_array_equal(flags, [True, False, False, True])
  np.testing.assert_allclose(y, [-2.5, -0.26, 0.24, 2.5])
  np.testing.assert_allclose(sig.quantize(x, 0.1), [-3.0, -0.3, 0.2, 2.9], atol=1e-6)
