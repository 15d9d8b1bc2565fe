"""Host-side analysis of `fibril_sim/rangefinder` runs (SPEC §5, "Lidar, optical flow i
kamera")."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.analysis.common import fraction, masked_rms, nav_plot, usable
from fibril_mjx.core import registry


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS of measured − MuJoCo distance (m) over in-range samples where the ray hit
  (truth ≥ 0), the fraction of delivered samples in range (a valid measurement) and the
  delivered count."""
  z = np.asarray(sensor['distance_m'], np.float64)
  ref = common.at_sample_tick(sensor, np.asarray(truth['distance_m'], np.float64))
  new = sensor['new_data'].astype(bool)
  valid = usable(sensor, z) & sensor['in_range'].astype(bool)
  ok = valid & np.isfinite(ref) & (ref >= 0)
  return {'distance_error_rms_m': masked_rms((z - ref) ** 2, ok),
          'valid_fraction': fraction(valid, new), 'delivered': new.sum(axis=1)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Measured (in range) vs MuJoCo distance for a few worlds; error RMS across worlds."""
  z = np.asarray(sensor['distance_m'], np.float64)
  ref = np.asarray(truth['distance_m'], np.float64)
  ok = usable(sensor, z) & sensor['in_range'].astype(bool)
  nav_plot(path, time_s, sensor, world,
           [(f'{cid}: distance (in-range samples; truth −1 = no hit not drawn)', 'd [m]',
             np.where(ref >= 0, ref, np.nan), z, ok)],
           ('distance error RMS per world [m]', metrics.get('distance_error_rms_m', [])), title)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/rangefinder', metrics=host_metrics, plot=plot)
