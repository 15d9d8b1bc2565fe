"""Binomial proportions: the Wilson score interval of a failure rate (campaign reports,
`examples/policy_robustness.py`)."""

from __future__ import annotations

import math

Z95 = 1.959963984540054   # the standard normal's 97.5 % quantile


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
  """Wilson score interval of a binomial proportion `k / n` (95 % for the default `z`);
  `(nan, nan)` for `n = 0`."""
  if n == 0:
    return (float('nan'), float('nan'))
  p = k / n
  den = 1 + z * z / n
  mid = (p + z * z / (2 * n)) / den
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
  return (max(0.0, mid - half), min(1.0, mid + half))
