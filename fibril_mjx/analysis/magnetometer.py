"""Host-side analysis of `fibril_sim/magnetometer` runs
(docs/guides/sensors.md, "Navigation sensors, faults and health").

Every metric is per world over the *usable* samples (`common.usable`: delivered, healthy,
finite). A world with none gets NaN (never an exception); `fibril-mjx run` leaves NaN and
diverged worlds out of its statistics."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.analysis.common import fraction, masked_rms, nav_plot, usable
from fibril_mjx.core import registry


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: RMS of |measured − ideal Earth field in sensor axes| (µT; the error includes
  hard / soft iron, currents, disturbance, bias and noise, SPEC §5) at each sample tick, the
  fraction of delivered samples usable and the delivered count."""
  z = np.asarray(sensor['magnetic_field_ut'], np.float64)
  ref = common.at_sample_tick(sensor, np.asarray(truth['magnetic_field_ut'], np.float64))
  ok = usable(sensor, z, ref)
  new = sensor['new_data'].astype(bool)
  return {'magnetic_field_error_rms_ut': masked_rms(np.sum((z - ref) ** 2, axis=-1), ok),
          'valid_fraction': fraction(ok, new), 'delivered': new.sum(axis=1)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Measured vs ideal field per axis for a few worlds; error RMS across worlds."""
  z = np.asarray(sensor['magnetic_field_ut'], np.float64)
  ok = usable(sensor, z)
  panels = [(f'{cid}: field {a} (sensor axes)', f'B{a} [µT]',
             truth['magnetic_field_ut'][..., i], z[..., i], ok) for i, a in enumerate('xyz')]
  nav_plot(path, time_s, sensor, world, panels,
           ('magnetic field error RMS per world [µT]',
            metrics.get('magnetic_field_error_rms_ut', [])), title)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/magnetometer', metrics=host_metrics, plot=plot)
