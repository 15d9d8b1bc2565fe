#!/usr/bin/env python3
"""Kernels launched per tick by the components: XLA CPU thunks of a run, physics alone vs full.

On XLA:CPU a compiled program runs as a sequence of thunks (one per fusion, copy, dot,
conditional, ...), each dispatched by the thunk executor. A component's kernels each do little
work at a few thousand worlds per device, so how many it launches per tick is one part of what
it costs per world-step (`bench/overhead.py`), not all of it: what each kernel touches, and
what the other devices' threads do meanwhile, count too (XLA's classic emitters launch 986
kernels per tick for the turntable's physics where its MLIR emitters launch 362, and at 4096
worlds both run it as fast; docs/internals/performance.md). For each manifest (default: the
two of `overhead.py`) this compiles `sim.run(..., record=False)` of the manifest as is
(**full**) and of a copy without components (**physics**, as `overhead.py` makes it), runs
each once under `jax.profiler` with XLA's per-thunk trace events on, and counts the thunks
executed per tick. One XLA CPU device (the count does not depend on the device count; the
work per kernel does).

Prints per manifest `kernels_per_tick_physics_<stem>=`, `kernels_per_tick_full_<stem>=` and
`component_kernels_per_tick_<stem>=` (their difference). Counts, not times: the same on a busy
machine.

Usage:
  .venv/bin/python bench/kernels.py                      # both manifests, 256 worlds, 20 ticks
  .venv/bin/python bench/kernels.py --manifest bench/four_motor_rig.yaml --worlds 1024
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import pathlib
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
# events of the profiler that are not thunks: the Python API, the executor, the client, the
# thread pool, the buffer holds of a call, and each thunk's own `end:` marker
NOT_THUNKS = ('$', 'ThunkExecutor', 'PjitFunction', 'CommonPjRt', 'PjRt', 'Tfrt',
              'ThreadpoolListener', 'end: ', 'Wait for ')


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument('--manifest', nargs='+',
                  default=[str(REPO / 'manifests' / 'ahrs_turntable.yaml'),
                           str(REPO / 'bench' / 'four_motor_rig.yaml')])
  ap.add_argument('--worlds', type=int, default=256)
  ap.add_argument('--ticks', type=int, default=20)
  ap.add_argument('--top', type=int, default=0, help='also list the N most launched kernels')
  return ap.parse_args(argv)


def thunks(trace_dir: str) -> collections.Counter:
  """`{kernel name without its number: launches}` of the profiler trace in `trace_dir`."""
  path = glob.glob(f'{trace_dir}/**/*.trace.json.gz', recursive=True)[0]
  events = json.load(gzip.open(path))['traceEvents']
  out = collections.Counter()
  for e in events:
    if e.get('ph') == 'X' and not e['name'].startswith(NOT_THUNKS):
      out[e['name'].rsplit('.', 1)[0] if e['name'].rsplit('.', 1)[-1].isdigit()
          else e['name']] += 1
  return out


def count(sim, n, ticks, fm, jax) -> collections.Counter:
  """Thunks launched by one `run` of `ticks` ticks of `n` worlds (compiled beforehand)."""
  p = sim.default_params(n)
  st = jax.block_until_ready(sim.reset(p, fm.world_keys(0, n)))
  jax.block_until_ready(sim.run(p, st, ticks, record=False)[0])   # compile, untraced
  with tempfile.TemporaryDirectory(prefix='fibril_kernels_') as d:
    jax.profiler.start_trace(d, create_perfetto_trace=True)
    jax.block_until_ready(sim.run(p, st, ticks, record=False)[0])
    jax.profiler.stop_trace()
    return thunks(d)


def main(argv=None):
  args = parse_args(argv)
  sys.path.insert(0, str(REPO))
  sys.path.insert(0, str(REPO / 'bench'))
  from fibril_mjx.batch.worlds import cpu_flags
  cpu_flags(1)   # the CLI's code generation on one device, before JAX starts
  os.environ['XLA_FLAGS'] += ' --xla_cpu_enable_xprof_traceme=true'   # per-thunk events
  import jax
  import fibril_mjx as fm
  from overhead import physics_only_manifest
  print(f'jax {jax.__version__}, {args.worlds} worlds x {args.ticks} ticks, one device')
  lines = []
  for src in map(pathlib.Path, args.manifest):
    with tempfile.TemporaryDirectory(prefix='fibril_bench_') as tmp:
      sims = {'physics': fm.load(physics_only_manifest(src, pathlib.Path(tmp))),
              'full': fm.load(src)}
    per = {}
    for name, sim in sims.items():
      c = count(sim, args.worlds, args.ticks, fm, jax)
      per[name] = sum(c.values()) / args.ticks
      print(f'{src.name}: {name:8s} {per[name]:8.1f} kernels per tick')
      for k, v in c.most_common(args.top):
        print(f'    {v / args.ticks:7.1f}  {k}')
    stem = src.stem
    lines += [f'kernels_per_tick_physics_{stem}={per["physics"]:.1f}',
              f'kernels_per_tick_full_{stem}={per["full"]:.1f}',
              f'component_kernels_per_tick_{stem}={per["full"] - per["physics"]:.1f}']
  print()
  print('\n'.join(lines))
  return 0


if __name__ == '__main__':
  sys.exit(main())
