#!/usr/bin/env python3
"""Minimal reproducer (jax + mujoco only) of the jaxlib 0.10 CPU deadlock in batched LAPACK
Cholesky under `jit(scan(vmap(mjx.step)))`, for an upstream report.

A free-floating box with four hinged legs on a plane (nv = 10, contacts) is stepped for a few
steps over many worlds. jaxlib's `lapack_spotrf_ffi` splits a batch over the intra-op thread
pool when `batch * n**3 / 3 >= 200 000` FLOP (`GetLapackBatchChunkSize`) and waits on a
`BlockingCounter`; when the thunk executor runs two such calls at once on the pool's workers
(2 on a 2-core machine), each waits for sub-tasks queued behind the other: 0 % CPU forever.

  python bench/lapack_hang_repro.py --worlds 1024          # hangs (watchdog exits after 120 s)
  python bench/lapack_hang_repro.py --worlds 1024 --safe   # lax.map over sub-batches of 512
  python bench/lapack_hang_repro.py --worlds 512           # below the split: runs
  python bench/lapack_hang_repro.py --quick                # smoke test: 16 worlds, 2 steps, --safe

With `--safe` the worlds are reshaped to (W/k, k) with k * 333 < 200 000 and `lax.map` runs
the vmapped step over the sub-batches: every Cholesky runs inline, no hang.
"""

import argparse
import contextlib
import faulthandler
import io
import sys
import time

import jax
import jax.numpy as jnp
import mujoco

with contextlib.redirect_stdout(io.StringIO()):
  from mujoco import mjx

XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1"/>
    <body pos="0 0 0.3">
      <freejoint/>
      <geom type="box" size="0.2 0.15 0.05" mass="4"/>
      <body pos=" 0.2  0.15 0"><joint type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.03"/></body>
      <body pos=" 0.2 -0.15 0"><joint type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.03"/></body>
      <body pos="-0.2  0.15 0"><joint type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.03"/></body>
      <body pos="-0.2 -0.15 0"><joint type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.03"/></body>
    </body>
  </worldbody>
</mujoco>
"""


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--worlds', type=int, default=None, help='default 1024 (--quick 16)')
  ap.add_argument('--steps', type=int, default=None, help='default 10 (--quick 2)')
  ap.add_argument('--safe', action='store_true', help='lax.map over LAPACK-safe sub-batches')
  ap.add_argument('--timeout-s', type=float, default=120.0)
  ap.add_argument('--quick', action='store_true',
                  help='smoke test: 16 worlds, 2 steps, with --safe (sub-batches of 8)')
  a = ap.parse_args(argv)
  a.worlds = a.worlds or (16 if a.quick else 1024)
  a.steps = a.steps or (2 if a.quick else 10)
  a.safe = a.safe or a.quick
  m = mujoco.MjModel.from_xml_string(XML)
  mx, dx = mjx.put_model(m), mjx.put_data(m, mujoco.MjData(m))
  cost = m.nv ** 3 // 3
  k = 1 << (max(2, 199_999 // cost).bit_length() - 1)   # a power of two below the split
  if a.worlds < k:   # fewer worlds than one sub-batch (--quick): two sub-batches
    k = 1 << (max(2, a.worlds // 2).bit_length() - 1)
  print(f'jax {jax.__version__} mujoco {mujoco.__version__} devices {jax.devices()}; nv {m.nv}: '
        f'Cholesky cost {cost} FLOP, split at {200_000 // cost + 1} matrices; '
        f'worlds {a.worlds}, safe={a.safe} (sub-batch {k})', flush=True)
  batch = jax.tree.map(lambda x: jnp.broadcast_to(x, (a.worlds,) + x.shape), dx)
  batch = batch.replace(qpos=batch.qpos.at[:, 2].add(jnp.linspace(0, 0.1, a.worlds)))

  def rollout(d):
    return jax.lax.scan(lambda d, _: (jax.vmap(mjx.step, in_axes=(None, 0))(mx, d), None),
                        d, None, length=a.steps)[0]

  def safe(d):
    n = a.worlds // k * k   # (the remainder would run as a last, smaller sub-batch)
    split = jax.tree.map(lambda x: x[:n].reshape((n // k, k) + x.shape[1:]), d)
    out = jax.lax.map(rollout, split)
    return jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), out)

  faulthandler.dump_traceback_later(a.timeout_s, exit=True)
  t0 = time.perf_counter()
  out = jax.jit(safe if a.safe else rollout)(batch)
  jax.block_until_ready(out)
  faulthandler.cancel_dump_traceback_later()
  wall, finite = time.perf_counter() - t0, bool(jnp.isfinite(out.qpos).all())
  print(f'finished in {wall:.1f} s (incl. compile); qpos finite: {finite}')
  print(f'repro_finished_s={wall:.2f}')
  return 0 if finite else 1


if __name__ == '__main__':
  sys.exit(main())
