#!/usr/bin/env python3
"""The prepared GPU check (run by bench/gpu.sh): world-steps/s, compile time and memory per
world for the AHRS turntable, the IMU + EKF example and the wheeled base at 4096, 16384 and
65536 worlds, with MJX-JAX and (where it runs) MJX-Warp, and the C ratio of the turntable.

Per-world physics (share_physics=False) so the physics is what scales; record=False.
Memory per world: the device's peak bytes in use / worlds where the backend reports it
(GPU), else the state bytes per world. `--quick`: 64 worlds, 5 ticks, CPU-friendly.
"""

import argparse
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / 'bench'))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--quick', action='store_true')
  ap.add_argument('--worlds', type=int, nargs='+', default=None)
  ap.add_argument('--ticks', type=int, default=None)
  ap.add_argument('--budget-s', type=float, default=420.0,
                  help='skip the remaining sizes once this much time is spent')
  a = ap.parse_args(argv)
  from fibril_mjx.batch.worlds import cpu_flags
  cores = cpu_flags()
  import jax
  import fibril_mjx as fm
  from fibril_mjx.batch import worlds
  from fibril_mjx.errors import FibrilError
  from scaling import c_rate
  sizes = a.worlds or ([64] if a.quick else [4096, 16384, 65536])
  ticks = a.ticks or (5 if a.quick else 100)
  t_start = time.perf_counter()
  print(f'jax {jax.__version__} backend {jax.default_backend()} devices {jax.devices()}')
  manifests = ['ahrs_turntable', 'imu_ekf', 'wheeled_base']
  for impl in ('jax', 'warp'):
    try:
      worlds.check_impl(impl)
    except FibrilError as e:
      print(f'impl {impl}: skipped: {e}')
      continue
    for name in manifests:
      try:
        sim = fm.load(REPO / 'manifests' / f'{name}.yaml', impl=impl)
      except FibrilError as e:
        print(f'{impl} {name}: cannot load: {e}')
        continue
      for n in sizes:
        if time.perf_counter() - t_start > a.budget_s:
          print(f'{impl} {name} {n}: skipped (time budget {a.budget_s:.0f} s spent)')
          continue
        p, keys = sim.default_params(n), fm.world_keys(0, n)
        try:
          t0 = time.perf_counter()
          st = jax.block_until_ready(sim.rollout(p, keys, ticks, record=False,
                                                 share_physics=False)[0])
          first = time.perf_counter() - t0
          t0 = time.perf_counter()
          st = jax.block_until_ready(sim.rollout(p, keys, ticks, record=False,
                                                 share_physics=False)[0])
          steady = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 — e.g. out of memory at 65536 worlds
          print(f'{impl} {name} {n}: failed: {type(e).__name__}: {str(e)[:200]}')
          continue
        stats = getattr(jax.devices()[0], 'memory_stats', lambda: None)() or {}
        peak = stats.get('peak_bytes_in_use')
        per = (peak / n if peak else worlds.tree_nbytes((st.data, st.components)) / n)
        print(f'{impl:4s} {name:14s} {n:6d} worlds x {ticks} ticks: '
              f'{n * ticks / steady:12,.0f} world-steps/s  compile {first - steady:6.1f} s  '
              f'{worlds.fmt_bytes(per)}/world ({"device peak" if peak else "state"})',
              flush=True)
  turn = fm.load(REPO / 'manifests' / 'ahrs_turntable.yaml')
  n = sizes[0]
  p, keys = turn.default_params(n), fm.world_keys(0, n)
  jax.block_until_ready(turn.rollout(p, keys, ticks, record=False, share_physics=False)[0])
  t0 = time.perf_counter()
  jax.block_until_ready(turn.rollout(p, keys, ticks, record=False, share_physics=False)[0])
  rate = n * ticks / (time.perf_counter() - t0)
  c = c_rate(turn, n, ticks, 1, cores)
  print(f'c_ratio_turntable_{n}={rate / c:.3f}  (fibril {rate:,.0f} vs MuJoCo C {cores} '
        f'threads + NumPy sensors {c:,.0f} world-steps/s)')
  print(f'total {time.perf_counter() - t_start:.0f} s')
  return 0


if __name__ == '__main__':
  sys.exit(main())
