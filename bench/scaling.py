#!/usr/bin/env python3
"""Scaling of the world axis, side by side in one process: devices, shared physics, and the
ratio to MuJoCo C plus a NumPy sensor model on the same compiled model, worlds and ticks.

Prints (last lines, machine readable):

  devices_speedup_2=            turntable, per-world physics: 2 CPU devices vs 1 (same
                                worlds and ticks; needs >= 2 cores)
  shared_physics_speedup_4096=  sensor-only turntable (AHRS), 4096 worlds: shared physics vs
                                one physics rollout per world
  c_ratio_turntable_1024=       fibril_mjx world-steps/s (per-world physics, all devices) /
                                (`mujoco.rollout`, threads = cores, + a vectorized NumPy
                                sensor model: bias, white noise, quantization on every
                                sample of every sensor), 1024 worlds
  c_ratio_turntable_shared_1024=  the same with shared physics
  c_ratio_wheeled_base_1024=    the wheeled base (contacts, dcmotor wheels, motor components)
  c_ratio_turntable_1024_physics_c=     fibril_mjx with `physics='c'` (MuJoCo C through
                                `mujoco.rollout`, same threads, then the device layer in
                                JAX over its sensordata) / the same C rollout + NumPy sensors
  c_ratio_wheeled_base_1024_physics_c=  the same for the wheeled base; both sides roll out
                                the controls the manifest's command script makes (driving)
  campaign_speedup_c_over_mjx=  the contact campaign (manifests/campaigns/
                                wheeled_base_robustness.yaml, 256 worlds x 0.5 s) wall time
                                with `physics: mjx` / with `physics: c`, compile included
                                (a user's run); `..._steady=` the second run of each

Rates are medians of `--repeats` timed rollouts (record=False) after a compiling one; C
timings include the NumPy sensor model. Other load on the machine moves both sides alike
only roughly: compare within one run.

  .venv/bin/python bench/scaling.py              # ~10 min on 2 busy cores
  .venv/bin/python bench/scaling.py --quick      # small sizes (smoke test)
  .venv/bin/python bench/scaling.py --only c     # the physics='c' ratios only
  .venv/bin/python bench/scaling.py --only campaign
  .venv/bin/python bench/scaling.py --only mjx       # devices, shared physics, MJX C ratios
"""

import argparse
import os
import pathlib
import statistics
import sys
import time
from fibril_mjx.batch.simulation import Options

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def fibril_rate(sim, n, ticks, repeats, **kw):
  """Median world-steps/s of `sim.rollout(record=False)` (first call compiles, untimed)."""
  import fibril_mjx as fm
  import jax
  p, keys = sim.default_params(n), fm.world_keys(0, n)
  t0 = time.perf_counter()
  jax.block_until_ready(sim.rollout(p, keys, ticks, options=Options(record=False, **kw))[0])
  compile_s = time.perf_counter() - t0
  ts = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(sim.rollout(p, keys, ticks, options=Options(record=False, **kw))[0])
    ts.append(time.perf_counter() - t0)
  return n * ticks / statistics.median(ts), compile_s - statistics.median(ts)


def c_rate(sim, n, ticks, repeats, threads, ctrl=None, *, callable_only=False):
  """World-steps/s of `mujoco.rollout` (threads) + a vectorized NumPy sensor model on the
  compiled MuJoCo model of `sim` (with its actuator_script ctrl, other actuators at 0; or
  `ctrl (ticks, nu)`); `callable_only`: the timed function itself (after one warm call)."""
  import jax
  import jax.numpy as jnp
  import mujoco
  import numpy as np
  from mujoco import rollout
  m = sim.mj_model
  d = mujoco.MjData(m)
  mujoco.mj_forward(m, d)
  spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
  s0 = np.zeros(mujoco.mj_stateSize(m, spec))
  mujoco.mj_getState(m, d, s0, spec)
  if ctrl is None:
    ctrl = np.asarray(jax.vmap(lambda k: sim.actuator_script.ctrl(
        jnp.zeros(m.nu, jnp.float32), k, sim.dt))(jnp.arange(ticks)), np.float64)
  ctrl = np.broadcast_to(ctrl, (n, ticks, m.nu)).copy()
  init = np.tile(s0, (n, 1))
  datas = [mujoco.MjData(m) for _ in range(threads)]
  rng = np.random.default_rng(0)
  bias = rng.normal(0, 0.01, (n, 1, m.nsensordata))
  lsb = 1e-4

  def once():
    _, sens = rollout.rollout(m, datas, init, ctrl, persistent_pool=True)
    noisy = sens + bias + 0.01 * rng.standard_normal(sens.shape)
    return np.round(noisy / lsb) * lsb
  once()
  if callable_only:
    return once
  ts = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    once()
    ts.append(time.perf_counter() - t0)
  return n * ticks / statistics.median(ts)


