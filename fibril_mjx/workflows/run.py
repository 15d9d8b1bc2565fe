"""`fibril-mjx run`: a batch of worlds, with progress, a summary, traces and plots.

Output directory layout (written to a temporary sibling and renamed when complete, so a
failed run never leaves a directory that looks finished):

- `summary.txt` / `summary.json` — throughput and per-component statistics across worlds.
- `meta.json` — seed, manifest path and sha256, fibril_mjx / jax / mujoco versions, worlds,
  duration, dt, ticks, command line, and every component's resolved fields with their layer.
- `worlds.csv` — one row per world: global world index and each per-world metric.
- `trace.npz` — per-tick arrays of the first `--trace-worlds` worlds: `time_s` `(T,)`,
  `world_index` `(K,)`, `sensor/<id>/<field>` and `truth/<id>/<field>` `(K, T, ...)`. Sensor
  fields are the delivered output held at each tick (`new_data` marks deliveries); a
  component with FIFO delivery holds its batches, `(K, T, B, ...)` sample fields, `sequence`
  and `sample_tick` per slot, plus `count` (`fibril_mjx/mechanisms/fifo.py`).
- `<component id>.png` — truth vs delivered samples for world 0 and the error distribution.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import pathlib
import shutil
import sys
import time
from typing import Any

import jax
import mujoco
import numpy as np
from tqdm import tqdm

from fibril_mjx import analysis
from fibril_mjx.config.version import __version__
from fibril_mjx.analysis import common
from fibril_mjx.batch import simulation as simulator
from fibril_mjx.batch.simulation import Options
from fibril_mjx.batch import worlds as worlds_mod
from fibril_mjx.batch.worlds import cpu_isa
from fibril_mjx.batch import physics_c
from fibril_mjx.io import outdir
from fibril_mjx.workflows import stopping
from fibril_mjx.io import traces as traces_io
from fibril_mjx.io import trajectory as traj_io


def _jsonable(v):
  if isinstance(v, tuple):
    return [_jsonable(x) for x in v]
  return v


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How `run` runs its worlds and writes its directory (defaults: the CLI's).

  Attributes:
    trace_worlds: the first worlds whose per-tick outputs go to `trace.npz` and the plots.
    chunk_worlds: worlds per host chunk (default: as many as the host memory budget for the
      recorded outputs allows, `memory_budget_bytes`, default $FIBRIL_MJX_MEMORY_BUDGET or
      1 GiB). A chunk is one program: sharded over `devices` and split into LAPACK-safe
      sub-batches inside (`fibril_mjx.batch.worlds`); world results never depend on the
      chunking.
    overwrite: replace an existing output directory.
    segments: MJX device calls per chunk (progress and the watchdog see each).
    devices: None (every local device), a count or a device list.
    share_physics: run the physics once for all worlds when no per-world input reaches it
      (`Simulation.physics_sharing`); False: one physics rollout per world.
    impl: physics implementation (`'jax'` or `'warp'`, see `fibril_mjx.load`).
    stall_s: the watchdog's idle limit (`worlds.Watchdog`).
    physics: `'mjx'` (in the loop; the default without `trajectory`), `'c'` (MuJoCo C through
      `mujoco.rollout`, open loop), `'auto'` (`physics_c.choose`; the CLI's default), or
      `'trajectory'` (the default with `trajectory`, a state log: the path of an NPZ /
      Parquet file, `fibril_mjx.io.trajectory`).
    command: the command line that asked for the run (`meta.json`'s `command`; the CLI passes
      its argv), or None.
  """
  trace_worlds: int = 16
  chunk_worlds: int | None = None
  overwrite: bool = False
  segments: int = 20
  devices: Any = None
  share_physics: bool = True
  impl: str = 'jax'
  memory_budget_bytes: float | None = None
  stall_s: float | None = None
  physics: str | None = None
  trajectory: Any = None
  command: Any = None


