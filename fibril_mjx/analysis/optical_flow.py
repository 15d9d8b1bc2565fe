"""Host-side analysis of `fibril_sim/optical_flow` runs
(docs/guides/sensors.md, "Exteroceptive sensors: camera, lidar, optical flow")."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.analysis.common import fraction, masked_mean, masked_rms, nav_plot, usable
from fibril_mjx.core import registry


def _rates(sensor):
  t = np.asarray(sensor['integration_time_s'], np.float64)
  return np.asarray(sensor['flow_rad'], np.float64) / np.where(t > 0, t, np.nan)[..., None]


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS of the mean flow rate over each frame (flow_rad / integration time) − the
  ideal flow rate at the frame's sample tick (rad/s; an approximation: the truth is not
  averaged over the frame), over frames with quality > 0; mean quality; the fraction of frames
  with quality > 0; the delivered count."""
  rate = _rates(sensor)
  ref = common.at_sample_tick(sensor, np.asarray(truth['flow_rate_rad_s'], np.float64))
  new = sensor['new_data'].astype(bool)
  q = np.asarray(sensor['quality'], np.float64)
  ok = usable(sensor, rate) & (q > 0)
  return {'flow_rate_error_rms_rad_s': masked_rms(np.sum((rate - ref) ** 2, -1) / 2, ok),
          'mean_quality': masked_mean(q, usable(sensor)),
          'tracking_fraction': fraction(q > 0, new), 'delivered': new.sum(axis=1)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Flow rate x, y (frame mean, dots) vs the ideal rate (lines), and the quality."""
  rate = _rates(sensor)
  ref = np.asarray(truth['flow_rate_rad_s'], np.float64)
  q = np.asarray(sensor['quality'], np.float64)
  ok = usable(sensor, rate)
  nav_plot(path, time_s, sensor, world,
           [(f'{cid}: flow rate x (frame mean; quality > 0)', 'rad/s', ref[..., 0],
             rate[..., 0], ok & (q > 0)),
            (f'{cid}: flow rate y', 'rad/s', ref[..., 1], rate[..., 1], ok & (q > 0)),
            (f'{cid}: quality', '0-255', None, q, usable(sensor))],
           ('flow rate error RMS per world [rad/s]',
            metrics.get('flow_rate_error_rms_rad_s', [])), title)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/optical_flow', metrics=host_metrics, plot=plot)
