"""What a real log records besides the noise: its timing as stamped (period, jitter, loss,
gaps), the output step (quantization), the stretches at rest inside one session, and motion
left inside a stretch."""

from __future__ import annotations

import math

import numpy as np
from scipy import signal

#: a gap longer than this many periods splits a record into segments (the Allan and Welch
#: estimators run per segment); shorter gaps drop the missing samples (never filled)
GAP_SPLIT_PERIODS = 4.5
#: rest detection: windows of this length (s), a stretch at least `REST_MIN_S` long (s), cut
#: by `REST_TRIM_S` at each end, at rest where both window stds are below `REST_FACTOR` × the
#: quietest windows' median
REST_WINDOW_S, REST_MIN_S, REST_TRIM_S, REST_FACTOR = 0.5, 5.0, 0.5, 2.0
#: the quietest fraction of windows taken as the floor of the rest detector
REST_QUIET = 0.2
#: motion left in a stretch: a window std this many times its stretch's median
MOTION_FACTOR = 1.8


def true_runs(mask) -> list[tuple[int, int]]:
  """`(first, last)` index of each run of True in a 1-D bool array, in order."""
  m = np.concatenate([[False], np.asarray(mask, bool), [False]]).astype(np.int8)
  d = np.diff(m)
  return list(zip(np.nonzero(d == 1)[0].tolist(), (np.nonzero(d == -1)[0] - 1).tolist()))

def timing(t):
  """The log's timing as recorded.

  Args:
    t: `(n,)` sample times (s), increasing.

  Returns:
    dict `period_s` (median interval), `jitter_s` (std of each interval about its nearest
    whole number of periods), `off_nominal` (fraction of intervals more than 5 % off one
    period), `lost` (missing samples: Σ(round(Δt/period) − 1)), `loss` (lost / expected),
    `max_gap_periods`, `splits` (indices where a gap > `GAP_SPLIT_PERIODS` periods starts a
    new segment), `samples`.
  """
  t = np.asarray(t, np.float64)
  d = np.diff(t)
  if d.size == 0:
    return {'period_s': float('nan'), 'jitter_s': 0.0, 'off_nominal': 0.0, 'lost': 0,
            'loss': 0.0, 'max_gap_periods': 1.0, 'splits': [], 'samples': int(t.size)}
  period = float(np.median(d))
  steps = np.maximum(np.round(d / period), 1)
  lost = int(np.sum(steps - 1))
  return {'period_s': period, 'jitter_s': float(np.std(d - steps * period)),
          'off_nominal': float(np.mean(np.abs(d / period - 1) > 0.05)), 'lost': lost,
          'loss': lost / float(t.size + lost), 'max_gap_periods': float(d.max() / period),
          'splits': [int(i) + 1 for i in np.flatnonzero(d > GAP_SPLIT_PERIODS * period)],
          'samples': int(t.size)}


def segments(x, splits, min_len):
  """`x` cut at `splits` (sample indices), keeping the pieces of at least `min_len` samples."""
  return [s for s in np.split(np.asarray(x), splits) if s.shape[0] >= min_len]


