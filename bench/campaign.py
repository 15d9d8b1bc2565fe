"""Campaign overhead: world-steps/s of a campaign (sampling, per-world model fields and
latencies, metrics, Parquet writing included) vs a plain `rollout` of the same worlds with
traces and the same metrics, on the AHRS robustness example.

Usage: .venv/bin/python bench/campaign.py [WORLDS] [DURATION_S]   (defaults 4096, 0.5)
Last line: `campaign_overhead_4096=` (campaign time / rollout time; goal <= 1.10).
Both are timed after a first run that compiles (the same shapes), so compile time is excluded.
"""

from __future__ import annotations

import math
import pathlib
import shutil
import sys
import tempfile
import time

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fibril_mjx  # noqa: E402
from fibril_mjx import analysis  # noqa: E402
from fibril_mjx.analysis import common  # noqa: E402
from fibril_mjx.campaign import engine, execute, spec  # noqa: E402

CAMPAIGN = ROOT / 'manifests' / 'campaigns' / 'ahrs_robustness.yaml'
CHUNK = 512


def plain(sim, worlds, n_ticks):
  params = sim.default_params(CHUNK)
  for lo in range(0, worlds, CHUNK):
    keys = fibril_mjx.world_keys(0, CHUNK, lo)
    _, tr = sim.rollout(params, keys, n_ticks, chunk_worlds=CHUNK)
    flat = common.flatten(jax.tree.map(np.asarray, tr))
    for cid, c in sim.components.items():
      fn = analysis.for_type(c.type).metrics
      if fn is not None:
        fn(common.group(flat, 'sensor', cid), common.group(flat, 'truth', cid))


def main():
  worlds = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
  duration = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
  camp = spec.read(CAMPAIGN, worlds=worlds, duration_s=duration, chunk_worlds=CHUNK)
  sim = fibril_mjx.load(camp.manifest)
  n_ticks = max(1, int(math.ceil(duration / sim.dt - 1e-9)))
  plain(sim, CHUNK, n_ticks)                                   # compile
  t0 = time.perf_counter()
  plain(sim, worlds, n_ticks)
  t_plain = time.perf_counter() - t0
  tmp = pathlib.Path(tempfile.mkdtemp(prefix='bench_campaign'))
  try:
    plan = engine.Plan(camp)
    plan.run_chunk(0, CHUNK)                                   # compile
    execute.engine.Plan = lambda c, _p=plan: _p                # reuse the compiled plan
    t0 = time.perf_counter()
    execute.run(CAMPAIGN, tmp / 'out', worlds=worlds, duration_s=duration, chunk_worlds=CHUNK,
                progress=False, report=False)
    t_camp = time.perf_counter() - t0
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  steps = worlds * n_ticks
  print(f'{worlds} worlds x {n_ticks} ticks, chunks of {CHUNK}')
  print(f'plain rollout + metrics: {t_plain:.1f} s, {steps / t_plain:,.0f} world-steps/s')
  print(f'campaign:                {t_camp:.1f} s, {steps / t_camp:,.0f} world-steps/s')
  print(f'campaign_overhead_{worlds}={t_camp / t_plain:.3f}')


if __name__ == '__main__':
  main()
