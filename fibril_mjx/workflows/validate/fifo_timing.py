"""The timing check of a device with FIFO delivery (`delivery: fifo`,
`fibril_mjx/mechanisms/fifo.py`): batches against a NumPy FIFO of the configured reader.

A FIFO has no random term, so its reference is exact: samples enter at the integer-tick
acquisition instants `ceil((phase + n·period) / dt)`, a full FIFO drops the oldest or the
newest, the reader starts a read at its instants `ceil((read_phase + i·read_period) / dt)` or
when the FIFO holds the watermark (never while one is in flight), latches `min(count,
read_max)` samples and receives them `ceil(read_delay / dt)` ticks later. The checks compare,
for every sensor and world of the rig:

| check | measured | against the reference |
| --- | --- | --- |
| `timing.period` | acquisition stamps (`sample_tick`, per sample) | the schedule, within one tick |
| `timing.batch` | every read: arrival tick, count, sequences | equal (0 read ticks differ) |
| `timing.latency` | mean arrival − acquisition of the delivered samples [s] | equal within 1e-9 s |
| `timing.jitter` | its std [s] (the batching spread) | equal within 1e-9 s |
| `timing.loss` | fraction of sequence numbers skipped (overflow) | equal |
"""

from __future__ import annotations

import collections
import math
import types

import numpy as np

from fibril_mjx.analysis import plotting
from fibril_mjx.mechanisms import fifo
from fibril_mjx.workflows.validate.common import Check, hist_vs_reference, with_plot

_TOL_S = 1e-9


def batched(sens: dict) -> bool:
  """Whether the rig's sensors deliver through a FIFO (their outputs are `fifo.Batch`es)."""
  return any(isinstance(d, fifo.Batch) for d in sens.values())


def delivered(d):
  """A `Delivered`-like view of one sensor's batch trace (`fifo.by_acquisition`: each sample
  at its acquisition tick), for the per-sample checks; other outputs pass through."""
  if not isinstance(d, fifo.Batch):
    return d
  fields, names = fifo.split(d)
  v = fifo.by_acquisition(fields)
  sample = collections.namedtuple('Sample', names)(*(v[n] for n in names))
  return types.SimpleNamespace(sample=sample, **{k: v[k] for k in fifo.BOOK if k != 'count'})


def _ticks(seconds: float, dt: float) -> int:
  return int(math.ceil(seconds / dt - 1e-9))


def reference(cfg: dict, dt: float, n_ticks: int):
  """The configured FIFO over ticks `0..n_ticks`: `(reads {arrival tick: [sequence, ...]},
  acquisition tick per sequence (n,))`."""
  period, phase = float(cfg['period_s']), float(cfg.get('phase_s', 0.0))
  n_acq = int((n_ticks * dt - phase) / period) + 2
  acq = np.array([_ticks(phase + n * period, dt) for n in range(max(n_acq, 0))], np.int64)
  acq = acq[acq <= n_ticks]
  depth = int(cfg['fifo_depth'])
  read_max = int(cfg.get('fifo_read_max') or depth)
  delay = _ticks(float(cfg.get('fifo_read_delay_s', 0.0)), dt)
  rp = float(cfg.get('fifo_read_period_s', 0.0))
  reads = set()
  if rp > 0:
    rph = float(cfg.get('fifo_read_phase_s', 0.0))
    reads = {_ticks(rph + i * rp, dt) for i in range(int(n_ticks * dt / rp) + 2)}
  drop_oldest = cfg.get('fifo_overflow', 'drop_oldest') == 'drop_oldest'
  watermark = int(cfg.get('fifo_watermark', 0))
  q, pending, out = collections.deque(), None, {}
  j = 0
  for k in range(n_ticks + 1):
    while j < acq.size and acq[j] == k:
      if len(q) < depth:
        q.append(j)
      elif drop_oldest:
        q.popleft()
        q.append(j)
      j += 1
    if pending is not None and pending[0] <= k:   # the read in flight arrives
      out[k], pending = pending[1], None
    if pending is None and q and (k in reads if rp > 0 else len(q) >= watermark):
      pending = (k + delay, [q.popleft() for _ in range(min(len(q), read_max))])
    if pending is not None and pending[0] <= k:   # no read delay: it arrives now
      out[k], pending = pending[1], None
  return out, acq


