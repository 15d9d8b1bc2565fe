#!/usr/bin/env python3
"""Where a program's LAPACK-safe sub-batches go: around the whole run, or around each physics
call only.

jaxlib splits a batched LAPACK call over its thread pool from 200,000 FLOP on, and two such
calls at once deadlock (`bench/lapack_hang_repro.py`). `fibril_mjx.batch.lapack` keeps every
call below that by running a program's worlds in sub-batches of `k`: a `lax.map` over the
whole block (`fibril_mjx.batch.worlds.program`), so a run's scan over ticks runs once per
sub-batch. On the MJX humanoid (a Cholesky of nv = 27, 6,561 FLOP per world) `k` is 30, so
every kernel of the device components then works on 30 worlds, and what they cost is mostly
their launches (`bench/kernels.py` counts them per sub-batch).

This bench measures the other place for the sub-batches, side by side in one process on one
pinned core:

  block     `Options(sub_batch=k)`: the program per sub-batch of k worlds (what fibril_mjx
            does);
  per-call  `Options(sub_batch=n)`, one program over all n = m·k worlds, with MJX's
            `forward` and `integrate` (`fibril_mjx.physics.mjx`) replaced by a form whose
            vmap is a `lax.map` over sub-batches of k (`jax.custom_batching.custom_vmap`):
            the components step every world at once, the physics stays below the split.

It prints each layout's µs per world-step of `sim.run` (median of interleaved repetitions),
the first calls of `reset` and `run` (compile), whether both layouts end in bitwise the same
state, and `physics_sub_batch_ratio=` (per-call µs per world-step / block). A ratio above 1
means the per-tick `lax.map` over the physics costs more than the component launches it
saves: each sub-batch then slices and writes back every leaf of `mjx.Data` (84 on the
humanoid) twice per tick.

Usage:
  .venv/bin/python bench/physics_sub_batch.py                 # the humanoid, 34 sub-batches of 30
  .venv/bin/python bench/physics_sub_batch.py --manifest bench/four_motor_rig.yaml --sub-batch 32
  .venv/bin/python bench/physics_sub_batch.py --quick         # smoke test
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--manifest', default=str(REPO / 'bench' / 'humanoid_motors.yaml'))
  ap.add_argument('--sub-batch', type=int, default=None,
                  help='worlds per sub-batch (default: the LAPACK-safe size, '
                       'Simulation.sub_batch_cap; 8 when the model has no LAPACK call)')
  ap.add_argument('--sub-batches', type=int, default=None,
                  help='sub-batches (default: about 1024 worlds, at least 2; --quick 2): '
                       'n = sub-batches x sub-batch worlds')
  ap.add_argument('--ticks', type=int, default=None, help='ticks per timed run (default 50)')
  ap.add_argument('--repeats', type=int, default=None, help='timed runs per layout (default 4)')
  ap.add_argument('--quick', action='store_true',
                  help='smoke test: the AHRS turntable, 2 sub-batches of 8, 5 ticks')
  a = ap.parse_args(argv)
  if a.quick:
    a.manifest = str(REPO / 'manifests' / 'ahrs_turntable.yaml')
    a.sub_batch = a.sub_batch or 8
  a.sub_batches = a.sub_batches or (2 if a.quick else None)
  a.ticks = a.ticks or (5 if a.quick else 50)
  a.repeats = a.repeats or (1 if a.quick else 4)
  if min(a.sub_batches or 2, a.ticks, a.repeats) < 1 or (a.sub_batch or 2) < 1:
    ap.error('--sub-batch, --sub-batches, --ticks and --repeats must be positive')
  return a


def sub_batched(fn, k: int):
  """`fn` (one world's physics call) whose `vmap` over `n = m·k` worlds is a `lax.map` of its
  vmap over `m` sub-batches of `k`."""
  import jax
  from jax.custom_batching import custom_vmap
  f = custom_vmap(fn)

  @f.def_vmap
  def rule(n, in_batched, *args):
    axes = tuple(jax.tree.map(lambda b: 0 if b else None, in_batched))
    flat, tree = jax.tree.flatten(args)
    batched = jax.tree.leaves(in_batched)
    if n % k:
      raise ValueError(f'{n} worlds are not whole sub-batches of {k}')

    def one(chunk):
      it = iter(chunk)
      leaves = [next(it) if b else x for x, b in zip(flat, batched)]
      return jax.vmap(fn, in_axes=axes)(*jax.tree.unflatten(tree, leaves))
    out = jax.lax.map(one, [x.reshape((n // k, k) + x.shape[1:])
                            for x, b in zip(flat, batched) if b])
    out = jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), out)
    return out, jax.tree.map(lambda _: True, out)
  return f


def main(argv=None):
  a = parse_args(argv)
  os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})   # before JAX starts its threads
  sys.path.insert(0, str(REPO))
  from fibril_mjx.batch.worlds import cpu_flags
  cpu_flags(1)
  import jax
  import numpy as np
  import fibril_mjx as fm
  from fibril_mjx.batch.simulation import Options
  from fibril_mjx.physics import mjx as physics

  sims = {'block': fm.load(a.manifest), 'per-call': fm.load(a.manifest)}
  k = a.sub_batch or sims['block'].sub_batch_cap()[0] or 8
  n = (a.sub_batches or max(2, round(1024 / k))) * k
  opts = {'block': Options(sub_batch=k, record=False),
          'per-call': Options(sub_batch=n, record=False)}
  print(f'jax {jax.__version__}, {pathlib.Path(a.manifest).name}: {n} worlds = '
        f'{n // k} sub-batches of {k}, {a.ticks} ticks, one core')
  params, keys = sims['block'].default_params(n), fm.world_keys(0, n)
  states, ends, times = {}, {}, {name: [] for name in sims}
  plain = physics.forward, physics.integrate
  for name, sim in sims.items():   # first calls: each layout traces MJX itself
    physics.forward.clear_cache()
    physics.integrate.clear_cache()
    if name == 'per-call':
      physics.forward = sub_batched(lambda m, d: plain[0](m, d), k)
      physics.integrate = sub_batched(lambda m, d: plain[1](m, d), k)
    try:
      t0 = time.perf_counter()
      states[name] = jax.block_until_ready(sim.reset(params, keys, options=opts[name]))
      t1 = time.perf_counter()
      ends[name] = jax.block_until_ready(sim.run(params, states[name], a.ticks,
                                                 options=opts[name])[0])
      t2 = time.perf_counter()
    finally:
      physics.forward, physics.integrate = plain
    print(f'{name:9s} first calls: reset {t1 - t0:6.1f} s, run {t2 - t1:6.1f} s', flush=True)
  for r in range(a.repeats):   # interleaved, the order flipped every repetition
    for name in (list(sims) if r % 2 == 0 else list(sims)[::-1]):
      t0 = time.perf_counter()
      jax.block_until_ready(sims[name].run(params, states[name], a.ticks,
                                           options=opts[name])[0])
      times[name].append(time.perf_counter() - t0)
  same = all(np.array_equal(x, y, equal_nan=True) for x, y in
             zip(jax.tree.leaves(ends['block']), jax.tree.leaves(ends['per-call'])))
  us = {name: statistics.median(t) / (n * a.ticks) * 1e6 for name, t in times.items()}
  for name in sims:
    print(f'{name:9s} {us[name]:8.2f} us per world-step')
  print(f'final states bitwise equal: {same}')
  print(f'physics_sub_batch_ratio={us["per-call"] / us["block"]:.3f}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
