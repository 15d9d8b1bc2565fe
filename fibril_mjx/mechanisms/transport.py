"""The delivery queue (SPEC §4): latency, jitter without reordering, loss, static capacity.

A sample acquired at tick `k` is released at
`r = max(k + ceil(max(0, latency_s + jitter_s·z) / dt), previous release)` — so jitter never
reorders samples — unless it is lost (probability `loss_probability`). Samples wait in a ring
buffer of static capacity; a sample that finds the buffer full is dropped and counted in
`overflow`. Sequence numbers are acquisition indices, so a consumer sees gaps.

Continuous latency (`fractional_delay`, `arrival_mix`): a latency of `n + f` ticks sends with
`n` whole ticks and the consumer mixes, over the tick of arrival, what it held before with what
arrived (the command acts for the fraction `1 − f` of that tick it covers; SPEC §6.1).

`init`, `send` and `receive` also serve FIFO delivery (a `fifo.Fifo` in place of a
`Transport`: batches read on the reader's schedule, `fibril_mjx/mechanisms/fifo.py`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx.mechanisms import fifo, ring, rng
from fibril_mjx.mechanisms.schedule import in_ticks, require_whole_ticks, ticks_fraction

_JITTER_SIGMAS = 6.0
SNAP_TICKS = 1e-4   # a continuous latency this close to a whole number of ticks is that number


@dataclasses.dataclass(frozen=True)
class Transport:
  """Static transport config.

  Attributes:
    latency_ticks: `latency_s / dt` rounded up to the next tick (used when there is no jitter).
    capacity: in-flight queue slots.
  """
  latency_s: float
  jitter_s: float
  loss_probability: float
  dt: float
  latency_ticks: int
  capacity: int

  @staticmethod
  def build(latency_s: float, jitter_s: float, loss_probability: float, period_s: float,
            dt: float, quantization: str, *, origin,
            latency_field: str = 'latency_s') -> 'Transport':
    """Validates and sizes a transport.

    The capacity covers every sample in flight while the delay stays below
    `latency + 6·jitter` (one more slot for the sample being delivered); later ones overflow
    and are counted.
    """
    lat = ticks_fraction(latency_s, dt)
    if quantization == 'strict':
      require_whole_ticks(latency_s, dt, origin(latency_field))
    worst = latency_s + _JITTER_SIGMAS * jitter_s
    capacity = 1 if worst == 0 else int(math.ceil(worst / period_s + 1e-9)) + 1
    return Transport(float(latency_s), float(jitter_s), float(loss_probability), float(dt),
                     int(math.ceil(lat)), capacity)

  def describe(self) -> str:
    return (f'{in_ticks("latency", self.latency_s, self.latency_ticks)}, jitter '
            f'{self.jitter_s:g} s, loss {self.loss_probability:g}, queue capacity '
            f'{self.capacity}')


class Delivered(NamedTuple):
  """What a consumer sees, held between deliveries.

  Attributes:
    sample: the latest delivered sample (neutral values before the first delivery).
    new_data: a sample was delivered this tick.
    sequence: acquisition index of `sample` (-1 before the first delivery).
    sample_tick: tick of the state it was acquired from.
    arrival_tick: tick it was delivered.
    valid: anything delivered yet.
  """
  sample: Any
  new_data: jax.Array
  sequence: jax.Array
  sample_tick: jax.Array
  arrival_tick: jax.Array
  valid: jax.Array


class QueueState(NamedTuple):
  """Ring buffer of samples in flight plus counters.

  Attributes:
    buf: samples, each leaf with a leading `(capacity,)` axis.
    sequence, sample_tick, release: `(capacity,)` int32.
    head, count: ring position and occupancy.
    last_release: release tick of the latest enqueued sample (orders jitter).
    overflow: samples dropped because the queue was full.
    lost: samples lost in transport.
    delay_ticks: this world's latency in ticks (used without jitter); `tp.init` sets the
      static `latency_ticks`, a campaign may set a per-world value (`with_latency`).
    latency_s: this world's latency in seconds (used with jitter), likewise.
  """
  buf: Any
  sequence: jax.Array
  sample_tick: jax.Array
  release: jax.Array
  head: jax.Array
  count: jax.Array
  last_release: jax.Array
  overflow: jax.Array
  lost: jax.Array
  delay_ticks: jax.Array
  latency_s: jax.Array


def init(tr: Transport, neutral_sample) -> tuple[QueueState, Delivered]:
  """The empty queue and the neutral held output (a `fifo.Fifo` gives its own: FIFO
  delivery, `fibril_mjx/mechanisms/fifo.py`)."""
  if isinstance(tr, fifo.Fifo):
    return fifo.init(tr, neutral_sample)
  c = tr.capacity
  buf = jax.tree.map(lambda x: jnp.zeros((c,) + jnp.shape(x), jnp.asarray(x).dtype),
                     neutral_sample)
  zc = jnp.zeros((c,), jnp.int32)
  z = jnp.int32(0)
  q = QueueState(buf, zc, zc, zc, z, z, jnp.int32(-1), z, z, jnp.int32(tr.latency_ticks),
                 jnp.float32(tr.latency_s))
  held = Delivered(neutral_sample, jnp.bool_(False), jnp.int32(-1), jnp.int32(-1),
                   jnp.int32(-1), jnp.bool_(False))
  return q, held


def send(tr: Transport, q: QueueState, sample, n, tick, jitter_stream, loss_stream,
         active=None) -> QueueState:
  """Enqueues sample number `n` acquired at `tick` (call only at acquisition instants).

  Args:
    jitter_stream, loss_stream: named stream keys (unused when the term is off).
    active: optional per-world bool; when False nothing is sent (no loss or overflow is
      counted) — for senders that issue on some ticks only (actuator commands).
  """
  if isinstance(tr, fifo.Fifo):
    return fifo.send(tr, q, sample, n, tick, active)
  delay = q.delay_ticks
  if tr.jitter_s > 0:
    secs = jnp.maximum(0.0, q.latency_s + tr.jitter_s * rng.normal(jitter_stream, n))
    delay = jnp.ceil(secs / tr.dt - 1e-6).astype(jnp.int32)
  release = jnp.maximum(tick + delay, q.last_release)
  keep = jnp.bool_(True)
  if tr.loss_probability > 0:
    keep = rng.uniform(loss_stream, n) >= tr.loss_probability
  room = q.count < tr.capacity
  if active is not None:
    keep = keep | ~active   # an inactive tick loses nothing ...
    room = room | ~active   # ... and overflows nothing
  put = keep & room if active is None else keep & room & active
  slot = (q.head + q.count) % tr.capacity
  upd = lambda arr, v: ring.put(arr, slot, v, put)
  return q._replace(
      buf=jax.tree.map(upd, q.buf, sample),
      sequence=upd(q.sequence, n),
      sample_tick=upd(q.sample_tick, tick),
      release=upd(q.release, release),
      head=q.head,
      count=q.count + put.astype(jnp.int32),
      last_release=jnp.where(put, release, q.last_release),
      overflow=q.overflow + (keep & ~room).astype(jnp.int32),
      lost=q.lost + (~keep).astype(jnp.int32),
  )


def with_latency(q: QueueState, latency_s, delay_ticks) -> QueueState:
  """`q` with one world's own latency, set before anything is sent.

  Args:
    latency_s: latency (s), used with jitter.
    delay_ticks: the same rounded up to whole ticks on the host (`latency_ticks` of a
      `Transport.build` with that latency), used without jitter.

  The queue's static `capacity` must cover it: build the transport with the largest latency
  of the batch (campaigns do).
  """
  return q._replace(delay_ticks=jnp.asarray(delay_ticks, jnp.int32),
                    latency_s=jnp.asarray(latency_s, jnp.float32))


def with_delay(q: QueueState, delay_ticks) -> QueueState:
  """`q` with a traced whole-tick delay for the samples sent from now on (no jitter): the
  whole ticks of a continuous latency (`fractional_delay`)."""
  return q._replace(delay_ticks=jnp.asarray(delay_ticks, jnp.int32))


def fractional_delay(latency_s, dt: float, max_ticks: float) -> tuple[jax.Array, jax.Array]:
  """A per-world latency (traced, differentiable) as whole ticks `n` and the fraction `f` of
  the next tick: `latency_s / dt = n + f`, clamped to `[0, max_ticks]`.

  Within `SNAP_TICKS` of a whole number of ticks the latency is that number (`f = 0`: float32
  seconds over `dt` are rarely exact). `f` carries the derivative `1 / dt` everywhere inside
  the clamp (the snap and `n` have none), so a loss is differentiable in the latency.

  Args:
    latency_s: scalar latency (s).
    dt: physics step (s).
    max_ticks: the largest latency (ticks) the queue holds.

  Returns:
    `(n int32 scalar, f float32 scalar in [0, 1))`.
  """
  x = jnp.clip(jnp.asarray(latency_s, jnp.float32) / jnp.float32(dt), 0.0, max_ticks)
  whole = jnp.round(x)
  snap = jnp.abs(x - whole) < SNAP_TICKS
  n = jax.lax.stop_gradient(jnp.where(snap, whole, jnp.floor(x)))
  frac = jax.lax.stop_gradient(jnp.where(snap, 0.0, x - n))
  frac = frac + (x - jax.lax.stop_gradient(x))   # value unchanged, derivative 1/dt
  return n.astype(jnp.int32), frac


def arrival_mix(before, after, fraction):
  """The time average over one tick of a held value that switches from `before` to `after`
  at `fraction` of the tick: `after + fraction·(before − after)` (exactly `after` at
  `fraction = 0`).

  Args:
    before, after: values (any matching shapes); fraction: scalar in [0, 1).
  """
  return after + fraction * (before - after)


def release(tr: Transport, q: QueueState, tick) -> tuple[QueueState, jax.Array, jax.Array]:
  """Takes every sample whose release tick has come out of the queue.

  Release ticks never decrease along the ring, so the released samples are a prefix of it.

  Returns:
    `(queue without them, ready (capacity,) bool, idx (capacity,) int32)`: ring slot `idx[j]`
    holds the `j`-th oldest sample in flight, released now when `ready[j]`. The samples stay
    readable in the returned queue's `buf` until later sends overwrite them.
  """
  c = tr.capacity
  offs = jnp.arange(c, dtype=jnp.int32)
  idx = (q.head + offs) % c
  # slot k holds the ((k - head) mod c)-th oldest sample; the ready ones are a prefix
  in_flight = (offs - q.head) % c < q.count
  m = jnp.sum((in_flight & (q.release <= tick)).astype(jnp.int32))
  ready = offs < m
  return q._replace(head=(q.head + m) % c, count=q.count - m), ready, idx


def receive(tr: Transport, q: QueueState, held: Delivered, tick, dues=None
            ) -> tuple[QueueState, Delivered]:
  """Delivers every sample whose release tick has come; the latest one becomes `held`.

  `dues` (the component's `{schedule name: (due, n)}`) is read by FIFO delivery only (its
  periodic reader), which `fifo.receive` serves.
  """
  if isinstance(tr, fifo.Fifo):
    return fifo.receive(tr, q, held, tick, dues)
  q_out, ready, idx = release(tr, q, tick)
  m = jnp.sum(ready.astype(jnp.int32))
  new = m > 0
  last = (q.head + jnp.maximum(m - 1, 0)) % tr.capacity
  pick = lambda arr, h: jnp.where(new, ring.get(arr, last), h)
  out = Delivered(
      sample=jax.tree.map(pick, q.buf, held.sample),
      new_data=new,
      sequence=pick(q.sequence, held.sequence),
      sample_tick=pick(q.sample_tick, held.sample_tick),
      arrival_tick=jnp.where(new, jnp.asarray(tick, jnp.int32), held.arrival_tick),
      valid=held.valid | new,
  )
  return q_out, out
