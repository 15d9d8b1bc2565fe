#!/usr/bin/env python3
"""The prepared GPU check (run by bench/gpu.sh): what the device layer costs on top of bare MJX,
for the AHRS turntable and the MJX test humanoid (with an AHRS on its torso), at 4096, 16384
and 65536 worlds.

Per model and size, side by side in one process:

* **bare MJX-JAX** — `jax.jit(lax.scan(jax.vmap(mjx.step)))` over the same compiled MuJoCo model
  fibril_mjx builds (its hidden probe sensors included), the same initial state and the
  manifest's actuator script as ctrl: physics alone, no device layer;
* **bare MJX-Warp** — the same with `mjx.put_model(..., impl='warp')`, where warp-lang is
  installed and an NVIDIA GPU is visible (else one line says why it is skipped);
* **fibril_mjx** — `Simulation.rollout(options=Options(record=False, share_physics=False))`:
  reset, physics per world and the AHRS device model on top, with MJX-JAX (and MJX-Warp where
  it runs).

Each is called once (compile + run) and then timed once more (run): `world-steps/s` = worlds x
ticks / the second call's wall time; `compile s` = first call - second call. The last lines per
size are `overhead_ratio_<model>_<n>=` (fibril world-steps/s / bare world-steps/s, MJX-JAX;
1.00 = the device layer is free) and `overhead_ratio_warp_<model>_<n>=`. Every line is flushed
as soon as it is known, so a later failure (out of memory at 65536 worlds, the bench's
timeout) keeps every figure before it. An incompatibility (a missing module, an API a jax
version removed) is one `... failed:` / `... skipped:` line and the script goes on with what it
can. `--budget-s`: no new size is started once the time spent plus the size's estimate would
pass it; those sizes are printed as skipped.

`--quick` (CPU smoke test): 64 worlds, 5 ticks, one XLA CPU device; on the CPU the bare
rollout uses the same LAPACK-safe sub-batches as fibril_mjx (`lax.map` over `vmap`s of k worlds).
"""

import argparse
import os
import pathlib
import sys
import time
from fibril_mjx.batch.simulation import Options

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / 'bench'))

MODELS = {'ahrs_turntable': REPO / 'manifests' / 'ahrs_turntable.yaml',
          'humanoid': REPO / 'bench' / 'humanoid_ahrs.yaml'}
# Without fibril_mjx (an import failure): the bare physics from the MJCF alone.
RAW_XML = {'ahrs_turntable': REPO / 'assets' / 'examples' / 'turntable.xml',
           'humanoid': REPO / 'bench' / 'humanoid_imu.xml'}


def say(*parts):
  print(*parts, flush=True)


def one_line(e: BaseException) -> str:
  text = ' '.join(str(e).split())
  return f'{type(e).__name__}: {text[:300]}'


def raw_model(name: str):
  """The model from its MJCF alone, `package://fibril_sim_models/` read as assets/."""
  import mujoco
  xml = RAW_XML[name].read_text().replace('package://fibril_sim_models/',
                                            str(REPO / 'assets') + '/')
  return mujoco.MjModel.from_xml_string(xml)


class Case:
  """One model: its fibril_mjx simulation (None when fibril_mjx cannot load) and the compiled
  MuJoCo model both variants step."""

  def __init__(self, name: str, fm):
    self.name, self.sim, self.script = name, None, None
    if fm is not None:
      try:
        self.sim = fm.load(MODELS[name])
        self.m, self.script = self.sim.physics_model, self.sim.actuator_script
      except Exception as e:  # noqa: BLE001 — reported, then the bare rows still run
        say(f'{name}: fibril_mjx cannot load {MODELS[name].name}: {one_line(e)}')
    if self.sim is None:
      self.m = raw_model(name)
    self.dt = float(self.m.opt.timestep)
    self.warp_sim = None

  def fibril_warp(self, fm):
    if self.warp_sim is None:
      self.warp_sim = fm.load(MODELS[self.name], impl='warp')
    return self.warp_sim


