"""`fibril-mjx campaign`: chunks of worlds → atomic Parquet parts, `campaign.json`, resume,
local or Ray backend, progress over all chunks, then the report.

Output directory:

- `parts/part-NNNNN.parquet` — one per chunk of the plan, one row per world (written to a
  temporary name and renamed, so a part is complete or absent);
- `campaign.json` — hashes (campaign file, manifest, MJCF model, profiles, package
  versions), options, the chunk plan, the completed chunks and each part's row count and
  SHA-256 (`parts`; rewritten atomically after each part; `--resume` and every reader verify
  the parts against it);
- `summary.txt`, `summary.json`, `*.png` — the report (`report.py`).

A paired campaign (`designs:`) writes one such directory per design under `designs/NAME/` (all
on the same world keys and draws), one per design after the first under `unpaired/NAME/` (the
same design on independent keys, seed + 1 + its index), and the paired report (`paired.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import time
from importlib import metadata

import jax

from fibril_mjx.batch import worlds
from fibril_mjx.errors import FibrilError
from fibril_mjx.workflows.campaign import engine
from fibril_mjx.workflows.campaign import paired
from fibril_mjx.workflows.campaign import report as rp
from fibril_mjx.workflows.campaign import spec as sp
from fibril_mjx.workflows import stopping
from fibril_mjx.workflows.campaign.parts import (  # noqa: F401
    check_part, part_path, read_meta, read_rows, write_atomic, write_part)
from fibril_mjx.io import outdir

FORMAT = 'fibril_campaign_output/1'
PACKAGES = ('fibril_mjx', 'jax', 'jaxlib', 'mujoco', 'mujoco-mjx', 'numpy', 'scipy', 'pyarrow')


def _sha(path) -> str:
  return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def hashes(plan: engine.Plan) -> dict:
  """What a campaign's results depend on besides the code: files and package versions."""
  man = plan.sim.manifest
  profiles = hashlib.sha256()
  for pid in sorted(man.catalog.profiles):
    p = man.catalog.profiles[pid]
    profiles.update(pid.encode() + b'\0' + pathlib.Path(p.file).read_bytes())
  versions = {}
  for name in PACKAGES:
    try:
      versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      versions[name] = None
  out = {'campaign': plan.campaign.sha256, 'manifest': _sha(plan.campaign.manifest),
         'model': _sha(man.model_path), 'profiles': profiles.hexdigest(), 'packages': versions}
  if plan.campaign.design is not None:   # one run of a paired campaign: its design and seed
    out['design'] = {'name': plan.campaign.design, 'seed': plan.campaign.seed}
  if plan.policy is not None:   # the checkpoint and its network description
    out['policy'] = plan.policy.sha256
    out['policy_json'] = _sha(plan.policy.path.with_name('policy.json'))
  return out


def options(plan: engine.Plan) -> dict:
  c = plan.campaign
  # The device count and the XLA CPU code generation are part of the options: with the ISA
  # of `worlds.cpu_flags` (no FMA) a row is bitwise the same at any device count; with
  # `--cpu-isa native` only at the same count, and the two code generations differ.
  return {'worlds': c.worlds, 'seed': c.seed, 'duration_s': c.duration_s,
          'chunk_worlds': c.chunk_worlds, 'ticks': plan.n_ticks, 'dt_s': plan.sim.dt,
          'devices': len(jax.local_devices()), 'cpu_isa': worlds.cpu_isa(),
          'physics': plan.physics,
          'policy': None if c.controller is None else str(c.controller.policy),
          **({'design': c.design} if c.design is not None else {})}


def _ray_chunk(campaign_path, over: sp.Overrides, lo, hi, n_devices, cpu_isa='AVX'):
  """A Ray task: runs one chunk in a worker (the plan is built once per worker process) on
  as many XLA devices and the same CPU code generation as the driver, so that its rows are
  bitwise the driver's."""
  # effective when this worker has not started JAX yet
  worlds.cpu_flags(n_devices, bitwise=cpu_isa != 'native')
  import jax
  if len(jax.local_devices()) != n_devices or worlds.cpu_isa() != cpu_isa:
    raise FibrilError(f'Ray worker: {len(jax.local_devices())} XLA device(s) and CPU ISA '
                      f'{worlds.cpu_isa()}, the driver uses {n_devices} and {cpu_isa}; rows '
                      'would not be bitwise equal to a local run')
  key = (campaign_path, over)
  plans = globals().setdefault('_WORKER_PLANS', {})
  if key not in plans:
    plans[key] = engine.Plan(sp.read(campaign_path, **over._asdict()))
  return plans[key].run_chunk(lo, hi)


