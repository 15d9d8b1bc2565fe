#!/usr/bin/env python3
"""Where a program's LAPACK-safe sub-batches go: around the whole run, around each physics
call, or around each LAPACK call only.

jaxlib splits a batched LAPACK call over its thread pool from 200,000 FLOP on, and two such
calls at once deadlock (`bench/lapack_hang_repro.py`). `fibril_mjx.batch.lapack` keeps every
call below that by running a program's worlds in sub-batches of `k`: a `lax.map` over the
whole block (`fibril_mjx.batch.worlds.program`), so a run's scan over ticks runs once per
sub-batch. On the MJX humanoid (a Cholesky of nv = 27, 6,561 FLOP per world) `k` is 30, so
every kernel of the device components then works on 30 worlds, and what they cost is mostly
their launches (`bench/kernels.py` counts them per sub-batch).

This bench measures the other places for the sub-batches, side by side in one process on one
pinned core:

  block     `Options(sub_batch=k)`: the program per sub-batch of k worlds (what fibril_mjx
            does);
  per-call  `Options(sub_batch=n)`, one program over all n = m·k worlds, with MJX's
            `forward` and `integrate` (`fibril_mjx.physics.mjx`) replaced by a form whose
            vmap is a `lax.map` over sub-batches of k (`jax.custom_batching.custom_vmap`):
            the components step every world at once, the physics stays below the split;
  lapack    the same program, with `forward` and `integrate` re-evaluated from their jaxpr
            so that only their LAPACK calls (`cholesky`, `triangular_solve`, ...) map over
            sub-batches of k: everything else, the physics included, steps all n worlds.

It prints each layout's µs per world-step of `sim.run` (median of interleaved repetitions),
the first calls of `reset` and `run` (compile), whether each layout ends in bitwise the
block's state, and `physics_sub_batch_ratio=` (per-call µs per world-step / block) and
`lapack_sub_batch_ratio=` (lapack / block). A ratio above 1 means the layout costs more than
the component launches it saves. On the humanoid, per-call slices every leaf of `mjx.Data`
(84 of them) out of the batch and writes it back twice per tick, per sub-batch. lapack steps
28 KB per world over every world at once, where a block's 30 worlds stay in the core's cache
for a whole run.

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
  if min(a.ticks, a.repeats) < 1 or any(x is not None and x < 1
                                         for x in (a.sub_batch, a.sub_batches)):
    ap.error('--sub-batch, --sub-batches, --ticks and --repeats must be positive')
  return a


def sub_batched(fn, k: int):
  """`fn` (one world's function) whose `vmap` over `n = m·k` worlds is a `lax.map` of its vmap
  over `m` sub-batches of `k` (this bench's world counts are whole sub-batches)."""
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


def has_lapack(jaxpr) -> bool:
  from jax.extend import core
  from fibril_mjx.batch.lapack import PRIMITIVES
  return any(e.primitive.name in PRIMITIVES or any(has_lapack(j) for j in
                                                   core.jaxprs_in_params(e.params))
             for e in jaxpr.eqns)


def eval_lapack_sub_batched(jaxpr, consts, args, k: int):
  """`jaxpr` evaluated with each LAPACK call `sub_batched` (k worlds), the calls that hold
  one inlined or rebuilt around it (jit, custom derivatives, scan, cond, while)."""
  import functools
  import jax
  from jax.extend import core
  from fibril_mjx.batch.lapack import PRIMITIVES
  env = dict(zip(jaxpr.constvars, consts)) | dict(zip(jaxpr.invars, args))
  read = lambda v: v.val if isinstance(v, core.Literal) else env[v]   # noqa: E731
  for e in jaxpr.eqns:
    ins, p, name = [read(v) for v in e.invars], e.params, e.primitive.name
    if name in PRIMITIVES:
      outs = sub_batched(functools.partial(e.primitive.bind, **p), k)(*ins)
    elif not any(has_lapack(j) for j in core.jaxprs_in_params(p)):
      outs = e.primitive.bind(*ins, **p)
    elif 'jaxpr' in p and name != 'scan' or 'call_jaxpr' in p:   # jit, custom_jvp/vjp_call
      inner = p.get('call_jaxpr', p.get('jaxpr'))
      outs = eval_lapack_sub_batched(inner.jaxpr, inner.consts, ins, k)
    elif name == 'scan':
      j, nc, ncar = p['jaxpr'], p['num_consts'], p['num_carry']

      def body(carry, x, j=j, c=ins[:nc], ncar=ncar):
        o = eval_lapack_sub_batched(j.jaxpr, j.consts, [*c, *carry, *x], k)
        return o[:ncar], o[ncar:]
      carry, ys = jax.lax.scan(body, ins[nc:nc + ncar], ins[nc + ncar:], length=p['length'],
                               reverse=p['reverse'], unroll=p['unroll'])
      outs = [*carry, *ys]
    elif name == 'cond':
      outs = jax.lax.switch(ins[0], [functools.partial(
          lambda b, *o: eval_lapack_sub_batched(b.jaxpr, b.consts, o, k), b)
          for b in p['branches']], *ins[1:])
    elif name == 'while':
      cj, bj, cn, bn = p['cond_jaxpr'], p['body_jaxpr'], p['cond_nconsts'], p['body_nconsts']
      outs = jax.lax.while_loop(
          lambda c: eval_lapack_sub_batched(cj.jaxpr, cj.consts, [*ins[:cn], *c], k)[0],
          lambda c: eval_lapack_sub_batched(bj.jaxpr, bj.consts, [*ins[cn:cn + bn], *c], k),
          list(ins[cn + bn:]))
    else:
      raise NotImplementedError(f'a LAPACK call inside {name!r}')
    outs = outs if e.primitive.multiple_results or name == 'jit' else [outs]
    env.update(zip(e.outvars, outs))
  return [read(v) for v in jaxpr.outvars]


def lapack_sub_batched(fn, k: int):
  """`fn` (one world's physics call) with only its LAPACK calls in sub-batches of `k` under
  `vmap`."""
  import jax

  def wrapped(*args):
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
    outs = eval_lapack_sub_batched(closed.jaxpr, closed.consts, jax.tree.leaves(args), k)
    return jax.tree.unflatten(jax.tree.structure(shapes), outs)
  return wrapped


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

  sims = {name: fm.load(a.manifest) for name in ('block', 'per-call', 'lapack')}
  k = a.sub_batch or sims['block'].sub_batch_cap()[0] or 8
  n = (a.sub_batches or max(2, round(1024 / k))) * k
  opts = {'block': Options(sub_batch=k, record=False),
          'per-call': Options(sub_batch=n, record=False),
          'lapack': Options(sub_batch=n, record=False)}
  wrap = {'per-call': sub_batched, 'lapack': lapack_sub_batched}
  print(f'jax {jax.__version__}, {pathlib.Path(a.manifest).name}: {n} worlds = '
        f'{n // k} sub-batches of {k}, {a.ticks} ticks, one core')
  params, keys = sims['block'].default_params(n), fm.world_keys(0, n)
  states, ends, times = {}, {}, {name: [] for name in sims}
  plain = physics.forward, physics.integrate
  for name, sim in sims.items():   # first calls: each layout traces MJX itself
    physics.forward.clear_cache()
    physics.integrate.clear_cache()
    if name in wrap:
      physics.forward = wrap[name](lambda m, d: plain[0](m, d), k)
      physics.integrate = wrap[name](lambda m, d: plain[1](m, d), k)
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
  for r in range(a.repeats):   # interleaved, the order reversed every repetition
    for name in (list(sims) if r % 2 == 0 else list(sims)[::-1]):
      t0 = time.perf_counter()
      jax.block_until_ready(sims[name].run(params, states[name], a.ticks,
                                           options=opts[name])[0])
      times[name].append(time.perf_counter() - t0)
  us = {name: statistics.median(t) / (n * a.ticks) * 1e6 for name, t in times.items()}
  for name in sims:
    same = all(np.array_equal(x, y, equal_nan=True) for x, y in
               zip(jax.tree.leaves(ends['block']), jax.tree.leaves(ends[name])))
    print(f'{name:9s} {us[name]:8.2f} us per world-step, final state bitwise the block\'s: '
          f'{same}')
  print(f'lapack_sub_batch_ratio={us["lapack"] / us["block"]:.3f}')
  print(f'physics_sub_batch_ratio={us["per-call"] / us["block"]:.3f}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
