"""`fibril-mjx run`: a batch of worlds, with progress, a summary, traces and plots.

Output directory layout (written to a temporary sibling and renamed when complete, so a
failed run never leaves a directory that looks finished):

- `summary.txt` / `summary.json` — throughput and per-component statistics across worlds.
- `meta.json` — seed, manifest path and sha256, fibril_mjx / jax / mujoco versions, worlds,
  duration, dt, ticks, command line, and every component's resolved fields with their layer.
- `worlds.csv` — one row per world: global world index and each per-world metric.
- `trace.npz` — per-tick arrays of the first `--trace-worlds` worlds: `time_s` `(T,)`,
  `world_index` `(K,)`, `sensor/<id>/<field>` and `truth/<id>/<field>` `(K, T, ...)`. Sensor
  fields are the delivered output held at each tick (`new_data` marks deliveries).
- `<component id>.png` — truth vs delivered samples for world 0 and the error distribution.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import sys
import time

import jax
import numpy as np
from tqdm import tqdm

from fibril_mjx import __version__, analysis
from fibril_mjx.analysis import common
from fibril_mjx.errors import FibrilError


def _jsonable(v):
  if isinstance(v, tuple):
    return [_jsonable(x) for x in v]
  return v


def run(manifest_path, *, worlds: int, seed: int, duration_s: float, out, trace_worlds=16,
        chunk_worlds=1024, overwrite=False, segments=20) -> dict:
  """Runs `worlds` worlds for `duration_s` and writes the output directory. Returns the summary."""
  import mujoco
  from fibril_mjx import simulator

  out = pathlib.Path(out)
  if out.exists() and any(out.iterdir()) and not overwrite:
    raise FibrilError(f'{out}: output directory exists and is not empty (use --overwrite)')
  t_build = time.perf_counter()
  sim = simulator.load(manifest_path)
  build_s = time.perf_counter() - t_build
  n_ticks = max(1, int(math.ceil(duration_s / sim.dt - 1e-9)))
  seg = int(math.ceil(n_ticks / segments))
  n_seg = int(math.ceil(n_ticks / seg))
  trace_worlds = max(0, min(trace_worlds, worlds))
  chunk = min(chunk_worlds, worlds)

  params_all = sim.default_params(worlds)
  metrics: dict[str, dict[str, list]] = {cid: {} for cid in sim.components}
  status: dict[str, dict[str, list]] = {cid: {} for cid in sim.components}
  kept: dict[str, list] = {}
  first_call_s, steady_s, steady_steps = None, 0.0, 0
  bar = tqdm(total=worlds * n_seg * seg, unit='world-step', unit_scale=True,
             desc=f'{pathlib.Path(manifest_path).name}', file=sys.stderr, dynamic_ncols=True,
             disable=os.environ.get('FIBRIL_MJX_NO_PROGRESS') == '1')
  t_run = time.perf_counter()
  for lo in range(0, worlds, chunk):
    hi = min(worlds, lo + chunk)
    p = jax.tree.map(lambda x: x[lo:hi], params_all)
    keys = simulator.world_keys(seed, hi - lo, lo)
    t0 = time.perf_counter()
    state = sim.reset(p, keys)
    pieces = [jax.tree.map(lambda x: np.asarray(x)[:, None], sim.outputs(state))]
    for _ in range(n_seg):
      t0 = time.perf_counter() if first_call_s is not None else t0
      state, outs = sim.run(p, state, seg, True)
      outs = jax.tree.map(lambda x: np.swapaxes(np.asarray(x), 0, 1), outs)
      dt_call = time.perf_counter() - t0
      if first_call_s is None:
        first_call_s = dt_call
      else:
        steady_s += dt_call
        steady_steps += (hi - lo) * seg
      pieces.append(outs)
      bar.update((hi - lo) * seg)
    trace = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1)[:, :n_ticks + 1], *pieces)
    flat = common.flatten(trace)
    for cid, c in sim.components.items():
      metric_fn = analysis.for_type(c.type).metrics
      if metric_fn is not None:
        m = metric_fn(common.group(flat, 'sensor', cid), common.group(flat, 'truth', cid))
        for k, v in m.items():
          metrics[cid].setdefault(k, []).append(np.asarray(v))
      for k, v in c.status(state.components[cid]).items():
        status[cid].setdefault(k, []).append(np.asarray(v))
    if lo < trace_worlds:
      for k, v in flat.items():
        kept.setdefault(k, []).append(v[:trace_worlds - lo])
  bar.close()
  run_s = time.perf_counter() - t_run
  metrics = {cid: {k: np.concatenate(v) for k, v in m.items()} for cid, m in metrics.items()}
  status = {cid: {k: np.concatenate(v) for k, v in m.items()} for cid, m in status.items()}
  time_s = np.arange(n_ticks + 1) * sim.dt

  rate = steady_steps / steady_s if steady_s > 0 else float('nan')
  summary = {
      'manifest': str(manifest_path), 'manifest_sha256': sim.manifest.sha256,
      'fibril_mjx': __version__, 'seed': seed, 'worlds': worlds, 'duration_s': n_ticks * sim.dt,
      'dt_s': sim.dt, 'ticks': n_ticks, 'build_s': build_s, 'run_s': run_s,
      'first_segment_s_including_compile': first_call_s,
      'world_steps_per_s': rate, 'components': {}}
  lines = [f'fibril-mjx run {manifest_path}  (fibril_mjx {__version__}, seed {seed}, manifest '
           f'sha256 {sim.manifest.sha256[:12]})',
           f'{worlds} worlds x {n_ticks} ticks (dt {sim.dt:g} s, {n_ticks * sim.dt:g} s)  '
           f'build {build_s:.1f} s, first segment incl. compile {first_call_s:.1f} s, '
           f'total {run_s:.1f} s',
           f'throughput {rate:,.0f} world-steps/s (after compile)', '']
  for cid, c in sim.components.items():
    comp = {'type': c.type, 'sample_type': c.sample_type, 'metrics': {}, 'status': {}}
    lines.append(f'{cid} ({c.type}) — across {worlds} worlds: mean / p50 / p95 / max')
    for k, v in metrics[cid].items():
      d = common.describe(v)
      comp['metrics'][k] = d
      lines.append(f'  {k:<34} {d["mean"]:.4g} / {d["p50"]:.4g} / {d["p95"]:.4g} / '
                   f'{d["max"]:.4g}')
    for k, v in status[cid].items():
      tot = int(np.sum(v))
      comp['status'][k] = tot
      lines.append(f'  {k:<34} {tot} in total')
    summary['components'][cid] = comp
    lines.append('')

  meta = {
      'fibril_mjx': __version__, 'jax': jax.__version__, 'mujoco': mujoco.__version__,
      'manifest': str(pathlib.Path(manifest_path).resolve()),
      'manifest_sha256': sim.manifest.sha256, 'model': str(sim.manifest.model_path),
      'seed': seed, 'worlds': worlds, 'world_key': 'fold_in(PRNGKey(seed), global world index)',
      'dt_s': sim.dt, 'ticks': n_ticks, 'command': sys.argv,
      'components': {cid: {'type': c.type, 'fields': {
          n: {'value': _jsonable(fv.value), 'layer': fv.layer, 'source': fv.source}
          for n, fv in c.fields}} for cid, c in sim.components.items()},
      'params': 'every world uses the resolved field values above (no randomization)',
  }

  tmp = out.parent / f'.{out.name}.partial-{os.getpid()}'
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  try:
    (tmp / 'summary.txt').write_text('\n'.join(lines) + '\n')
    (tmp / 'summary.json').write_text(json.dumps(summary, indent=2))
    (tmp / 'meta.json').write_text(json.dumps(meta, indent=2))
    cols = ['world_index'] + [f'{cid}/{k}' for cid in metrics for k in metrics[cid]]
    rows = np.column_stack([np.arange(worlds)] + [metrics[cid][k] for cid in metrics
                                                   for k in metrics[cid]])
    np.savetxt(tmp / 'worlds.csv', rows, delimiter=',', header=','.join(cols), comments='',
               fmt='%.9g')
    if trace_worlds:
      arrays = {k: np.concatenate(v) for k, v in kept.items()}
      np.savez(tmp / 'trace.npz', time_s=time_s, world_index=np.arange(trace_worlds), **arrays)
      for cid, c in sim.components.items():
        plot_fn = analysis.for_type(c.type).plot
        if plot_fn is not None:
          plot_fn(tmp / f'{cid}.png', cid, time_s, common.group(arrays, 'sensor', cid),
                  common.group(arrays, 'truth', cid), 0, metrics[cid],
                  f'{pathlib.Path(manifest_path).name} — {cid} ({c.type}), seed {seed}')
    if out.exists():
      shutil.rmtree(out)
    tmp.rename(out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  print('\n'.join(lines))
  print(f'wrote {out}/: summary.txt, summary.json, meta.json, worlds.csv'
        + (', trace.npz, ' + ', '.join(f'{cid}.png' for cid in sim.components) if trace_worlds
           else ''))
  return summary
