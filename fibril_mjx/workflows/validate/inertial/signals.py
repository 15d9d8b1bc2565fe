"""Signal helpers of the inertial checks: gap filling, the reference low-pass, the expected
discrete first-order response, quaternion residuals."""

from __future__ import annotations

import math

import numpy as np



# ------------------------------------------------------------------------- data helpers


def fill_gaps(x):
  """Forward-fills NaN (lost samples) along axis 1; leading NaN take the first value."""
  x = x.copy()
  for idx in np.ndindex(x.shape[0], *x.shape[2:]):
    row = x[(idx[0], slice(None)) + idx[1:]]
    bad = np.isnan(row)
    if bad.any() and not bad.all():
      good = np.nonzero(~bad)[0]
      fill_idx = np.maximum.accumulate(np.where(bad, 0, np.arange(row.size)))
      fill_idx[:good[0]] = good[0]
      row[:] = row[fill_idx]
  return x


def _lowpass(x, bw, period):
  """Reference first-order filter of SPEC §5.1 on axis 1 (float64 NumPy)."""
  if bw <= 0:
    return x
  a = 1.0 - math.exp(-2 * math.pi * bw * period)
  y = np.empty_like(x)
  y[:, 0] = x[:, 0]
  for k in range(1, x.shape[1]):
    y[:, k] = y[:, k - 1] + a * (x[:, k] - y[:, k - 1])
  return y


def h_discrete(f, bw, fs):
  """Response of the discrete first-order low-pass of bandwidth `bw` (Hz; ≤ 0: none) run at
  `fs` Hz, at frequencies `f` (Hz)."""
  if bw <= 0:
    return np.ones_like(np.asarray(f, np.float64), dtype=complex)
  a = 1.0 - math.exp(-2 * math.pi * bw / fs)
  return a / (1.0 - (1.0 - a) * np.exp(-2j * np.pi * np.asarray(f) / fs))


def h_expected(dev, ch, f_true, dt):
  """Response of the configured low-pass to a tone of true frequency `f_true`, as seen in
  the samples (scale applied by the caller): at the output rate, the discrete filter at the
  alias frequency of the sampled tone; at the physics rate (`filter_rate: physics`), the
  filter at `1/dt` before sampling. For tones above the output Nyquist frequency the
  returned value is the conjugate convention of `_bode` (sampled tone phasor = conj(U))."""
  fs = 1.0 / dev.period_s
  f_true = np.asarray(f_true, np.float64)
  above = f_true > fs / 2
  if dev.filter_rate == 'physics':
    h = h_discrete(f_true, ch.bandwidth_hz, 1.0 / dt)
    return np.where(above, np.conj(h), h)
  return h_discrete(np.where(above, fs - f_true, f_true), ch.bandwidth_hz, fs)


def reference_filter(dev, ch, x_ticks, ticks, dt):
  """Noiseless filtered input at the sample ticks: `x_ticks` `(T, 3)` per physics tick."""
  if dev.filter_rate == 'physics' and ch.bandwidth_hz > 0:
    return _lowpass(x_ticks[None], ch.bandwidth_hz, dt)[0][ticks]
  return _lowpass(x_ticks[ticks][None], ch.bandwidth_hz, dev.period_s)[0]


def quat_err_vec(q, q_ref):
  """Small rotation vectors `2·vec(q_ref⁻¹ ⊗ q)` (body frame), float64."""
  q = np.asarray(q, np.float64)
  p = np.asarray(q_ref, np.float64)
  w = p[..., :1] * q[..., :1] + np.sum(p[..., 1:] * q[..., 1:], -1, keepdims=True)
  v = p[..., :1] * q[..., 1:] - q[..., :1] * p[..., 1:] - np.cross(p[..., 1:], q[..., 1:])
  return 2.0 * v * np.sign(w + 1e-30)
