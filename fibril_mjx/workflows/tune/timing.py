"""The search stage of a fitted transport latency: the training loss over every whole tick
within its bounds, all candidates in one batch, before (and again after) the continuous stage.

A latency moves samples by whole ticks (the delivery queue releases a sample at a tick), so
the loss is a step function of it with no useful derivative: it is searched, not descended.

Values alone cannot pin it down to the tick. At a recorded arrival the consumer holds the last
sample delivered, and every latency within one output period below the true one delivers the
same sample by then (the next one is not out yet): the loss is flat over that period. What
separates them is *when* the model delivers: only the true latency delivers at the recorded
arrival ticks themselves. So candidates are ranked by loss, and among those whose loss ties
the best (within `TIE`, relative) by the fraction of recorded arrivals at which the model
delivers a sample (its `new_data`). Both are kept as evidence, per candidate."""

from __future__ import annotations

import math

import numpy as np

from fibril_mjx.io import recording as rec_mod

TIE = 1e-4   # relative loss difference within which candidates are ranked by their timing


def candidates(prob, q) -> np.ndarray:
  """The whole-tick latencies (s) within a fitted latency's bounds."""
  dt = prob.dt
  k = np.arange(math.ceil(q.lower / dt - 1e-9), math.floor(q.upper / dt + 1e-9) + 1)
  return k * dt


def _coincidence(prob, cid: str, timing) -> np.ndarray:
  """Per start, the fraction of `cid`'s recorded arrivals (training recordings) at whose tick
  the model delivers a sample."""
  L, hits, total = prob.L, 0, 0
  term = next(t for t in prob.spec.loss if t.component == cid)
  for w, rec in enumerate(prob.train.recordings):
    k = np.rint(np.asarray(rec.sensor(cid)[rec_mod.ARRIVAL_TIME]) / prob.dt).astype(int)
    k = k[(k >= 1) & (k <= L)]
    new = timing[term][w][0]            # (S, L): delivered at tick j + 1
    hits = hits + new[:, k - 1].astype(bool).sum(axis=1)
    total += len(k)
  return hits / max(total, 1)


def search(prob, u) -> list[dict]:
  """Sets each fitted latency of `prob` to its best whole tick at the fitted coordinates
  `u (P,)` (see the module docstring), one latency after the other (the others held at their
  current value). Returns per latency `{name, candidates_s, losses, coincidence, best_s,
  previous_s}`."""
  out = []
  ds = prob.train
  u = np.asarray(u, np.float64)[:len(prob.params)]   # single shooting (no window starts)
  if not ds.maps:
    prob.evaluate(np.asarray(u, np.float64)[None], ds)
  for q in prob.timing:
    cand = candidates(prob, q)
    U = np.tile(np.asarray(u, np.float64), (len(cand), 1))
    _, fields, tim = prob.forward(U, ds, latency={q.target: cand})
    r, _ = prob.residuals(fields, ds)
    loss = np.sum(r ** 2, axis=1) / prob.n_residuals(ds)
    hit = _coincidence(prob, q.target[0], tim)
    tied = loss <= loss.min() * (1 + TIE)
    b = int(np.flatnonzero(tied)[np.argmax(hit[tied])])
    out.append({'name': q.name, 'candidates_s': cand.tolist(), 'losses': loss.tolist(),
                'coincidence': hit.tolist(), 'best_s': float(cand[b]),
                'previous_s': float(prob.latency[q.target])})
    prob.latency[q.target] = float(cand[b])
  return out


def describe(found: dict, dt: float) -> str:
  """One line of evidence: the best tick's loss and timing against its neighbours'."""
  cand, loss = np.asarray(found['candidates_s']), np.asarray(found['losses'])
  hit = np.asarray(found['coincidence'])
  b = int(np.argmin(np.abs(cand - found['best_s'])))
  near = [f'{loss[j]:.4g} / {100 * hit[j]:.0f} % at {cand[j] * 1e3:g} ms'
          for j in (b - 1, b + 1) if 0 <= j < len(cand)]
  return (f'{found["name"]} = {found["best_s"] * 1e3:g} ms ({found["best_s"] / dt:.0f} ticks): '
          f'loss {loss[b]:.4g}, model deliveries at {100 * hit[b]:.0f} % of the recorded '
          'arrivals' + (f' (neighbours: {", ".join(near)})' if near else '')
          + f'; {len(cand)} whole ticks searched in [{cand[0] * 1e3:g}, {cand[-1] * 1e3:g}] ms')
