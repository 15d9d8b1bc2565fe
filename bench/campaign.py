"""Campaign overhead: world-steps/s of a campaign (sampling, per-world inputs, metrics,
Parquet parts and campaign.json included) vs a plain `Simulation.rollout` of the same worlds
with the same per-world values (same group simulation, params, per-world MJX model fields,
latencies, initial state, devices and batch layout) and the same metrics, on the AHRS
robustness example.

Usage: .venv/bin/python bench/campaign.py [WORLDS] [DURATION_S]   (defaults 4096, 0.5)
       .venv/bin/python bench/campaign.py --quick   # 16 worlds x 0.02 s, chunks of 8, one pass

Prints both rates, a profile of the campaign (where its time goes, per stage, summed over
chunks), the nominal rollout for reference (the manifest without `vary`, default params, no
per-world model fields: what the first version of this benchmark compared with), and last
`campaign_overhead_4096=` (campaign time / like-for-like rollout time; goal <= 1.10).
Everything is timed after a first pass that compiles the same shapes (compile time excluded);
the two compared runs are interleaved and the best of REPEAT each is kept;
like `fibril-mjx`, one XLA CPU device per core.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import pathlib
import shutil
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fibril_mjx.batch.worlds import cpu_flags  # noqa: E402

cpu_flags()   # before JAX initializes: one CPU device per core, as fibril-mjx does

import jax  # noqa: E402
import numpy as np  # noqa: E402

import fibril_mjx  # noqa: E402
from fibril_mjx import analysis  # noqa: E402
from fibril_mjx.analysis import common  # noqa: E402
from fibril_mjx.workflows.campaign import engine, execute, spec  # noqa: E402
from fibril_mjx.batch.simulation import Options

CAMPAIGN = ROOT / 'manifests' / 'campaigns' / 'ahrs_robustness.yaml'
CHUNK = 512
REPEAT = 2


def prepared(plan, worlds):
  """Per-chunk rollout inputs of the campaign's worlds, built before timing."""
  out = []
  for lo, hi in plan.chunks:
    w = np.arange(lo, hi)
    samples = plan.sample(w)
    sim = plan.group_sim(plan.group_key(samples))
    inp = plan.inputs(sim, w, samples)
    out.append((sim, inp, plan.sub_batch(sim)))
  return out


def plain_same(plan, inputs):
  """The same worlds, values and metrics through `rollout` directly (no campaign)."""
  for sim, inp, sub in inputs:
    _, tr, _ = inp.rollout(sim, plan.n_ticks, options=Options(sub_batch=sub))
    plan.metric_columns(sim, common.flatten(jax.tree.map(np.asarray, tr)))


def sensor_only(plan, inputs):
  """The same worlds with their sensor / transport values but nominal MJCF fields and initial
  state: nothing per world reaches the physics, so it is shared (computed once per chunk)."""
  for sim, inp, _ in inputs:
    inp = dataclasses.replace(inp, model=None, qpos_offset=None, qvel_offset=None)
    _, tr, _ = inp.rollout(sim, plan.n_ticks)
    plan.metric_columns(sim, common.flatten(jax.tree.map(np.asarray, tr)))


def plain_nominal(sim, worlds, n_ticks, share=True):
  params = sim.default_params(CHUNK)
  for lo in range(0, worlds, CHUNK):
    _, tr, _ = sim.rollout(params, fibril_mjx.world_keys(0, CHUNK, lo), n_ticks,
                           options=Options(share_physics=share))
    flat = common.flatten(jax.tree.map(np.asarray, tr))
    for cid, c in sim.components.items():
      fn = analysis.for_type(c.type).metrics
      if fn is not None:
        fn(common.group(flat, 'sensor', cid), common.group(flat, 'truth', cid))


def profile(plan, out):
  """One campaign pass split by stage (what `run_chunk` + `execute.finish` do), seconds."""
  t = dict.fromkeys(('sampling', 'inputs (params, model fields, latency)',
                     'rollout (device compute)', 'trace to host', 'metrics + criteria',
                     'sampled columns', 'Parquet part'), 0.0)
  (out / 'parts').mkdir(parents=True)
  keys = list(t)
  for i, (lo, hi) in enumerate(plan.chunks):
    w = np.arange(lo, hi)
    t0 = time.perf_counter()
    samples = plan.sample(w)
    t1 = time.perf_counter()
    sim = plan.group_sim(plan.group_key(samples))
    inp = plan.inputs(sim, w, samples)
    t2 = time.perf_counter()
    _, tr, _ = inp.rollout(sim, plan.n_ticks, options=Options(sub_batch=plan.sub_batch(sim)))
    jax.block_until_ready(tr)
    t3 = time.perf_counter()
    host = jax.tree.map(np.asarray, tr)
    t4 = time.perf_counter()
    cols = plan.metric_columns(sim, common.flatten(host))
    t5 = time.perf_counter()
    sampled = plan.sampled_columns(samples)
    t6 = time.perf_counter()
    execute.write_part(out / 'parts' / f'part-{i:05d}.parquet',
                       {'world': w, **sampled, **cols})
    t7 = time.perf_counter()
    for k, a, b in zip(keys, (t0, t1, t2, t3, t4, t5, t6), (t1, t2, t3, t4, t5, t6, t7)):
      t[k] += b - a
  return t