def driven_ctrl(sim, n_ticks):
  """`(n_ticks, nu)` controls the manifest's actuators write (world 0, pass 1 of physics_c)."""
  import jax.numpy as jnp
  import numpy as np
  import fibril_mjx as fm
  from fibril_mjx.batch import physics_c
  m = sim.mj_model
  s0 = physics_c.initial_states(m, 1)
  held = physics_c.frames_from_states(m, np.repeat(s0[:, None], n_ticks, axis=1),
                                      np.zeros((1, n_ticks, m.nsensordata)),
                                      np.zeros((1, n_ticks, m.nu)))
  ctrl = physics_c.device_program(sim.built, False, sim.default_params(1),
                                  fm.world_keys(0, 1), held, None, None)[2]
  return np.asarray(jnp.asarray(ctrl)[0], np.float64)


def interleaved(n, ticks, reps, **fns):
  """Median world-steps/s of each function, timed in alternation (`reps` rounds), so that a
  change of load on a shared machine reaches every side alike."""
  ts = {k: [] for k in fns}
  for _ in range(reps):
    for k, fn in fns.items():
      t0 = time.perf_counter()
      fn()
      ts[k].append(time.perf_counter() - t0)
  return {k: n * ticks / statistics.median(v) for k, v in ts.items()}


