"""`fibril-mjx replay DIR --world W --out DIR2`: re-runs one world of a campaign alone, with its
sampled values, and writes its full trace, metrics and plots.

The world runs from the same (seed, world index, field paths) as in the campaign, so its
metrics equal its Parquet row bitwise; `metrics.json` records the comparison.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

from fibril_mjx import analysis
from fibril_mjx.analysis import common
from fibril_mjx.errors import FibrilError
from fibril_mjx.io import outdir
from fibril_mjx.workflows.campaign import engine, spec
from fibril_mjx.workflows.campaign import execute as runmod


def replay(campaign_dir, world: int, out, *, overwrite: bool = False) -> dict:
  """Replays `world` of the campaign in `campaign_dir` into `out`; returns metrics.json."""
  campaign_dir = pathlib.Path(campaign_dir)
  meta_path = campaign_dir / 'campaign.json'
  if not meta_path.is_file():
    raise FibrilError(f'{campaign_dir}: not a campaign directory (no campaign.json)')
  meta = runmod.read_meta(meta_path)
  # its row, from verified parts (a damaged part is an error naming it, before the run)
  rows = runmod.read_rows(campaign_dir) if meta['completed'] else None
  o = meta['options']
  if not 0 <= world < o['worlds']:
    raise FibrilError(f'--world {world}: the campaign has worlds 0..{o["worlds"] - 1}')
  out = outdir.claim(out, overwrite=overwrite)
  camp = spec.read(meta['campaign_file'], worlds=o['worlds'], duration_s=o['duration_s'],
                   chunk_worlds=o['chunk_worlds'], policy=o.get('policy'),
                   design=o.get('design'), seed=o.get('seed'))
  plan = engine.Plan(camp, physics=o.get('physics', 'mjx'))   # the backend that ran it
  if runmod.hashes(plan) != meta['hashes']:
    raise FibrilError(f'{campaign_dir}: the campaign file, manifest, profiles or packages '
                      'changed since the campaign ran; replay would not reproduce it')
  worlds = np.array([world])
  samples = plan.sample(worlds)
  cols, flat = plan.run_worlds(worlds, samples, trace=True)
  sampled = plan.sampled_columns(samples)
  row = None
  if rows is not None:
    i = np.nonzero(rows['world'] == world)[0]
    row = {k: v[i[0]] for k, v in rows.items()} if len(i) else None
  metrics = {k: (bool(v[0]) if v.dtype == bool else float(v[0])) for k, v in cols.items()}
  result = {'world': world, 'campaign': str(campaign_dir), 'sampled': {
      k: str(v[0]) if v.dtype.kind in 'UO' else float(v[0]) for k, v in sampled.items()},
      'metrics': metrics}
  if row is not None:
    result['equal_to_campaign_row'] = all(
        np.array_equal(np.asarray(row[k]), np.asarray(v[0])) for k, v in cols.items())
  sim = plan.group_sim(tuple(int(samples[f.path][1][0]) for f in plan.static))
  time_s = np.arange(plan.n_ticks + 1) * sim.dt
  with outdir.staged(out) as tmp:
    (tmp / 'metrics.json').write_text(json.dumps(result, indent=2))
    np.savez(tmp / 'trace.npz', time_s=time_s, world_index=worlds, **flat)
    for cid, c in sim.components.items():
      kind = analysis.for_type(c.type)
      if kind.plot is not None:
        sensor, truth = common.group(flat, 'sensor', cid), common.group(flat, 'truth', cid)
        # every metric of the component (a plot may show some the campaign does not keep)
        m = {} if kind.metrics is None else kind.metrics(sensor, truth)
        kind.plot(tmp / f'{cid}.png', cid, time_s, sensor, truth, 0, m,
                  f'replay of world {world} — {cid} ({c.type})')
  return result
