#!/usr/bin/env python3
"""Cost of MuJoCo `dcmotor` under MJX (fibril_mjx.physics.dcmotor): the wheeled base with dcmotor
wheels vs the same robot with plain velocity actuators, side by side in one run.

Variants (same manifest, same components and command_script, same contacts):
  * `dcmotor`  — manifests/wheeled_base.yaml as is: four M3508 P19 dcmotors (input="vel",
                 controller kd, 24 V limit, 20 A saturation, inductance → a current state),
                 stepped by the JAX dcmotor evaluation next to MJX;
  * `velocity` — a temporary copy of the robot MJCF where each dcmotor is replaced by
                 `<velocity kv="kd" forcerange="the dcmotor's force range">` (the dcmotor's
                 speed loop without the electrical model), so plain `mjx.step` runs.

Both are timed like bench/overhead.py (compile and a steady call first, then interleaved
repetitions of reset + `sim.run(record=False)` in chunks; the median counts). The last line is

  dcmotor_ratio_<worlds>=<velocity world-steps/s / dcmotor world-steps/s>

(slowdown factor of the dcmotor evaluation; 1.0 = free).

All worlds run in one program laid out by `fibril_mjx.batch.worlds` (sharded over the devices,
LAPACK-safe sub-batches inside, which removes the jaxlib CPU Cholesky deadlock that once made
this bench chunk by 512); `--chunk N` adds host chunks.

Usage:
  .venv/bin/python bench/dcmotor.py              # 1024 worlds, 100 ticks, 3 repetitions
  .venv/bin/python bench/dcmotor.py --quick      # 128 worlds, 20 ticks, 2 repetitions
"""

from __future__ import annotations

import argparse
import faulthandler
import pathlib
import re
import statistics
import sys
import tempfile
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from overhead import Variant, fmt_rate, load  # noqa: E402


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--manifest', default=str(REPO / 'manifests' / 'wheeled_base.yaml'))
  ap.add_argument('--worlds', type=int, default=None, help='default 1024 (--quick: 128)')
  ap.add_argument('--ticks', type=int, default=None, help='default 100 (--quick: 20)')
  ap.add_argument('--repeats', type=int, default=None, help='default 3 (--quick: 2)')
  ap.add_argument('--chunk', type=int, default=None, help='worlds per host chunk (default none)')
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument('--quick', action='store_true')
  ap.add_argument('--watchdog-s', type=float, default=1800.0)
  a = ap.parse_args(argv)
  a.worlds = a.worlds or (128 if a.quick else 1024)
  a.ticks = a.ticks or (20 if a.quick else 100)
  a.repeats = a.repeats or (2 if a.quick else 3)
  a.chunk = a.chunk and min(a.chunk, a.worlds)
  return a


_DCMOTOR = re.compile(r'<dcmotor\b[^>]*/>', re.S)


def velocity_twin(manifest: pathlib.Path, sim, tmp: pathlib.Path) -> pathlib.Path:
  """Writes the robot with each dcmotor replaced by a velocity servo; returns its manifest."""
  m = sim.mj_model
  xml = sim.manifest.model_path.read_text()
  repl = {}
  for aid in sim.dcmotor.actuator_id:
    name = m.actuator(aid).name
    joint = m.joint(m.actuator_trnid[aid, 0]).name
    kd = float(m.actuator_gainprm[aid, 6])
    lo, hi = m.actuator_forcerange[aid]
    repl[name] = (f'<velocity name="{name}" joint="{joint}" kv="{kd:g}" '
                  f'forcerange="{lo:g} {hi:g}"/>')

  def sub(match):
    name = re.search(r'name="([^"]+)"', match.group(0)).group(1)
    return repl.get(name, match.group(0))
  out_xml = tmp / sim.manifest.model_path.name.replace('.xml', '_velocity.xml')
  out_xml.write_text(_DCMOTOR.sub(sub, xml))
  doc = yaml.safe_load(manifest.read_text())
  doc['model'] = str(out_xml)
  base = manifest.resolve().parent
  if 'packages' in doc:
    doc['packages'] = {k: str((base / v).resolve()) for k, v in doc['packages'].items()}
  doc['profile_paths'] = [str((base / p).resolve()) for p in doc.get('profile_paths', [])]
  out = tmp / 'velocity_twin.yaml'
  out.write_text(yaml.safe_dump(doc, sort_keys=False))
  return out


