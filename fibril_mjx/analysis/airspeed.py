"""Host-side analysis of `fibril_sim/airspeed` runs
(docs/guides/sensors.md, "Navigation sensors, faults and health")."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.analysis.common import fraction, masked_mean, masked_rms, nav_plot, usable
from fibril_mjx.core import registry


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS and mean of measured − ideal lagged differential pressure (Pa; truth
  `lagged_pressure_pa`: ½ρu|u| through the probe lag, before offset, noise, saturation and
  quantization) at each sample tick, the usable fraction and the delivered count."""
  z = np.asarray(sensor['differential_pressure_pa'], np.float64)
  ref = common.at_sample_tick(sensor, np.asarray(truth['lagged_pressure_pa'], np.float64))
  ok = usable(sensor, z, ref)
  new = sensor['new_data'].astype(bool)
  return {'differential_pressure_error_rms_pa': masked_rms((z - ref) ** 2, ok),
          'differential_pressure_error_mean_pa': masked_mean(z - ref, ok),
          'valid_fraction': fraction(ok, new), 'delivered': new.sum(axis=1)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Measured vs ideal differential pressure for a few worlds; error RMS across worlds."""
  z = np.asarray(sensor['differential_pressure_pa'], np.float64)
  nav_plot(path, time_s, sensor, world,
           [(f'{cid}: differential pressure', 'q [Pa]', truth['lagged_pressure_pa'], z,
             usable(sensor, z))],
           ('differential pressure error RMS per world [Pa]',
            metrics.get('differential_pressure_error_rms_pa', [])), title)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/airspeed', metrics=host_metrics, plot=plot)
