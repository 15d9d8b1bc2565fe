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

import json
import math
import os
import pathlib
import shutil
import sys
import time

import jax
import mujoco
import numpy as np
from tqdm import tqdm

from fibril_mjx import analysis
from fibril_mjx.config.version import __version__
from fibril_mjx.analysis import common
from fibril_mjx.batch import simulation as simulator
from fibril_mjx.batch import worlds as worlds_mod
from fibril_mjx.batch.worlds import cpu_isa
from fibril_mjx.batch import physics_c
from fibril_mjx.errors import FibrilError
from fibril_mjx.io import outdir
from fibril_mjx.io import trajectory as traj_io


def _jsonable(v):
  if isinstance(v, tuple):
    return [_jsonable(x) for x in v]
  return v


def _finite_rows(v: np.ndarray, keep: np.ndarray) -> np.ndarray:
  """Per-world metric values of the worlds kept (not diverged) that are finite."""
  v = np.asarray(v, np.float64)[keep]
  if v.ndim == 0:
    return v
  return v[np.all(np.isfinite(v), axis=tuple(range(1, v.ndim)))]


def _describe(v: np.ndarray) -> dict:
  if v.size == 0:
    nan = float('nan')
    return {'mean': nan, 'p50': nan, 'p95': nan, 'max': nan}
  return common.describe(v)


class _TraceFile:
  """Per-tick traces of the first K worlds, written chunk by chunk into `.npy` files on disk
  (`numpy.lib.format.open_memmap`), then streamed into `trace.npz`: the whole trace is never
  in memory."""

  def __init__(self, folder: pathlib.Path, n_worlds: int, n_steps: int):
    self.folder, self.n, self.t = folder, n_worlds, n_steps
    self.arrays: dict[str, np.ndarray] = {}
    folder.mkdir(parents=True, exist_ok=True)

  def write(self, flat: dict, lo: int, hi: int, t0: int) -> None:
    """Worlds `lo..hi-1` (global), ticks `t0..` of each `(worlds, ticks, ...)` array."""
    hi = min(hi, self.n)
    if lo >= hi:
      return
    for k, v in flat.items():
      a = self.arrays.get(k)
      if a is None:
        name = self.folder / (k.replace('/', '__') + '.npy')
        a = np.lib.format.open_memmap(name, mode='w+', dtype=v.dtype,
                                      shape=(self.n, self.t) + v.shape[2:])
        self.arrays[k] = a
      a[lo:hi, t0:t0 + v.shape[1]] = v[:hi - lo]

  def save_npz(self, path: pathlib.Path, **extra) -> None:
    for a in self.arrays.values():
      a.flush()
    np.savez(path, **extra, **self.arrays)   # streams each array in buffered pieces


def choose_physics(sim, physics: str, trajectory=None) -> tuple[str, str]:
  """`(backend, why)`: what runs the physics. `'auto'` picks MuJoCo C on a CPU host when
  nothing closes a loop on physics (measured faster there, `bench/scaling.py`), else MJX."""
  if physics is None:
    physics = 'mjx' if trajectory is None else 'trajectory'
  if trajectory is not None:
    if physics not in ('auto', 'trajectory'):
      raise FibrilError(f'--trajectory replays a recorded state log; it cannot be combined '
                        f'with --physics {physics}')
    physics_c.check_open_loop(sim.built, 'trajectory')
    return 'trajectory', f'recorded state log {trajectory}, sensordata by mj_forward'
  if physics == 'trajectory':
    raise FibrilError("physics 'trajectory' needs a state log: --trajectory LOG")
  return physics_c.choose(sim.built, physics, impl=sim.impl)


