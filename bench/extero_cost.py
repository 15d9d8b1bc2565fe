#!/usr/bin/env python3
"""Cost of the exteroceptive sensors per beam / per landmark next to the IMU, at 1024 worlds.

Builds one simulation per variant on the example rig (assets/examples/flow_quad.xml: ground,
tarmac strip, four posts, 17 geoms) and times `sim.run(params, state, ticks, record=False)` after
a warm-up call (compile excluded), the variants interleaved over `--repeats` so machine noise
hits all alike; every sensor acquires every physics tick (period = dt) so the numbers are the
cost of one acquisition per tick:

  physics      `components: []` (bare physics, the reference)
  imu          + fibril_sim/imu (icm42688p_nominal)
  lidar_<N>    + fibril_sim/lidar with N beams (noise, resolution, no-return model on)
  camera_<L>   + fibril_sim/camera with L landmarks (rolling shutter, distortion, exposure,
                 occlusion rays)
  flow         + fibril_sim/optical_flow (pmw3901_nominal; one ray per tick)

Printed: median seconds per world-tick of each variant, its increment over `physics`, the
increment per beam / per landmark, and each increment as a ratio of the IMU's increment —
all from this one run. Usage:

  .venv/bin/python bench/extero_cost.py                   # 1024 worlds, 50 ticks, 3 repeats
  .venv/bin/python bench/extero_cost.py --worlds 64 --ticks 10 --repeats 1   # smoke test
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

import yaml
from fibril_mjx.batch.simulation import Options

REPO = pathlib.Path(__file__).resolve().parent.parent
MODEL = 'package://fibril_sim_models/examples/flow_quad.xml'
LANDMARKS = ['lm_post0', 'lm_post1', 'lm_post2', 'lm_post3', 'lm_ground0', 'lm_ground1',
             'lm_ground2', 'lm_ground3']
DT = 0.002


def imu():
  return {'id': 'imu', 'type': 'fibril_sim/imu',
          'config': {'profiles': {'device': 'icm42688p_nominal'}, 'period_s': DT,
                     'gyroscope_sensor': 'imu_gyro', 'accelerometer_sensor': 'imu_accel'}}


def lidar(n):
  rows = 4 if n >= 64 else 1
  return {'id': 'lidar', 'type': 'fibril_sim/lidar', 'config': {
      'site': 'lidar', 'period_s': DT, 'horizontal_samples': n // rows,
      'vertical_samples': rows, 'vertical_min_deg': -15.0, 'vertical_max_deg': 5.0,
      'horizontal_max_deg': 180.0 - 360.0 / (n // rows), 'max_range_m': 12.0,
      'noise_stddev_m': 0.01, 'resolution_m': 0.005, 'dropout_probability': 0.01,
      'reference_range_m': 8.0, 'group_reflectivity': [0.6, 0.3, 0.9, 1, 1, 1]}}


def camera(n):
  lm = (LANDMARKS * (n // len(LANDMARKS) + 1))[:n]
  return {'id': 'cam', 'type': 'fibril_sim/camera', 'config': {
      'site': 'cam', 'landmarks': lm, 'period_s': DT, 'width_px': 640, 'height_px': 480,
      'fx_px': 460.0, 'fy_px': 460.0, 'cx_px': 319.5, 'cy_px': 239.5,
      'distortion': [-0.28, 0.08, 0.0, 0.0, -0.01], 'shutter': 'rolling',
      'readout_time_s': 0.0015, 'exposure_s': 0.0004, 'pixel_noise_stddev_px': 0.3}}


def flow():
  return {'id': 'flow', 'type': 'fibril_sim/optical_flow',
          'config': {'profiles': {'device': 'pmw3901_nominal'}, 'site': 'flow', 'period_s': DT,
                     'exposure_s': 0.001}}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--worlds', type=int, default=None, help='default 1024 (--quick 16)')
  ap.add_argument('--ticks', type=int, default=None, help='default 50 (--quick 5)')
  ap.add_argument('--repeats', type=int, default=None, help='default 3 (--quick 1)')
  ap.add_argument('--beams', type=int, nargs='+', default=None, help='default 64 256 (--quick 8)')
  ap.add_argument('--landmarks', type=int, nargs='+', default=None,
                  help='default 8 32 (--quick 8)')
  ap.add_argument('--quick', action='store_true', help='smoke test: the small sizes above')
  args = ap.parse_args(argv)
  q = args.quick
  args.worlds = args.worlds or (16 if q else 1024)
  args.ticks = args.ticks or (5 if q else 50)
  args.repeats = args.repeats or (1 if q else 3)
  args.beams = args.beams or ([8] if q else [64, 256])
  args.landmarks = args.landmarks or ([8] if q else [8, 32])
  sys.path.insert(0, str(REPO))
  import jax

  import fibril_mjx
  from fibril_mjx.config import paths
  # before JAX computes: one XLA CPU device, the host's ISA, a scan over ticks as one kernel
  fibril_mjx.cpu_flags(1, bitwise=False)

  variants = {'physics': [], 'imu': [imu()]}
  variants.update({f'lidar_{n}': [lidar(n)] for n in args.beams})
  variants.update({f'camera_{n}': [camera(n)] for n in args.landmarks})
  variants['flow'] = [flow()]
  tmp = pathlib.Path(tempfile.mkdtemp(prefix='extero_bench_'))
  del paths
  sims = {}
  for name, comps in variants.items():
    doc = {'fibril_manifest': 1, 'model': MODEL, 'components': comps,
           'actuator_script': [{'actuator': 'lift', 'waveform': 'sine', 'offset': 7.848,
                                             'amplitude': 0.0, 'frequency_hz': 1.0}]}
    path = tmp / f'{name}.yaml'
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    sim = fibril_mjx.load(str(path))
    p = sim.default_params(args.worlds)
    keys = fibril_mjx.world_keys(0, args.worlds)
    t0 = time.perf_counter()
    st = jax.block_until_ready(sim.reset(p, keys))
    st2, _, _ = sim.run(p, st, args.ticks, options=Options(record=False))
    jax.block_until_ready(st2)
    print(f'{name}: built and compiled in {time.perf_counter() - t0:.1f} s', flush=True)
    sims[name] = (sim, p, st)
  times = {name: [] for name in sims}
  order = list(sims)
  for r in range(args.repeats):
    for name in (order if r % 2 == 0 else order[::-1]):
      sim, p, st = sims[name]
      t0 = time.perf_counter()
      out, _, _ = sim.run(p, st, args.ticks, options=Options(record=False))
      jax.block_until_ready(out)
      times[name].append((time.perf_counter() - t0) / (args.ticks * args.worlds))
  med = {k: statistics.median(v) for k, v in times.items()}
  base = med['physics']
  d_imu = med['imu'] - base
  print(f'\n{args.worlds} worlds, {args.ticks} ticks, median of {args.repeats}; backend '
        f'{jax.default_backend()} ({jax.device_count()} devices)')
  print(f'{"variant":<12} {"s/world-tick":>13} {"increment":>11} {"per unit":>11} '
        f'{"incr/IMU":>9} {"unit/IMU":>9}')
  for name, t in med.items():
    inc = t - base
    unit = ''
    per = ratio_u = float('nan')
    if name.startswith('lidar_') or name.startswith('camera_'):
      n = int(name.split('_')[1])
      per = inc / n
      ratio_u = per / d_imu if d_imu > 0 else float('nan')
      unit = 'beam' if name.startswith('lidar_') else 'landmark'
    ratio = inc / d_imu if d_imu > 0 and name != 'physics' else float('nan')
    print(f'{name:<12} {t:13.3e} {inc:11.3e} {per:11.3e} {ratio:9.2f} {ratio_u:9.3f} {unit}')
  print(f'\nimu_increment_s_per_world_tick={d_imu:.3e}')
  for name, t in med.items():
    if name.startswith('lidar_') or name.startswith('camera_'):
      n = int(name.split('_')[1])
      print(f'{name}_per_unit_over_imu={(t - base) / n / d_imu:.4f}' if d_imu > 0 else '')


if __name__ == '__main__':
  main()
