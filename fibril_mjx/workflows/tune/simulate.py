"""Recordings of a simulated unit (noise on), e.g. to try a tune file on known values."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.io import recording as rec_mod
from fibril_mjx.batch.simulation import Options, Start
from fibril_mjx.batch.simulation import load as load_simulation
from fibril_mjx.mechanisms.rng import world_keys


def simulate_recording(manifest, *, overrides=None, seed: int = 0, duration_s: float,
                       qpos0=None, qvel0=None, world: int = 0, meta: dict | None = None,
                       physics: str = 'mjx'):
  """A recording of a simulated unit (noise on, as configured): world `world` of `seed`.

  Args:
    manifest: manifest path; overrides: the unit's "true" values (overlay entries).
    qpos0, qvel0: optional initial joint positions `(nq,)` / velocities `(nv,)` (stored as
      `initial/qpos`, `initial/qvel`).

  Returns:
    a `Recording` (`recording_from_trace`: samples where delivered, truth apart).
  """
  return simulate_recordings(manifest, overrides=overrides, seed=seed, duration_s=duration_s,
                             qpos0=qpos0, qvel0=qvel0, worlds=[world], meta=meta,
                             physics=physics)[0]


def simulate_recordings(manifest, *, overrides=None, seed: int = 0, duration_s: float,
                        qpos0=None, qvel0=None, worlds=(0, 1), meta: dict | None = None,
                        physics: str = 'mjx'):
  """Recordings of worlds `worlds` of run `seed` of a simulated unit, from one batched run.

  Same initial state in every world; the worlds differ by their noise draws (independent
  recordings of one unit, e.g. a training and a held-out one). Arguments as
  `simulate_recording`; `physics`: `'mjx'` (in the loop, float32) or `'c'` (MuJoCo C, open
  loop, float64: much faster for long recordings on a CPU).

  Returns:
    a list of `Recording`s, one per entry of `worlds`.
  """
  sim = load_simulation(manifest, overrides=overrides, physics=physics)
  n = int(round(duration_s / sim.dt))
  nw = max(2, max(worlds) + 1)
  keys = world_keys(seed, nw)
  params = sim.default_params(nw)
  if physics == 'c':
    m = sim.mj_model
    off = lambda x, x0, k: None if x is None else np.tile(   # noqa: E731
        np.asarray(x, np.float64) - np.asarray(x0, np.float64), (nw, 1)).reshape(nw, k)
    start = Start(qpos_offset=off(qpos0, sim.data0.qpos, m.nq),
                  qvel_offset=off(qvel0, np.zeros(m.nv), m.nv))
    _, trace, _ = sim.rollout(params, keys, n, start=start,
                              options=Options(share_physics=False))
  else:
    d0 = sim.data0
    if qpos0 is not None:
      d0 = d0.replace(qpos=jnp.asarray(qpos0, d0.qpos.dtype))
    if qvel0 is not None:
      d0 = d0.replace(qvel=jnp.asarray(qvel0, d0.qvel.dtype))
    st = jax.jit(lambda p, k: sim.reset(p, k, start=Start(data0=d0)))(params, keys)
    out0 = sim.outputs(st)
    st, outs, _ = sim.run(params, st, n)
    trace = jax.tree.map(lambda a, b: jnp.concatenate([a[:, None], jnp.swapaxes(b, 0, 1)], 1),
                         out0, outs)
  trace = jax.tree.map(np.asarray, trace)
  out = []
  for w in worlds:
    info = {'seed': seed, **(meta or {})}
    rec = rec_mod.recording_from_trace(trace, w, sim=sim, meta=info)
    if qpos0 is not None or qvel0 is not None:
      rec.initial = {
          'qpos': np.asarray(sim.data0.qpos if qpos0 is None else qpos0, np.float64),
          'qvel': np.zeros(sim.mj_model.nv) if qvel0 is None else np.asarray(qvel0, np.float64)}
    out.append(rec)
  return out