def quantization_step(x, min_coherence=0.3):
  """The output step q of one axis: the largest q ≤ the residual std for which the samples sit
  on a lattice `o + k·q` (coherence `|mean exp(2πi x/q)|` ≥ `min_coherence` and 8 times the
  coherence of unquantized samples, 1/√n); None when the output is not quantized.

  A Gaussian of std s has coherence `exp(−2π²s²/q²)` (< 1e-8 at q ≤ s), so q above the std
  cannot be read from the samples' spread and is not searched.
  """
  x = np.asarray(x, np.float64)
  x = x - np.median(x)
  s = float(np.std(x))
  if s == 0 or x.size < 100:
    return None
  need = max(min_coherence, 8.0 / math.sqrt(x.size))
  u = np.unique(x)
  if u.size < 3:
    return None
  d = np.diff(u)
  lo = max(float(np.min(d[d > 0])), s * 1e-4)
  qs = np.geomspace(s, lo, 800)
  xs = x[:: max(1, x.size // 8000)]
  coh = np.array([abs(np.mean(np.exp(2j * np.pi * xs / q))) for q in qs])
  if coh.max() < need:
    return None
  # the largest step near the best coherence (its divisors q/k sit on the lattice too)
  q = qs[int(np.argmax(coh >= max(need, 0.8 * coh.max())))]
  grid = np.linspace(0.97 * q, 1.03 * q, 121)
  cs = [abs(np.mean(np.exp(2j * np.pi * xs / g))) for g in grid]
  return float(grid[int(np.argmax(cs))])


def _window_std(x, w):
  n = x.shape[0] // w
  return x[:n * w].reshape(n, w, -1).std(1)


def find_rest(t, gyro, accel):
  """Stretches at rest in one session log.

  A window of `REST_WINDOW_S` is at rest when the norm of its per-axis gyro std and that of its
  accelerometer std are both below `REST_FACTOR` × the median over the quietest `REST_QUIET`
  of the windows; runs of rest windows at least `REST_MIN_S` long, trimmed by `REST_TRIM_S`
  at each end, are the stretches.

  Returns:
    `(stretches, thresholds)`: `[(i0, i1), ...]` sample index ranges, and dict `gyro`,
    `accel` (the thresholds, units of the samples), `window_s`, `min_s`, `trim_s`.
  """
  t = np.asarray(t, np.float64)
  period = float(np.median(np.diff(t)))
  w = max(4, int(round(REST_WINDOW_S / period)))
  sg = np.linalg.norm(_window_std(np.asarray(gyro, np.float64), w), axis=1)
  sa = np.linalg.norm(_window_std(np.asarray(accel, np.float64), w), axis=1)
  k = max(1, int(REST_QUIET * sg.size))
  thr_g = REST_FACTOR * float(np.median(np.sort(sg)[:k]))
  thr_a = REST_FACTOR * float(np.median(np.sort(sa)[:k]))
  rest = (sg < thr_g) & (sa < thr_a)
  trim = int(round(REST_TRIM_S / period))
  out = []
  for i, j in true_runs(rest):
    i0, i1 = i * w + trim, (j + 1) * w - trim
    if (i1 - i0) * period >= REST_MIN_S - 2 * REST_TRIM_S and t[i1 - 1] - t[i0] >= (
        REST_MIN_S - 2 * REST_TRIM_S):
      out.append((int(i0), int(i1)))
  return out, {'gyro': thr_g, 'accel': thr_a, 'window_s': w * period, 'min_s': REST_MIN_S,
               'trim_s': REST_TRIM_S}


def window_stds(x, rate, lines=()):
  """`(stds, w)`: the std of each `REST_WINDOW_S` window (`w` samples, at least 8; a record
  shorter than one window is one window) of one axis `x (n,)`, after notching out the model's
  `lines` (`f0`, `bandwidth_hz`; a narrowband process's amplitude wanders on its own)."""
  x = np.asarray(x, np.float64)
  w = min(max(8, int(round(REST_WINDOW_S * rate))), x.shape[0])
  for ln in lines:
    width = max(4 * ln['bandwidth_hz'], 4 * rate / w, 0.2)
    lo, hi = max(ln['f0'] - width, 0.01), min(ln['f0'] + width, 0.499 * rate)
    if hi > lo and x.shape[0] > 15:          # sosfiltfilt pads 3·(2·sections + 1) samples
      sos = signal.butter(2, (lo, hi), btype='bandstop', fs=rate, output='sos')
      x = signal.sosfiltfilt(sos, x - x.mean())
  return _window_std(x[:, None], w)[:, 0], w


def motion_left(x, rate, t0=0.0, lines=(), floor=None):
  """Windows of one axis whose std exceeds `MOTION_FACTOR` × the median window std (a
  stationary noise keeps every 0.5 s window std within ≈ 1 ± 3/√(2w) of it), after notching
  out the model's `lines` (`window_stds`).

  Args:
    x: `(n,)` samples of one axis; `rate`: Hz; `t0`: the time of its first sample (s).
    floor: the median window std to compare with — the one of every record of a session
      (`motion_floor`), so a held-out piece shorter than 4 windows is checked too; default
      this record's own, which needs 4 windows (else nothing is reported).

  Returns:
    `[(t_start, t_end), ...]` seconds (from `t0`) of runs of such windows.
  """
  if np.asarray(x).shape[0] < 8:
    return []
  s, w = window_stds(x, rate, lines)
  if floor is None:
    if s.size < 4:
      return []
    floor = float(np.median(s))
  lim = max(MOTION_FACTOR, 1 + 5 / math.sqrt(2 * w)) * floor
  bad = np.flatnonzero(s > lim)
  runs = []
  for b in bad:
    if runs and b == runs[-1][1]:
      runs[-1][1] = b + 1
    else:
      runs.append([b, b + 1])
  return [(t0 + a * w / rate, t0 + b * w / rate) for a, b in runs]


def motion_floor(records, rate, lines=()):
  """The median window std over all `records` (`window_stds`): the floor `motion_left`
  compares each record with (None when no record has 8 samples)."""
  s = [window_stds(r, rate, lines)[0] for r in records if np.asarray(r).shape[0] >= 8]
  return float(np.median(np.concatenate(s))) if s else None
