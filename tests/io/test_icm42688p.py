"""ICM-42688-P bus emulation: registers, FIFO packets, INT1, and a reference driver over SPI.

The expected bytes and values are built here from the datasheet numbers written out (packet 3:
header 0b0110_10xx, accel X/Y/Z then gyro X/Y/Z as big-endian int16, an int8 temperature
(raw/2.07 + 25 °C), a big-endian 16-bit µs timestamp; 16.4 LSB/dps at ±2000 dps, 2048 LSB/g at
±16 g, 32768/FS in general; a 2048-byte FIFO), in float64 NumPy, not with the emulator's
helpers. The burst-read boundary error and the FIFO overflow are checked as the driver sees
them: its bytes, its decoded samples, its lost-packet count and the timestamp gap.
"""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest

from fibril_mjx.io import icm42688p as icm

REPO = pathlib.Path(__file__).resolve().parents[2]
G0 = 9.80665
DPS = math.pi / 180.0
GYRO_LSB = {2000.0: 16.4, 500.0: 65.5}          # LSB per dps (32768 / FS)
ACCEL_LSB = {16.0: 2048.0, 4.0: 8192.0}         # LSB per g
ODR = 1000.0


def feed(n=2000, seed=0, period=1e-3):
  rng = np.random.default_rng(seed)
  t = np.arange(1, n + 1) * period
  gyro = rng.normal(0.0, 2.0, (n, 3))
  accel = rng.normal(0.0, 20.0, (n, 3)) + np.array([0.0, 0.0, 9.8])
  gyro[5] = [40.0, -40.0, 0.0]     # beyond ±2000 dps: saturates at ±32767
  temp = 30.0 + 0.01 * np.arange(n)
  return icm.Samples(t, gyro, accel, temp)


def ref_counts(s, i, gyro_fs=2000.0, accel_fs=16.0):
  """`(accel int16 (3,), gyro int16 (3,), temp int8)` of sample `i`, from the datasheet numbers."""
  g = np.clip(np.round(s.angular_velocity[i] / DPS * (32768.0 / gyro_fs)), -32767, 32767)
  a = np.clip(np.round(s.linear_acceleration[i] / G0 * (32768.0 / accel_fs)), -32767, 32767)
  tc = int(np.clip(np.round((s.temperature_c[i] - 25.0) * 2.07), -128, 127))
  return a.astype(np.int64), g.astype(np.int64), tc


def ref_packet(s, i, gyro_fs=2000.0, accel_fs=16.0, header=0x68) -> bytes:
  a, g, tc = ref_counts(s, i, gyro_fs, accel_fs)
  ts = int(round(s.t_s[i] * 1e6)) % 65536
  return (bytes([header]) + np.array(list(a) + list(g), '>i2').tobytes()
          + np.int8(tc).tobytes() + ts.to_bytes(2, 'big'))


def rig(samples=None, **cfg):
  dev = icm.Icm42688pEmulator(feed() if samples is None else samples)
  spi = icm.SpiBus(dev)
  drv = icm.ReferenceDriver(spi, max_burst_bytes=cfg.pop('max_burst_bytes', None))
  assert drv.probe()
  drv.configure(**({'odr_hz': ODR} | cfg))
  return dev, spi, drv


def test_sensitivities_match_datasheet_numbers():
  assert 32768.0 / 2000.0 == pytest.approx(GYRO_LSB[2000.0], rel=1e-3)
  assert 32768.0 / 500.0 == pytest.approx(GYRO_LSB[500.0], rel=1e-3)
  assert 32768.0 / 16.0 == ACCEL_LSB[16.0]


def test_registers_a_driver_reads():
  dev = icm.Icm42688pEmulator(feed())
  spi = icm.SpiBus(dev)
  assert spi.read(0x75) == 0x47                    # WHO_AM_I
  assert spi.read(0x4F) == 0x06 and spi.read(0x50) == 0x06   # ±2000 dps / ±16 g, 1 kHz
  assert spi.read(0x4C) == 0x30                    # INTF_CONFIG0: big-endian data and count
  assert spi.read(0x2D) & 0x10                     # RESET_DONE_INT after power-up ...
  assert spi.read(0x2D) == 0                       # ... cleared by the read
  spi.write(0x75, 0x00)                            # read-only
  assert spi.read(0x75) == 0x47
  # a write burst to consecutive registers, read back as a burst
  spi.transfer([0x60, 0x34, 0x02])
  assert spi.burst_read(0x60, 2) == bytes([0x34, 0x02])
  # bypass mode (FIFO_CONFIG 0) and sensors off: nothing is acquired
  dev.advance(0.05)
  assert dev.acquired == 0 and spi.burst_read(0x2E, 2) == b'\x00\x00'


