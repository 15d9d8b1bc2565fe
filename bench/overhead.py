#!/usr/bin/env python3
"""Cost of the device components over bare physics: world-steps/s with and without them.

For each robot manifest (default: the AHRS turntable, a four-motor + AHRS rig driven by its
command_script, and the MJX test humanoid with a motor on each of its 21 actuators and an AHRS,
`bench/humanoid_motors.yaml`) builds two simulations:
  * `full`     — the manifest as is (physics + components, e.g. the AHRS, the motors);
  * `physics`  — the same model and `actuator_script` with `components: []` and without the
                 component-bound sections (`command_script`, `assemblies`,
                 `parameter_overlays`) (a temporary manifest written to a temp dir).
and times `sim.run(params, state, ticks, record=False)` for both, at each world count, with
the repetitions interleaved (full/physics alternate, order flipped every repetition) so
machine noise hits both alike. Every world count runs in one program laid out by
`fibril_mjx.batch.worlds` (sharded over all devices, LAPACK-safe sub-batches inside, no hang);
`--chunk N` adds host chunks of N worlds (world keys from global world indices).

Reported per variant and world count: median world-steps/s of the run phase (reset excluded,
timed separately), cold compile time (first call minus a steady call), bytes of state per
world and shared. The last two lines are

  overhead_ratio_<first size>=...   (only when several sizes are given)
  overhead_ratio_<last size>=...

with ratio = physics-alone world-steps/s / full world-steps/s (slowdown factor; >= 1 means
the components cost time; the target is <= 1.10), the worse (largest) over the robots.

Usage:
  .venv/bin/python bench/overhead.py                     # 1024 and 4096 worlds, 200 ticks
  .venv/bin/python bench/overhead.py --one-core --manifest bench/four_motor_rig.yaml --repeats 16
      # one device pinned to one core, 2048 worlds (what each device of a full run does)
  .venv/bin/python bench/overhead.py --one-core --manifest bench/four_motor_rig.yaml --worlds 1024 --sub-batch 256
      # both variants in sub-batches of 256 worlds (docs/internals/performance.md)
  .venv/bin/python bench/overhead.py --quick             # smoke test (seconds)
  FIBRIL_BENCH_COMPILE_CACHE=/tmp/jaxcache .venv/bin/python bench/overhead.py
      # enables JAX's persistent compilation cache (compile times then measure cache hits)
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

import yaml
from fibril_mjx.batch.simulation import Options

REPO = pathlib.Path(__file__).resolve().parent.parent
CACHE_ENV = 'FIBRIL_BENCH_COMPILE_CACHE'


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument('--manifest', nargs='+',
                  default=[str(REPO / 'manifests' / 'ahrs_turntable.yaml'),
                           str(REPO / 'bench' / 'four_motor_rig.yaml'),
                           str(REPO / 'bench' / 'humanoid_motors.yaml')],
                  help='robot manifests (default: the AHRS turntable, the four-motor rig and the '
                       'humanoid with 21 motors)')
  ap.add_argument('--worlds', type=int, nargs='+', default=None,
                  help='world counts (default 1024 4096; --quick: 128 512)')
  ap.add_argument('--ticks', type=int, default=None,
                  help='ticks per timed run call (default 200; --quick: 20)')
  ap.add_argument('--repeats', type=int, default=None,
                  help='timed repetitions after the warm-up call (default 5; --quick: 2)')
  ap.add_argument('--chunk', type=int, default=None,
                  help='worlds per host chunk (default: none, one program per world count)')
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument('--sub-batch', type=int, default=None,
                  help='worlds per sub-batch of both variants (`Options(sub_batch=)`; default: '
                       'the LAPACK-safe size, one sub-batch when the model has no LAPACK call)')
  ap.add_argument('--quick', action='store_true', help='small sizes, for a smoke test')
  ap.add_argument('--one-core', action='store_true',
                  help='one XLA device, the process pinned to one core: what each device of a '
                       'run over every core does, with less noise from the other cores (for '
                       'comparing two versions of the code; default worlds then 2048)')
  ap.add_argument('--watchdog-s', type=float, default=1200.0,
                  help='abort with a traceback if the whole run takes longer (0: off)')
  a = ap.parse_args(argv)
  q = a.quick
  a.worlds = a.worlds or ([128, 512] if q else [2048] if a.one_core else [1024, 4096])
  a.ticks = a.ticks or (20 if q else 200)
  a.repeats = a.repeats or (2 if q else 5)
  if a.one_core and not hasattr(os, 'sched_setaffinity'):
    ap.error('--one-core pins the process with os.sched_setaffinity, which this OS lacks '
             '(Linux only)')
  if (min(a.worlds) < 1 or a.ticks < 1 or a.repeats < 1
      or a.sub_batch is not None and a.sub_batch < 2):
    ap.error('--worlds, --ticks and --repeats must be positive, --sub-batch at least 2')
  return a


def physics_only_manifest(src: pathlib.Path, tmpdir: pathlib.Path) -> pathlib.Path:
  """Writes a copy of `src` with `components: []` into `tmpdir`; paths made absolute."""
  data = yaml.safe_load(src.read_text())
  base = src.resolve().parent
  data['components'] = []
  for key in ('command_script', 'assemblies', 'parameter_overlays'):  # name components
    data.pop(key, None)
  data.pop('profile_paths', None)  # profiles are only read by components
  if 'packages' in data:
    data['packages'] = {k: str((base / v).resolve()) for k, v in data['packages'].items()}
  if not str(data['model']).startswith('package://'):
    data['model'] = str((base / data['model']).resolve())
  out = tmpdir / (src.stem + '_physics_only.yaml')
  out.write_text(yaml.safe_dump(data, sort_keys=False))
  return out


def tree_nbytes(tree) -> int:
  import jax
  return sum(int(x.nbytes) for x in jax.tree.leaves(tree))


class Variant:
  """One simulation and its measurements."""

  def __init__(self, name, sim, seed, chunk, sub_batch=None):
    import jax
    self.name, self.sim, self.seed, self.chunk = name, sim, seed, chunk
    self.sub_batch = sub_batch
    self.params = {}        # n -> full params (world axis n)
    self.run_s = {}         # n -> [seconds of the run phase per repetition]
    self.reset_s = {}       # n -> [seconds of the reset phase]
    self.cpu_s = {}         # n -> [process CPU seconds of the run phase]
    self.first = None       # (reset_s, run_s) of the very first (compiling) call
    self.state_bytes = None
    self._jax = jax

  def _params(self, n):
    if n not in self.params:
      self.params[n] = self._jax.block_until_ready(self.sim.default_params(n))
    return self.params[n]

  def call(self, n, ticks):
    """Reset + run `n` worlds in chunks; returns (reset s, run s, run process-CPU s)."""
    import fibril_mjx as fm
    from fibril_mjx.batch import worlds
    jax = self._jax
    params = self._params(n)
    t_reset = t_run = t_cpu = 0.0
    for lo, hi in worlds.chunks(n, self.chunk):
      p = jax.tree.map(lambda x: x[lo:hi], params)
      keys = fm.world_keys(self.seed, hi - lo, lo)
      jax.block_until_ready((p, keys))
      t0 = time.perf_counter()
      st = jax.block_until_ready(self.sim.reset(p, keys,
                                                options=Options(sub_batch=self.sub_batch)))
      t1, c1 = time.perf_counter(), time.process_time()
      st, _, _ = self.sim.run(p, st, ticks, options=Options(record=False,
                                                            sub_batch=self.sub_batch))
      jax.block_until_ready(st)
      t2, c2 = time.perf_counter(), time.process_time()
      t_reset += t1 - t0
      t_run += t2 - t1
      t_cpu += c2 - c1
      if self.state_bytes is None:
        self.state_bytes = state_bytes(st, hi - lo)
    return t_reset, t_run, t_cpu


def state_bytes(st, n):
  """(per-world bytes, of which components, shared bytes) of a SimState of `n` worlds."""
  import jax
  per_world_leaves = jax.tree.leaves((st.data, st.components))
  for x in per_world_leaves:
    assert x.shape[:1] == (n,), ('leaf without a world axis', x.shape)
  per = tree_nbytes((st.data, st.components)) / n
  comps = tree_nbytes(st.components) / n
  shared = tree_nbytes((st.tick, st.clocks))
  return per, comps, shared


def load():
  try:
    return ' '.join(f'{x:.2f}' for x in os.getloadavg())
  except OSError:
    return '?'


def fmt_rate(x):
  return f'{x / 1e3:,.1f} k' if x < 1e6 else f'{x / 1e6:,.3f} M'


def main(argv=None):
  args = parse_args(argv)
  if args.watchdog_s > 0:
    faulthandler.dump_traceback_later(args.watchdog_s, exit=True)
  sys.path.insert(0, str(REPO))
  from fibril_mjx.batch.worlds import cpu_flags
  if args.one_core:   # before JAX starts its threads: they inherit the affinity
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
  cpu_flags(1 if args.one_core else None)   # else one XLA CPU device per core, as fibril-mjx

  import jax
  cache = os.environ.get(CACHE_ENV)
  if cache:
    jax.config.update('jax_compilation_cache_dir', cache)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
    jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)
  import mujoco
  import fibril_mjx as fm

  print(f'python {platform.python_version()}  jax {jax.__version__}  jaxlib '
        f'{jax.lib.__version__ if hasattr(jax.lib, "__version__") else "?"}  mujoco '
        f'{mujoco.__version__}  fibril_mjx {fm.__version__}')
  print(f'devices {jax.devices()}  backend {jax.default_backend()}  cpus {os.cpu_count()}')
  cache_dir = jax.config.jax_compilation_cache_dir
  print(f'persistent compilation cache: {cache_dir or "off"}'
        + ('' if cache_dir else f' (set {CACHE_ENV}=DIR to enable)'))
  worst = {}
  for path in args.manifest:
    ratios = measure(pathlib.Path(path), args, fm)
    for n, r in ratios.items():
      worst[n] = max(worst.get(n, 0.0), r)
  print()
  print('overhead ratio (physics / full world-steps/s) per robot and world count; the lines '
        'below give the worse robot')
  for path, ratios in RESULTS.items():
    print(f'  {path}: ' + ', '.join(f'{n} worlds {r:.4f}' for n, r in ratios.items()))
  for n in args.worlds:
    print(f'overhead_ratio_{n}={worst[n]:.4f}')
  return 0


RESULTS: dict = {}


def measure(src: pathlib.Path, args, fm) -> dict:
  """Full vs physics-alone timing of one manifest; returns `{worlds: ratio}`."""
  import jax
  print()
  print(f'load average at start: {load()}  (>> the core count means other work competes: '
        'trust paired/CPU ratios more than absolute rates)')
  print(f'=== manifest {src}  worlds {args.worlds}  ticks {args.ticks}  repeats {args.repeats}  '
        f'chunk {args.chunk}  seed {args.seed}')

  with tempfile.TemporaryDirectory(prefix='fibril_bench_') as tmp:
    phys_path = physics_only_manifest(src, pathlib.Path(tmp))
    t0 = time.perf_counter()
    full = Variant('full', fm.load(src), args.seed, args.chunk, args.sub_batch)
    phys = Variant('physics', fm.load(phys_path), args.seed, args.chunk, args.sub_batch)
    print(f'host build of both: {time.perf_counter() - t0:.2f} s; components of full: '
          + ', '.join(f'{cid} ({c.type})' for cid, c in full.sim.components.items()))
  variants = (full, phys)
  if not full.sim.components:
    print('note: the manifest has no components; both variants are physics alone')

  # Warm-up: the first call compiles reset and run (shapes are those of one chunk, so every
  # world count reuses them); a second call gives the steady time to subtract.
  # MJX's forward and integrate are jitted once per process (physics/mjx.py) and every program
  # reuses their trace: each variant's first call clears them, so each pays the trace of the
  # physics as a process running only that manifest would (else whichever compiles first pays
  # it for both).
  from fibril_mjx.physics import mjx as fibril_physics
  warm_n = min(args.chunk or min(args.worlds), min(args.worlds))
  for v in variants:
    fibril_physics.forward.clear_cache()
    fibril_physics.integrate.clear_cache()
    v.first = v.call(warm_n, args.ticks)
    v.steady0 = v.call(warm_n, args.ticks)
    print(f'compiled {v.name:8s} first call {sum(v.first[:2]):7.2f} s, steady '
          f'{sum(v.steady0[:2]):6.3f} s'
          f' ({warm_n} worlds)', flush=True)
  for n in args.worlds:       # every world count's program compiles here, untimed
    for v in variants:
      if n != warm_n:
        v.call(n, args.ticks)

  for r in range(args.repeats):
    order = variants if r % 2 == 0 else variants[::-1]
    for n in args.worlds:
      for v in order:
        rs, ru, cpu = v.call(n, args.ticks)
        v.reset_s.setdefault(n, []).append(rs)
        v.run_s.setdefault(n, []).append(ru)
        v.cpu_s.setdefault(n, []).append(cpu)
    print(f'repetition {r + 1}/{args.repeats} done (load average {load()})', flush=True)

  # ------------------------------------------------------------------ report
  from fibril_mjx.batch import worlds
  for n in args.worlds:
    print(f'layout at {n} worlds: {full.sim.layout(n).describe()}')

  def rate(v, n, t):
    return n * args.ticks / t

  print()
  print(f'run phase (sim.run, {args.ticks} ticks, record=False), median of {args.repeats} '
        'repetitions; wall-clock world-steps/s with [min - max], and world-steps per process-'
        'CPU-second (less sensitive to other load on the machine)')
  hdr = (f'{"variant":9s} {"worlds":>6s} {"chunks":>6s} {"world-steps/s":>14s} '
         f'{"[min - max]":>24s} {"per CPU-s":>10s} {"run ms":>9s} {"reset ms":>9s}')
  print(hdr)
  print('-' * len(hdr))
  for n in args.worlds:
    for v in variants:
      ts = v.run_s[n]
      med = statistics.median(ts)
      lo, hi = rate(v, n, max(ts)), rate(v, n, min(ts))
      print(f'{v.name:9s} {n:6d} {len(worlds.chunks(n, args.chunk)):6d} {fmt_rate(rate(v, n, med)):>14s} '
            f'{"[" + fmt_rate(lo) + " - " + fmt_rate(hi) + "]":>24s} '
            f'{fmt_rate(rate(v, n, statistics.median(v.cpu_s[n]))):>10s} {med * 1e3:9.1f} '
            f'{statistics.median(v.reset_s[n]) * 1e3:9.1f}')
  print()
  print(f'{"variant":9s} {"compile s":>10s} {"(reset":>8s} {"run)":>7s} '
        f'{"state B/world":>14s} {"of which comps":>15s} {"shared B":>9s}')
  for v in variants:
    cr = v.first[0] - v.steady0[0]
    cu = v.first[1] - v.steady0[1]
    per, comps, shared = v.state_bytes
    print(f'{v.name:9s} {cr + cu:10.2f} {cr:8.2f} {cu:7.2f} {per:14,.0f} {comps:15,.0f} '
          f'{shared:9,d}')
  print('compile s = first call - steady call (trace + lower + XLA compile of reset and run; '
        'each variant traces MJX itself; full is compiled first, so it also pays one-off JAX '
        'warm-up costs)')
  print()
  print('ratio = physics-alone world-steps/s / full world-steps/s (slowdown; target <= 1.10)')
  ratios = {}
  for n in args.worlds:
    mf = statistics.median(full.run_s[n])
    mp = statistics.median(phys.run_s[n])
    ratios[n] = mf / mp      # = physics rate / full rate
    paired = sorted(f / p for f, p in zip(full.run_s[n], phys.run_s[n]))
    cpu = statistics.median(full.cpu_s[n]) / statistics.median(phys.cpu_s[n])
    best = min(full.run_s[n]) / min(phys.run_s[n])
    print(f'{n:6d} worlds: ratio of medians {ratios[n]:.3f} | paired per-repetition '
          + ' '.join(f'{x:.3f}' for x in paired)
          + f' (median {statistics.median(paired):.3f}) | best-of {best:.3f} | '
          + f'CPU-time {cpu:.3f} | '
          + f'{(mf - mp) / (n * args.ticks) * 1e9:+.0f} ns per world-step')
  RESULTS[str(src)] = ratios
  return ratios


if __name__ == '__main__':
  sys.exit(main())