def bare_program(case: Case, n: int, ticks: int, impl: str, sub_batch):
  """`jit` of `n` worlds x `ticks` steps of bare MJX from the model's initial state."""
  import jax
  import jax.numpy as jnp
  import mujoco
  from mujoco import mjx
  m = case.m
  d = mujoco.MjData(m)
  mujoco.mj_forward(m, d)
  mx = mjx.put_model(m, impl=impl)
  dx0 = mjx.put_data(m, d, impl=impl)
  script = case.script

  def ctrl(dx, k):
    if script is None:
      return dx
    return dx.replace(ctrl=script.ctrl(dx.ctrl, k, case.dt))

  def tile(x):
    return jnp.broadcast_to(x, (n,) + jnp.shape(x))

  if sub_batch is None or sub_batch >= n:
    def tick(dx, k):
      dx = jax.vmap(lambda one: mjx.step(mx, ctrl(one, k)))(dx)
      return dx, None

    def run():
      dx = jax.tree.map(tile, dx0)
      return jax.lax.scan(tick, dx, jnp.arange(ticks))[0]
  else:   # CPU only: LAPACK-safe sub-batches, as fibril_mjx lays worlds out there
    def world(dx):
      def tick(one, k):
        return mjx.step(mx, ctrl(one, k)), None
      return jax.lax.scan(tick, dx, jnp.arange(ticks))[0]

    m_sub = -(-n // sub_batch)   # sub-batches, the last padded (explicit shapes: some
                                 # mjx.Data leaves are empty, which a -1 reshape cannot take)

    def run():
      dx = jax.tree.map(lambda x: jnp.broadcast_to(x, (m_sub, sub_batch) + jnp.shape(x)), dx0)
      return jax.lax.map(jax.vmap(world), dx)
  return jax.jit(run)


def timed(fn):
  """(first call s, second call s) of `fn()`, results blocked on."""
  import jax
  t0 = time.perf_counter()
  jax.block_until_ready(fn())
  first = time.perf_counter() - t0
  t0 = time.perf_counter()
  jax.block_until_ready(fn())
  return first, time.perf_counter() - t0


def row(impl, case, n, ticks, variant, first, steady, cost, extra=''):
  cost[0] += first - steady
  cost[1] += steady
  rate = n * ticks / steady
  say(f'{impl:4s} {case.name:14s} {n:6d} worlds x {ticks} ticks  {variant:6s}: '
      f'{rate:14,.0f} world-steps/s  compile {first - steady:6.1f} s{extra}')
  key = f'{impl}_{variant}_{case.name}_{n}'
  say(f'wsps_{key}={rate:.0f}')
  say(f'compile_s_{key}={first - steady:.2f}')
  return rate


def measure(case, n, ticks, impl, fm, sub_batch, rates):
  """Bare then fibril for one (model, size, impl); returns [compile s, steady run s] summed
  over both (the next size's estimate: the same compile, 4x the run)."""
  import jax
  import numpy as np
  cost = [0.0, 0.0]
  bare = fib = None
  try:
    prog = bare_program(case, n, ticks, impl, sub_batch)
    first, steady = timed(prog)
    bare = row(impl, case, n, ticks, 'bare', first, steady, cost)
  except Exception as e:  # noqa: BLE001 — e.g. out of memory, or an incompatible MJX
    say(f'{impl} {case.name} {n} bare: failed: {one_line(e)}')
  sim = case.sim if impl == 'jax' else None
  if impl == 'warp' and fm is not None and case.sim is not None:
    try:
      sim = case.fibril_warp(fm)
    except Exception as e:  # noqa: BLE001
      say(f'warp {case.name} fibril: cannot load with impl=warp: {one_line(e)}')
  if sim is not None:
    try:
      p, keys = sim.default_params(n), fm.world_keys(0, n)
      out = {}

      def go():
        out['st'] = sim.rollout(p, keys, ticks,
                                options=Options(record=False, share_physics=False))[0]
        return out['st']
      first, steady = timed(go)
      div = int(np.sum(np.asarray(out['st'].diverged) >= 0))
      stats = getattr(jax.devices()[0], 'memory_stats', lambda: None)() or {}
      peak = stats.get('peak_bytes_in_use')
      mem = f'  device peak so far {peak / 2**30:.2f} GiB' if peak else ''
      fib = row(impl, case, n, ticks, 'fibril', first, steady, cost,
                f'{mem}  diverged {div}/{n}  ({sim.layout(n).describe()})')
    except Exception as e:  # noqa: BLE001
      say(f'{impl} {case.name} {n} fibril: failed: {one_line(e)}')
  elif fm is None:
    say(f'{impl} {case.name} {n} fibril: skipped (fibril_mjx did not import)')
  rates[(case.name, n, impl)] = (bare, fib)
  if bare and fib:
    tag = '' if impl == 'jax' else 'warp_'
    say(f'overhead_ratio_{tag}{case.name}_{n}={fib / bare:.3f}  '
        f'(fibril world-steps/s / bare MJX-{impl.upper() if impl == "jax" else "Warp"}; '
        '1.00 = the device layer is free)')
  return cost


def c_ratio(case, n, ticks, fibril_rate):
  """`c_ratio_turntable_<n>=`: fibril_mjx's rate just measured over `mujoco.rollout` on the
  host's cores plus a NumPy sensor model (bench/scaling.py's `c_rate`)."""
  if case.sim is None or not fibril_rate:
    say(f'c_ratio_turntable_{n}: skipped (no fibril_mjx figure at {n} worlds)')
    return
  try:
    from scaling import c_rate
    cores = len(os.sched_getaffinity(0))
    c = c_rate(case.sim, n, ticks, 1, cores)
    say(f'c_ratio_turntable_{n}={fibril_rate / c:.3f}  (fibril {fibril_rate:,.0f} vs MuJoCo C '
        f'{cores} threads + NumPy sensors {c:,.0f} world-steps/s)')
  except Exception as e:  # noqa: BLE001
    say(f'c_ratio_turntable_{n}: failed: {one_line(e)}')


def warp_reason(jax):
  """None when MJX-Warp can run here, else why not (one line)."""
  if not any(d.platform == 'gpu' for d in jax.devices()):
    return (f'runs on NVIDIA GPUs only; this process sees {jax.devices()[0].platform} '
            'device(s)')
  try:
    import warp  # noqa: F401
  except ImportError:
    return ('warp-lang (mujoco-mjx[warp]) is not installed: its wheel is 149 MB, over the '
            '64 MiB a device call carries, so bench/gpu.sh --fetch does not fetch it')
  return None


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--quick', action='store_true', help='CPU smoke test: 64 worlds, 5 ticks')
  ap.add_argument('--worlds', type=int, nargs='+', default=None)
  ap.add_argument('--ticks', type=int, default=None)
  ap.add_argument('--models', nargs='+', choices=tuple(MODELS), default=list(MODELS))
  ap.add_argument('--budget-s', type=float, default=None,
                  help='start no new size once this much time would be spent (default 300 s; '
                  '1200 s with --quick, for a busy CPU)')
  ap.add_argument('--no-c-ratio', action='store_true')
  a = ap.parse_args(argv)
  t_start = time.perf_counter()
  sizes = a.worlds or ([64] if a.quick else [4096, 16384, 65536])
  ticks = a.ticks or (5 if a.quick else 100)
  if a.budget_s is None:
    a.budget_s = 1200.0 if a.quick else 300.0
  if a.quick:   # one XLA CPU device: bare and fibril then use the same one
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                               ' --xla_force_host_platform_device_count=1').strip()
  try:
    import jax
    import mujoco
    from mujoco import mjx  # noqa: F401
  except Exception as e:  # noqa: BLE001
    say(f'cannot run: jax / mujoco / mujoco.mjx do not import: {one_line(e)}')
    return 1
  say(f'python {sys.version.split()[0]}  jax {jax.__version__}  mujoco {mujoco.__version__}  '
      f'backend {jax.default_backend()}  devices {jax.devices()}')
  fm = None
  try:
    import fibril_mjx as fm
  except Exception as e:  # noqa: BLE001 — the bare rows still run
    say(f'fibril_mjx does not import (bare MJX rows only): {one_line(e)}')
  impls = ['jax']
  why = warp_reason(jax)
  if why is None:
    impls.append('warp')
  else:
    say(f'impl warp: skipped: MJX-Warp {why}')
  cases = []
  for name in a.models:
    try:
      cases.append(Case(name, fm))
    except Exception as e:  # noqa: BLE001
      say(f'{name}: cannot build the model: {one_line(e)}')
  for c in cases:
    say(f'model {c.name}: nq {c.m.nq} nv {c.m.nv} nu {c.m.nu} ngeom {c.m.ngeom} nsensor '
        f'{c.m.nsensor} dt {c.dt} s  ({"fibril_mjx physics model" if c.sim else "raw MJCF"})')
  last: dict = {}
  rates: dict = {}
  for n in sizes:           # size-major: both models at the smallest size come first
    for c in cases:
      for impl in impls:
        key = (c.name, impl)
        # the size before: the same compile, 4x the worlds, each program run twice
        est = last[key][0] + 8.0 * last[key][1] if key in last else 0.0
        spent = time.perf_counter() - t_start
        if spent + est > a.budget_s:
          say(f'{impl} {c.name} {n}: skipped (time budget: {spent:.0f} s spent + ~{est:.0f} s '
              f'estimated > {a.budget_s:.0f} s)')
          continue
        sub = None
        if jax.default_backend() == 'cpu' and c.sim is not None:
          sub = c.sim.sub_batch_cap()[0]
        last[key] = measure(c, n, ticks, impl, fm, sub, rates)
        if (c.name, impl, n) == ('ahrs_turntable', 'jax', sizes[0]) and not a.no_c_ratio:
          c_ratio(c, n, ticks, rates.get((c.name, n, impl), (None, None))[1])
  say(f'total {time.perf_counter() - t_start:.0f} s')
  return 0


if __name__ == '__main__':
  sys.exit(main())
