"""Input checks shared by the statistics (one channel, uniformly sampled)."""

from __future__ import annotations

import numpy as np


def as_signal(x, name='x'):
  """`x` as a float64 `(n_samples,)` array: 1-D, at least 3 samples, all finite (else a
  `ValueError` naming `name`)."""
  x = np.asarray(x, dtype=np.float64)
  if x.ndim != 1:
    raise ValueError(f'{name} must be 1-D (n_samples,), got shape {x.shape}')
  if x.size < 3:
    raise ValueError(f'{name} needs at least 3 samples, got {x.size}')
  if not np.all(np.isfinite(x)):
    raise ValueError(f'{name} contains non-finite values')
  return x


def check_rate(rate_hz):
  """`rate_hz` as a float, > 0 (else a `ValueError`)."""
  rate_hz = float(rate_hz)
  if not rate_hz > 0:
    raise ValueError(f'rate_hz must be > 0, got {rate_hz}')
  return rate_hz
