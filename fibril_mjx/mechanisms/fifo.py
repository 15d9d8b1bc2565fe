"""FIFO delivery (SPEC §4 "FIFO delivery", where the rules are written out): a device FIFO read
in batches on the reader's schedule — the transport mode `delivery: fifo` of a sensing
component.

Samples acquired on the component's schedule enter a FIFO of `fifo_depth` samples; a read
starts at the reader's instants or at the watermark, never while one is in flight, latches
`min(count, fifo_read_max)` samples, oldest first, and arrives `ceil(fifo_read_delay_s / dt)`
ticks later. A full FIFO loses a sample (`drop_oldest` / `drop_newest`, counted in
`overflow`). Order within tick k: acquisitions enter → the read in flight arrives → a due read
starts → with no read delay it arrives at k. A consumer sees a `Batch` held between reads; the
host views `rows` and `by_acquisition` unpack it per sample. With the default
`delivery: queue` nothing here is traced.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from fibril_mjx.errors import ConfigError, ConfigErrors, Strict
from fibril_mjx.mechanisms.schedule import Schedule, ticks_fraction
from fibril_mjx.mechanisms import ring

READ = 'fifo_read'                     # the name of the periodic reader's schedule
BOOK = ('count', 'new_data', 'sequence', 'sample_tick', 'arrival_tick', 'valid')
FIELDS = ('fifo_depth', 'fifo_watermark', 'fifo_read_period_s', 'fifo_read_phase_s',
          'fifo_read_delay_s', 'fifo_read_max', 'fifo_overflow')


class FifoConfig(Strict):
  """Manifest fields of FIFO delivery (a mixin of a sensor's config model).

  `fifo_depth` default 128: the ICM-42688-P's 2048-byte FIFO holds 128 16-byte accel + gyro
  packets (profiles/evidence/consumer_mems_imu.md "FIFO size", packet 3).
  """
  delivery: Literal['queue', 'fifo'] = 'queue'
  fifo_depth: int = pydantic.Field(128, ge=1)
  fifo_watermark: int = pydantic.Field(0, ge=0)
  fifo_read_period_s: float = pydantic.Field(0.0, ge=0)
  fifo_read_phase_s: float = pydantic.Field(0.0, ge=0)
  fifo_read_delay_s: float = pydantic.Field(0.0, ge=0)
  fifo_read_max: int = pydantic.Field(0, ge=0)
  fifo_overflow: Literal['drop_oldest', 'drop_newest'] = 'drop_oldest'


@dataclasses.dataclass(frozen=True)
class Fifo:
  """Static FIFO delivery config (hashable).

  Attributes:
    depth: samples the FIFO holds.
    read_max: `B`, samples one read takes at most (the batch size of `Batch`).
    watermark: samples that start a read (0: reads on `read_schedule`).
    read_schedule: the periodic reader's `Schedule`, or None (watermark reads).
    delay_ticks: ticks from a read's start to its arrival (`delay_s` rounded up to ticks).
    drop_oldest: overflow policy (False: drop the newest).
    dt: physics timestep (s).
  """
  depth: int
  read_max: int
  watermark: int
  read_schedule: Schedule | None
  delay_ticks: int
  delay_s: float
  drop_oldest: bool
  dt: float

  @staticmethod
  def build(cfg, dt: float, origin) -> 'Fifo':
    """Validates the `fifo_*` fields of a config with `delivery: fifo`.

    Raises:
      ConfigErrors: every rule broken, each naming its field (`origin(field)`).
    """
    errs = []

    def bad(field, rule):
      errs.append(ConfigError(*origin(field), rule, getattr(cfg, field)))

    for f in ('latency_s', 'jitter_s', 'loss_probability'):
      if getattr(cfg, f, 0.0) != 0:
        bad(f, 'must be 0 with delivery: fifo (the FIFO read delay is fifo_read_delay_s)')
    wm, period = cfg.fifo_watermark, cfg.fifo_read_period_s
    if (wm > 0) == (period > 0):
      bad('fifo_watermark', 'delivery: fifo needs exactly one of fifo_watermark (> 0) or '
          'fifo_read_period_s (> 0)')
    if wm > cfg.fifo_depth:
      bad('fifo_watermark', f'must be <= fifo_depth = {cfg.fifo_depth}')
    if cfg.fifo_read_max > cfg.fifo_depth:
      bad('fifo_read_max', f'must be <= fifo_depth = {cfg.fifo_depth} (0: fifo_depth)')
    if wm > 0 and cfg.fifo_read_phase_s != 0:
      bad('fifo_read_phase_s', 'only with fifo_read_period_s (watermark reads have no phase)')
    delay = int(math.ceil(ticks_fraction(cfg.fifo_read_delay_s, dt)))
    sched = None
    if period > 0 and not errs:
      sched = Schedule.build(period, cfg.fifo_read_phase_s, dt, 'next_boundary', origin=origin,
                             period_field='fifo_read_period_s',
                             phase_field='fifo_read_phase_s')
      spacing = sched.period // sched.den   # fewest ticks between two read instants
      if delay > spacing:
        bad('fifo_read_delay_s', f'must be at most the read period: {delay} ticks of '
            f'dt = {dt:g} s, reads can be {spacing} ticks apart (one read in flight)')
    if errs:
      raise ConfigErrors(errs)
    return Fifo(int(cfg.fifo_depth), int(cfg.fifo_read_max or cfg.fifo_depth), int(wm), sched,
                delay, float(cfg.fifo_read_delay_s), cfg.fifo_overflow == 'drop_oldest',
                float(dt))

  def describe(self) -> str:
    when = (f'reads every {self.read_schedule.period_s:g} s (phase '
            f'{self.read_schedule.phase_s:g} s)' if self.read_schedule is not None
            else f'reads at watermark {self.watermark} samples')
    return (f'fifo: depth {self.depth} samples, {when}, at most {self.read_max} per read, '
            f'read delay {self.delay_s:g} s = {self.delay_ticks} ticks, overflow '
            f'{"drop_oldest" if self.drop_oldest else "drop_newest"}')


def unused_fields(cfg, origin) -> None:
  """With `delivery: queue`, a `fifo_*` field off its default is an error (never ignored;
  a resolved config written out whole, defaults included, still loads)."""
  errs = [ConfigError(*origin(f), 'only with delivery: fifo', getattr(cfg, f))
          for f in FIELDS if getattr(cfg, f) != FifoConfig.model_fields[f].default]
  if errs:
    raise ConfigErrors(errs)


class Batch(NamedTuple):
  """What a consumer of a FIFO sees, held between reads.

  Attributes:
    sample: the samples of the latest read, each leaf `(B, ...)`, oldest first; slots at and
      after `count` hold zeros.
    count: samples in that read (int32).
    new_data: a read arrived this tick.
    sequence: `(B,)` acquisition index per slot (-1 in empty slots).
    sample_tick: `(B,)` acquisition tick per slot (-1 in empty slots).
    arrival_tick: tick the read arrived (-1 before the first).
    valid: anything delivered yet.
  """
  sample: Any
  count: jax.Array
  new_data: jax.Array
  sequence: jax.Array
  sample_tick: jax.Array
  arrival_tick: jax.Array
  valid: jax.Array


class FifoState(NamedTuple):
  """The FIFO ring, the read in flight and the counters.

  Attributes:
    buf: samples, each leaf `(depth, ...)`; `sequence`, `sample_tick` `(depth,)`.
    head, count: ring position and occupancy.
    pending: the read in flight, a `Batch` (its `arrival_tick` is the tick it arrives; -1
      when none is in flight).
    overflow: samples lost to a full FIFO.
    lost: always 0 (no transport loss in FIFO delivery; kept for the common status).
    reads: reads that arrived.
  """
  buf: Any
  sequence: jax.Array
  sample_tick: jax.Array
  head: jax.Array
  count: jax.Array
  pending: Batch
  overflow: jax.Array
  lost: jax.Array
  reads: jax.Array


def _slots(like, n):
  return jax.tree.map(lambda x: jnp.zeros((n,) + jnp.shape(x), jnp.asarray(x).dtype), like)


def _empty_batch(neutral, b: int) -> Batch:
  m1 = jnp.full((b,), -1, jnp.int32)
  return Batch(_slots(neutral, b), jnp.int32(0), jnp.bool_(False), m1, m1, jnp.int32(-1),
               jnp.bool_(False))


def init(f: Fifo, neutral_sample) -> tuple[FifoState, Batch]:
  z = jnp.int32(0)
  zd = jnp.zeros((f.depth,), jnp.int32)
  q = FifoState(_slots(neutral_sample, f.depth), zd, zd, z, z,
                _empty_batch(neutral_sample, f.read_max), z, z, z)
  return q, _empty_batch(neutral_sample, f.read_max)


def send(f: Fifo, q: FifoState, sample, n, tick, active=None) -> FifoState:
  """Sample `n` acquired at `tick` enters the FIFO (call at acquisition instants only;
  `active` False: nothing is sent)."""
  put = jnp.bool_(True) if active is None else jnp.asarray(active)
  full = q.count >= f.depth
  slot = (q.head + q.count) % f.depth          # the oldest's slot when full
  store = put if f.drop_oldest else put & ~full
  upd = lambda arr, v: ring.put(arr, slot, v, store)   # noqa: E731
  head, count = q.head, q.count
  if f.drop_oldest:
    head = jnp.where(put & full, (head + 1) % f.depth, head)
    count = jnp.where(put & ~full, count + 1, count)
  else:
    count = count + store.astype(jnp.int32)
  return q._replace(buf=jax.tree.map(upd, q.buf, sample), sequence=upd(q.sequence, n),
                    sample_tick=upd(q.sample_tick, tick), head=head, count=count,
                    overflow=q.overflow + (put & full).astype(jnp.int32))


def _start(f: Fifo, q: FifoState, start, tick) -> FifoState:
  """Latches up to `read_max` samples into the read in flight when `start`."""
  j = jnp.arange(f.read_max, dtype=jnp.int32)
  m = jnp.minimum(q.count, f.read_max)
  start = start & (m > 0)
  idx = (q.head + j) % f.depth
  ok = j < m
  take = lambda arr: jnp.where(ok.reshape((-1,) + (1,) * (arr.ndim - 1)), arr[idx],  # noqa: E731
                               jnp.zeros_like(arr[idx]))
  batch = Batch(jax.tree.map(take, q.buf), m, jnp.bool_(True),
                jnp.where(ok, q.sequence[idx], -1), jnp.where(ok, q.sample_tick[idx], -1),
                jnp.asarray(tick + f.delay_ticks, jnp.int32), jnp.bool_(True))
  pending = jax.tree.map(lambda a, b: jnp.where(start, a, b), batch, q.pending)
  return q._replace(pending=pending, head=jnp.where(start, (q.head + m) % f.depth, q.head),
                    count=jnp.where(start, q.count - m, q.count))


def _arrive(q: FifoState, held: Batch, tick) -> tuple[FifoState, Batch]:
  """The read in flight arrives if its tick has come; else `held` stays (not new)."""
  p = q.pending
  now = (p.arrival_tick >= 0) & (p.arrival_tick <= tick)
  out = jax.tree.map(lambda a, b: jnp.where(now, a, b), p, held._replace(new_data=False))
  out = out._replace(new_data=now, valid=held.valid | now)
  q = q._replace(pending=p._replace(arrival_tick=jnp.where(now, -1, p.arrival_tick)),
                 reads=q.reads + now.astype(jnp.int32))
  return q, out


def receive(f: Fifo, q: FifoState, held: Batch, tick, dues) -> tuple[FifoState, Batch]:
  """After this tick's acquisitions: the read in flight arrives, a due read starts (and with
  no delay arrives now).

  Args:
    dues: the component's `{schedule name: (due, n)}` (`READ` for periodic reads).
  """
  q, held = _arrive(q, held, tick)
  if f.read_schedule is not None:
    due = dues[READ][0]
  else:
    due = q.count >= f.watermark
  idle = q.pending.arrival_tick < 0
  q = _start(f, q, due & idle, tick)
  if f.delay_ticks == 0:
    q, held = _arrive(q, held, tick)
  return q, held


# ------------------------------------------------------------------------ host views


def is_batch(d) -> bool:
  """A FIFO delivery: a `Batch`, or a field dict (a trace group) with `count`."""
  return isinstance(d, Batch) or (isinstance(d, dict) and 'count' in d)


def rows(d: dict) -> dict:
  """One row per batch slot of a FIFO trace group `{field: (W, T, B, ...)}` (sample fields
  and `BOOK`): `{field: (W, T·B, ...)}` with `new_data` true on the delivered samples, in
  arrival order (acquisition order), `arrival_tick` per sample."""
  count, new = np.asarray(d['count']), np.asarray(d['new_data']).astype(bool)
  w, t, b = np.asarray(d['sequence']).shape
  delivered = new[..., None] & (np.arange(b) < count[..., None])
  out = {}
  for k, v in d.items():
    v = np.asarray(v)
    if k in ('count', 'new_data', 'valid', 'arrival_tick'):
      v = np.broadcast_to(v[..., None], (w, t, b))
    out[k] = v.reshape((w, t * b) + v.shape[3:])
  out['new_data'] = delivered.reshape(w, t * b)
  out['valid'] = np.logical_or.accumulate(out['new_data'], axis=1)
  del out['count']
  return out


def by_acquisition(d: dict) -> dict:
  """A FIFO trace group as a per-tick `Delivered`-shaped one `{field: (W, T, ...)}`: the row of
  tick k holds the sample acquired at k when it was delivered (`new_data`, its batch's
  `arrival_tick`), else the previous one held. What the per-sample analyses read (values at
  their acquisition tick against truth there); arrivals themselves are in the batch fields."""
  r = rows(d)
  t_n = np.asarray(d['count']).shape[1]
  w_n = r['new_data'].shape[0]
  src = np.full((w_n, t_n), -1, np.int64)
  ww, jj = np.nonzero(r['new_data'])
  src[ww, r['sample_tick'][ww, jj]] = jj
  new = src >= 0
  held = np.maximum.accumulate(np.where(new, np.arange(t_n), -1), axis=1)  # last new tick
  pick = np.where(held >= 0, src[np.arange(w_n)[:, None], np.maximum(held, 0)], -1)
  out = {}
  for k, v in r.items():
    if k in ('new_data', 'valid'):
      continue
    g = np.take_along_axis(v, np.maximum(pick, 0).reshape(pick.shape + (1,) * (v.ndim - 2)),
                           axis=1)
    if k in ('sequence', 'sample_tick', 'arrival_tick'):
      g = np.where(pick >= 0, g, -1).astype(v.dtype)
    else:
      g = np.where((pick >= 0).reshape(pick.shape + (1,) * (v.ndim - 2)), g, np.zeros_like(g))
    out[k] = g
  out['new_data'] = new
  out['valid'] = held >= 0
  return out


def split(batch: Batch) -> tuple[dict, tuple]:
  """`(field dict, sample field names)` of a `Batch` of host arrays."""
  names = batch.sample._fields
  d = {n: getattr(batch.sample, n) for n in names}
  d.update({k: getattr(batch, k) for k in BOOK})
  return d, names
