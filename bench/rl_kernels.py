#!/usr/bin/env python3
"""Kernels launched per env step by the RL env with devices and by the bare Brax env.

The two envs of `bench/rl.py` (**fibril**: `examples/train_ppo.make_env` with `DEVICE_VARY`
under `fibril_mjx.rl.wrappers.wrap_for_training`; **bare_ar**: `bench/rl.BareEnv` under Brax's
`VmapWrapper` and `EpisodeWrapper` with `fibril_mjx.rl.wrappers.AutoReset`, the same
auto-reset on both sides) are compiled as `bench/rl.programs` makes them (a `lax.scan` of env
steps with a fixed action), each at `--steps` and at twice as many steps, and run once each
under `jax.profiler` with XLA's per-thunk trace events on (as `bench/kernels.py`). The
difference of the two thunk counts over the extra steps is the kernels **per env step** of the
scan's body alone, without what a run launches once. Counts, not times: the same on a busy
machine. Episodes are longer than the runs, so no restart fires: the per-step cost of the
auto-reset is its test, not its restart (that is once per episode).

`--by-source N` also reads XLA's dump of the compiled programs (`bench/kernels.py`'s
`instruction_sources`, extended to the frames of `examples/` and `bench/`) and lists, for the
fibril env, the N source lines that launch the most kernels per env step more than the bare
env does, and the N that take the most time, in microseconds per env step (a control-flow
kernel's own time, without the kernels it runs nested on its thread: a loop whose body's
kernels are not nested in its event keeps their time; three profiled runs; times of one
machine and load: compare lines within one run). A line is the innermost frame in fibril_mjx,
examples or bench (`physics/mjx.py` is MJX's step). `--unrolled-threefry` lowers JAX's
threefry hash on the CPU with its rounds written out (as JAX lowers it on other backends; the
same bits) instead of its CPU form, a loop of five iterations per hash: what those loops cost
per step.

Prints `rl_kernels_per_step_<env>=`, `rl_hlo_instructions_<env>=` (instructions of the
optimized scan program) and `rl_device_kernels_per_step=` (fibril − bare_ar).

    nice .venv/bin/python bench/rl_kernels.py                    # 256 envs, 10 / 20 steps
    nice .venv/bin/python bench/rl_kernels.py --by-source 30
    nice .venv/bin/python bench/rl_kernels.py --no-vary          # without DEVICE_VARY
    .venv/bin/python bench/rl_kernels.py --quick                 # smoke test: 8 envs, 2 / 4 steps
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import pathlib
import re
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
ROOTS = ('/fibril_mjx/', '/examples/', '/bench/')


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--envs', type=int, default=256)
  ap.add_argument('--steps', type=int, default=10)
  ap.add_argument('--episode-length', type=int, default=1000,
                  help='longer than the runs: no restart fires')
  ap.add_argument('--no-vary', action='store_true', help='fibril env without DEVICE_VARY')
  ap.add_argument('--quick', action='store_true', help='smoke test: 8 envs, 2 / 4 steps')
  ap.add_argument('--by-source', type=int, default=0, metavar='N')
  ap.add_argument('--unrolled-threefry', action='store_true',
                  help="lower threefry2x32 on CPU as JAX lowers it elsewhere (its five rounds "
                       "unrolled, the same bits) instead of JAX's CPU rolled loop of five "
                       'iterations: what the rolled loops cost per step')
  args = ap.parse_args(argv)
  if args.quick:
    args.envs, args.steps = 8, 2
  return args


def instruction_sources(hlo_text: str) -> dict:
  """`bench/kernels.instruction_sources` with the frames of `ROOTS` (fibril_mjx, examples,
  bench)."""
  import kernels
  return kernels.instruction_sources(hlo_text, ROOTS)


def profiled(fn, state, jax, kernels):
  """`{kernel name: (launches, exclusive microseconds)}` of one profiled call of `fn(state)`:
  a control-flow thunk's time (a `while`, a `conditional`) without the thunks it ran inside
  it (events of one thread nest)."""
  out = collections.defaultdict(lambda: [0, 0.0])
  with tempfile.TemporaryDirectory(prefix='fibril_rl_kernels_') as d:
    jax.profiler.start_trace(d)
    jax.block_until_ready(fn(state))
    jax.profiler.stop_trace()
    events = sorted((e for e in kernels.trace_events(d) if e.get('ph') == 'X'
                     and not e['name'].startswith(kernels.NOT_THUNKS)),
                    key=lambda e: (e['pid'], e['tid'], e['ts'], -e['dur']))
    stack = []   # (event, end) of the enclosing thunks on this thread
    for e in events:
      while stack and (stack[-1][0]['tid'] != e['tid'] or stack[-1][0]['pid'] != e['pid']
                       or stack[-1][1] <= e['ts']):
        stack.pop()
      if stack:   # inside its parent: not the parent's own time
        out[stack[-1][0]['name']][1] -= e['dur']
      out[e['name']][0] += 1
      out[e['name']][1] += e['dur']
      stack.append((e, e['ts'] + e['dur']))
  return out


def main(argv=None):
  args = parse_args(argv)
  sys.path.insert(0, str(REPO / 'bench'))
  import fibril_mjx
  fibril_mjx.cpu_flags(1, bitwise=False)   # as bench/rl.py
  dump = tempfile.TemporaryDirectory(prefix='fibril_rl_hlo_')
  if os.environ.get('RLK_DUMP'):
    dump.name = os.environ['RLK_DUMP']
  os.environ['XLA_FLAGS'] += (' --xla_cpu_enable_xprof_traceme=true'
                              f' --xla_dump_to={dump.name} --xla_dump_hlo_as_text'
                              ' --xla_dump_hlo_module_re=.*jit_run.*')
  import jax
  if args.unrolled_threefry:
    from jax._src.interpreters import mlir   # JAX 0.10's lowering rules of threefry2x32
    from jax._src.random.threefry2x32 import _threefry2x32_lowering_rule as unrolled
    from jax._src.random.threefry2x32 import threefry2x32_p
    mlir.register_lowering(threefry2x32_p, unrolled, platform='cpu')
  import kernels
  import rl
  from brax.envs.wrappers import training
  from fibril_mjx.rl import wrappers
  rl.train_ppo.brax_jax_compat()
  sim = fibril_mjx.load(rl.train_ppo.MANIFEST)
  fib = rl.train_ppo.make_env(sim, episode_length=args.episode_length, randomize=False,
                              vary=None if args.no_vary else rl.train_ppo.DEVICE_VARY)
  bare = rl.BareEnv(sim.physics_model, fib.task.control_ticks)
  envs = {'fibril': wrappers.wrap_for_training(fib, args.episode_length),
          'bare_ar': wrappers.AutoReset(training.EpisodeWrapper(training.VmapWrapper(bare),
                                                                args.episode_length, 1))}
  print(f'jax {jax.__version__}, {args.envs} envs, {args.steps} / {2 * args.steps} steps, '
        f'one device')
  per_step, hlo, lines = {}, {}, []
  by_line, names = {}, {}
  for name, env in envs.items():
    counts, sources_of = {}, {}
    for steps in (args.steps, 2 * args.steps):
      before = set(glob.glob(f'{dump.name}/*jit_run*.cpu_after_optimizations.txt'))
      reset, run = rl.programs(env, args.envs, steps)
      state = jax.block_until_ready(reset(jax.random.PRNGKey(0)))
      state = jax.block_until_ready(run(state))   # compile
      new = sorted(set(glob.glob(f'{dump.name}/*jit_run*.cpu_after_optimizations.txt'))
                   - before)
      text = pathlib.Path(new[-1]).read_text()
      hlo[name] = sum(1 for ln in text.splitlines() if re.match(r'\s+(?:ROOT )?%\S+ = ', ln))
      sources_of[steps] = instruction_sources(text)
      reps = 3 if args.by_source else 1
      runs = [profiled(run, state, jax, kernels) for _ in range(reps)]
      counts[steps] = runs
    n1 = sum(v[0] for v in counts[args.steps][0].values())
    n2 = sum(v[0] for v in counts[2 * args.steps][0].values())
    per_step[name] = (n2 - n1) / args.steps
    print(f'{name}: {per_step[name]:.1f} kernels per env step in the scan '
          f'({n1} in {args.steps} steps, {n2} in {2 * args.steps}); '
          f'{hlo[name]} HLO instructions', flush=True)
    if args.by_source:   # per line: the doubled run minus the single one, per extra step
      # launches: the difference of the two runs; microseconds: the longer run's, per step,
      # the least of its profiled runs per kernel (a kernel's time on a loaded machine is at
      # least its own)
      line = collections.defaultdict(lambda: [0.0, 0.0])
      for steps, sign in ((2 * args.steps, 1), (args.steps, -1)):
        src = sources_of[steps]
        for k, (c, _) in counts[steps][0].items():
          line[src.get(k, 'unmapped')][0] += sign * c / args.steps
      src, runs = sources_of[2 * args.steps], counts[2 * args.steps]
      for k in runs[0]:
        line[src.get(k, 'unmapped')][1] += min(r[k][1] for r in runs if k in r) / (
            2 * args.steps)
      by_line[name] = line
      names[name] = collections.defaultdict(collections.Counter)
      for steps, sign in ((2 * args.steps, 1), (args.steps, -1)):
        for k, (c, _) in counts[steps][0].items():
          names[name][sources_of[steps].get(k, 'unmapped')][
              re.sub(r'\.\d+$', '', k)] += sign * c / args.steps
    lines += [f'rl_kernels_per_step_{name}={per_step[name]:.1f}',
              f'rl_hlo_instructions_{name}={hlo[name]}']
  if args.by_source:
    f, b = by_line['fibril'], by_line['bare_ar']
    keys = set(f) | set(b)
    total_us = {k: sum(v[1] for v in by_line[k].values()) for k in by_line}
    print(f'per env step (all {args.envs} envs): fibril {total_us["fibril"]:.0f} us, '
          f'bare_ar {total_us["bare_ar"]:.0f} us of kernels')
    print(f'the {args.by_source} source lines with the most kernels per env step more than '
          'bare_ar: +launches (fibril, bare_ar) fibril-us')
    for k in sorted(keys, key=lambda k: -abs(f[k][0] - b[k][0]))[:args.by_source]:
      print(f'  {f[k][0] - b[k][0]:+7.1f} ({f[k][0]:6.1f}, {b[k][0]:6.1f}) '
            f'{f[k][1]:8.1f} us  {k}')
    print(f'the {args.by_source} fibril source lines with the most kernel time per env step:')
    for k in sorted(f, key=lambda k: -f[k][1])[:args.by_source]:
      print(f'  {f[k][1]:8.1f} us {f[k][0]:6.1f}x  {k}')
    for key in ('no-metadata', 'unmapped'):
      for name in by_line:
        print(f'  {name} {key}: ' + ', '.join(
            f'{k} {v:.1f}' for k, v in names[name][key].most_common(8)))
    for name, line in by_line.items():
      modules = collections.defaultdict(lambda: [0.0, 0.0])
      for k, v in line.items():
        modules[k.split(':')[0]][0] += v[0]
        modules[k.split(':')[0]][1] += v[1]
      print(f'  {name} per module, launches and us per env step: ' + ', '.join(
          f'{k} {v[0]:.1f} {v[1]:.0f} us' for k, v in
          sorted(modules.items(), key=lambda kv: -kv[1][1])))
  lines.append(f'rl_device_kernels_per_step={per_step["fibril"] - per_step["bare_ar"]:.1f}')
  print()
  print('\n'.join(lines))
  return 0


if __name__ == '__main__':
  sys.exit(main())
