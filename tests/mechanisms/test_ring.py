"""Ring-buffer slot reads/writes (`mechanisms/ring.py`) and the delivery queue built on them.

References: NumPy indexing for `get` / `put`; for the queue, a float64-free Python model of
the ring (a deque of (release tick, sample) in FIFO order) written here.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fibril_mjx.errors import field_origin
from fibril_mjx.mechanisms import ring
from fibril_mjx.mechanisms import transport as tp

O = field_origin('m.yaml', 'c')


@pytest.mark.parametrize('shape', [(5,), (4, 3), (3, 2, 2)])
def test_get_and_put_equal_numpy_indexing(shape):
  arr = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 7.5
  value = np.full(shape[1:], 99.0, np.float32)
  for slot in range(shape[0]):
    np.testing.assert_array_equal(ring.get(jnp.asarray(arr), jnp.int32(slot)), arr[slot])
    want = arr.copy()
    want[slot] = value
    np.testing.assert_array_equal(ring.put(jnp.asarray(arr), jnp.int32(slot), value), want)
    np.testing.assert_array_equal(
        ring.put(jnp.asarray(arr), jnp.int32(slot), value, jnp.bool_(False)), arr)


def test_get_keeps_nan_and_signed_zero_bitwise():
  arr = jnp.asarray([np.nan, -0.0, 1.0], jnp.float32)
  out = [np.asarray(ring.get(arr, jnp.int32(k))) for k in range(3)]
  assert np.isnan(out[0]) and np.signbit(out[1]) and out[2] == 1.0


def _queue_program(tr, n_ticks, period):
  """One world's queue over `n_ticks`, a sample every `period` ticks (value = its index)."""
  def body(c, tick):
    q, held = c
    due = tick % period == 0
    n = tick // period
    q = jax.lax.cond(due, lambda q: tp.send(tr, q, n.astype(jnp.float32), n, tick,
                                            jnp.zeros(2, jnp.uint32), jnp.zeros(2, jnp.uint32)),
                     lambda q: q, q)
    q, held = tp.receive(tr, q, held, tick)
    return (q, held), (held.new_data, held.sequence, held.sample)
  q, held = tp.init(tr, jnp.float32(0.0))
  return jax.lax.scan(body, (q, held), jnp.arange(n_ticks, dtype=jnp.int32))[1]


def test_queue_matches_a_python_model_of_the_ring():
  # latency 7 ticks, a sample every 2 ticks: 4 samples in flight, the ring wraps every 5
  tr = tp.Transport.build(0.007, 0.0, 0.0, 0.002, 0.001, 'next_boundary', origin=O)
  assert tr.capacity == 5 and tr.latency_ticks == 7
  new, seq, sample = map(np.asarray, jax.jit(_queue_program, static_argnums=(0, 1, 2))(
      tr, 60, 2))
  flight, last = collections.deque(), None
  for tick in range(60):
    if tick % 2 == 0:
      flight.append((tick + 7, tick // 2))
    out = None
    while flight and flight[0][0] <= tick:
      out = flight.popleft()[1]
    assert bool(new[tick]) == (out is not None), tick
    last = out if out is not None else last
    if last is not None:
      assert seq[tick] == last and sample[tick] == last, tick


def test_batched_queue_has_no_gather_or_scatter():
  """Under vmap a traced index would become a gather/scatter per leaf (a loop over the
  worlds, and a kernel of its own): the queue must stay elementwise."""
  tr = tp.Transport.build(0.007, 0.0, 0.0, 0.002, 0.001, 'next_boundary', origin=O)
  jaxpr = jax.make_jaxpr(jax.vmap(lambda _: _queue_program(tr, 4, 2)))(jnp.zeros(3))
  prims = set()

  def walk(j):
    for e in j.eqns:
      prims.add(e.primitive.name)
      for p in e.params.values():
        for sub in (p if isinstance(p, (list, tuple)) else [p]):
          if hasattr(sub, 'jaxpr'):
            walk(sub.jaxpr if hasattr(sub.jaxpr, 'eqns') else sub.jaxpr.jaxpr)
  walk(jaxpr.jaxpr)
  assert not {p for p in prims if 'gather' in p or 'scatter' in p}, sorted(prims)