def output_bytes(plan: engine.Plan, todo: list[int]) -> float:
  """About the bytes the chunks `todo` write: twice their raw columns (a Parquet part of
  float64 columns is at most that) and 1 MiB for campaign.json, the report and its plots."""
  n = sum(plan.chunks[i][1] - plan.chunks[i][0] for i in todo)
  columns = 1 + len(plan.metrics) + sum(len(f.columns) for f in plan.fields)
  return 2 * 8 * n * columns + 2 ** 20


def new_meta(plan: engine.Plan, camp: sp.Campaign) -> dict:
  """`campaign.json` of a run that has completed no chunk yet."""
  return {'format': FORMAT, 'campaign_file': str(camp.file.resolve()),
          'manifest': str(camp.manifest), 'hashes': hashes(plan), 'options': options(plan),
          'chunks': [list(c) for c in plan.chunks], 'latency_capacity_s': plan.latency_max,
          'fields': [{'path': f.path, 'kind': f.kind, 'dist': f.dist.dist,
                      'params': {k: list(v) for k, v in f.dist.params.items()},
                      'relative': f.dist.relative, 'columns': f.columns}
                     for f in plan.fields],
          'scenario': {k: [e.model_dump(exclude_unset=True) for e in v]
                       for k, v in (camp.scenario or {}).items()},
          'metrics': plan.metrics,
          'criteria': [{'name': c.name, 'metric': c.metric, 'min': c.min, 'max': c.max}
                       for c in camp.criteria],
          'physics_choice': plan.physics_why, 'completed': [], 'parts': {}}


def resumed_chunks(out, meta: dict, old: dict) -> list[int]:
  """The chunks of `old` (the directory's `campaign.json`) already written to `out` and intact
  (`parts.check_part`; a missing or damaged part is said on stderr and run again, its record
  is copied to `meta['parts']` otherwise); refuses when the run there differs from `meta` in
  anything that decides its rows."""
  diffs = [k for k in ('hashes', 'options', 'chunks', 'fields', 'metrics', 'criteria')
           if old.get(k) != meta[k]]
  if diffs:
    detail = []
    for k in diffs:
      if isinstance(meta[k], dict) and isinstance(old.get(k), dict):
        detail += [f'{k}.{x}' for x in meta[k] if old[k].get(x) != meta[k][x]]
      else:
        detail.append(k)
    raise FibrilError(f'{out}: cannot resume: {", ".join(detail)} differ from the run in '
                      'this directory (same campaign file, manifest, profiles, packages and '
                      'options are required; use another --out)')
  kept = []
  for i in sorted(old['completed']):
    why = check_part(out, i, old)
    if why is None:
      kept.append(i)
      if str(i) in old.get('parts', {}):
        meta['parts'][str(i)] = old['parts'][str(i)]
    else:
      lo, hi = old['chunks'][i]
      print(f'resume: {part_path(out, i)}: {why}; running chunk {i} (worlds {lo}..{hi - 1}) '
            'again', file=sys.stderr)
  return kept


