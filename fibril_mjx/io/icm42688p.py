"""A bus boundary for one real IMU: the TDK InvenSense ICM-42688-P's registers, FIFO and INT1
as a driver sees them over SPI, fed with simulated IMU samples (host side, NumPy, no JAX).

docs/guides/interfaces.md, "ICM-42688-P register and FIFO emulation": a message model cannot
expose a driver's SPI burst-read bug or a wrong FIFO-interrupt clear; a register emulation can
(and cannot expose a case resonance). This is that layer for one device, not "full HIL": it has
no electrical timing, no clock drift, no analog front end (the samples come already filtered and
noisy from `fibril_sim/imu`), one register bank.

Pieces:
- `Icm42688pEmulator`: bank-0 register file, FIFO, interrupt status and the INT1 line;
  `advance(t_s)` acquires the samples of `Samples` up to `t_s` at the configured ODR.
- `SpiBus`: the transaction interface a driver uses (`transfer(tx) -> rx`, full duplex, one
  chip-select assertion per call) with `read`, `write`, `burst_read` helpers.
- `ReferenceDriver`: a small driver written against the datasheet register map: probe
  (WHO_AM_I), configure (ODR, full scale, FIFO packet 3, stream or stop-on-full, watermark),
  and `read_fifo` (INT_STATUS + FIFO_COUNT, then a burst of whole packets from FIFO_DATA).
  `max_burst_bytes` models a DMA / transfer-size limit: a limit that is not a multiple of the
  packet size splits packets across bursts — the burst-read boundary error of the tests.

Register addresses and values follow the TDK datasheet DS-000347 as the Zephyr and PX4 drivers
transcribe it. Where each value comes from, and what is assumed where the datasheet text was not
checked (burst auto-increment, a full FIFO, partial reads, interrupt clears, LSB scale):
docs/internals/interfaces.md, "ICM-42688-P register emulation".
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from typing import NamedTuple, Sequence

import numpy as np

from fibril_mjx.mechanisms import fifo

G0 = 9.80665   # m/s² per g (the unit conversions of profiles/evidence/consumer_mems_imu.md)

# Bank 0 register addresses (DS-000347 register map, via Zephyr icm42688_reg.h / PX4).
DEVICE_CONFIG, FIFO_CONFIG = 0x11, 0x16
TEMP_DATA1, ACCEL_DATA_X1, GYRO_DATA_X1 = 0x1D, 0x1F, 0x25
INT_STATUS, FIFO_COUNTH, FIFO_COUNTL, FIFO_DATA = 0x2D, 0x2E, 0x2F, 0x30
SIGNAL_PATH_RESET, INTF_CONFIG0, PWR_MGMT0 = 0x4B, 0x4C, 0x4E
GYRO_CONFIG0, ACCEL_CONFIG0 = 0x4F, 0x50
FIFO_CONFIG1, FIFO_CONFIG2, FIFO_CONFIG3 = 0x5F, 0x60, 0x61
INT_CONFIG0, INT_SOURCE0 = 0x63, 0x65
FIFO_LOST_PKT0, FIFO_LOST_PKT1 = 0x6C, 0x6D
WHO_AM_I, REG_BANK_SEL = 0x75, 0x76
WHO_AM_I_VALUE = 0x47
SPI_READ = 0x80

# INT_STATUS bits
RESET_DONE_INT, DATA_RDY_INT, FIFO_THS_INT, FIFO_FULL_INT = 0x10, 0x08, 0x04, 0x02
# FIFO_CONFIG1 bits
FIFO_RESUME_PARTIAL_RD, FIFO_WM_GT_TH, FIFO_HIRES_EN = 0x40, 0x20, 0x10
FIFO_TMST_FSYNC_EN, FIFO_TEMP_EN, FIFO_GYRO_EN, FIFO_ACCEL_EN = 0x08, 0x04, 0x02, 0x01
# FIFO_CONFIG mode (bits 7:6)
FIFO_MODE_BYPASS, FIFO_MODE_STREAM, FIFO_MODE_STOP_ON_FULL = 0x00, 0x40, 0x80
# SIGNAL_PATH_RESET / DEVICE_CONFIG bits
FIFO_FLUSH, SOFT_RESET_CONFIG = 0x02, 0x01
# FIFO header bits
HEADER_MSG, HEADER_ACCEL, HEADER_GYRO, HEADER_20 = 0x80, 0x40, 0x20, 0x10
HEADER_TIMESTAMP_ODR, HEADER_ODR_ACCEL, HEADER_ODR_GYRO = 0x08, 0x02, 0x01
PACKET_BYTES = {1: 8, 2: 8, 3: 16, 4: 20}
FIFO_SIZE_BYTES = 2048

# GYRO_CONFIG0 / ACCEL_CONFIG0 codes
GYRO_FS_DPS = {0: 2000.0, 1: 1000.0, 2: 500.0, 3: 250.0, 4: 125.0, 5: 62.5, 6: 31.25,
               7: 15.625}
ACCEL_FS_G = {0: 16.0, 1: 8.0, 2: 4.0, 3: 2.0}
ODR_HZ = {1: 32000.0, 2: 16000.0, 3: 8000.0, 4: 4000.0, 5: 2000.0, 6: 1000.0, 7: 200.0,
          8: 100.0, 9: 50.0, 10: 25.0, 11: 12.5, 12: 6.25, 13: 3.125, 14: 1.5625, 15: 500.0}
FIFO_TEMP_LSB_PER_C, TEMP_DATA_LSB_PER_C, TEMP_OFFSET_C = 2.07, 132.48, 25.0

DEFAULTS = {GYRO_CONFIG0: 0x06, ACCEL_CONFIG0: 0x06, INTF_CONFIG0: 0x30, WHO_AM_I: WHO_AM_I_VALUE,
            INT_SOURCE0: 0x10}


class EmulationLimit(Exception):
  """A register setting this emulation does not model (e.g. FIFO_HIRES_EN, banks 1–4)."""


class Samples(NamedTuple):
  """Simulated IMU samples in sensor axes, time-ordered.

  Attributes:
    t_s: `(N,)` acquisition times, s.
    angular_velocity: `(N, 3)` rad/s.
    linear_acceleration: `(N, 3)` m/s² (specific force).
    temperature_c: `(N,)` °C, or None (25 °C).
  """
  t_s: np.ndarray
  angular_velocity: np.ndarray
  linear_acceleration: np.ndarray
  temperature_c: np.ndarray | None = None


def samples_from_trace(arrays, cid: str, row: int, dt_s: float) -> Samples:
  """The delivered samples of IMU component `cid`, world row `row`, of a run's `trace.npz`
  arrays or a flattened rollout trace (`analysis.common.flatten`), stamped `sample_tick · dt`
  (FIFO delivery: every sample of every batch, `fifo.rows`)."""
  prefix = f'sensor/{cid}/'
  group = {k[len(prefix):]: np.asarray(v[row:row + 1]) for k, v in arrays.items()
           if k.startswith(prefix)}
  if fifo.is_batch(group):
    group = fifo.rows(group)
  get = lambda k: group[k][0]   # noqa: E731
  keep = get('new_data') & get('valid')
  temp = get('temperature_c')[keep] if 'temperature_c' in group else None
  return Samples(get('sample_tick')[keep].astype(np.float64) * dt_s,
                 get('angular_velocity')[keep].astype(np.float64),
                 get('linear_acceleration')[keep].astype(np.float64), temp)


def _lsb(v: float, per_unit: float) -> int:
  return int(min(max(round(v * per_unit), -32767), 32767))


def _be16(v: int) -> bytes:
  return int(v & 0xFFFF).to_bytes(2, 'big')


class Icm42688pEmulator:
  """The ICM-42688-P's bank-0 registers, FIFO and INT1, fed with `Samples` (module docstring).

  Time advances only through `advance(t_s)`; a bus transaction happens at the current time.
  Counters for tests: `acquired` (packets produced), `lost` (packets dropped by a full FIFO).
  """

  def __init__(self, samples: Samples, fifo_size_bytes: int = FIFO_SIZE_BYTES):
    self.samples = samples
    self.fifo_size = int(fifo_size_bytes)
    self._reset()

  def _reset(self):
    self.regs = np.zeros(128, np.uint8)
    for a, v in DEFAULTS.items():
      self.regs[a] = v
    self.fifo: deque[bytes] = deque()   # whole packets
    self.partial = 0                    # bytes of the head packet already read
    self.lost = self.acquired = 0
    self.status = RESET_DONE_INT
    self.next_t = None                  # next ODR instant, s
    self.now = getattr(self, 'now', 0.0)
    self._odr_changed = False
    self._latest = (np.zeros(3), np.zeros(3), TEMP_OFFSET_C)

  # -- configuration read back from the registers
  @property
  def odr_hz(self) -> float:
    code = int(self.regs[GYRO_CONFIG0]) & 0x0F
    if code not in ODR_HZ:
      raise EmulationLimit(f'GYRO_CONFIG0 ODR code {code:#x} is reserved')
    return ODR_HZ[code]

  @property
  def gyro_lsb_per_rad_s(self) -> float:
    return 32768.0 / GYRO_FS_DPS[int(self.regs[GYRO_CONFIG0]) >> 5] * 180.0 / math.pi

  @property
  def accel_lsb_per_m_s2(self) -> float:
    return 32768.0 / ACCEL_FS_G[(int(self.regs[ACCEL_CONFIG0]) >> 5) & 0x03] / G0

  def _running(self) -> bool:
    pm = int(self.regs[PWR_MGMT0])
    return (pm & 0x0C) == 0x0C or (pm & 0x03) in (0x02, 0x03)

  def _fifo_bytes(self) -> int:
    return sum(len(p) for p in self.fifo) - self.partial

  # -- acquisition
  def _sample_at(self, t: float):
    s = self.samples
    i = int(np.searchsorted(s.t_s, t + 1e-12, side='right')) - 1
    if i < 0:
      return np.zeros(3), np.zeros(3), TEMP_OFFSET_C
    temp = TEMP_OFFSET_C if s.temperature_c is None else float(s.temperature_c[i])
    return s.angular_velocity[i], s.linear_acceleration[i], temp

  def _packet(self, t: float, gyro, accel, temp_c) -> bytes:
    cfg1 = int(self.regs[FIFO_CONFIG1])
    if cfg1 & FIFO_HIRES_EN:
      raise EmulationLimit('FIFO_HIRES_EN (packet 4, 20-bit data) is not emulated')
    a_on, g_on = bool(cfg1 & FIFO_ACCEL_EN), bool(cfg1 & FIFO_GYRO_EN)
    ga, aa = self.gyro_lsb_per_rad_s, self.accel_lsb_per_m_s2
    acc = b''.join(_be16(_lsb(v, aa)) for v in accel)
    gyr = b''.join(_be16(_lsb(v, ga)) for v in gyro)
    t8 = int(min(max(round((temp_c - TEMP_OFFSET_C) * FIFO_TEMP_LSB_PER_C), -128), 127)) & 0xFF
    odr = (HEADER_ODR_ACCEL | HEADER_ODR_GYRO) if self._odr_changed else 0
    if a_on and g_on:   # packet 3
      header = HEADER_ACCEL | HEADER_GYRO | HEADER_TIMESTAMP_ODR | odr
      ts = int(round(t * 1e6)) & 0xFFFF
      return bytes([header]) + acc + gyr + bytes([t8]) + _be16(ts)
    if a_on:            # packet 1
      return bytes([HEADER_ACCEL | (odr & HEADER_ODR_ACCEL)]) + acc + bytes([t8])
    return bytes([HEADER_GYRO | (odr & HEADER_ODR_GYRO)]) + gyr + bytes([t8])   # packet 2

  def _push(self, pkt: bytes) -> None:
    mode = int(self.regs[FIFO_CONFIG]) & 0xC0
    if mode == FIFO_MODE_BYPASS:
      return
    self.acquired += 1
    if sum(map(len, self.fifo)) + len(pkt) > self.fifo_size:
      self.status |= FIFO_FULL_INT
      if mode != FIFO_MODE_STREAM:   # stop-on-full (10 or 11): the new packet is dropped
        self._lost(1)
        return
      while self.fifo and sum(map(len, self.fifo)) + len(pkt) > self.fifo_size:
        self.fifo.popleft()          # stream: the oldest packets make room
        self.partial = 0
        self._lost(1)
    self.fifo.append(pkt)
    if sum(map(len, self.fifo)) + len(pkt) > self.fifo_size:
      self.status |= FIFO_FULL_INT   # full: the next packet would not fit

  def _lost(self, n: int) -> None:
    self.lost += n
    c = min((int(self.regs[FIFO_LOST_PKT0]) | int(self.regs[FIFO_LOST_PKT1]) << 8) + n, 0xFFFF)
    self.regs[FIFO_LOST_PKT0], self.regs[FIFO_LOST_PKT1] = c & 0xFF, c >> 8

  def _watermark(self) -> None:
    wm = int(self.regs[FIFO_CONFIG2]) | (int(self.regs[FIFO_CONFIG3]) & 0x0F) << 8
    n = self._fifo_bytes()
    gt = bool(int(self.regs[FIFO_CONFIG1]) & FIFO_WM_GT_TH)
    if wm > 0 and (n > wm if gt else n >= wm):
      self.status |= FIFO_THS_INT

  def advance(self, t_s: float) -> None:
    """Acquire every ODR instant in `(now, t_s]` (nothing while both sensors are off)."""
    t_s = float(t_s)
    if not self._running():
      self.now, self.next_t = t_s, None
      return
    period = 1.0 / self.odr_hz
    if self.next_t is None:
      self.next_t = self.now + period
    while self.next_t <= t_s + 1e-12:
      t = self.next_t
      gyro, accel, temp = self._sample_at(t)
      self._latest = (gyro, accel, temp)
      self._push(self._packet(t, gyro, accel, temp))
      self._odr_changed = False
      self.status |= DATA_RDY_INT
      self._watermark()
      self.next_t = t + period
    self.now = t_s

  @property
  def int1(self) -> bool:
    """INT1 level: a status bit that INT_SOURCE0 routes to INT1 is set."""
    return bool(self.status & int(self.regs[INT_SOURCE0]) & 0x1F)

  # -- register access (one byte at a time, as a burst presents them)
  def _read(self, addr: int) -> int:
    if int(self.regs[REG_BANK_SEL]) & 0x07:
      raise EmulationLimit('register banks 1-4 are not emulated')
    if addr == INT_STATUS:
      v, self.status = self.status, 0
      if (int(self.regs[INT_CONFIG0]) & 0x0C) == 0x08:   # FIFO_THS clears on FIFO read only
        self.status = v & FIFO_THS_INT
      return v
    if addr in (FIFO_COUNTH, FIFO_COUNTL):
      n = self._fifo_bytes()
      if int(self.regs[INTF_CONFIG0]) & 0x40:   # FIFO_COUNT_REC: records
        n = len(self.fifo)
      hi, lo = (n >> 8) & 0xFF, n & 0xFF
      if not int(self.regs[INTF_CONFIG0]) & 0x20:   # little-endian count
        hi, lo = lo, hi
      return hi if addr == FIFO_COUNTH else lo
    if addr == FIFO_DATA:
      return self._fifo_byte()
    if TEMP_DATA1 <= addr < GYRO_DATA_X1 + 6:
      gyro, accel, temp = self._latest
      raw = (_be16(_lsb(temp - TEMP_OFFSET_C, TEMP_DATA_LSB_PER_C))
             + b''.join(_be16(_lsb(v, self.accel_lsb_per_m_s2)) for v in accel)
             + b''.join(_be16(_lsb(v, self.gyro_lsb_per_rad_s)) for v in gyro))
      return raw[addr - TEMP_DATA1]
    return int(self.regs[addr])

  def _fifo_byte(self) -> int:
    if int(self.regs[INT_CONFIG0]) & 0x08:   # FIFO_THS_INT_CLEAR 10 / 11: on FIFO data read
      self.status &= ~FIFO_THS_INT
    if not self.fifo:
      return HEADER_MSG
    head = self.fifo[0]
    b = head[self.partial]
    self.partial += 1
    if self.partial == len(head):
      self.fifo.popleft()
      self.partial = 0
    return b

  def end_transaction(self) -> None:
    """Chip select released: a packet read in part is rewound unless FIFO_RESUME_PARTIAL_RD is
    set (an assumption: docs/internals/interfaces.md, "ICM-42688-P")."""
    if self.partial and not int(self.regs[FIFO_CONFIG1]) & FIFO_RESUME_PARTIAL_RD:
      self.partial = 0

  def _write(self, addr: int, v: int) -> None:
    v &= 0xFF
    if addr == REG_BANK_SEL:
      self.regs[addr] = v
      return
    if int(self.regs[REG_BANK_SEL]) & 0x07:
      raise EmulationLimit('register banks 1-4 are not emulated')
    if addr in (WHO_AM_I, INT_STATUS, FIFO_COUNTH, FIFO_COUNTL, FIFO_LOST_PKT0, FIFO_LOST_PKT1):
      return   # read-only
    if addr == DEVICE_CONFIG and v & SOFT_RESET_CONFIG:
      now = self.now
      self._reset()
      self.now = now
      return
    if addr == SIGNAL_PATH_RESET:
      if v & FIFO_FLUSH:
        self.fifo.clear()
        self.partial = 0
      return
    if addr in (GYRO_CONFIG0, ACCEL_CONFIG0) and (int(self.regs[addr]) & 0x0F) != (v & 0x0F):
      self._odr_changed = True
      self.next_t = None
    if addr == PWR_MGMT0:
      self.next_t = None
    if addr == FIFO_DATA:
      return
    self.regs[addr] = v


class SpiBus:
  """SPI transactions with one `Icm42688pEmulator` (mode 3, 8-bit address, bit 7 = read).

  `transfer(tx)` is one chip-select assertion: byte 0 is the address (| 0x80 to read), then
  data. On a read the returned bytes are `[0x00, data...]` (the first is clocked out during the
  address); the address auto-increments and stays at FIFO_DATA once it is reached. On a write
  the data go to consecutive addresses. `transactions` counts calls.
  """

  def __init__(self, device: Icm42688pEmulator):
    self.device, self.transactions = device, 0

  def transfer(self, tx: Sequence[int]) -> bytes:
    self.transactions += 1
    tx = bytes(tx)
    addr, out = tx[0] & 0x7F, bytearray([0])
    try:
      for b in tx[1:]:
        if tx[0] & SPI_READ:
          out.append(self.device._read(addr))
        else:
          self.device._write(addr, b)
          out.append(0)
        if addr != FIFO_DATA:
          addr = (addr + 1) & 0x7F
    finally:
      self.device.end_transaction()
    return bytes(out)

  def read(self, addr: int) -> int:
    return self.transfer([addr | SPI_READ, 0])[1]

  def write(self, addr: int, value: int) -> None:
    self.transfer([addr & 0x7F, value])

  def burst_read(self, addr: int, n: int) -> bytes:
    return self.transfer([addr | SPI_READ] + [0] * n)[1:]


@dataclasses.dataclass
class FifoSample:
  """One decoded FIFO packet: rad/s, m/s², °C, the 16-bit timestamp (µs), the header."""
  angular_velocity: np.ndarray
  linear_acceleration: np.ndarray
  temperature_c: float
  timestamp_us: int
  header: int


@dataclasses.dataclass
class FifoRead:
  """What one `ReferenceDriver.read_fifo` saw."""
  samples: list
  int_status: int
  fifo_count: int
  lost_total: int
  bad_headers: int
  bytes_read: int

  @property
  def overflowed(self) -> bool:
    return bool(self.int_status & FIFO_FULL_INT)


class ReferenceDriver:
  """A minimal driver written against the datasheet register map (module docstring).

  Args:
    spi: the `SpiBus`.
    max_burst_bytes: the largest FIFO_DATA burst one transaction may carry (None: no limit).
      The driver stitches bursts together and parses packets at 16-byte boundaries.
  """

  PACKET = PACKET_BYTES[3]
  HEADER_MASK, HEADER_EXPECTED = 0xFC, HEADER_ACCEL | HEADER_GYRO | HEADER_TIMESTAMP_ODR

  def __init__(self, spi: SpiBus, max_burst_bytes: int | None = None):
    self.spi, self.max_burst = spi, max_burst_bytes
    self.gyro_fs_dps = self.accel_fs_g = None

  def probe(self) -> bool:
    return self.spi.read(WHO_AM_I) == WHO_AM_I_VALUE

  def configure(self, *, odr_hz: float = 1000.0, gyro_fs_dps: float = 2000.0,
                accel_fs_g: float = 16.0, stream: bool = True, watermark_packets: int = 0,
                resume_partial_read: bool = False, fifo_ths_clear_on_data: bool = False) -> None:
    """Soft reset, sensors in low-noise mode, FIFO packet 3 (accel + gyro + temperature +
    timestamp)."""
    def inv(table, value, what):
      codes = {x: k for k, x in table.items()}
      if value not in codes:
        raise ValueError(f'{what} {value!r}: the ICM-42688-P supports {sorted(codes)}')
      return codes[value]
    self.spi.write(DEVICE_CONFIG, SOFT_RESET_CONFIG)
    self.spi.write(REG_BANK_SEL, 0)
    odr = inv(ODR_HZ, odr_hz, 'odr_hz')
    self.spi.write(GYRO_CONFIG0, inv(GYRO_FS_DPS, gyro_fs_dps, 'gyro_fs_dps') << 5 | odr)
    self.spi.write(ACCEL_CONFIG0, inv(ACCEL_FS_G, accel_fs_g, 'accel_fs_g') << 5 | odr)
    self.spi.write(FIFO_CONFIG1, FIFO_ACCEL_EN | FIFO_GYRO_EN | FIFO_TEMP_EN | FIFO_TMST_FSYNC_EN
                   | (FIFO_RESUME_PARTIAL_RD if resume_partial_read else 0))
    wm = watermark_packets * self.PACKET
    self.spi.transfer([FIFO_CONFIG2, wm & 0xFF, (wm >> 8) & 0x0F])   # 0x60, 0x61 in one write
    self.spi.write(INT_CONFIG0, 0x08 if fifo_ths_clear_on_data else 0x00)
    self.spi.write(INT_SOURCE0, FIFO_THS_INT | FIFO_FULL_INT if wm else FIFO_FULL_INT)
    self.spi.write(FIFO_CONFIG, FIFO_MODE_STREAM if stream else FIFO_MODE_STOP_ON_FULL)
    self.spi.write(SIGNAL_PATH_RESET, FIFO_FLUSH)
    self.spi.write(PWR_MGMT0, 0x0F)   # gyro LN (3:2 = 11), accel LN (1:0 = 11)
    self.gyro_fs_dps, self.accel_fs_g = gyro_fs_dps, accel_fs_g

  def read_fifo(self) -> FifoRead:
    """INT_STATUS, FIFO_COUNTH, FIFO_COUNTL in one burst; then whole packets from FIFO_DATA."""
    st, ch, cl = self.spi.burst_read(INT_STATUS, 3)
    count = ch << 8 | cl
    n = count // self.PACKET * self.PACKET
    data = bytearray()
    while len(data) < n:
      k = n - len(data) if self.max_burst is None else min(self.max_burst, n - len(data))
      data += self.spi.burst_read(FIFO_DATA, k)
    lost = self.spi.read(FIFO_LOST_PKT0) | self.spi.read(FIFO_LOST_PKT1) << 8
    g_lsb = 32768.0 / self.gyro_fs_dps * 180.0 / math.pi
    a_lsb = 32768.0 / self.accel_fs_g / G0
    out, bad = [], 0
    for off in range(0, n, self.PACKET):
      p = data[off:off + self.PACKET]
      if p[0] & self.HEADER_MASK != self.HEADER_EXPECTED:
        bad += 1
        continue
      v = np.frombuffer(bytes(p[1:13]), '>i2').astype(np.float64)
      out.append(FifoSample(v[3:6] / g_lsb, v[0:3] / a_lsb,
                            int(np.int8(p[13])) / FIFO_TEMP_LSB_PER_C + TEMP_OFFSET_C,
                            int(p[14]) << 8 | int(p[15]), int(p[0])))
    return FifoRead(out, st, count, lost, bad, len(data))