def run(manifest_path, *, worlds: int, seed: int, duration_s: float, out, trace_worlds=16,
        chunk_worlds=None, overwrite=False, segments=20, devices=None, share_physics=True,
        impl='jax', memory_budget_bytes=None, stall_s=None, physics=None,
        trajectory=None) -> dict:
  """Runs `worlds` worlds for `duration_s` and writes the output directory. Returns the summary.

  Args:
    chunk_worlds: worlds per host chunk (default: as many as the host memory budget for the
      recorded outputs allows, `memory_budget_bytes`, default $FIBRIL_MJX_MEMORY_BUDGET or
      1 GiB). A chunk is one program: sharded over `devices` and split into LAPACK-safe
      sub-batches inside (`fibril_mjx.batch.worlds`); world results never depend on the chunking.
    devices: None (every local device), a count or a device list.
    share_physics: run the physics once for all worlds when no per-world input reaches it
      (`Simulation.physics_sharing`); False: one physics rollout per world.
    impl: physics implementation (`'jax'` or `'warp'`, see `fibril_mjx.load`).
    physics: `'mjx'` (in the loop; the default without `trajectory`), `'c'` (MuJoCo C through
      `mujoco.rollout`, open loop), `'auto'` (`choose_physics`; the CLI's default), or
      `'trajectory'` (the default with `trajectory`, a state log: the path of an NPZ /
      Parquet file, `fibril_mjx.io.trajectory`).
  """

  out = outdir.claim(out, overwrite=overwrite)
  t_build = time.perf_counter()
  sim = simulator.load(manifest_path, impl=impl)
  physics, physics_why = choose_physics(sim, physics, trajectory)
  log = None
  if physics != 'mjx':
    sim = simulator.Simulation(sim.built, impl=impl, physics='c')
    if trajectory is not None:
      log = traj_io.load(trajectory, sim.mj_model)
  build_s = time.perf_counter() - t_build
  n_ticks = max(1, int(math.ceil(duration_s / sim.dt - 1e-9)))
  seg = int(math.ceil(n_ticks / segments))
  n_seg = int(math.ceil(n_ticks / seg))
  trace_worlds = max(0, min(trace_worlds, worlds))
  devs = worlds_mod.resolve_devices(devices)
  share, share_reason = sim.physics_sharing(share_physics=share_physics)
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
  budget = memory_budget_bytes or float(os.environ.get('FIBRIL_MJX_MEMORY_BUDGET', 2 ** 30))
  chunk = min(worlds, chunk_worlds or max(1, int(budget // max(trace_b, 1))))

  params_all = sim.default_params(worlds)
  metrics: dict[str, dict[str, list]] = {cid: {} for cid in sim.components}
  status: dict[str, dict[str, list]] = {cid: {} for cid in sim.components}
  diverged_all = []
  first_call_s, steady_s, steady_steps = None, 0.0, 0
  seen_layouts = set()
  bar = tqdm(total=worlds * n_seg * seg, unit='world-step', unit_scale=True,
             desc=f'{pathlib.Path(manifest_path).name}', file=sys.stderr, dynamic_ncols=True,
             disable=os.environ.get('FIBRIL_MJX_NO_PROGRESS') == '1')
  tmp = outdir.stage(out)
  layouts = []
  try:
    traces = _TraceFile(tmp / '.trace', trace_worlds, n_ticks + 1)
    t_run = time.perf_counter()
    for lo, hi in worlds_mod.chunks(worlds, chunk):
      n = hi - lo
      p = jax.tree.map(lambda x: x[lo:hi], params_all)
      keys = simulator.world_keys(seed, n, lo)
      lay = sim.layout(n, devices=devs, share=share)
      layouts.append(lay)
      watch = worlds_mod.Watchdog(f'{manifest_path}: worlds {lo}..{hi - 1} of {worlds} '
                                  f'({lay.describe()})', stall_s)
      compiling = lay not in seen_layouts
      seen_layouts.add(lay)
      t0 = time.perf_counter()
      if physics != 'mjx':   # the whole chunk in one open-loop rollout
        state, outs = physics_c.simulation_rollout(sim, p, keys, n_ticks, trajectory=log,
                                                   share_physics=share_physics)
        host = jax.tree.map(np.asarray, watch.wait(outs))
        dt_call = time.perf_counter() - t0
        first_call_s = dt_call if first_call_s is None else first_call_s
        steady_s, steady_steps = steady_s + dt_call, steady_steps + n * n_ticks   # incl. compile
        bar.update(n * n_seg * seg)
      else:
        state = sim.reset(p, keys, share_physics=share, devices=devs)
        out0 = jax.tree.map(lambda x: np.asarray(x)[:, None], watch.wait(sim.outputs(state)))
        host = jax.tree.map(lambda x: np.empty((n, n_ticks + 1) + x.shape[2:], x.dtype), out0)
        jax.tree.map(lambda h, x: h.__setitem__((slice(None), slice(0, 1)), x), host, out0)
      tick = 1
      for _ in range(n_seg if physics == 'mjx' else 0):
        t0 = time.perf_counter() if not compiling else t0
        state, outs = sim.run(p, state, seg, True, devices=devs, world_major=True)
        outs = watch.wait(outs)
        take = min(seg, n_ticks + 1 - tick)
        jax.tree.map(lambda h, x: h.__setitem__((slice(None), slice(tick, tick + take)),
                                                np.asarray(x)[:, :take]), host, outs)
        tick += take
        dt_call = time.perf_counter() - t0
        if compiling:
          first_call_s = dt_call if first_call_s is None else first_call_s
          compiling = False
        else:
          steady_s += dt_call
          steady_steps += n * seg
        bar.update(n * seg)
      flat = common.flatten(host)
      for cid, c in sim.components.items():
        metric_fn = analysis.for_type(c.type).metrics
        if metric_fn is not None:
          with np.errstate(all='ignore'):
            m = metric_fn(common.per_sample(common.group(flat, 'sensor', cid)),
                        common.group(flat, 'truth', cid))
          for k, v in m.items():
            metrics[cid].setdefault(k, []).append(np.asarray(v))
        for k, v in c.status(state.components[cid]).items():
          status[cid].setdefault(k, []).append(np.asarray(v))
      diverged_all.append(np.asarray(state.diverged))
      traces.write(flat, lo, hi, 0)
      del host, flat
    bar.close()
    run_s = time.perf_counter() - t_run
    metrics = {cid: {k: np.concatenate(v) for k, v in m.items()} for cid, m in metrics.items()}
    status = {cid: {k: np.concatenate(v) for k, v in m.items()} for cid, m in status.items()}
    diverged = np.concatenate(diverged_all)
    keep = diverged < 0
    time_s = np.arange(n_ticks + 1) * sim.dt
    peak = worlds_mod.describe_memory()['peak_rss_bytes']

    rate = steady_steps / steady_s if steady_s > 0 else float('nan')
    lay0 = layouts[0]
    physics_line = (f'physics: 1 shared trajectory for {worlds} worlds' if share else
                    f'physics: one trajectory per world ({share_reason})')
    bad = np.nonzero(~keep)[0]
    summary = {
        'manifest': str(manifest_path), 'manifest_sha256': sim.manifest.sha256,
        'fibril_mjx': __version__, 'seed': seed, 'worlds': worlds,
        'duration_s': n_ticks * sim.dt, 'dt_s': sim.dt, 'ticks': n_ticks, 'build_s': build_s,
        'run_s': run_s, 'first_segment_s_including_compile': first_call_s,
        'world_steps_per_s': rate, 'physics_impl': sim.impl, 'physics': physics,
        'physics_choice': physics_why,
        'physics_shared': bool(share), 'physics_sharing': share_reason,
        'devices': len(devs), 'layout': lay0.describe(), 'chunk_worlds': chunk,
        'state_bytes_per_world': state_b, 'trace_bytes_per_world': trace_b,
        'peak_rss_bytes': peak,
        'diverged': {'count': int(bad.size), 'worlds': bad.tolist(),
                     'first_tick': diverged[bad].tolist()},
        'components': {}}
    lines = [f'fibril-mjx run {manifest_path}  (fibril_mjx {__version__}, seed {seed}, manifest '
             f'sha256 {sim.manifest.sha256[:12]})',
             f'{worlds} worlds x {n_ticks} ticks (dt {sim.dt:g} s, {n_ticks * sim.dt:g} s)  '
             f'build {build_s:.1f} s, first segment incl. compile {first_call_s:.1f} s, '
             f'total {run_s:.1f} s',
             f'throughput {rate:,.0f} world-steps/s ' + ('(after compile)' if physics == 'mjx'
                                                       else '(compile of the device pass included)'),
             physics_line + (f'; {worlds_mod.describe_impl(sim.impl)}' if physics == 'mjx'
                              else '; MuJoCo C (float64), devices in JAX float32'),
             f'physics backend: {physics} ({physics_why})',
             (f'layout: {lay0.describe()}' if physics == 'mjx' else
              f'layout: mujoco.rollout on {os.cpu_count()} threads, then the devices in JAX')
             + (f'; host chunks of {chunk} worlds' if chunk < worlds else ''),
             f'memory: {worlds_mod.fmt_bytes(state_b)} state + '
             f'{worlds_mod.fmt_bytes(trace_b)} recorded outputs per world; peak RSS '
             f'{worlds_mod.fmt_bytes(peak)}']
    if bad.size:
      ticks_txt = ', '.join(str(t) for t in diverged[bad][:10]) + (' ...' if bad.size > 10
                                                                   else '')
      lines.append(f'{bad.size} of {worlds} worlds diverged (non-finite physics or component '
                   f'state) at ticks {ticks_txt}; worlds '
                   + ', '.join(map(str, bad[:10])) + (' ...' if bad.size > 10 else '')
                   + '; excluded from the statistics below (listed in worlds.csv)')
    lines.append('')
    for cid, c in sim.components.items():
      comp = {'type': c.type, 'sample_type': c.sample_type, 'metrics': {}, 'status': {}}
      lines.append(f'{cid} ({c.type}) — across {int(keep.sum())} worlds'
                   + (f' ({bad.size} diverged excluded)' if bad.size else '')
                   + ': mean / p50 / p95 / max')
      for k, v in metrics[cid].items():
        d = _describe(_finite_rows(v, keep))
        comp['metrics'][k] = d
        lines.append(f'  {k:<34} {d["mean"]:.4g} / {d["p50"]:.4g} / {d["p95"]:.4g} / '
                     f'{d["max"]:.4g}')
      for k, v in status[cid].items():
        tot = int(np.sum(np.asarray(v)[keep]))
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
        'devices': [str(d) for d in devs], 'layout': lay0.describe(), 'chunk_worlds': chunk,
        'physics_impl': sim.impl, 'physics_sharing': share_reason, 'physics': physics,
        'physics_choice': physics_why,
        'trajectory': str(pathlib.Path(trajectory).resolve()) if trajectory else None,
        'cpu_isa': cpu_isa(),
    }

    (tmp / 'summary.txt').write_text('\n'.join(lines) + '\n')
    (tmp / 'summary.json').write_text(json.dumps(summary, indent=2))
    (tmp / 'meta.json').write_text(json.dumps(meta, indent=2))
    cols = (['world_index', 'diverged_tick'] +
            [f'{cid}/{k}' for cid in metrics for k in metrics[cid]])
    rows = np.column_stack([np.arange(worlds), diverged] +
                           [metrics[cid][k] for cid in metrics for k in metrics[cid]])
    np.savetxt(tmp / 'worlds.csv', rows, delimiter=',', header=','.join(cols), comments='',
               fmt='%.9g')
    plot_failed = []
    if trace_worlds:
      traces.save_npz(tmp / 'trace.npz', time_s=time_s, world_index=np.arange(trace_worlds))
      arrays = traces.arrays
      ok = np.nonzero(keep[:trace_worlds])[0]
      world = int(ok[0]) if ok.size else 0
      for cid, c in sim.components.items():
        plot_fn = analysis.for_type(c.type).plot
        if plot_fn is None:
          continue
        finite_metrics = {k: _finite_rows(v, keep) for k, v in metrics[cid].items()}
        try:
          with np.errstate(all='ignore'):
            plot_fn(tmp / f'{cid}.png', cid, time_s,
                    common.per_sample(common.group(arrays, 'sensor', cid)),
                    common.group(arrays, 'truth', cid), world, finite_metrics,
                    f'{pathlib.Path(manifest_path).name} — {cid} ({c.type}), seed {seed}'
                    + (f', world {world}' if world else ''))
        except Exception as e:  # noqa: BLE001 — a plot never costs the results
          plot_failed.append(f'{cid}.png not drawn: {type(e).__name__}: {e}')
    shutil.rmtree(tmp / '.trace', ignore_errors=True)
    if plot_failed:
      (tmp / 'summary.txt').write_text('\n'.join(lines + plot_failed) + '\n')
    outdir.commit(tmp, out)
  except BaseException:
    bar.close()
    outdir.discard(tmp)
    raise
  print('\n'.join(lines))
  for line in plot_failed:
    print(f'warning: {line}', file=sys.stderr)
  print(f'wrote {out}/: summary.txt, summary.json, meta.json, worlds.csv'
        + (', trace.npz, ' + ', '.join(f'{cid}.png' for cid in sim.components
                                       if f'{cid}.png not drawn' not in ' '.join(plot_failed))
           if trace_worlds else ''))
  return summary
