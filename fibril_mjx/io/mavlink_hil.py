"""The HIL packet boundary: delivered samples as MAVLink `HIL_SENSOR` and `HIL_GPS` messages
(packed by `pymavlink`, MAVLink 2 common set), what a flight controller in HIL mode receives.

One `HIL_SENSOR` per tick on which a selected IMU, magnetometer, barometer or airspeed
component delivered a sample (`new_data`; `fields_updated` has the bits of those sources, the
others hold their last value), one `HIL_GPS` per delivered GNSS sample. `time_usec` is the
sample stamp (`sample_tick · dt`), the `.tlog` time the arrival (`arrival_tick · dt`).
`body_axes='flu'` (default) maps site axes x forward, y left, z up to MAVLink's FRD body by
`(x, −y, −z)`; `'frd'` passes them through. Each field's unit and source, the stamp of a
message with several sources, and health: docs/internals/interfaces.md, "MAVLink HIL".
"""

from __future__ import annotations

import math
import struct
from typing import Iterable, Iterator, Mapping, NamedTuple

import numpy as np

from fibril_mjx.core import registry
from fibril_mjx.errors import FibrilError
from fibril_mjx.io import mcap_export
from fibril_mjx.io.mcap_export import read_run
from fibril_mjx.io import outdir
from fibril_mjx.mechanisms import fifo

IMU, MAG, BARO, AIRSPEED, GPS = 'imu', 'mag', 'baro', 'airspeed', 'gps'
# The sample fields that identify each source (as `mcap_export` maps fields to messages).
KEY_FIELDS = {IMU: ('angular_velocity', 'linear_acceleration'), MAG: ('magnetic_field_ut',),
              BARO: ('pressure_pa',), AIRSPEED: ('differential_pressure_pa',),
              GPS: ('latitude_e7', 'longitude_e7', 'height_m', 'velocity_enu_m_s')}
DELIVERY_FIELDS = ('new_data', 'sequence', 'sample_tick', 'arrival_tick', 'valid')

# International Standard Atmosphere, troposphere (ISO 2533): p0, T0, lapse rate, g0, R*/M.
ISA_P0_PA, ISA_T0_K, ISA_LAPSE_K_M = 101325.0, 288.15, 0.0065
ISA_G0, ISA_R_AIR = 9.80665, 287.05287
UINT16_MAX = 0xFFFF


def _mavlink():
  from pymavlink.dialects.v20 import common
  return common


def updated_bits(source: str) -> int:
  """The `HIL_SENSOR_UPDATED_FLAGS` bits a source sets when it delivered a sample."""
  m = _mavlink()
  return {IMU: (m.HIL_SENSOR_UPDATED_XACC | m.HIL_SENSOR_UPDATED_YACC
                | m.HIL_SENSOR_UPDATED_ZACC | m.HIL_SENSOR_UPDATED_XGYRO
                | m.HIL_SENSOR_UPDATED_YGYRO | m.HIL_SENSOR_UPDATED_ZGYRO),
          MAG: m.HIL_SENSOR_UPDATED_XMAG | m.HIL_SENSOR_UPDATED_YMAG | m.HIL_SENSOR_UPDATED_ZMAG,
          BARO: (m.HIL_SENSOR_UPDATED_ABS_PRESSURE | m.HIL_SENSOR_UPDATED_PRESSURE_ALT
                 | m.HIL_SENSOR_UPDATED_TEMPERATURE),
          AIRSPEED: m.HIL_SENSOR_UPDATED_DIFF_PRESSURE}[source]


def pressure_altitude_m(pressure_pa: float) -> float:
  """ISA (troposphere) altitude of a static pressure: `T0/L · (1 − (p/p0)^(R·L/g0))`, m."""
  return ISA_T0_K / ISA_LAPSE_K_M * (
      1.0 - (float(pressure_pa) / ISA_P0_PA) ** (ISA_R_AIR * ISA_LAPSE_K_M / ISA_G0))


def _axes(v, body_axes: str) -> tuple[float, float, float]:
  x, y, z = (float(c) for c in v)
  return (x, -y, -z) if body_axes == 'flu' else (x, y, z)


def _int(v: float, lo: int, hi: int, invalid: int = 0) -> int:
  """Round to an integer field's range (`invalid` for a non-finite value)."""
  if not math.isfinite(v):
    return invalid
  return int(min(max(round(v), lo), hi))


