"""NumPy helpers shared by the host-side analyses: flattening traces, float64 attitude
errors, summaries, a generic multi-panel plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import plotting
from fibril_mjx.mechanisms import fifo


def flatten(trace: dict) -> dict:
  """`{'sensor': {id: Delivered}, 'truth': {id: {...}}}` → `{'sensor/id/field': array}`."""
  flat = {}
  for cid, d in trace['sensor'].items():
    for name, value in d.sample._asdict().items():
      flat[f'sensor/{cid}/{name}'] = np.asarray(value)
    for name in (fifo.BOOK if isinstance(d, fifo.Batch) else
                 ('new_data', 'sequence', 'sample_tick', 'arrival_tick', 'valid')):
      flat[f'sensor/{cid}/{name}'] = np.asarray(getattr(d, name))
  for cid, d in trace['truth'].items():
    for name, value in d.items():
      flat[f'truth/{cid}/{name}'] = np.asarray(value)
  return flat


def rpy_deg(q) -> np.ndarray:
  """Roll, pitch, yaw (Z-Y-X) in degrees of quaternions `(..., 4)` `[w, x, y, z]`, float64."""
  w, x, y, z = np.moveaxis(np.asarray(q, np.float64), -1, 0)
  return np.degrees(np.stack([
      np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y)),
      np.arcsin(np.clip(2 * (w * y - z * x), -1, 1)),
      np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))], -1))


def angle_rad(p, q) -> np.ndarray:
  """Rotation angle `(...)` in [0, π] between quaternions `(..., 4)`, float64, well
  conditioned for small angles (from the vector part of `p⁻¹ ⊗ q`, not `arccos`)."""
  p = np.asarray(p, np.float64)
  q = np.asarray(q, np.float64)
  w = np.abs(np.sum(p * q, axis=-1))
  v = p[..., :1] * q[..., 1:] - q[..., :1] * p[..., 1:] - np.cross(p[..., 1:], q[..., 1:])
  return 2 * np.arctan2(np.linalg.norm(v, axis=-1), w)


def group(flat: dict, kind: str, cid: str) -> dict:
  prefix = f'{kind}/{cid}/'
  return {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix)}


def per_sample(sensor: dict) -> dict:
  """A component's sensor group `{field: (W, T, ...)}` as per-tick delivered samples: itself
  for the delivery queue; for FIFO delivery (batches, a `count` field) the acquisition-time
  view `fifo.by_acquisition` (each sample at its acquisition tick, with its batch's
  arrival)."""
  return fifo.by_acquisition(sensor) if fifo.is_batch(sensor) else sensor


def describe(values: np.ndarray) -> dict:
  """Mean, median, 95th percentile and maximum of `values` (all NaN when there are none)."""
  v = np.asarray(values, np.float64)
  if v.size == 0:
    return dict.fromkeys(('mean', 'p50', 'p95', 'max'), float('nan'))
  return {'mean': float(v.mean()), 'p50': float(np.percentile(v, 50)),
          'p95': float(np.percentile(v, 95)), 'max': float(v.max())}


def finite_rows(v: np.ndarray, keep: np.ndarray) -> np.ndarray:
  """Per-world metric values of the worlds kept (not diverged) that are finite."""
  v = np.asarray(v, np.float64)[keep]
  if v.ndim == 0:
    return v
  return v[np.all(np.isfinite(v), axis=tuple(range(1, v.ndim)))]


def plot_lines(path, time_s, title: str, panels: list, hist=None, points=None):
  """Stacked time-series panels plus an optional per-world histogram (actuator components).

  Args:
    panels: `[(panel title, y label, [(label, (T,) values, style or colour), ...]), ...]`.
    hist: optional `(x label, (nworld,) values)` drawn as the last panel.
    points: optional `{panel index: [(label, t (n,), y (n,), colour), ...]}` drawn as dots
      (delivered samples).
  """
  plt = plotting.pyplot()

  n = len(panels) + (hist is not None)
  fig, axes = plt.subplots(n, 1, figsize=(11, 2.6 * n + 0.6), squeeze=False)
  axes = axes[:, 0]
  for k, (ptitle, ylabel, lines) in enumerate(panels):
    ax = axes[k]
    for label, y, style in lines:
      if style.startswith('tab:') or style.startswith('C'):
        ax.plot(time_s[:len(y)], y, '-', color=style, lw=1, label=label)
      else:
        ax.plot(time_s[:len(y)], y, style, lw=1, label=label)
    for label, t, y, colour in (points or {}).get(k, []):
      ax.plot(t, y, '.', ms=2, color=colour, label=label)
    ax.set_title(ptitle, fontsize=9)
    ax.set_ylabel(ylabel)
    ax.legend(loc='upper right', fontsize=7)
  axes[len(panels) - 1].set_xlabel('time [s]')
  if hist is not None:
    xlabel, values = hist
    ax = axes[-1]
    values = np.asarray(values, np.float64)
    ax.hist(values, bins=min(40, max(5, len(values) // 4)), color='tab:purple')
    ax.set_xlabel(xlabel)
    ax.set_ylabel('worlds')
    ax.set_title(f'across {len(values)} worlds', fontsize=9)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def at_sample_tick(sensor: dict, a: np.ndarray) -> np.ndarray:
  """Truth `a` `(nworld, T, ...)` taken at each delivered sample's `sample_tick`."""
  st = np.clip(sensor['sample_tick'], 0, None)
  return np.take_along_axis(a, st.reshape(st.shape + (1,) * (a.ndim - 2)), axis=1)