def checks(dev, dt: float, sens: dict, fig_dir) -> list[Check]:
  """The timing checks of the module docstring over every sensor and world of a rig trace."""
  cfg = {**dev.config, 'period_s': dev.period_s, 'phase_s': dev.phase_s}
  n_ticks = next(iter(sens.values())).new_data.shape[1] - 1
  ref, acq = reference(cfg, dt, n_ticks)
  ref_lat = np.concatenate([(k - acq[s]) * dt for k, s in ref.items()] or [np.zeros(0)])
  ref_seen = sorted(n for s in ref.values() for n in s)
  ref_skipped = (ref_seen[-1] + 1 - len(ref_seen)) if ref_seen else 0
  lats, sizes, bad_reads, reads, off_sched, skipped, total = [], [], 0, 0, 0, 0, 0
  for d in sens.values():
    new = np.asarray(d.new_data).astype(bool)
    count, seq = np.asarray(d.count), np.asarray(d.sequence)
    st = np.asarray(d.sample_tick)
    for w in range(new.shape[0]):
      got = {int(k): seq[w, k, :count[w, k]].tolist() for k in np.flatnonzero(new[w])}
      ticks = set(got) | set(ref)
      reads += len(ticks)
      bad_reads += sum(got.get(k) != ref.get(k) for k in ticks)
      for k in got:
        m = count[w, k]
        s = st[w, k, :m]
        lats.append((k - s) * dt)
        sizes.append(m)
        e = s * dt - (dev.phase_s + seq[w, k, :m] * dev.period_s)
        off_sched += int(np.sum((e < -1e-6 * dt) | (e >= dt * (1 + 1e-6))))
      seen = sorted(n for v in got.values() for n in v)
      if seen:
        skipped += seen[-1] + 1 - len(seen)
        total += seen[-1] + 1
  lats = np.concatenate(lats) if lats else np.zeros(0)
  worlds = sum(np.asarray(d.new_data).shape[0] for d in sens.values())
  basis = (f'NumPy FIFO of the configured reader on {dt:g} s ticks (exact: no random term); '
           f'{worlds} sensor-worlds')
  mean = lambda x: float(np.mean(x)) if x.size else float('nan')   # noqa: E731
  std = lambda x: float(np.std(x)) if x.size else float('nan')     # noqa: E731
  frac = skipped / max(total, 1)
  ref_frac = ref_skipped / max(ref_seen[-1] + 1 if ref_seen else 1, 1)
  out = [
      Check('timing.period', 'sample period [s] (acquisition stamps; schedule error count)',
            {'off_schedule': off_sched}, dev.period_s,
            f'each sample time within [t_n, t_n + dt), dt = {dt:g} s',
            'integer-tick schedule t_n = phase + n·period rounded up to a tick',
            off_sched == 0),
      Check('timing.batch', 'read ticks whose read (count, sequences) differs from the '
            'reference FIFO\'s (or only one has a read)',
            {'differ': bad_reads, 'reads': reads, 'mean_count': mean(np.asarray(sizes))},
            {'reads_per_world': len(ref), 'mean_count': mean(np.asarray(
                [len(v) for v in ref.values()]))}, 0, basis, bad_reads == 0),
      Check('timing.latency', 'mean latency batch arrival − acquisition [s]', mean(lats),
            mean(ref_lat), _TOL_S, basis, abs(mean(lats) - mean(ref_lat)) <= _TOL_S),
      Check('timing.jitter', 'latency std [s] (the spread within batches)', std(lats),
            std(ref_lat), _TOL_S, basis, abs(std(lats) - std(ref_lat)) <= _TOL_S),
      Check('timing.loss', 'fraction of sequence numbers skipped (FIFO overflow)', frac,
            ref_frac, _TOL_S, basis, abs(frac - ref_frac) <= _TOL_S),
  ]
  return with_plot(out, _plot(fig_dir, lats, ref_lat, np.asarray(sizes), ref))


def _plot(fig_dir, lats, ref_lat, sizes, ref):
  plt = plotting.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  hi = max(lats.max() if lats.size else 0, ref_lat.max() if ref_lat.size else 0) * 1e3 + 1e-6
  bins = np.linspace(0, hi, 40)
  hist_vs_reference(axes[0], lats * 1e3, ref_lat * 1e3, bins, 'reference FIFO',
                    'latency arrival − acquisition [ms]')
  counts = [len(v) for v in ref.values()]
  top = max(list(sizes) + counts + [1])
  hist_vs_reference(axes[1], sizes, counts, np.arange(top + 2) - 0.5, 'reference FIFO',
                    'samples per read')
  return plotting.save(fig, fig_dir / 'timing.png')