def select_sources(fields_of: Mapping[str, Iterable[str]], types: Mapping[str, str] | None = None,
                   chosen: Mapping[str, str | None] | None = None, *, where: str = '<run>'
                   ) -> dict[str, str]:
  """`{source: component id}` for the sources present.

  Args:
    fields_of: `{component id: sample field names}` in manifest order.
    types: `{component id: component type}`: when several components have a source's fields
      (an AHRS also has rates), the first whose type's `mavlink` part is that source.
    chosen: explicit `{source: component id}` (e.g. `{'mag': 'mag_left'}`); `''` leaves a
      source out.
  """
  types, chosen = types or {}, chosen or {}
  out = {}
  for source, keys in KEY_FIELDS.items():
    want = chosen.get(source)
    if want == '':
      continue
    if want is not None:
      if want not in fields_of:
        raise FibrilError(f'{where}: --{source} {want}: no such component; components: '
                          f'{", ".join(fields_of)}')
      if not set(keys) <= set(fields_of[want]):
        raise FibrilError(f'{where}: --{source} {want}: its samples lack '
                          f'{", ".join(sorted(set(keys) - set(fields_of[want])))}')
      out[source] = want
      continue
    match = [cid for cid, f in fields_of.items() if set(keys) <= set(f)]
    typed = [cid for cid in match if registry.get(types.get(cid)).mavlink == source]
    if typed or match:
      out[source] = (typed or match)[0]
  if not out:
    raise FibrilError(f'{where}: no IMU, magnetometer, barometer, airspeed or GNSS component '
                      'to export as MAVLink HIL messages')
  return out


class Packet(NamedTuple):
  """One packed message: `log_time_us` (arrival), the pymavlink message object, its bytes."""
  log_time_us: int
  message: object
  buf: bytes