@dataclasses.dataclass(frozen=True)
class _Plan:
  """What a run does, decided before the first world runs.

  Attributes:
    label, worlds, seed: the manifest path (in messages), the world count and the seed.
    stall_s: the watchdog's idle limit.
    physics, physics_why: the backend (`'mjx'`, `'c'` or `'trajectory'`) and why.
    log: the recorded state log (physics `'trajectory'`), else None.
    n_ticks: ticks after tick 0; seg, n_seg: ticks per segment (MJX: one device call) and
      the number of segments.
    devs: the devices.
    share, share_reason: whether one physics trajectory serves every world, and why.
    state_b, trace_b: bytes per world of the device state and of the recorded outputs.
    chunk: worlds per host chunk.
  """
  physics: str
  physics_why: str
  log: Any
  n_ticks: int
  seg: int
  n_seg: int
  devs: list
  share: bool
  share_reason: str
  state_b: float
  trace_b: float
  chunk: int
  label: Any
  worlds: int
  seed: int
  stall_s: float | None


def _load(manifest_path, impl, physics, trajectory):
  """The manifest's `Simulation` on its physics backend (`physics_c.choose`).

  Returns:
    `(sim, physics, why, log)`: `log` the recorded state log of physics `'trajectory'`, else
    None.
  """
  sim = simulator.load(manifest_path, impl=impl)
  physics, physics_why = physics_c.choose(sim.built, physics, impl=sim.impl,
                                          trajectory=trajectory)
  log = None
  if physics != 'mjx':
    sim = simulator.Simulation(sim.built, impl=impl, physics='c')
    if trajectory is not None:
      log = traj_io.load(trajectory, sim.mj_model)
      physics_why += (', sensordata by mj_inverse with its qacc' if 'qacc' in log else
                      ', sensordata by mj_forward (accelerations of the modelled forces)')
  return sim, physics, physics_why, log