def test_packet3_bytes_and_driver_values():
  s = feed()
  dev, spi, drv = rig(s)
  dev.advance(0.010)   # 10 ODR instants: t = 1 ms ... 10 ms
  st, ch, cl = spi.burst_read(0x2D, 3)
  assert st & 0x08 and (ch << 8 | cl) == 10 * 16   # DATA_RDY; count in bytes, big-endian
  raw = spi.burst_read(0x30, 10 * 16)
  assert raw == b''.join(ref_packet(s, i) for i in range(10))
  assert spi.burst_read(0x30, 2) == b'\x80\x80'    # empty FIFO: header "FIFO empty"
  # the driver decodes the next 40 packets to the float64 reference values
  dev.advance(0.050)
  r = drv.read_fifo()
  assert len(r.samples) == 40 and r.bad_headers == 0 and r.lost_total == 0
  for k, smp in enumerate(r.samples):
    i = 10 + k
    a, g, tc = ref_counts(s, i)
    np.testing.assert_allclose(smp.angular_velocity, g / (32768.0 / 2000.0) * DPS, rtol=0,
                               atol=1e-12)
    np.testing.assert_allclose(smp.linear_acceleration, a / (32768.0 / 16.0) * G0, rtol=0,
                               atol=1e-12)
    assert smp.temperature_c == pytest.approx(tc / 2.07 + 25.0, abs=1e-12)
    assert smp.timestamp_us == int(round(s.t_s[i] * 1e6)) % 65536


def test_full_scale_and_saturation():
  s = feed()
  dev, spi, drv = rig(s, gyro_fs_dps=500.0, accel_fs_g=4.0)
  assert spi.read(0x4F) == (2 << 5 | 6) and spi.read(0x50) == (2 << 5 | 6)
  dev.advance(0.008)
  r = drv.read_fifo()
  for k, smp in enumerate(r.samples):
    a, g, _ = ref_counts(s, k, 500.0, 4.0)
    np.testing.assert_allclose(smp.angular_velocity, g / (32768.0 / 500.0) * DPS, atol=1e-12)
  sat = r.samples[5].angular_velocity / DPS
  assert sat[0] == pytest.approx(32767 / 65.536) and sat[1] == pytest.approx(-32767 / 65.536)


def test_watermark_raises_int1_and_clears():
  dev, spi, drv = rig(watermark_packets=8)
  dev.advance(0.007)
  assert not dev.int1                              # 7 packets < watermark of 8 packets
  dev.advance(0.008)
  assert dev.int1
  r = drv.read_fifo()                              # the INT_STATUS read clears it
  assert r.int_status & 0x04 and len(r.samples) == 8 and not dev.int1


def test_burst_read_boundary_error():
  """A transfer limit of 24 bytes splits every second 16-byte packet. With
  FIFO_RESUME_PARTIAL_RD = 0 (default) the split packet is re-sent from its header on the next
  burst, so the stitched stream is misaligned; with it set, the driver sees every packet."""
  s = feed()
  n_pk = 12
  ref = b''.join(ref_packet(s, i) for i in range(n_pk))
  dev, spi, drv = rig(s, max_burst_bytes=24)
  dev.advance(n_pk * 1e-3)
  seen = []
  orig = spi.burst_read
  spi.burst_read = lambda a, n: seen.append((a, orig(a, n))) or seen[-1][1]
  r = drv.read_fifo()
  data = b''.join(b for a, b in seen if a == 0x30)
  # what the datasheet behaviour predicts: each burst starts at a packet boundary
  want = b''
  j = 0
  while len(want) < n_pk * 16:
    want += ref[16 * j:16 * j + min(24, n_pk * 16 - len(want))]
    j += 1
  assert data == want
  heads = [want[o] for o in range(0, len(want), 16)]
  assert r.bad_headers == sum(1 for h in heads if h & 0xFC != 0x68) > 0
  good = [k for k in range(n_pk) if heads[k] & 0xFC == 0x68]
  # the samples the driver accepted are not the acquired sequence
  wrong = [smp for smp in r.samples
           if not any(np.allclose(smp.angular_velocity,
                                  ref_counts(s, i)[1] / (32768.0 / 2000.0) * DPS)
                      for i in range(n_pk))]
  assert len(r.samples) == len(good) and wrong
  # only 8 of the 12 packets left the FIFO: the rest come on the next read
  assert spi.burst_read(0x2E, 2) == (4 * 16).to_bytes(2, 'big')

  dev, spi, drv = rig(s, max_burst_bytes=24, resume_partial_read=True)
  dev.advance(n_pk * 1e-3)
  r = drv.read_fifo()
  assert r.bad_headers == 0 and len(r.samples) == n_pk
  assert [x.timestamp_us for x in r.samples] == [int(round(s.t_s[i] * 1e6)) for i in range(n_pk)]


