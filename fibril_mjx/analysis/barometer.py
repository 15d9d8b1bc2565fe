"""Host-side analysis of `fibril_sim/barometer` runs
(docs/guides/sensors.md, "Navigation sensors, faults and health").

The truth carries the site height, not the ideal pressure (that needs the world's
`altitude_offset_m` and sea level, Params the host analysis does not see). So the pressure is
compared with the ISA pressure at the true height plus a per-world constant height offset
(estimated as the mean pressure altitude − true height): the metric is the error *about* that
constant (noise, drift, throttle / airspeed bias, faults), and the constant is reported on
its own."""

from __future__ import annotations

import numpy as np

from fibril_mjx.analysis import common
from fibril_mjx.analysis.common import fraction, masked_mean, masked_rms, nav_plot, usable
from fibril_mjx.components.sensors.barometer import ISA_EXPONENT, LAPSE_K_M, isa_pressure
from fibril_mjx.core import registry

P0_PA, T0_K = 101325.0, 288.15      # ISA sea level


def pressure_altitude_m(p_pa) -> np.ndarray:
  """ISA pressure altitude (m above the standard sea level) of a pressure, float64."""
  p = np.asarray(p_pa, np.float64)
  return T0_K / LAPSE_K_M * (1.0 - np.power(np.clip(p, 1e-9, None) / P0_PA, 1.0 / ISA_EXPONENT))


def pressure_residual_pa(p_pa, z_m, mask) -> tuple[np.ndarray, np.ndarray]:
  """`(residual (nworld, T) Pa, offset (nworld,) m)`: pressure − ISA(true height + offset),
  with `offset` the per-world mean of pressure altitude − true height over `mask`."""
  p = np.asarray(p_pa, np.float64)
  z = np.asarray(z_m, np.float64)
  offset = masked_mean(pressure_altitude_m(p) - z, mask)
  ref = isa_pressure(z + np.nan_to_num(offset)[:, None], P0_PA, T0_K)
  return p - ref, offset


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world: std of measured pressure − ISA pressure at the true site height (Pa) about the
  constant offset, that offset as a height (m: `altitude_offset_m` + static bias), the usable
  fraction and the delivered count."""
  p = np.asarray(sensor['pressure_pa'], np.float64)
  z = common.at_sample_tick(sensor, np.asarray(truth['site_z_m'], np.float64))
  ok = usable(sensor, p, z)
  res, offset = pressure_residual_pa(p, z, ok)
  new = sensor['new_data'].astype(bool)
  return {'pressure_error_std_pa': masked_rms(res ** 2, ok),
          'pressure_altitude_offset_m': offset,
          'valid_fraction': fraction(ok, new), 'delivered': new.sum(axis=1)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Measured pressure vs ISA at the true height (+ each world's constant offset) for a few
  worlds; the error std across worlds."""
  p = np.asarray(sensor['pressure_pa'], np.float64)
  z_s = common.at_sample_tick(sensor, np.asarray(truth['site_z_m'], np.float64))
  ok = usable(sensor, p, z_s)
  _, offset = pressure_residual_pa(p, z_s, ok)
  z = np.asarray(truth['site_z_m'], np.float64)
  ideal = isa_pressure(z + np.nan_to_num(offset)[:, None], P0_PA, T0_K)
  nav_plot(path, time_s, sensor, world,
           [(f'{cid}: static pressure (truth: ISA at the site height + per-world offset)',
             'p [Pa]', ideal, p, ok)],
           ('pressure error std per world [Pa]', metrics.get('pressure_error_std_pa', [])),
           title)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/barometer', metrics=host_metrics, plot=plot)