def run(campaign_path, out, over: sp.Overrides = sp.Overrides(), *, resume=False,
        backend='local', ray_address=None, report=True, progress=None, plan=None) -> dict:
  """Runs (or resumes) a campaign into `out`; returns `campaign.json`'s content.

  Args:
    over: values replacing the campaign file's (`worlds`, `duration_s`, `chunk_worlds`, the
      `policy` checkpoint: the same campaign for another policy; `design` and `seed`: one
      design of a paired campaign, what the paired run passes for each of its runs). A paired
      campaign without `design` runs them all and returns the paired report (`paired.run`).
    resume: continue `out`, skipping completed chunks; refuses when any hash or option differs.
    backend: `local` (this process) or `ray` (each chunk a Ray task; `ray_address` of an
      existing cluster, e.g. `127.0.0.1:6379` or `ray://head:10001`; None starts a local one).
    plan: an `engine.Plan` already built for this campaign and these options (its compiled
      programs are reused, e.g. by `bench/campaign.py`); None builds one.
  """
  if backend not in ('local', 'ray'):
    raise FibrilError(f'--backend {backend!r}: must be local or ray')
  if over.policy is not None:
    over = over._replace(policy=str(pathlib.Path(over.policy).resolve()))
  camp = sp.read(campaign_path, **over._asdict())
  if camp.designs and over.design is None:
    if plan is not None:
      raise FibrilError(f'{campaign_path}: plan= is for one design; a paired campaign builds '
                        'one per design')
    return paired.run(camp, out, run, over, resume=resume, progress=progress, report=report,
                      backend=backend, ray_address=ray_address)
  out = outdir.claim(out, overwrite=resume, hint='use --resume to continue it, or another --out')
  meta_path = out / 'campaign.json'
  if resume and not meta_path.is_file() and out.exists() and any(out.iterdir()):
    raise FibrilError(f'{out}: not a campaign directory (no campaign.json)')
  if plan is None:
    plan = engine.Plan(camp)
  else:
    same = lambda c: (c.sha256, c.worlds, c.seed, c.duration_s, c.chunk_worlds,  # noqa: E731
                      c.controller, c.design)
    if same(plan.campaign) != same(camp):
      raise FibrilError(f'{campaign_path}: plan= was built for another campaign or options')
  meta = new_meta(plan, camp)
  if resume and meta_path.is_file():
    meta['completed'] = resumed_chunks(out, meta, read_meta(meta_path))
  (out / 'parts').mkdir(parents=True, exist_ok=True)
  for stale in [*(out / 'parts').glob('.part-*.partial-*'),
                *out.glob('.campaign.json.partial-*')]:
    stale.unlink(missing_ok=True)   # left by a killed run: never renamed, never counted
  todo = [i for i in range(len(plan.chunks)) if i not in set(meta['completed'])]
  outdir.check_space(out, output_bytes(plan, todo), 'the campaign')
  write_atomic(meta_path, json.dumps(meta, indent=2).encode())

  from tqdm import tqdm
  done_worlds = sum(plan.chunks[i][1] - plan.chunks[i][0] for i in meta['completed'])
  bar = tqdm(total=camp.worlds, initial=done_worlds, unit='world', desc=camp.file.name,
             file=sys.stderr, dynamic_ncols=True,
             disable=(progress is False) or os.environ.get('FIBRIL_MJX_NO_PROGRESS') == '1')
  t0 = time.perf_counter()

  def kept():
    return (f'{len(meta["completed"])} of {len(plan.chunks)} parts kept in {out}; continue '
            'with --resume')

  def finish(i, cols):
    meta['parts'][str(i)] = write_part(part_path(out, i), cols)
    meta['completed'] = sorted(set(meta['completed']) | {i})
    write_atomic(meta_path, json.dumps(meta, indent=2).encode())
    bar.update(plan.chunks[i][1] - plan.chunks[i][0])
    if len(meta['completed']) < len(plan.chunks):   # a chunk boundary
      flag.check(kept())

  try:
    with stopping.at_boundaries(kept) as flag:
      if backend == 'local':
        for i in todo:
          finish(i, plan.run_chunk(*plan.chunks[i]))
      else:
        _run_ray(plan, camp, over, todo, ray_address, finish)
  except OSError as e:
    err = outdir.write_error(e, out, kept())
    if err is None:
      raise
    raise err from None
  finally:
    bar.close()
  meta['run_s'] = time.perf_counter() - t0
  write_atomic(meta_path, json.dumps(meta, indent=2).encode())
  if report:
    rp.write(out, plan, meta)
  return meta


def _run_ray(plan, camp, over, todo, address, finish):
  try:
    import ray
  except ImportError:
    raise FibrilError('--backend ray needs the optional extra: pip install "fibril_mjx[ray]"'
                      ) from None
  started = not ray.is_initialized()
  if started:
    ray.init(address=address, include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)
  try:
    task = ray.remote(_ray_chunk)
    n_devices = len(jax.local_devices())
    path = str(camp.file.resolve())
    slots = max(1, int(ray.cluster_resources().get('CPU', 1)))
    pending, queue = {}, list(todo)
    while queue or pending:
      while queue and len(pending) < slots:
        i = queue.pop(0)
        pending[task.remote(path, over, *plan.chunks[i], n_devices, worlds.cpu_isa())] = i
      ready, _ = ray.wait(list(pending), num_returns=1)
      for ref in ready:
        finish(pending.pop(ref), ray.get(ref))
  finally:
    if started:
      ray.shutdown()