def _plan(sim, physics, physics_why, log, *, label, worlds, seed, duration_s,
          options: RunOptions) -> _Plan:
  """Ticks and segments, devices, physics sharing, bytes per world and the host chunk size
  (see `run`)."""
  n_ticks = max(1, int(math.ceil(duration_s / sim.dt - 1e-9)))
  seg = int(math.ceil(n_ticks / options.segments))
  n_seg = int(math.ceil(n_ticks / seg))
  devs = worlds_mod.resolve_devices(options.devices)
  share, share_reason = sim.physics_sharing(share_physics=options.share_physics)
  if physics == 'trajectory':
    share, share_reason = True, 'shared: every world replays the recorded trajectory'

  # Bytes per world: the state carried on the device and the outputs recorded on the host.
  if physics == 'mjx':
    state_b, tick_b = sim.world_nbytes(share=share)
  else:   # the device pass's own state (a Frame in place of mjx.Data); MJX is not traced
    st_, out_ = physics_c.output_shapes(sim.built, sim.default_params(2),
                                        simulator.world_keys(0, 2), with_state=True)
    state_b, tick_b = worlds_mod.tree_nbytes(st_) / 2, worlds_mod.tree_nbytes(out_) / 2
  trace_b = tick_b * (n_ticks + 1)
  budget = (options.memory_budget_bytes
            or float(os.environ.get('FIBRIL_MJX_MEMORY_BUDGET', 2 ** 30)))
  chunk = min(worlds, options.chunk_worlds or max(1, int(budget // max(trace_b, 1))))
  return _Plan(physics, physics_why, log, n_ticks, seg, n_seg, devs, share, share_reason,
               state_b, trace_b, chunk, label, worlds, seed, options.stall_s)


@dataclasses.dataclass
class _Results:
  """What the chunks produce, gathered chunk by chunk.

  Attributes:
    metrics, status: `{cid: {name: [(n, ...) per chunk]}}` per-world metrics and status
      counters.
    diverged: per chunk, `(n,)` the tick each world diverged at (< 0: never).
    layouts: each chunk's device layout.
    first_call_s: the first device call of a new layout, compile included.
    steady_s, steady_steps: wall time and world-steps of the other calls (physics `'c'`: of
      every call, compile included).
  """
  metrics: dict
  status: dict
  diverged: list = dataclasses.field(default_factory=list)
  layouts: list = dataclasses.field(default_factory=list)
  first_call_s: float | None = None
  steady_s: float = 0.0
  steady_steps: int = 0

  def add(self, sim, flat: dict, state) -> None:
    """Appends one chunk's metrics (from its flattened host outputs `flat`), its status
    counters and divergence ticks (from its final `state`)."""
    states = sim.component_states(state)
    for cid, c in sim.components.items():
      metric_fn = analysis.for_type(c.type).metrics
      if metric_fn is not None:
        with np.errstate(all='ignore'):
          m = metric_fn(common.per_sample(common.group(flat, 'sensor', cid)),
                        common.group(flat, 'truth', cid))
        for k, v in m.items():
          self.metrics[cid].setdefault(k, []).append(np.asarray(v))
      for k, v in c.status(states[cid]).items():
        self.status[cid].setdefault(k, []).append(np.asarray(v))
    self.diverged.append(np.asarray(state.diverged))

  def concatenated(self):
    """`(metrics, status, diverged)` over all worlds: `{cid: {name: (worlds, ...)}}` twice and
    `(worlds,)`."""
    cat = lambda d: {cid: {k: np.concatenate(v) for k, v in m.items()} for cid, m in d.items()}
    return cat(self.metrics), cat(self.status), np.concatenate(self.diverged)


def _rollout_c(sim, plan: _Plan, p, keys, n: int, watch, res: _Results, bar):
  """A chunk of `n` worlds in one open-loop rollout (MuJoCo C, or the recorded trajectory).

  Returns:
    `(final state, host outputs {...: (n, n_ticks + 1, ...)})`.
  """
  t0 = time.perf_counter()
  state, outs = physics_c.simulation_rollout(sim, p, keys, plan.n_ticks, trajectory=plan.log,
                                             options=Options(share_physics=plan.share))
  host = jax.tree.map(np.asarray, watch.wait(outs))
  dt_call = time.perf_counter() - t0
  res.first_call_s = dt_call if res.first_call_s is None else res.first_call_s
  res.steady_s += dt_call   # incl. compile
  res.steady_steps += n * plan.n_ticks
  bar.update(n * plan.n_seg * plan.seg)
  return state, host


def _rollout_mjx(sim, plan: _Plan, p, keys, n: int, watch, compiling: bool, res: _Results,
                 bar):
  """A chunk of `n` worlds under MJX, segment by segment: the first segment is one `rollout`
  (reset, its ticks and tick 0's outputs in one program), the others `run` (`compiling`: the
  layout is new, so the first segment's call is timed as the compile).

  Returns:
    `(final state, host outputs {...: (n, n_ticks + 1, ...)})`.
  """
  t0 = time.perf_counter()
  state, outs, _ = sim.rollout(p, keys, plan.seg,
                               options=Options(share_physics=plan.share, devices=plan.devs))
  outs = watch.wait(outs)
  host = jax.tree.map(lambda x: np.empty((n, plan.n_ticks + 1) + x.shape[2:], x.dtype), outs)
  tick = 0
  for k in range(plan.n_seg):
    if k:
      t0 = time.perf_counter()
      state, outs, _ = sim.run(p, state, plan.seg,
                               options=Options(record=True, devices=plan.devs, world_major=True))
      outs = watch.wait(outs)
    done = plan.seg + 1 if k == 0 else plan.seg   # the first segment holds tick 0 too
    take = min(done, plan.n_ticks + 1 - tick)
    jax.tree.map(lambda h, x: h.__setitem__((slice(None), slice(tick, tick + take)),
                                            np.asarray(x)[:, :take]), host, outs)
    tick += take
    dt_call = time.perf_counter() - t0
    if compiling:
      res.first_call_s = dt_call if res.first_call_s is None else res.first_call_s
      compiling = False
    else:
      res.steady_s += dt_call
      res.steady_steps += n * plan.seg
    bar.update(n * plan.seg)
  return state, host


def _run_chunk(sim, plan: _Plan, params_all, lo: int, hi: int, *, res: _Results,
               traces: traces_io.TraceFile, bar) -> None:
  """Runs worlds `lo..hi-1` (global indices): their metrics, status and divergence go into
  `res`, their per-tick outputs into `traces`."""
  n = hi - lo
  p = jax.tree.map(lambda x: x[lo:hi], params_all)
  keys = simulator.world_keys(plan.seed, n, lo)
  watch = worlds_mod.Watchdog(f'{plan.label}: worlds {lo}..{hi - 1} of {plan.worlds}',
                              plan.stall_s)
  if plan.physics != 'mjx':   # the whole chunk in one open-loop rollout
    res.layouts.append(sim.layout(n, devices=plan.devs, share=plan.share))
    state, host = _rollout_c(sim, plan, p, keys, n, watch, res, bar)
  else:   # a new world count is a new layout: its first call compiles
    compiling = n not in [lay.n_worlds for lay in res.layouts]
    state, host = _rollout_mjx(sim, plan, p, keys, n, watch, compiling, res, bar)
    res.layouts.append(sim.last_layout)   # the layout the programs found (`Simulation._call`)
  flat = common.flatten(host)
  res.add(sim, flat, state)
  traces.write(flat, lo, hi, 0)


def _component_summary(sim, metrics, status, keep, bad) -> tuple[dict, list]:
  """Per component, the statistics across the kept worlds (`keep (worlds,)`; `bad` the
  indices of the diverged): `({cid: {type, sample_type, metrics, status}}, summary lines)`."""
  components, lines = {}, []
  for cid, c in sim.components.items():
    comp = {'type': c.type, 'sample_type': c.sample_type, 'metrics': {}, 'status': {}}
    lines.append(f'{cid} ({c.type}) — across {int(keep.sum())} worlds'
                 + (f' ({bad.size} diverged excluded)' if bad.size else '')
                 + ': mean / p50 / p95 / max')
    for k, v in metrics[cid].items():
      d = common.describe(common.finite_rows(v, keep))
      comp['metrics'][k] = d
      lines.append(f'  {k:<34} {d["mean"]:.4g} / {d["p50"]:.4g} / {d["p95"]:.4g} / '
                   f'{d["max"]:.4g}')
    for k, v in status[cid].items():
      tot = int(np.sum(np.asarray(v)[keep]))
      comp['status'][k] = tot
      lines.append(f'  {k:<34} {tot} in total')
    components[cid] = comp
    lines.append('')
  return components, lines


def _summary(sim, plan: _Plan, res: _Results, metrics, status, diverged, *, build_s,
             run_s) -> tuple[dict, list]:
  """`summary.json`'s dict and `summary.txt`'s lines: throughput, physics, layout, memory,
  diverged worlds and per-component statistics."""
  manifest_path, seed, worlds = plan.label, plan.seed, plan.worlds
  keep = diverged < 0
  peak = worlds_mod.describe_memory()['peak_rss_bytes']
  rate = res.steady_steps / res.steady_s if res.steady_s > 0 else float('nan')
  lay0, n_ticks, chunk = res.layouts[0], plan.n_ticks, plan.chunk
  physics_line = (f'physics: 1 shared trajectory for {worlds} worlds' if plan.share else
                  f'physics: one trajectory per world ({plan.share_reason})')
  bad = np.nonzero(~keep)[0]
  summary = {
      'manifest': str(manifest_path), 'manifest_sha256': sim.manifest.sha256,
      'fibril_mjx': __version__, 'seed': seed, 'worlds': worlds,
      'duration_s': n_ticks * sim.dt, 'dt_s': sim.dt, 'ticks': n_ticks, 'build_s': build_s,
      'run_s': run_s, 'first_segment_s_including_compile': res.first_call_s,
      'world_steps_per_s': rate, 'physics_impl': sim.impl, 'physics': plan.physics,
      'physics_choice': plan.physics_why,
      'physics_shared': bool(plan.share), 'physics_sharing': plan.share_reason,
      'devices': len(plan.devs), 'layout': lay0.describe(), 'chunk_worlds': chunk,
      'state_bytes_per_world': plan.state_b, 'trace_bytes_per_world': plan.trace_b,
      'peak_rss_bytes': peak,
      'diverged': {'count': int(bad.size), 'worlds': bad.tolist(),
                   'first_tick': diverged[bad].tolist()},
      'components': {}}
  mjx = plan.physics == 'mjx'
  lines = [f'fibril-mjx run {manifest_path}  (fibril_mjx {__version__}, seed {seed}, manifest '
           f'sha256 {sim.manifest.sha256[:12]})',
           f'{worlds} worlds x {n_ticks} ticks (dt {sim.dt:g} s, {n_ticks * sim.dt:g} s)  '
           f'build {build_s:.1f} s, first segment incl. compile {res.first_call_s:.1f} s, '
           f'total {run_s:.1f} s',
           f'throughput {rate:,.0f} world-steps/s ' + ('(after compile)' if mjx
                                                     else '(compile of the device pass included)'),
           physics_line + (f'; {worlds_mod.describe_impl(sim.impl)}' if mjx
                           else '; MuJoCo C (float64), devices in JAX float32'),
           f'physics backend: {plan.physics} ({plan.physics_why})',
           (f'layout: {lay0.describe()}' if mjx else
            f'layout: mujoco.rollout on {os.cpu_count()} threads, then the devices in JAX')
           + (f'; host chunks of {chunk} worlds' if chunk < worlds else ''),
           f'memory: {worlds_mod.fmt_bytes(plan.state_b)} state + '
           f'{worlds_mod.fmt_bytes(plan.trace_b)} recorded outputs per world; peak RSS '
           f'{worlds_mod.fmt_bytes(peak)}']
  if bad.size:
    ticks_txt = ', '.join(str(t) for t in diverged[bad][:10]) + (' ...' if bad.size > 10
                                                                 else '')
    lines.append(f'{bad.size} of {worlds} worlds diverged (non-finite physics or component '
                 f'state) at ticks {ticks_txt}; worlds '
                 + ', '.join(map(str, bad[:10])) + (' ...' if bad.size > 10 else '')
                 + '; excluded from the statistics below (listed in worlds.csv)')
  lines.append('')
  summary['components'], comp_lines = _component_summary(sim, metrics, status, keep, bad)
  return summary, lines + comp_lines


def _meta(sim, plan: _Plan, layout, *, manifest_path, seed, worlds, trajectory,
          command) -> dict:
  """`meta.json`: versions, manifest, seed, worlds, ticks, the command line, every
  component's resolved fields with their layer, devices and physics."""
  return {
      'fibril_mjx': __version__, 'jax': jax.__version__, 'mujoco': mujoco.__version__,
      'manifest': str(pathlib.Path(manifest_path).resolve()),
      'manifest_sha256': sim.manifest.sha256, 'model': str(sim.manifest.model_path),
      'seed': seed, 'worlds': worlds, 'world_key': 'fold_in(PRNGKey(seed), global world index)',
      'dt_s': sim.dt, 'ticks': plan.n_ticks,
      'command': None if command is None else [str(a) for a in command],
      'components': {cid: {'type': c.type, 'fields': {
          n: {'value': _jsonable(fv.value), 'layer': fv.layer, 'source': fv.source}
          for n, fv in c.fields}} for cid, c in sim.components.items()},
      'params': 'every world uses the resolved field values above (no randomization)',
      'devices': [str(d) for d in plan.devs], 'layout': layout.describe(),
      'chunk_worlds': plan.chunk,
      'physics_impl': sim.impl, 'physics_sharing': plan.share_reason, 'physics': plan.physics,
      'physics_choice': plan.physics_why,
      'trajectory': str(pathlib.Path(trajectory).resolve()) if trajectory else None,
      'cpu_isa': cpu_isa(),
  }


def _write_tables(tmp: pathlib.Path, lines, summary, meta, metrics, diverged, worlds) -> None:
  """`summary.txt`, `summary.json`, `meta.json` and `worlds.csv` (one row per world: its
  index, divergence tick and every metric)."""
  (tmp / 'summary.txt').write_text('\n'.join(lines) + '\n')
  (tmp / 'summary.json').write_text(json.dumps(summary, indent=2))
  (tmp / 'meta.json').write_text(json.dumps(meta, indent=2))
  cols = (['world_index', 'diverged_tick'] +
          [f'{cid}/{k}' for cid in metrics for k in metrics[cid]])
  rows = np.column_stack([np.arange(worlds), diverged] +
                         [metrics[cid][k] for cid in metrics for k in metrics[cid]])
  np.savetxt(tmp / 'worlds.csv', rows, delimiter=',', header=','.join(cols), comments='',
             fmt='%.9g')


def _plots(tmp: pathlib.Path, sim, arrays, metrics, keep, time_s, *, title, seed,
           trace_worlds) -> list[str]:
  """`<component id>.png` from the traces `arrays` of the first kept world (world 0 when all
  diverged); returns a line per plot that failed (a plot never costs the results)."""
  failed = []
  ok = np.nonzero(keep[:trace_worlds])[0]
  world = int(ok[0]) if ok.size else 0
  for cid, c in sim.components.items():
    plot_fn = analysis.for_type(c.type).plot
    if plot_fn is None:
      continue
    finite_metrics = {k: common.finite_rows(v, keep) for k, v in metrics[cid].items()}
    try:
      with np.errstate(all='ignore'):
        plot_fn(tmp / f'{cid}.png', cid, time_s,
                common.per_sample(common.group(arrays, 'sensor', cid)),
                common.group(arrays, 'truth', cid), world, finite_metrics,
                f'{title} — {cid} ({c.type}), seed {seed}'
                + (f', world {world}' if world else ''))
    except Exception as e:  # noqa: BLE001 — a plot never costs the results
      failed.append(f'{cid}.png not drawn: {type(e).__name__}: {e}')
  return failed


def _print_report(out, sim, lines, plot_failed, trace_worlds) -> None:
  """The summary on stdout, failed plots as warnings on stderr, and what was written."""
  print('\n'.join(lines))
  for line in plot_failed:
    print(f'warning: {line}', file=sys.stderr)
  print(f'wrote {out}/: summary.txt, summary.json, meta.json, worlds.csv'
        + (', trace.npz, ' + ', '.join(f'{cid}.png' for cid in sim.components
                                       if f'{cid}.png not drawn' not in ' '.join(plot_failed))
           if trace_worlds else ''))


def run(manifest_path, *, worlds: int, seed: int, duration_s: float, out,
        options: RunOptions | None = None) -> dict:
  """Runs `worlds` worlds for `duration_s` and writes the output directory `out` (`options`:
  `RunOptions`). Returns the summary.

  Checks free space first; a write error or SIGINT / SIGTERM (at a chunk boundary) keeps nothing.
  """
  opt = options or RunOptions()
  out = outdir.claim(out, overwrite=opt.overwrite)
  t_build = time.perf_counter()
  sim, physics, physics_why, log = _load(manifest_path, opt.impl, opt.physics, opt.trajectory)
  build_s = time.perf_counter() - t_build
  plan = _plan(sim, physics, physics_why, log, label=manifest_path, worlds=worlds, seed=seed,
               duration_s=duration_s, options=opt)
  trace_worlds = max(0, min(opt.trace_worlds, worlds))
  # the traces twice (.trace/ on disk, then trace.npz), worlds.csv, 1 MiB of summary and plots
  outdir.check_space(out, 2 * trace_worlds * plan.trace_b + 1024 * worlds + 2 ** 20, 'the run')
  params_all = sim.default_params(worlds)
  res = _Results({cid: {} for cid in sim.components}, {cid: {} for cid in sim.components})
  bar = tqdm(total=worlds * plan.n_seg * plan.seg, unit='world-step', unit_scale=True,
             desc=f'{pathlib.Path(manifest_path).name}', file=sys.stderr, dynamic_ncols=True,
             disable=os.environ.get('FIBRIL_MJX_NO_PROGRESS') == '1')
  kept = f'nothing kept: {out} is written by a complete run only; run it again'
  with (stopping.at_boundaries(lambda: kept) as flag, outdir.write_errors(out, kept),
        outdir.staged(out) as tmp, contextlib.closing(bar)):
    traces = traces_io.TraceFile(tmp / '.trace', trace_worlds, plan.n_ticks + 1)
    t_run = time.perf_counter()
    for lo, hi in worlds_mod.chunks(worlds, plan.chunk):
      _run_chunk(sim, plan, params_all, lo, hi, res=res, traces=traces, bar=bar)
      if hi < worlds:   # a chunk boundary: where SIGINT / SIGTERM end the run
        flag.check(kept)
    bar.close()
    run_s = time.perf_counter() - t_run
    metrics, status, diverged = res.concatenated()
    keep = diverged < 0
    time_s = np.arange(plan.n_ticks + 1) * sim.dt
    summary, lines = _summary(sim, plan, res, metrics, status, diverged, build_s=build_s,
                              run_s=run_s)
    meta = _meta(sim, plan, res.layouts[0], manifest_path=manifest_path, seed=seed,
                 worlds=worlds, trajectory=opt.trajectory, command=opt.command)
    _write_tables(tmp, lines, summary, meta, metrics, diverged, worlds)
    plot_failed = []
    if trace_worlds:
      traces.save_npz(tmp / 'trace.npz', time_s=time_s, world_index=np.arange(trace_worlds))
      plot_failed = _plots(tmp, sim, traces.arrays, metrics, keep, time_s,
                           title=pathlib.Path(manifest_path).name, seed=seed,
                           trace_worlds=trace_worlds)
    shutil.rmtree(tmp / '.trace', ignore_errors=True)
    if plot_failed:
      (tmp / 'summary.txt').write_text('\n'.join(lines + plot_failed) + '\n')
  _print_report(out, sim, lines, plot_failed, trace_worlds)
  return summary