def rate_error_metrics(sensor: dict, truth: dict) -> dict:
  """Per-world RMS error (float64, per axis) of the delivered angular velocity (rad/s) and
  specific force (m/s²) vs truth at their sample ticks, over delivered, healthy samples whose
  value is finite (`usable`; NaN for a world with none), and the delivered sample count."""
  new = sensor['new_data']
  out = {}
  for f, unit in (('angular_velocity', 'rad_s'), ('linear_acceleration', 'm_s2')):
    x = sensor[f].astype(np.float64)
    e = np.sum((x - at_sample_tick(sensor, truth[f])) ** 2, axis=-1) / 3
    out[f'{f}_error_rms_{unit}'] = masked_rms(e, usable(sensor, x))
  out['delivered'] = new.sum(axis=1)
  return out


def hist_across_worlds(ax, values, xlabel: str) -> None:
  """Histogram of a per-world metric on `ax`, over its finite values (a message instead when
  there is none: NaN and diverged worlds are left out)."""
  values = np.asarray(values, np.float64)
  values = values[np.isfinite(values)]
  if values.size:
    ax.hist(values, bins=min(40, max(5, values.size // 4)), color='tab:purple')
    ax.set_title(f'error distribution across {values.size} worlds', fontsize=9)
  else:
    ax.text(0.5, 0.5, 'no finite per-world value (diverged worlds are left out)',
            ha='center', va='center', transform=ax.transAxes)
  ax.set_xlabel(xlabel)
  ax.set_ylabel('worlds')


def save(fig, path, title: str) -> None:
  """Titles, lays out, writes and closes a figure."""
  plt = plotting.pyplot()
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


# ----------------------------------------------- navigation sensors (magnetometer … GNSS)
# Which delivered samples count, masked statistics, and the measured-vs-truth plot.

HEALTHY = 0          # fibril_mjx.mechanisms.faults.HEALTHY
COLOURS = ('tab:red', 'tab:blue', 'tab:green')


def usable(sensor: dict, *values) -> np.ndarray:
  """`(nworld, T)` bool: delivered, healthy samples whose `values` `(nworld, T, ...)` are all
  finite."""
  ok = sensor['new_data'].astype(bool)
  if 'health' in sensor:
    ok = ok & (sensor['health'] == HEALTHY)
  for v in values:
    v = np.asarray(v, np.float64)
    ok = ok & np.all(np.isfinite(v.reshape(v.shape[:2] + (-1,))), axis=-1)
  return ok


def masked_mean(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """Per-world mean `(nworld,)` of `x` `(nworld, T)` over `mask` (NaN where it is empty)."""
  count = mask.sum(axis=1)
  total = np.where(mask, np.nan_to_num(np.asarray(x, np.float64)), 0.0).sum(axis=1)
  return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def masked_rms(err2: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """Per-world √(mean of `err2` over `mask`), NaN where the mask is empty."""
  return np.sqrt(masked_mean(err2, mask))


def fraction(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
  """Per-world `part.sum() / whole.sum()` over ticks (NaN with no sample)."""
  n = whole.sum(axis=1)
  return np.where(n > 0, (part & whole).sum(axis=1) / np.maximum(n, 1), np.nan)


def plot_worlds(world: int, nworld: int, n: int = 3) -> list[int]:
  """The plotted worlds: `world` (the first kept one) and the next ones, at most `n`."""
  return [w for w in range(world, nworld)][:n] or ([0] if nworld else [])


def nav_plot(path, time_s, sensor: dict, world: int, panels: list, hist: tuple,
             title: str) -> None:
  """Measured (dots, at their sample ticks) vs truth (line) over time for a few worlds, one
  panel per quantity, and the per-world error histogram. Non-finite values are not drawn.

  Args:
    panels: `[(panel title, y label, truth (nworld, T) or None, measured (nworld, T),
      usable mask (nworld, T)), ...]`.
    hist: `(x label, per-world values)`.
  """
  plt = plotting.pyplot()

  fig, axes = plt.subplots(len(panels) + 1, 1, figsize=(11, 2.4 * len(panels) + 3.0),
                           squeeze=False)
  axes = axes[:, 0]
  nworld = sensor['new_data'].shape[0]
  st = np.clip(sensor['sample_tick'], 0, len(time_s) - 1)
  for ax, (ptitle, ylabel, truth, measured, mask) in zip(axes, panels):
    for w, c in zip(plot_worlds(world, nworld), COLOURS):
      if truth is not None:
        y = np.asarray(truth[w], np.float64)
        ax.plot(time_s[:len(y)], np.where(np.isfinite(y), y, np.nan), '-', color=c, lw=0.8,
                alpha=0.7)
      m = mask[w]
      if m.any():
        ax.plot(time_s[st[w][m]], np.asarray(measured[w], np.float64)[m], '.', ms=2.5,
                color=c, label=f'world {w}')
    ax.set_title(ptitle, fontsize=9)
    ax.set_ylabel(ylabel)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(loc='upper right', fontsize=7)
  axes[len(panels) - 1].set_xlabel('time [s]  (lines: truth, dots: delivered samples)')
  xlabel, values = hist
  hist_across_worlds(axes[-1], values, xlabel)
  save(fig, path, title)


def plot_rpy(axes, time_s, q_true, t_s, rpy_meas_deg, *, truth_label: str, label: str,
             title: str, **style) -> None:
  """The left column of an attitude figure: roll, pitch, yaw of the truth over every tick and of
  the delivered samples / estimates at their stamps (`style`: their matplotlib line style)."""
  r_true = rpy_deg(q_true)
  for i, name in enumerate(('roll', 'pitch', 'yaw')):
    ax = axes[i, 0]
    ax.plot(time_s, r_true[:, i], 'k-', lw=1, label=truth_label)
    ax.plot(t_s, rpy_meas_deg[:, i], color='tab:red', label=label, **style)
    ax.set_ylabel(f'{name} [deg]')
  axes[0, 0].legend(loc='upper right', fontsize=8)
  axes[0, 0].set_title(title)
  axes[2, 0].set_xlabel('time [s]')
