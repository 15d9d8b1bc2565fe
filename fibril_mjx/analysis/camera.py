"""Host-side analysis of `fibril_sim/camera` runs (landmark projections;
docs/guides/sensors.md, "Exteroceptive sensors: camera, lidar, optical flow")."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis.common import masked_mean, nav_plot, usable
from fibril_mjx.core import registry


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: mean fraction of landmarks visible per delivered frame, RMS motion blur (px)
  and mean rolling-shutter row-time spread (s, latest − earliest visible row) over visible
  landmarks, the delivered frame count."""
  del truth
  ok = usable(sensor)
  vis = sensor['visible'].astype(bool)                       # (W, T, L)
  blur2 = np.sum(np.asarray(sensor['blur_px'], np.float64) ** 2, axis=-1)
  nvis = vis.sum(-1)
  rt = np.asarray(sensor['row_time_s'], np.float64)
  spread = np.where(nvis > 0, np.where(vis, rt, -np.inf).max(-1)
                    - np.where(vis, rt, np.inf).min(-1), np.nan)
  blur_frame = np.where(nvis > 0, np.where(vis, blur2, 0).sum(-1) / np.maximum(nvis, 1), np.nan)
  return {'visible_fraction': masked_mean(vis.mean(-1), ok),
          'blur_rms_px': np.sqrt(masked_mean(blur_frame, ok & (nvis > 0))),
          'row_time_spread_s': masked_mean(spread, ok & (nvis > 0)),
          'delivered': sensor['new_data'].sum(axis=1)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Visible landmarks per frame and the largest blur per frame for a few worlds; the
  visible fraction across worlds."""
  ok = usable(sensor)
  vis = sensor['visible'].astype(bool)
  blur = np.linalg.norm(np.asarray(sensor['blur_px'], np.float64), axis=-1)
  nav_plot(path, time_s, sensor, world,
           [(f'{cid}: visible landmarks per delivered frame', 'count', None, vis.sum(-1), ok),
            (f'{cid}: largest motion blur among visible landmarks', 'px', None,
             np.where(vis, blur, 0).max(-1), ok)],
           ('visible fraction per world', metrics.get('visible_fraction', [])), title)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/camera', metrics=host_metrics, plot=plot)
