"""Host-side analysis of `fibril_sim/gnss` runs
(docs/guides/sensors.md, "Navigation sensors, faults and health").

The reported geodetic position is converted back to the world ENU frame on the host
(`fibril_mjx.mechanisms.geodesy.geodetic_e7_to_enu`) and compared with the true antenna position at each
solution's sample tick. The geodetic origin is static config, not in the trace: it is read
from the receiver's initial held output (tick 0, before any solution is delivered), which is
the origin itself (1e-7° ≈ 1 cm rounding)."""

from __future__ import annotations

import numpy as np

from fibril_mjx.mechanisms import geodesy
from fibril_mjx.analysis import common
from fibril_mjx.analysis.common import fraction, masked_rms, nav_plot, usable
from fibril_mjx.core import registry

FIX_3D = 3


def origin_of(sensor: dict) -> geodesy.Origin | None:
  """The geodetic origin from the held output at tick 0 of a world with nothing delivered
  yet (None when every world delivered at tick 0)."""
  idle = np.nonzero(~sensor['new_data'][:, 0].astype(bool))[0]
  if not idle.size:
    return None
  w = int(idle[0])
  return geodesy.Origin.build(float(sensor['latitude_e7'][w, 0]) / geodesy.E7,
                              float(sensor['longitude_e7'][w, 0]) / geodesy.E7,
                              float(sensor['height_m'][w, 0]))


def reported_enu(sensor: dict) -> np.ndarray:
  """`(nworld, T, 3)` reported position in the world ENU frame, m (NaN without an origin)."""
  lat = np.asarray(sensor['latitude_e7'], np.float64)
  o = origin_of(sensor)
  if o is None:
    return np.full(lat.shape + (3,), np.nan)
  return geodesy.geodetic_e7_to_enu(o, lat, np.asarray(sensor['longitude_e7'], np.float64),
                                    np.asarray(sensor['height_m'], np.float64))


def errors(sensor: dict, truth: dict):
  """`(position error (nworld, T, 3), velocity error (nworld, T, 3), fixed usable mask)`:
  reported − true antenna at each sample tick, over delivered healthy 3D fixes."""
  pos = reported_enu(sensor)
  e = pos - common.at_sample_tick(sensor, np.asarray(truth['antenna_position_m'], np.float64))
  ev = np.asarray(sensor['velocity_enu_m_s'], np.float64) - common.at_sample_tick(
      sensor, np.asarray(truth['antenna_velocity_m_s'], np.float64))
  ok = usable(sensor, e, ev) & (sensor['fix_type'] == FIX_3D)
  return e, ev, ok


def host_metrics(sensor: dict, truth: dict) -> dict:
  """Per world over delivered healthy 3D fixes: horizontal (√(e_E² + e_N²)) and vertical
  position error RMS (m), velocity error RMS (|e_v|, m/s), the fraction of east / north error
  components within the reported `horizontal_accuracy_m` (≈ 0.68 when the reported 1σ is
  right); the fraction of delivered solutions with a 3D fix and the delivered count."""
  e, ev, ok = errors(sensor, truth)
  new = sensor['new_data'].astype(bool)
  acc = np.asarray(sensor['horizontal_accuracy_m'], np.float64)[..., None]
  inside = np.sum(np.abs(np.nan_to_num(e[..., :2], nan=np.inf)) <= acc, axis=-1)
  n = ok.sum(axis=1)
  return {'horizontal_error_rms_m': masked_rms(np.sum(e[..., :2] ** 2, axis=-1), ok),
          'vertical_error_rms_m': masked_rms(e[..., 2] ** 2, ok),
          'velocity_error_rms_m_s': masked_rms(np.sum(ev ** 2, axis=-1), ok),
          'horizontal_within_1sigma_fraction': np.where(
              n > 0, np.sum(np.where(ok, inside, 0), axis=1) / np.maximum(2 * n, 1), np.nan),
          'fix_fraction': fraction(new & (sensor['fix_type'] == FIX_3D), new),
          'delivered': new.sum(axis=1)}


def plot(path, cid, time_s, sensor, truth, world, metrics, title):
  """Reported (3D fixes) vs true antenna position east / north / up for a few worlds; the
  horizontal error RMS across worlds."""
  pos = reported_enu(sensor)
  ok = usable(sensor, pos) & (sensor['fix_type'] == FIX_3D)
  true = np.asarray(truth['antenna_position_m'], np.float64)
  panels = [(f'{cid}: antenna {name} (3D fixes)', f'{name} [m]', true[..., i], pos[..., i], ok)
            for i, name in enumerate(('east', 'north', 'up'))]
  nav_plot(path, time_s, sensor, world, panels,
           ('horizontal position error RMS per world [m]',
            metrics.get('horizontal_error_rms_m', [])), title)


# This type's host-side parts (the workflows find this module by walking analysis/).
registry.register('fibril_sim/gnss', metrics=host_metrics, plot=plot)
