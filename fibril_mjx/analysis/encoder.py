"""Host-side analysis of `fibril_sim/encoder` runs: per-world metrics and the plot."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.analysis.common import masked_rms, nav_plot, usable
from fibril_mjx.core import registry


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS of delivered − true joint position at each sample's tick (offset, noise,
  resolution; rad or m) over usable samples, and the delivered count."""
  z = np.asarray(sensor['position'], np.float64)
  ref = common.at_sample_tick(sensor, np.asarray(truth['position'], np.float64))
  ok = usable(sensor, z) & np.isfinite(ref)
  return {'position_error_rms': masked_rms((z - ref) ** 2, ok),
          'delivered': sensor['new_data'].astype(bool).sum(axis=1)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Delivered vs true joint position for a few worlds; error RMS across worlds."""
  z = np.asarray(sensor['position'], np.float64)
  nav_plot(path, time_s, sensor, world,
           [(f'{cid}: joint position', 'position', np.asarray(truth['position'], np.float64),
             z, usable(sensor, z))],
           ('position error RMS per world', metrics.get('position_error_rms', [])), title)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/encoder', metrics=host_metrics, plot=plot)