class HilEncoder:
  """Host-side, stateful: per tick, the delivered samples of one world → MAVLink packets.

  Feed it every tick in order (`encode_tick`), from a run directory's trace
  (`export_tlog`), a recorded rollout (`stream_rollout`) or a step loop (`push`).
  """

  def __init__(self, sources: Mapping[str, str], dt_s: float, *, body_axes: str = 'flu',
               geoid_separation_m: float = 0.0, system_id: int = 1, component_id: int = 1,
               sensor_id: int = 0):
    """
    Args:
      sources: `{source: component id}` (`select_sources`).
      dt_s: the physics step (stamps are ticks · dt).
      body_axes: `'flu'` or `'frd'` (module docstring).
      geoid_separation_m: geoid height above the WGS-84 ellipsoid at the site (HIL_GPS.alt
        is MSL); 0 by default, i.e. the ellipsoid taken for MSL.
      system_id, component_id: the MAVLink sender.
      sensor_id: `HIL_SENSOR.id` / `HIL_GPS.id`.
    """
    if body_axes not in ('flu', 'frd'):
      raise FibrilError(f'--body-axes {body_axes!r}: expected flu or frd')
    self.sources, self.dt_us = dict(sources), float(dt_s) * 1e6
    self.body_axes, self.geoid = body_axes, float(geoid_separation_m)
    self.sensor_id = int(sensor_id)
    m = _mavlink()
    self._m = m
    self._out = _Sink()
    self._mav = m.MAVLink(self._out, srcSystem=int(system_id), srcComponent=int(component_id))
    self._mav.robust_parsing = True
    self._hold = {'acc': (0.0, 0.0, 0.0), 'gyro': (0.0, 0.0, 0.0), 'mag': (0.0, 0.0, 0.0),
                  'abs': 0.0, 'diff': 0.0, 'alt': 0.0, 'temp': 0.0}

  def _us(self, tick) -> int:
    return int(round(int(tick) * self.dt_us))

  def _pack(self, log_us: int, msg) -> Packet:
    self._mav.send(msg)
    return Packet(log_us, msg, self._out.take())

  def encode_tick(self, tick: int, samples: Mapping[str, Mapping[str, np.ndarray]]
                  ) -> list[Packet]:
    """Packets for one tick.

    Args:
      tick: the tick index (the `.tlog` time when a component reports no `arrival_tick`).
      samples: `{component id: {field: value at this tick}}` with the delivery fields
        (`new_data`, `valid`, `sample_tick`, `arrival_tick`) for at least the selected sources.

    Returns:
      `[HIL_SENSOR packet]` and/or `[HIL_GPS packet]`, possibly empty.
    """
    new = {}
    for source, cid in self.sources.items():
      f = samples[cid]
      if bool(f['new_data']) and bool(f['valid']):
        new[source] = f
    out = []
    sensor_sources = [s for s in (IMU, MAG, BARO, AIRSPEED) if s in new]
    if sensor_sources:
      h, bits = self._hold, 0
      for s in sensor_sources:
        f, bits = new[s], bits | updated_bits(s)
        if s == IMU:
          h['acc'] = _axes(f['linear_acceleration'], self.body_axes)
          h['gyro'] = _axes(f['angular_velocity'], self.body_axes)
        elif s == MAG:
          h['mag'] = tuple(c / 100.0 for c in _axes(f['magnetic_field_ut'], self.body_axes))
        elif s == BARO:
          p = float(f['pressure_pa'])
          h['abs'], h['alt'] = p / 100.0, pressure_altitude_m(p)
          h['temp'] = float(f['temperature_k']) - 273.15 if 'temperature_k' in f else 0.0
        else:
          h['diff'] = float(f['differential_pressure_pa']) / 100.0
      stamp_src = IMU if IMU in new else max(sensor_sources,
                                             key=lambda s: int(new[s]['sample_tick']))
      arrival = max(int(new[s].get('arrival_tick', tick)) for s in sensor_sources)
      msg = self._m.MAVLink_hil_sensor_message(
          self._us(new[stamp_src]['sample_tick']), *h['acc'], *h['gyro'], *h['mag'], h['abs'],
          h['diff'], h['alt'], h['temp'], bits, self.sensor_id)
      out.append(self._pack(self._us(arrival), msg))
    if GPS in new:
      f = new[GPS]
      ve, vn, vu = (float(c) for c in f['velocity_enu_m_s'])
      speed = math.hypot(vn, ve) * 100.0
      vel = _int(speed, 0, UINT16_MAX - 1, UINT16_MAX)
      cog = UINT16_MAX
      if vel not in (0, UINT16_MAX):
        cog = int(round(math.degrees(math.atan2(ve, vn)) * 100.0)) % 36000
      dop = lambda k: _int(float(f[k]) * 100.0, 0, UINT16_MAX - 1, UINT16_MAX) if k in f \
          else UINT16_MAX   # noqa: E731
      msg = self._m.MAVLink_hil_gps_message(
          self._us(f['sample_tick']), int(f['fix_type']) if 'fix_type' in f else 3,
          int(f['latitude_e7']), int(f['longitude_e7']),
          _int((float(f['height_m']) - self.geoid) * 1000.0, -2**31, 2**31 - 1),
          dop('hdop'), dop('vdop'), vel,
          _int(vn * 100.0, -32768, 32767), _int(ve * 100.0, -32768, 32767),
          _int(-vu * 100.0, -32768, 32767), cog,
          _int(float(f['satellites']), 0, 254, 255) if 'satellites' in f else 255,
          self.sensor_id, 0)
      out.append(self._pack(self._us(f.get('arrival_tick', tick)), msg))
    return out

  def push(self, outputs: Mapping, tick: int, world: int = 0) -> list[Packet]:
    """Packets of one tick from `Simulation.outputs(state)` (leaves `(nworld, ...)`) of world
    row `world` — for a step loop that streams as it runs."""
    return self.encode_tick(tick, _world_row(outputs['sensor'], self.sources.values(), world))


class _Sink:
  """The file object pymavlink writes packed bytes to."""

  def __init__(self):
    self.buf = bytearray()

  def write(self, b):
    self.buf += b

  def take(self) -> bytes:
    b, self.buf = bytes(self.buf), bytearray()
    return b


def _world_row(sensor: Mapping, cids, world: int, tick: int | None = None) -> dict:
  """`{cid: {field: value}}` of one world (and one tick when the leaves have a time axis)."""
  out = {}
  for cid in cids:
    d = sensor[cid]
    fields = dict(d.sample._asdict())
    fields.update({k: getattr(d, k) for k in DELIVERY_FIELDS})
    out[cid] = {k: (np.asarray(v)[world] if tick is None else np.asarray(v)[world, tick])
                for k, v in fields.items()}
  return out


