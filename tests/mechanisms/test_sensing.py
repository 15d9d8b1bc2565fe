"""The one sensing cycle (`fibril_mjx.mechanisms.sensing`): the order of its stages, its build-time
check, and a fault plan handled by the same cycle."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fibril_mjx.mechanisms import faults, rng, sensing
from fibril_mjx.mechanisms import transport as tp

DT = 0.002
PERIOD = 0.01                    # 5 ticks
T = 23
ORIGIN = lambda f: ('test.yaml', f)  # noqa: E731


class Sample(NamedTuple):
  value: jax.Array
  health: jax.Array


class Params(NamedTuple):
  faults: tuple = ()             # no fault entries


class State(NamedTuple):
  streams: dict
  queue: Any
  held: Any
  log: jax.Array                 # (T, 3) int32: observe, track, acquire ticks (−1 none)
  faults: Any = None


def observe(p, s, env, tick):
  return s._replace(log=s.log.at[tick, 0].set(env['other'] + tick))


def track(p, s, data, tick):
  """Copies what `observe` wrote this tick (−1 had it not run before)."""
  return s._replace(log=s.log.at[tick, 1].set(s.log[tick, 0]))


def acquire(p, s, data, tick, n):
  return (s._replace(log=s.log.at[tick, 2].set(tick)),
          Sample(jnp.float32(data) + n, jnp.int32(7)))


def cycle(plan=None, **stages):
  transport = tp.Transport.build(0.0, 0.0, 0.0, PERIOD, DT, 'next_boundary', origin=ORIGIN)
  return sensing.Cycle(transport, DT, acquire, plan, **stages)


def run(c):
  """Drives cycle `c` for `T` ticks (data = 100 + tick): `(state, delivered per tick)`."""
  neutral = Sample(jnp.float32(0), jnp.int32(0))
  queue, held = tp.init(c.transport, neutral)
  key = jax.random.PRNGKey(0)
  streams = {s: rng.stream_key(key, 'toy', s) for s in ('delivery_jitter', 'delivery_loss')}
  s = State(streams, queue, held, jnp.full((T, 3), -1, jnp.int32),
            None if c.fault_plan is None else faults.init_state(c.fault_plan, neutral))
  p = Params()

  def body(s, tick):
    due, n = tick % 5 == 0, tick // 5                  # PERIOD / DT = 5 ticks, phase 0
    s = sensing.sense(c, p, s, 100.0 + tick, tick, {'acquisition': (due, n)}, {'other': 0})
    return s, s.held
  return jax.lax.scan(body, s, jnp.arange(T, dtype=jnp.int32))


def test_stages_run_in_order_and_acquire_at_instants_only():
  s, out = run(cycle(observe=observe, track=track))
  log = np.asarray(s.log)
  ticks = np.arange(T)
  np.testing.assert_array_equal(log[:, 0], ticks)          # observe every tick
  np.testing.assert_array_equal(log[:, 1], ticks)          # track every tick, after observe
  np.testing.assert_array_equal(log[:, 2], np.where(ticks % 5 == 0, ticks, -1))
  new = np.asarray(out.new_data)
  np.testing.assert_array_equal(np.nonzero(new)[0], ticks[ticks % 5 == 0])
  np.testing.assert_array_equal(np.asarray(out.sample.value)[new],
                                100.0 + ticks[new] + ticks[new] // 5)   # data + n


def test_absent_stages_are_absent():
  s, _ = run(cycle())
  log = np.asarray(s.log)
  assert np.all(log[:, :2] == -1)


def test_a_fault_plan_is_handled_by_the_same_cycle():
  """An empty plan changes nothing but the health the sample carries (the health machine's)."""
  _, plain = run(cycle())
  _, faulted = run(cycle(faults.FaultPlan()))
  new = np.asarray(plain.new_data)
  np.testing.assert_array_equal(new, np.asarray(faulted.new_data))
  np.testing.assert_array_equal(np.asarray(plain.sample.value), np.asarray(faulted.sample.value))
  assert np.all(np.asarray(plain.sample.health)[new] == 7)
  assert np.all(np.asarray(faulted.sample.health)[new] == faults.HEALTHY)


def test_check_says_what_a_cycle_lacks():
  sensing.check(cycle(observe=observe, track=track), 'toy')
  with pytest.raises(TypeError, match='weak fault plan .*condition'):
    sensing.check(cycle(faults.FaultPlan(weak=True)), 'toy')
  sensing.check(cycle(faults.FaultPlan(weak=True), condition=lambda p, x: jnp.int32(0)), 'toy')
  with pytest.raises(TypeError, match='toy: sensing stage track must be a function or None'):
    sensing.check(cycle(track=3), 'toy')
  with pytest.raises(TypeError, match='sensing stage acquire must be a function, got None'):
    sensing.check(cycle()._replace(acquire=None), 'toy')