def main(argv=None):
  global CHUNK, REPEAT
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('worlds', type=int, nargs='?', default=None, help='default 4096 (--quick 16)')
  ap.add_argument('duration', type=float, nargs='?', default=None,
                  help='seconds per world (default 0.5; --quick 0.02)')
  ap.add_argument('--quick', action='store_true',
                  help='smoke test: 16 worlds x 0.02 s in chunks of 8, one timed pass each')
  a = ap.parse_args(argv)
  if a.quick:
    CHUNK, REPEAT = 8, 1
  worlds = a.worlds or (16 if a.quick else 4096)
  duration = a.duration or (0.02 if a.quick else 0.5)
  camp = spec.read(CAMPAIGN, worlds=worlds, duration_s=duration, chunk_worlds=CHUNK)
  plan = engine.Plan(camp)
  n_ticks = plan.n_ticks
  sim0 = plan.sim
  share, why = sim0.physics_sharing(model_fields=tuple(sorted(
      {f.target for f in plan.fields if f.kind == 'mjcf'})))
  inputs = prepared(plan, worlds)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix='bench_campaign'))
  try:
    plan.run_chunk(*plan.chunks[0])      # compiles the programs both paths use (same sims)
    for mod in ('pyarrow.parquet', 'tqdm'):   # first imports out of the timing
      importlib.import_module(mod)
    t_plain, t_camp = [], []
    for rep in range(REPEAT):   # interleaved, best of REPEAT (the machine is shared)
      t0 = time.perf_counter()
      plain_same(plan, inputs)
      t_plain.append(time.perf_counter() - t0)
      t0 = time.perf_counter()
      execute.run(CAMPAIGN, tmp / f'out{rep}',
                  spec.Overrides(worlds=worlds, duration_s=duration, chunk_worlds=CHUNK),
                  progress=False, report=False, plan=plan)
      t_camp.append(time.perf_counter() - t0)
    print('plain s:', ' '.join(f'{t:.2f}' for t in t_plain), ' campaign s:',
          ' '.join(f'{t:.2f}' for t in t_camp))
    t_plain, t_camp = min(t_plain), min(t_camp)
    prof = profile(plan, tmp / 'prof')
    nominal = fibril_mjx.load(camp.manifest)
    refs = {}
    for name, fn in (
        ('nominal rollout, physics shared', lambda w: plain_nominal(nominal, w, n_ticks)),
        ('nominal rollout, physics per world',
         lambda w: plain_nominal(nominal, w, n_ticks, share=False)),
        ('campaign values, sensor/transport only (shared physics)',
         lambda w: sensor_only(plan, inputs if w == worlds else inputs[:1]))):
      fn(CHUNK)                                                # compile
      t0 = time.perf_counter()
      fn(worlds)
      refs[name] = time.perf_counter() - t0
    t_nom = refs['nominal rollout, physics shared']
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  steps = worlds * n_ticks
  lay = sim0.layout(CHUNK, sub_batch=inputs[0][2], share=share)
  print(f'{worlds} worlds x {n_ticks} ticks, chunks of {CHUNK}: {lay.describe()}; '
        f'{len(jax.devices())} {jax.default_backend()} device(s); physics {why}')
  print(f'plain rollout, same worlds + values + metrics: {t_plain:6.2f} s, '
        f'{steps / t_plain:>10,.0f} world-steps/s')
  print(f'campaign (sampling ... Parquet):               {t_camp:6.2f} s, '
        f'{steps / t_camp:>10,.0f} world-steps/s')
  print('references (same worlds x ticks, metrics included):')
  for k, v in refs.items():
    print(f'  {k:<58s} {v:6.2f} s, {steps / v:>10,.0f} world-steps/s')
  total = sum(prof.values())
  print(f'campaign profile ({total:.2f} s over {len(plan.chunks)} chunks):')
  for k, v in prof.items():
    print(f'  {k:<40s} {v:7.3f} s  {100 * v / total:5.1f} %')
  print(f'campaign_vs_nominal_{worlds}={t_camp / t_nom:.3f}')
  print(f'campaign_overhead_{worlds}={t_camp / t_plain:.3f}')


if __name__ == '__main__':
  sys.exit(main())