def _by_component(arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
  """`{'sensor/imu/x': a}` → `{'imu': {'x': a}}`."""
  out: dict[str, dict[str, np.ndarray]] = {}
  for key, v in arrays.items():
    parts = key.split('/')
    if len(parts) == 3 and parts[0] == 'sensor':
      out.setdefault(parts[1], {})[parts[2]] = v
  # FIFO delivery: each sample at its acquisition tick, sent at its batch's arrival
  return {cid: fifo.by_acquisition(f) if fifo.is_batch(f) else f for cid, f in out.items()}


def _stream_rows(sensor: dict, encoder: HilEncoder, row: int, n_ticks: int) -> Iterator[Packet]:
  cids = list(encoder.sources.values())
  cols = {cid: {k: np.asarray(v[row]) for k, v in sensor[cid].items()} for cid in cids}
  delivered = np.zeros(n_ticks, bool)
  for cid in cids:
    delivered |= cols[cid]['new_data'] & cols[cid]['valid']
  for t in np.flatnonzero(delivered):
    yield from encoder.encode_tick(int(t), {cid: {k: v[t] for k, v in f.items()}
                                            for cid, f in cols.items()})


def stream_rollout(sim, trace: Mapping, *, world: int = 0, chosen: Mapping | None = None,
                   **encoder_kw) -> Iterator[Packet]:
  """The packets of one world of `Simulation.rollout`'s trace, in tick order.

  Args:
    sim: the `Simulation` (component types, `dt`).
    trace: `rollout(...)[1]` (leaves `(nworld, n_ticks + 1, ...)`).
    world: row of the trace.
    chosen: explicit `{source: component id}` (`select_sources`).
    encoder_kw: `HilEncoder` options.
  """
  sensor = trace['sensor']
  fields_of = {cid: list(d.sample._fields) + list(DELIVERY_FIELDS) for cid, d in sensor.items()}
  types = {cid: c.type for cid, c in sim.components.items()}
  sources = select_sources(fields_of, types, chosen, where=str(sim.manifest.path))
  enc = HilEncoder(sources, sim.dt, **encoder_kw)
  flat = {cid: {**{k: np.asarray(v) for k, v in d.sample._asdict().items()},
                **{k: np.asarray(getattr(d, k))
                   for k in (fifo.BOOK if isinstance(d, fifo.Batch) else DELIVERY_FIELDS)}}
          for cid, d in sensor.items() if cid in sources.values()}
  flat = {cid: fifo.by_acquisition(f) if fifo.is_batch(f) else f for cid, f in flat.items()}
  n_ticks = next(iter(flat.values()))['new_data'].shape[1]
  yield from _stream_rows(flat, enc, world, n_ticks)


def run_packets(run_dir, *, world: int | None = None, chosen: Mapping | None = None,
                **encoder_kw) -> tuple[dict[str, str], Iterator[Packet]]:
  """`(sources, packets)` of one traced world of a run directory (default: the first)."""
  arrays, meta = read_run(run_dir)
  traced = [int(w) for w in arrays['world_index']]
  if world is None:
    world = traced[0]
  if world not in traced:
    raise FibrilError(f'{run_dir}: world {world} is not in trace.npz; traced worlds: '
                      f'{", ".join(map(str, traced))}')
  sensor = _by_component(arrays)
  types = {cid: c.get('type', '') for cid, c in (meta.get('components') or {}).items()}
  sources = select_sources({cid: list(f) for cid, f in sensor.items()}, types, chosen,
                           where=str(run_dir))
  enc = HilEncoder(sources, float(meta['dt_s']), **encoder_kw)
  return sources, _stream_rows(sensor, enc, traced.index(world), arrays['time_s'].shape[0])


def export_tlog(run_dir, out, *, world: int | None = None, chosen: Mapping | None = None,
                overwrite: bool = False, **encoder_kw) -> dict:
  """Writes one world of a run directory as a MAVLink telemetry log (`.tlog`).

  A `.tlog` is what MAVProxy / QGroundControl write and `pymavlink.mavutil` reads: each packet
  preceded by its time as a big-endian uint64 of microseconds (here the arrival time,
  simulation time since 0).

  Returns:
    `{'sources': {source: component id}, 'HIL_SENSOR': count, 'HIL_GPS': count}`.
  """
  out = outdir.claim_file(out, overwrite=overwrite)
  sources, packets = run_packets(run_dir, world=world, chosen=chosen, **encoder_kw)
  outdir.check_space(out, mcap_export.export_bytes(run_dir, [world]), 'the .tlog file')
  counts = {'HIL_SENSOR': 0, 'HIL_GPS': 0}
  with outdir.write_errors(out), outdir.staged_file(out) as tmp, open(tmp, 'wb') as fh:
    for p in packets:
      fh.write(struct.pack('>Q', p.log_time_us) + p.buf)
      counts[p.message.get_type()] += 1
  return {'sources': sources, **counts}


# The HIL source each built-in type feeds (its `mavlink` part: preferred for that source).
registry.register('fibril_sim/imu', mavlink=IMU)
registry.register('fibril_sim/magnetometer', mavlink=MAG)
registry.register('fibril_sim/barometer', mavlink=BARO)
registry.register('fibril_sim/airspeed', mavlink=AIRSPEED)
registry.register('fibril_sim/gnss', mavlink=GPS)