def physics_c_ratios(out, turn, n, ticks, reps, cores):
  """fibril_mjx over MuJoCo C (`physics='c'`) / MuJoCo C + NumPy sensors, same worlds, ticks,
  threads and controls, timed in alternation."""
  import jax
  import fibril_mjx as fm
  cases = [('turntable', fm.Simulation(turn.built, physics='c'), ticks, None)]
  wheel = fm.load(REPO / 'manifests' / 'wheeled_base.yaml', physics='c')
  wt = max(10, ticks // 4)
  cases.append(('wheeled_base', wheel, wt, driven_ctrl(wheel, wt)))
  for name, sim, t, ctrl in cases:
    p, keys = sim.default_params(n), fm.world_keys(0, n)
    quiet = Options(record=False, share_physics=False)
    fib = lambda: jax.block_until_ready(sim.rollout(p, keys, t, options=quiet)[0])
    t0 = time.perf_counter()
    fib()
    first = time.perf_counter() - t0
    r = interleaved(n, t, max(reps, 5), fibril=fib,
                    c=c_rate(sim, n, t, 0, cores, ctrl, callable_only=True))
    print(f'{name} {n} x {t}: fibril physics=c {r["fibril"]:,.0f} (first call {first:.1f} s '
          f'incl. compile); MuJoCo C ({cores} threads) + NumPy sensors {r["c"]:,.0f} '
          'world-steps/s' + (' (same driving controls)' if ctrl is not None else ''),
          flush=True)
    out[f'c_ratio_{name}_{n}_physics_c'] = r['fibril'] / r['c']


def campaign_speedup(out, worlds, duration_s):
  """The contact campaign with `physics: mjx` and with `physics: c`: wall time of a first
  run (compile included) and of a second one, each into a fresh directory."""
  import shutil
  import tempfile
  from fibril_mjx.workflows.campaign import engine, execute, spec
  path = REPO / 'manifests' / 'campaigns' / 'wheeled_base_robustness.yaml'
  camp = spec.read(path, worlds=worlds, duration_s=duration_s)
  import numpy as np
  times, rows = {}, {}
  for physics in ('c', 'mjx'):
    t0 = time.perf_counter()
    plan = engine.Plan(camp, physics=physics)
    runs = []
    for _ in range(2):
      d = pathlib.Path(tempfile.mkdtemp()) / 'c'
      execute.run(path, d, spec.Overrides(worlds=worlds, duration_s=duration_s), plan=plan,
                  report=False, progress=False)
      runs.append(time.perf_counter() - t0)
      rows[physics] = execute.read_rows(d)
      t0 = time.perf_counter()
      shutil.rmtree(d.parent, ignore_errors=True)
    times[physics] = runs
    print(f'contact campaign {worlds} worlds x {duration_s:g} s, physics {physics}: first run '
          f'{runs[0]:.1f} s (plan + compile + run), second {runs[1]:.1f} s', flush=True)
  print('metric distributions, physics c vs mjx (MuJoCo C and MJX solve contacts '
        'differently: compare statistically): mean / p5 / p50 / p95')
  for k in plan.metrics:
    a, b = (np.asarray(rows[p][k], np.float64) for p in ('c', 'mjx'))
    f = lambda x: ' / '.join(f'{v:.4g}' for v in (np.mean(x), *np.percentile(x, [5, 50, 95])))  # noqa
    print(f'  {k:<34} c {f(a)}   mjx {f(b)}')
  out['campaign_speedup_c_over_mjx'] = times['mjx'][0] / times['c'][0]
  out['campaign_speedup_c_over_mjx_steady'] = times['mjx'][1] / times['c'][1]


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--quick', action='store_true')
  ap.add_argument('--ticks', type=int, default=None, help='default 200 (--quick 20)')
  ap.add_argument('--repeats', type=int, default=None, help='default 3 (--quick 1)')
  ap.add_argument('--only', choices=('all', 'mjx', 'c', 'campaign'), default='all')
  a = ap.parse_args(argv)
  from fibril_mjx.batch.worlds import cpu_flags
  cores = cpu_flags()
  import jax
  import mujoco
  import fibril_mjx as fm
  q = a.quick
  ticks = a.ticks or (20 if q else 200)
  reps = a.repeats or (1 if q else 3)
  n1, n4 = (128, 256) if q else (1024, 4096)
  print(f'jax {jax.__version__}  mujoco {mujoco.__version__}  devices {len(jax.devices())}  '
        f'cores {cores}  cpu {platform_cpu()}  load {os.getloadavg()[0]:.2f}')
  turn = fm.load(REPO / 'manifests' / 'ahrs_turntable.yaml')
  out = {}
  if a.only in ('all', 'c'):
    physics_c_ratios(out, turn, n1, ticks, reps, cores)
  if a.only in ('all', 'campaign'):
    campaign_speedup(out, 64 if q else 256, 0.1 if q else 0.5)
  if a.only not in ('all', 'mjx'):
    for k, v in out.items():
      print(f'{k}={v:.3f}')
    return 0
  ndev = len(jax.devices())
  r1, c1 = fibril_rate(turn, n1, ticks, reps, devices=1, share_physics=False)
  print(f'turntable {n1} worlds per-world physics, 1 device: {r1:,.0f} world-steps/s '
        f'(compile {c1:.1f} s; {turn.layout(n1, devices=1).describe()})', flush=True)
  if ndev >= 2:
    r2, c2 = fibril_rate(turn, n1, ticks, reps, devices=2, share_physics=False)
    print(f'turntable {n1} worlds per-world physics, 2 devices: {r2:,.0f} world-steps/s '
          f'(compile {c2:.1f} s; {turn.layout(n1, devices=2).describe()})', flush=True)
    out['devices_speedup_2'] = r2 / r1
  rall = r2 if ndev == 2 else fibril_rate(turn, n1, ticks, reps, share_physics=False)[0]
  rs, _ = fibril_rate(turn, n1, ticks, reps)
  cr = c_rate(turn, n1, ticks, reps, cores)
  print(f'turntable {n1}: fibril per-world {rall:,.0f}, shared {rs:,.0f}; MuJoCo C '
        f'({cores} threads) + NumPy sensors {cr:,.0f} world-steps/s', flush=True)
  out[f'c_ratio_turntable_{n1}'] = rall / cr
  out[f'c_ratio_turntable_shared_{n1}'] = rs / cr
  ps, _ = fibril_rate(turn, n4, ticks, reps, share_physics=False)
  ss, _ = fibril_rate(turn, n4, ticks, reps)
  print(f'turntable {n4}: per-world physics {ps:,.0f}, shared physics {ss:,.0f} '
        'world-steps/s', flush=True)
  out[f'shared_physics_speedup_{n4}'] = ss / ps
  wheel = fm.load(REPO / 'manifests' / 'wheeled_base.yaml')
  wt = max(10, ticks // 4)
  rw, cw = fibril_rate(wheel, n1, wt, reps)
  crw = c_rate(wheel, n1, wt, reps, cores)
  print(f'wheeled base {n1} x {wt} ticks: fibril {rw:,.0f} (compile {cw:.1f} s; '
        f'{wheel.layout(n1).describe()}); MuJoCo C + NumPy sensors {crw:,.0f} world-steps/s')
  out[f'c_ratio_wheeled_base_{n1}'] = rw / crw
  for k, v in out.items():
    print(f'{k}={v:.3f}')
  return 0


def platform_cpu():
  try:
    for line in open('/proc/cpuinfo'):
      if line.startswith('model name'):
        return line.split(':', 1)[1].strip()
  except OSError:
    pass
  import platform
  return platform.processor()


if __name__ == '__main__':
  sys.exit(main())