def main(argv=None):
  args = parse_args(argv)
  if args.watchdog_s > 0:
    faulthandler.dump_traceback_later(args.watchdog_s, exit=True)
  sys.path.insert(0, str(REPO))
  from fibril_mjx.batch.worlds import cpu_flags
  cpu_flags()   # one XLA CPU device per core, as fibril-mjx does (before JAX starts)
  import jax
  import mujoco
  import fibril_mjx as fm
  print(f'jax {jax.__version__}  mujoco {mujoco.__version__}  fibril_mjx {fm.__version__}  '
        f'devices {jax.devices()}  load average {load()}')
  src = pathlib.Path(args.manifest)
  print(f'manifest {src}  worlds {args.worlds}  ticks {args.ticks}  repeats {args.repeats}  '
        f'chunk {args.chunk}')
  dc_sim = fm.load(src)
  if dc_sim.dcmotor is None:
    raise SystemExit(f'{src}: the model has no dcmotor actuator')
  with tempfile.TemporaryDirectory(prefix='fibril_dcbench_') as tmp:
    vel_sim = fm.load(velocity_twin(src, dc_sim, pathlib.Path(tmp)))
  assert vel_sim.dcmotor is None
  print('velocity twin: ' + ', '.join(
      f'{vel_sim.mj_model.actuator(i).name} kv {vel_sim.mj_model.actuator_gainprm[i, 0]:g} '
      f'forcerange {vel_sim.mj_model.actuator_forcerange[i].tolist()}'
      for i in range(vel_sim.mj_model.nactuator)))
  variants = (Variant('dcmotor', dc_sim, args.seed, args.chunk),
              Variant('velocity', vel_sim, args.seed, args.chunk))
  n = args.worlds
  for v in variants:
    t0 = time.perf_counter()
    v.first = v.call(n, args.ticks)
    v.steady0 = v.call(n, args.ticks)
    print(f'compiled {v.name:8s} in {time.perf_counter() - t0:6.1f} s (first call '
          f'{sum(v.first[:2]):.1f} s, steady {sum(v.steady0[:2]):.2f} s)', flush=True)
  for r in range(args.repeats):
    for v in (variants if r % 2 == 0 else variants[::-1]):
      rs, ru, cpu = v.call(n, args.ticks)
      v.run_s.setdefault(n, []).append(ru)
      v.cpu_s.setdefault(n, []).append(cpu)
    print(f'repetition {r + 1}/{args.repeats} (load average {load()})', flush=True)
  print()
  print(f'{"variant":9s} {"world-steps/s":>14s} {"[min - max]":>24s} {"per CPU-s":>10s}')
  rates = {}
  for v in variants:
    ts = v.run_s[n]
    rates[v.name] = n * args.ticks / statistics.median(ts)
    print(f'{v.name:9s} {fmt_rate(rates[v.name]):>14s} '
          f'{"[" + fmt_rate(n * args.ticks / max(ts)) + " - " + fmt_rate(n * args.ticks / min(ts)) + "]":>24s} '
          f'{fmt_rate(n * args.ticks / statistics.median(v.cpu_s[n])):>10s}')
  ratio = rates['velocity'] / rates['dcmotor']
  paired = sorted(d / vv for d, vv in zip(variants[0].run_s[n], variants[1].run_s[n]))
  print(f'ratio (velocity / dcmotor world-steps/s): {ratio:.3f}; paired per repetition '
        + ' '.join(f'{x:.3f}' for x in paired))
  print(f'dcmotor_ratio_{n}={ratio:.4f}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
