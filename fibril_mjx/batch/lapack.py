"""jaxlib's LAPACK thread-pool split, and the sub-batch of worlds that stays below it
(`fibril_mjx.batch.worlds`, "sub-batches": two batched LAPACK calls split over the intra-op
pool deadlock it).

A program finds its own sub-batch (`laid_out`): traced at one sub-batch per device, its LAPACK
calls give the work per world; it is laid out again only when that work caps the sub-batch.
JAX keeps the trace for the compilation, so the check costs no second trace.
"""

from __future__ import annotations

from typing import Callable, Iterator

import jax
import numpy as np

from fibril_mjx.batch import worlds

LAPACK_MIN_WORK = 200_000   # jaxlib 0.10 CPU: a batched LAPACK call splits at this FLOP count

_LINALG_COST = {
    # FLOP estimates per matrix, as jaxlib 0.10's lapack_kernels.cc computes them.
    'cholesky': lambda s: s[-1] ** 3 // 3,
    'lu': lambda s: s[-2] * s[-1] * min(s[-2], s[-1]),
    'geqrf': lambda s: 2 * s[-2] * s[-1] * min(s[-2], s[-1]) - 2 * min(s[-2], s[-1]) ** 3 // 3,
    'geqp3': lambda s: 2 * s[-2] * s[-1] * min(s[-2], s[-1]) - 2 * min(s[-2], s[-1]) ** 3 // 3,
}
_LINALG_OTHER = {'eigh', 'eig', 'svd', 'schur', 'householder_product', 'hessenberg',
                 'tridiagonal', 'tridiagonal_solve', 'qr', 'ormqr'}
# every JAX primitive that runs as a CPU LAPACK kernel
PRIMITIVES = frozenset(_LINALG_COST) | _LINALG_OTHER | {'triangular_solve'}


def _linalg_calls(jaxpr) -> Iterator[tuple[str, int, int]]:
  """(primitive, matrices per call, FLOP per matrix) of every LAPACK-backed call, recursively."""
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name in PRIMITIVES:
      s = tuple(eqn.invars[0].aval.shape)
      if name == 'triangular_solve':
        b = tuple(eqn.invars[1].aval.shape)
        rows, cols = b[-2], b[-1]
        cost = rows * cols * (rows if eqn.params.get('left_side') else cols)
        batch = int(np.prod(b[:-2], dtype=np.int64))
      else:
        cost = (_LINALG_COST[name](s) if name in _LINALG_COST
                else 4 * max(s[-2:]) ** 3)     # conservative for kernels not listed
        batch = int(np.prod(s[:-2], dtype=np.int64))
      yield name, batch, int(cost)
    for v in eqn.params.values():
      for sub in (v if isinstance(v, (tuple, list)) else (v,)):
        inner = getattr(sub, 'jaxpr', sub)
        if hasattr(inner, 'eqns'):
          yield from _linalg_calls(inner)


def lapack_safe_sub_batch(fn: Callable, *args) -> tuple[int | None, str]:
  """Largest number of worlds per vmapped call of `fn` (a single-world function) whose LAPACK
  calls all stay below jaxlib's thread-pool split, and why.

  Returns:
    `(k, reason)`: `k` None when `fn` makes no batched LAPACK call (any sub-batch is safe).
  """
  return lapack_safe_sub_batch_of(jax.make_jaxpr(fn)(*args).jaxpr)


def lapack_safe_sub_batch_of(jaxpr, worlds_per_call: int = 1) -> tuple[int | None, str]:
  """`lapack_safe_sub_batch` read from a jaxpr whose batched calls hold `worlds_per_call`
  worlds (a program's own trace at one sub-batch of that size): a call's work per world is its
  work divided by that number, rounded up."""
  worst, what = 0, ''
  for name, batch, cost in _linalg_calls(jaxpr):
    per_world = -(-batch * cost // worlds_per_call)
    if per_world > worst:
      worst, what = per_world, (f'{name} ({-(-batch // worlds_per_call)} x {cost} FLOP per '
                                'world)')
  if worst == 0:
    return None, 'no batched LAPACK call in the step'
  k = max(2, (LAPACK_MIN_WORK - 1) // worst)
  return k, (f'{k} worlds per sub-batch keep {what} below jaxlib\'s {LAPACK_MIN_WORK:,}-FLOP '
             'thread-pool split')


def laid_out(program: Callable, n: int, devices, cap: int | None, find: bool, caps: dict, key,
             args: Callable):
  """`(jitted program, layout)` of `n` worlds on `devices`, from `program(layout)` (the jitted
  program of a layout) and `args(layout)` (its arguments): at most `cap` worlds per sub-batch,
  or with `find` the LAPACK-safe sub-batch read from the program's trace, kept in
  `caps[key]` for the programs of other world counts."""
  cap = caps.get(key) if find else cap
  lay = worlds.layout(n, len(devices), cap)
  prog = program(lay)
  if find and key not in caps and lay.sub_batch > 2:
    found = caps[key] = lapack_safe_sub_batch_of(prog.trace(*args(lay)).jaxpr.jaxpr,
                                                 lay.sub_batch)[0]
    if found is not None and found < lay.sub_batch:
      lay = worlds.layout(n, len(devices), found)
      prog = program(lay)
  return prog, lay