@pytest.mark.parametrize('stream', [True, False])
def test_fifo_overflow_as_the_driver_sees_it(stream):
  """A reader late by 300 ms at 1 kHz: 300 packets of 16 bytes into 2048 bytes (128 packets)."""
  s = feed()
  dev, spi, drv = rig(s, stream=stream)
  dev.advance(0.005)
  first = drv.read_fifo()
  assert len(first.samples) == 5 and not first.overflowed
  dev.advance(0.305)
  r = drv.read_fifo()
  capacity = 2048 // 16
  assert r.overflowed and r.fifo_count == capacity * 16 and len(r.samples) == capacity
  assert r.lost_total == 300 - capacity
  ts = [x.timestamp_us for x in r.samples]
  if stream:   # the newest 128 were kept: a gap of 172 samples after the first read
    expect = [int(round(s.t_s[i] * 1e6)) % 65536 for i in range(5 + 300 - capacity, 305)]
    gap_us = (ts[0] - first.samples[-1].timestamp_us) % 65536
  else:        # stop-on-full: the first 128 were kept, the rest dropped
    expect = [int(round(s.t_s[i] * 1e6)) % 65536 for i in range(5, 5 + capacity)]
    dev.advance(0.306)
    gap_us = (drv.read_fifo().samples[0].timestamp_us - ts[-1]) % 65536
  assert ts == expect
  # 173 ms between the samples on either side of the gap, seen through the 16-bit µs stamp:
  # it wraps every 65.536 ms, so the stamps alone under-count the loss (41.9 ms); the
  # FIFO_LOST_PKT count above is what tells the driver 172 packets are missing
  assert gap_us == (300 - capacity + 1) * 1000 % 65536


def test_flush_and_soft_reset():
  dev, spi, drv = rig()
  dev.advance(0.02)
  spi.write(0x4B, 0x02)                            # SIGNAL_PATH_RESET.FIFO_FLUSH
  assert spi.burst_read(0x2E, 2) == b'\x00\x00'
  spi.write(0x11, 0x01)                            # DEVICE_CONFIG.SOFT_RESET_CONFIG
  assert spi.read(0x4E) == 0 and spi.read(0x2D) & 0x10
  with pytest.raises(icm.EmulationLimit):
    spi.write(0x5F, 0x10)                          # FIFO_HIRES_EN: packet 4 not emulated
    spi.write(0x16, 0x40)
    spi.write(0x4E, 0x0F)
    dev.advance(0.03)


# ------------------------------------------------------------------ the example manifest

def test_example_manifest_samples_through_the_bus():
  """`manifests/icm42688p_bus.yaml`: rollout samples (500 Hz, the profile's LSBs) read back by
  the driver equal the float64 re-quantization of the delivered samples."""
  import jax
  from fibril_mjx import load, world_keys
  from fibril_mjx.analysis.common import flatten
  sim = load(REPO / 'manifests' / 'icm42688p_bus.yaml')
  n = 100
  _, trace, _ = sim.rollout(sim.default_params(1), world_keys(0, 1), n)
  flat = flatten(jax.device_get(trace))
  s = icm.samples_from_trace(flat, 'imu', 0, sim.dt)
  assert len(s.t_s) == n + 1
  dev = icm.Icm42688pEmulator(s)
  drv = icm.ReferenceDriver(icm.SpiBus(dev))
  drv.configure(odr_hz=500.0)
  got = []
  for k in range(1, 11):                          # a 20 ms read period
    dev.advance(k * 0.02)
    got += drv.read_fifo().samples
  assert len(got) == 100
  for k, smp in enumerate(got):
    i = k + 1                                     # ODR instants 2 ms, 4 ms, ... = ticks 1, 2, ...
    assert s.t_s[i] == pytest.approx((k + 1) * 0.002)
    g = np.clip(np.round(s.angular_velocity[i] / DPS * 16.384), -32767, 32767) / 16.384 * DPS
    a = np.clip(np.round(s.linear_acceleration[i] / G0 * 2048.0), -32767, 32767) / 2048.0 * G0
    np.testing.assert_allclose(smp.angular_velocity, g, atol=1e-12)
    np.testing.assert_allclose(smp.linear_acceleration, a, atol=1e-12)
  # the profile's LSB (evidence: (π/180)/16.4 rad/s) is the register LSB at ±2000 dps to 0.1 %:
  # re-quantization moves a sample by at most one register LSB
  step = np.abs(np.array([x.angular_velocity for x in got]) - s.angular_velocity[1:101])
  assert step.max() <= DPS / 16.384 + 1e-9


def test_driver_rejects_an_odr_the_device_lacks():
  dev = icm.Icm42688pEmulator(feed())
  drv = icm.ReferenceDriver(icm.SpiBus(dev))
  with pytest.raises(ValueError, match='odr_hz 300.0: the ICM-42688-P supports'):
    drv.configure(odr_hz=300.0)
