"""Host-side analysis of `fibril_sim/lidar` runs
(docs/guides/sensors.md, "Exteroceptive sensors: camera, lidar, optical flow")."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.analysis.common import masked_mean, masked_rms, nav_plot, usable
from fibril_mjx.core import registry


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS of measured − ideal range (m) over valid beams whose ideal ray hit, the
  fraction of valid beams among beams that hit (returns), and the delivered scan count."""
  r = np.asarray(sensor['range_m'], np.float64)              # (W, T, N)
  ref = common.at_sample_tick(sensor, np.asarray(truth['range_m'], np.float64))
  ok = usable(sensor)[..., None]
  valid = sensor['beam_valid'].astype(bool) & ok
  hit = (ref >= 0) & ok
  e2 = np.where(valid & hit, (r - ref) ** 2, 0.0).sum(-1)
  n = (valid & hit).sum(-1)
  per_scan = np.where(n > 0, e2 / np.maximum(n, 1), np.nan)
  ret = np.where(hit.sum(-1) > 0, (valid & hit).sum(-1) / np.maximum(hit.sum(-1), 1), np.nan)
  scans = usable(sensor)
  return {'range_error_rms_m': masked_rms(per_scan, scans & (n > 0)),
          'return_fraction': masked_mean(ret, scans & np.isfinite(ret)),
          'delivered': sensor['new_data'].sum(axis=1)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Per scan: fraction of beams with a return and the mean valid range; RMS range error
  across worlds."""
  ok = usable(sensor)
  valid = sensor['beam_valid'].astype(bool)
  r = np.where(valid, np.asarray(sensor['range_m'], np.float64), 0.0)
  mean_r = np.where(valid.sum(-1) > 0, r.sum(-1) / np.maximum(valid.sum(-1), 1), np.nan)
  nav_plot(path, time_s, sensor, world,
           [(f'{cid}: fraction of valid beams per scan', '-', None, valid.mean(-1), ok),
            (f'{cid}: mean valid range per scan', 'm', None, mean_r, ok & np.isfinite(mean_r))],
           ('range error RMS per world [m]', metrics.get('range_error_rms_m', [])), title)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/lidar', metrics=host_metrics, plot=plot)
