#!/usr/bin/env python3
"""Kernels launched per tick by the components: XLA CPU thunks of a run, physics alone vs full.

On XLA:CPU a compiled program runs as a sequence of thunks (one per fusion, copy, dot,
conditional, ...), each dispatched by the thunk executor. A component's kernels each do little
work at a few thousand worlds per device, so how many it launches per tick is one part of what
it costs per world-step (`bench/overhead.py`), not all of it: what each kernel touches, and
what the other devices' threads do meanwhile, count too (XLA's classic emitters launch 986
kernels per tick for the turntable's physics where its MLIR emitters launch 362, and at 4096
worlds both run it as fast; docs/internals/performance.md). For each manifest (default: the
three of `overhead.py`) this compiles `sim.run(..., record=False)` of the manifest as is
(**full**) and of a copy without components (**physics**, as `overhead.py` makes it), runs
each once under `jax.profiler` with XLA's per-thunk trace events on, and counts the thunks
executed per tick. One XLA CPU device (the count does not depend on the device count; the
work per kernel does).

Prints per manifest `kernels_per_tick_physics_<stem>=`, `kernels_per_tick_full_<stem>=` and
`component_kernels_per_tick_<stem>=` (their difference). Counts, not times: the same on a busy
machine.

`--by-source N` also says where the full run's kernel time goes: it times every kernel of the
full run (three profiled runs, averaged), reads XLA's dump of the compiled program to find the
line of fibril_mjx that each kernel's instruction came from (the innermost fibril_mjx frame of
its stack; `physics/mjx.py` is MuJoCo MJX's step, `no-metadata` instructions XLA added (the
loop's copies), `unmapped` events that name no instruction, such as the steps of a library
transpose), and lists the N lines with the most
microseconds per tick, then the total per fibril_mjx module, and how the component kernels'
time splits by size (how many launches per tick, the median launch, the time in launches under
10 us — what a component costs when each of its kernels does little work). Times of one machine
and load, so compare lines within one run.

Usage:
  .venv/bin/python bench/kernels.py                      # the three manifests, 256 worlds, 20 ticks
  .venv/bin/python bench/kernels.py --quick              # the first manifest, 16 worlds, 3 ticks
  .venv/bin/python bench/kernels.py --manifest bench/four_motor_rig.yaml --worlds 1024
  .venv/bin/python bench/kernels.py --manifest bench/four_motor_rig.yaml --worlds 2048 --by-source 30
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import pathlib
import re
import sys
import tempfile

import numpy as np
from fibril_mjx.batch.simulation import Options

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
                           str(REPO / 'bench' / 'four_motor_rig.yaml'),
                           str(REPO / 'bench' / 'humanoid_motors.yaml')])
  ap.add_argument('--worlds', type=int, default=None, help='default 256 (--quick 16)')
  ap.add_argument('--ticks', type=int, default=None, help='default 20 (--quick 3)')
  ap.add_argument('--quick', action='store_true',
                  help='smoke test: the first manifest only, 16 worlds, 3 ticks')
  ap.add_argument('--top', type=int, default=0, help='also list the N most launched kernels')
  ap.add_argument('--by-source', type=int, default=0, metavar='N',
                  help="also time the full run's kernels and list the N source lines that cost "
                       'the most per tick, then the N lines that launch the most kernels more '
                       'than the physics alone does')
  ap.add_argument('--in-loop', action='store_true',
                  help='also count each run at twice the ticks: the kernels per tick of the '
                       "loop's body alone (the difference over the extra ticks), without what "
                       'a run launches once (its state packed before the loop and unpacked '
                       'after it)')
  a = ap.parse_args(argv)
  a.manifest = a.manifest[:1] if a.quick else a.manifest
  a.worlds, a.ticks = a.worlds or (16 if a.quick else 256), a.ticks or (3 if a.quick else 20)
  return a


def trace_events(trace_dir: str) -> list:
  path = glob.glob(f'{trace_dir}/**/*.trace.json.gz', recursive=True)[0]
  return json.load(gzip.open(path))['traceEvents']


def thunks(trace_dir: str) -> collections.Counter:
  """`{kernel name without its number: launches}` of the profiler trace in `trace_dir`."""
  out = collections.Counter()
  for e in trace_events(trace_dir):
    if e.get('ph') == 'X' and not e['name'].startswith(NOT_THUNKS):
      out[e['name'].rsplit('.', 1)[0] if e['name'].rsplit('.', 1)[-1].isdigit()
          else e['name']] += 1
  return out


def instruction_sources(hlo_text: str, roots: tuple = ()) -> dict:
  """`{instruction name: 'file:function:line'}` of an XLA HLO dump, the innermost frame of
  each instruction's stack that lies in fibril_mjx (the dump's FileNames, FunctionNames,
  FileLocations and StackFrames tables; a frame's `parent_frame_id` is printed one above the
  parent's id, 1 meaning none). With `roots` (e.g. `('/fibril_mjx/', '/examples/')`), the
  innermost frame under any of them, its file named from the root's folder on
  (`fibril_mjx/core/pipeline.py`)."""
  tables = {'FileNames': {}, 'FunctionNames': {}, 'FileLocations': {}, 'StackFrames': {}}
  table, out = None, {}
  for line in hlo_text.splitlines():
    if line in tables:
      table = tables[line]
      continue
    m = re.match(r'(\d+) (.*)', line) if table is not None else None
    if m is None:
      table = None
      ins = re.match(r'\s+(?:ROOT )?%(\S+) = ', line)
      if ins:
        frame = re.search(r'stack_frame_id=(\d+)', line)
        out[ins.group(1)] = int(frame.group(1)) if frame else None
      continue
    if table is tables['FileNames'] or table is tables['FunctionNames']:
      table[int(m.group(1))] = m.group(2).strip('"')
    else:
      table[int(m.group(1))] = {k: int(v) for k, v in re.findall(r'(\w+)=(\d+)', m.group(2))}

  def where(frame):
    if frame is None:
      return 'no-metadata'
    for _ in range(500):   # the innermost fibril_mjx frame, walking out
      f = tables['StackFrames'].get(frame)
      if f is None:
        return '?'
      loc = tables['FileLocations'][f['file_location_id']]
      file = tables['FileNames'][loc['file_name_id']]
      root = next((r for r in roots or ('/fibril_mjx/',) if r in file), None)
      if root is not None:
        fn = tables['FunctionNames'][loc['function_name_id']]
        name = file.split(root)[-1] if not roots else f"{root.strip('/')}/{file.split(root)[-1]}"
        return f"{name}:{fn}:{loc['line']}"
      frame = f.get('parent_frame_id', 1) - 1
    return '?'
  return {name: where(frame) for name, frame in out.items()}


def by_source(sim, n, ticks, fm, jax, dump_dir: str
              ) -> tuple[collections.Counter, collections.Counter, list]:
  """`(microseconds, launches)` per tick of a run's kernels, keyed by source line, and
  the component kernels as `[(microseconds per launch, launches per tick)]` (those whose
  source is a fibril_mjx line outside physics/mjx.py)."""
  p = sim.default_params(n)
  st = jax.block_until_ready(sim.reset(p, fm.world_keys(0, n)))
  jax.block_until_ready(sim.run(p, st, ticks, options=Options(record=False))[0])   # compile
  names = collections.Counter()
  launches = collections.Counter()
  for _ in range(3):
    with tempfile.TemporaryDirectory(prefix='fibril_kernels_') as d:
      jax.profiler.start_trace(d)
      jax.block_until_ready(sim.run(p, st, ticks, options=Options(record=False))[0])
      jax.profiler.stop_trace()
      for e in trace_events(d):
        if e.get('ph') == 'X' and not e['name'].startswith(NOT_THUNKS):
          names[e['name']] += e['dur'] / 3 / ticks
          launches[e['name']] += 1 / 3 / ticks
  # every `run` program compiled so far is in the dump: this run's is the one whose
  # instructions the profiled kernels name (of two that name them all, the smaller: a
  # physics-alone program's names are often a subset of the full one's)
  sources = max((instruction_sources(pathlib.Path(path).read_text()) for path in
                 glob.glob(f'{dump_dir}/*jit_run*.cpu_after_optimizations.txt')),
                key=lambda src: (sum(1 for name in names if name in src), -len(src)))
  us, count, component = collections.Counter(), collections.Counter(), []
  for name, t in names.items():
    src = sources.get(name, 'unmapped')
    us[src] += t
    count[src] += launches[name]
    if ':' in src and not src.startswith('physics/mjx.py'):
      component.append((t / launches[name], launches[name]))
  return us, count, component


def size_summary(component: list) -> str:
  """One line on the component kernels' sizes: how many per tick, the median launch, and how
  much of their time is in launches under 10 us (where a launch's fixed cost dominates)."""
  if not component:
    return 'component kernels (fibril_mjx lines outside physics/mjx.py): none'
  per_tick = sum(c for _, c in component)
  small = [(d, c) for d, c in component if d < 10]
  durations, launches = zip(*component)
  median = np.quantile(durations, 0.5, weights=launches, method='inverted_cdf')
  return (f'component kernels (fibril_mjx lines outside physics/mjx.py): {per_tick:.0f} per tick, '
          f'{sum(d * c for d, c in component):.0f} us; median launch {median:.1f} us; '
          f'{sum(c for _, c in small):.0f} launches under 10 us take '
          f'{sum(d * c for d, c in small):.0f} us per tick')


def count(sim, n, ticks, fm, jax) -> collections.Counter:
  """Thunks launched by one `run` of `ticks` ticks of `n` worlds (compiled beforehand; `ticks`
  is static, so each tick count is a program of its own)."""
  p = sim.default_params(n)
  st = jax.block_until_ready(sim.reset(p, fm.world_keys(0, n)))
  jax.block_until_ready(sim.run(p, st, ticks,
                                options=Options(record=False))[0])   # compile, untraced
  with tempfile.TemporaryDirectory(prefix='fibril_kernels_') as d:
    jax.profiler.start_trace(d, create_perfetto_trace=True)
    jax.block_until_ready(sim.run(p, st, ticks, options=Options(record=False))[0])
    jax.profiler.stop_trace()
    return thunks(d)


def main(argv=None):
  args = parse_args(argv)
  sys.path.insert(0, str(REPO))
  sys.path.insert(0, str(REPO / 'bench'))
  from fibril_mjx.batch.worlds import cpu_flags
  cpu_flags(1)   # the CLI's code generation on one device, before JAX starts
  os.environ['XLA_FLAGS'] += ' --xla_cpu_enable_xprof_traceme=true'   # per-thunk events
  dump = tempfile.TemporaryDirectory(prefix='fibril_hlo_') if args.by_source else None
  if args.by_source:   # the compiled programs as text, with their source tables
    os.environ['XLA_FLAGS'] += (f' --xla_dump_to={dump.name} --xla_dump_hlo_as_text'
                                ' --xla_dump_hlo_module_re=.*jit_run.*')
  import jax
  import fibril_mjx as fm
  from overhead import physics_only_manifest
  print(f'jax {jax.__version__}, {args.worlds} worlds x {args.ticks} ticks, one device')
  lines = []
  for src in map(pathlib.Path, args.manifest):
    with tempfile.TemporaryDirectory(prefix='fibril_bench_') as tmp:
      sims = {'physics': fm.load(physics_only_manifest(src, pathlib.Path(tmp))),
              'full': fm.load(src)}
    per, loop = {}, {}
    for name, sim in sims.items():
      c = count(sim, args.worlds, args.ticks, fm, jax)
      per[name] = sum(c.values()) / args.ticks
      n_sub = sim.last_layout.n_sub if sim.last_layout is not None else 1
      print(f'{src.name}: {name:8s} {per[name]:8.1f} kernels per tick '
            f'({n_sub} sub-batch{"es" if n_sub > 1 else ""} of '
            f'{sim.last_layout.sub_batch if sim.last_layout is not None else args.worlds})')
      for k, v in c.most_common(args.top):
        print(f'    {v / args.ticks:7.1f}  {k}')
      if args.in_loop:
        twice = count(sim, args.worlds, 2 * args.ticks, fm, jax)
        loop[name] = (sum(twice.values()) - sum(c.values())) / args.ticks
        print(f'{src.name}: {name:8s} {loop[name]:8.1f} kernels per tick in the loop, '
              f'{sum(c.values()) - loop[name] * args.ticks:8.1f} once per run')
    if args.by_source:
      us, launches, component = by_source(sims['full'], args.worlds, args.ticks, fm, jax,
                                          dump.name)
      print(f'{src.name}: full run, {sum(us.values()):.0f} us and '
            f'{sum(launches.values()):.1f} kernels per tick; the costliest source lines:')
      for k, v in us.most_common(args.by_source):
        print(f'  {v:9.1f} us {launches[k]:6.1f}x  {k}')
      modules = collections.Counter()
      for k, v in us.items():
        modules[k.split(':')[0]] += v
      print('  per module: ' + ', '.join(f'{k} {v:.0f} us' for k, v in modules.most_common()))
      print('  ' + size_summary(component))
      _, alone, _ = by_source(sims['physics'], args.worlds, args.ticks, fm, jax, dump.name)
      extra = collections.Counter({k: launches[k] - alone[k] for k in set(launches) | set(alone)})
      print(f'{src.name}: the source lines that launch the most kernels per tick more than the '
            'physics alone (full, physics):')
      for k, v in sorted(extra.items(), key=lambda kv: -abs(kv[1]))[:args.by_source]:
        print(f'  {v:+7.1f}  ({launches[k]:6.1f}, {alone[k]:6.1f})  {k}')
    stem = src.stem
    lines += [f'kernels_per_tick_physics_{stem}={per["physics"]:.1f}',
              f'kernels_per_tick_full_{stem}={per["full"]:.1f}',
              f'component_kernels_per_tick_{stem}={per["full"] - per["physics"]:.1f}']
    if args.in_loop:
      lines.append(f'component_kernels_per_tick_in_loop_{stem}='
                   f'{loop["full"] - loop["physics"]:.1f}')
  print()
  print('\n'.join(lines))
  return 0


if __name__ == '__main__':
  sys.exit(main())
