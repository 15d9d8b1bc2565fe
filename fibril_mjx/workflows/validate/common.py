"""What every `fibril-mjx validate` rig shares: the `Check` line of the summary and its
formatting, collection of delivered samples, the transport timing check (IMU / AHRS and GNSS),
the rig files, the staged output directory and the summary (`summary.txt` / `summary.json`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import pathlib
import time
import types
from typing import Callable, NamedTuple

import jax
import mujoco
import numpy as np
import yaml
from scipy import stats as sps

from fibril_mjx.batch import physics_c
from fibril_mjx.batch.simulation import Options, Simulation
from fibril_mjx.batch.simulation import load as load_simulation
from fibril_mjx.config.version import __version__
from fibril_mjx.analysis import plotting
from fibril_mjx.io import outdir
from fibril_mjx.mechanisms import fifo

G = 9.80665
K_SIGMA = 4.0
#: the two-sided false-failure level of one check: that of `K_SIGMA` standard errors of a
#: normal statistic whose σ is known (6.3e-5)
LEVEL = 2.0 * float(sps.norm.sf(K_SIGMA))


def k_student(n: int) -> float:
  """The multiplier of a standard error estimated from `n` independent units (the sample std,
  n − 1 degrees of freedom) that keeps the level `LEVEL` of `K_SIGMA` known-σ standard errors:
  the Student-t quantile t_{n−1}(1 − LEVEL/2) (32.6 at 4 units, 8.47 at 8, 5.48 at 16, → 4).
  `K_SIGMA` below 2 units (no std to estimate)."""
  return K_SIGMA if n < 2 else float(sps.t.isf(LEVEL / 2, n - 1))


def k_complex(n: int) -> float:
  """The radius multiplier of the mean of `n` complex units (circular Gaussian scatter) about
  its expected value, in units of its RMS standard error √(Σ|h_i − h̄|² / (n − 1) / n), at the
  level `LEVEL`: n·|h̄ − h|² / s² is F(2, 2n − 2) distributed, so √F⁻¹(1 − LEVEL) (3.11 as
  n → ∞, 4.57 at 8 units). `K_SIGMA` below 2 units."""
  return K_SIGMA if n < 2 else math.sqrt(float(sps.f.isf(LEVEL, 2, 2 * n - 2)))


# ------------------------------------------------------------------------------- checks


@dataclasses.dataclass
class Check:
  """One pass/fail line of the summary."""
  name: str
  quantity: str
  measured: object
  configured: object
  tolerance: object
  basis: str
  passed: bool | None          # None: not resolvable / informational
  plot: str = ''
  note: str = ''

  def __post_init__(self):
    if self.passed is not None:
      self.passed = bool(self.passed)   # NumPy bools are not `False`

  def as_dict(self):
    return {k: _jsonable(v) for k, v in dataclasses.asdict(self).items()}


def _jsonable(v):
  if isinstance(v, dict):
    return {k: _jsonable(x) for k, x in v.items()}
  if isinstance(v, (list, tuple)):
    return [_jsonable(x) for x in v]
  if isinstance(v, np.ndarray):
    return _jsonable(v.tolist())
  if isinstance(v, (np.floating, float)):
    return None if not np.isfinite(v) else float(v)
  if isinstance(v, (np.integer,)):
    return int(v)
  if isinstance(v, np.bool_):
    return bool(v)
  return v


def fmt(v):
  if v is None:
    return '—'
  if isinstance(v, (list, tuple, np.ndarray)):
    return '[' + ', '.join(fmt(x) for x in np.asarray(v, dtype=object).ravel()) + ']'
  if isinstance(v, (bool, np.bool_)):
    return str(bool(v))
  if isinstance(v, (int, np.integer)):
    return str(int(v))
  if isinstance(v, (float, np.floating)):
    return f'{float(v):.5g}'
  return str(v)


def axis_name(i):
  return 'xyz'[i]


# ------------------------------------------------------------------------- data helpers


DUT = 'dut'   # the component id of a rig's device under test


def rig_simulation(path, *, placed: bool = False):
  """A rig's `Simulation` on the fastest valid physics backend (`physics_c.choose`: MuJoCo C
  on a CPU for these open-loop rigs, MJX otherwise). `placed`: the rig moves its device from
  site to site per world (`placements`), which only MuJoCo C can (MJX compiles each sensor's
  object into the program), so MuJoCo C on any backend; the devices run where JAX runs."""
  sim = load_simulation(path)
  physics, _ = physics_c.choose(sim.built, 'c' if placed else 'auto', impl=sim.impl)
  return sim if physics == 'mjx' else Simulation(sim.built, physics=physics)


def placements(m, sites, worlds: int) -> dict:
  """Per-world MJCF fields that place a rig's one device on each of `sites` in turn:
  `{'sensor_objid': (len(sites) * worlds, nsensor)}`, worlds `j*worlds .. (j+1)*worlds - 1`
  on `sites[j]`. Every sensor on the first site moves (the device's own and the hidden ones
  the builder adds for it, e.g. the IMU's orientation), so one compiled device program
  serves every site instead of one copy of the device per site."""
  ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, s) for s in sites]
  on = (m.sensor_objtype == mujoco.mjtObj.mjOBJ_SITE) & (m.sensor_objid == ids[0])
  objid = np.repeat(np.asarray(m.sensor_objid)[None], len(ids) * worlds, axis=0)
  for j, sid in enumerate(ids):
    objid[j * worlds:(j + 1) * worlds, on] = sid
  return {'sensor_objid': objid}


def by_place(tree, names, worlds: int) -> dict:
  """`{name: tree of worlds j*worlds .. (j+1)*worlds - 1}` for the j-th of `names` (the
  leading axis of `tree`'s leaves is the world axis of `placements`)."""
  return {n: jax.tree.map(lambda x, j=j: x[j * worlds:(j + 1) * worlds], tree)
          for j, n in enumerate(names)}


def segments(sim, params, keys, n_ticks, seg, observe_truth=False, model=None):
  """`(outputs of tick 0 (W, 1, ...), iterator of world-major outputs (W, seg, ...))` of a
  rig: MJX in segments of `seg` ticks (bounded device memory), MuJoCo C in one open-loop
  rollout (its outputs cut into the same segments). `model`: per-world MJCF fields (MuJoCo
  C only: `placements`)."""
  if getattr(sim, 'physics', 'mjx') == 'c':
    _, tr, _ = sim.rollout(params, keys, n_ticks, model=model, options=Options(record=True))
    tr = jax.tree.map(np.asarray, tr)
    return (jax.tree.map(lambda x: x[:, :1], tr),
            (jax.tree.map(lambda x, k=k: x[:, 1 + k:1 + k + seg], tr)
             for k in range(0, n_ticks, seg)))
  assert model is None, 'per-world placements need MuJoCo C (rig_simulation(placed=True))'
  state = sim.reset(params, keys)
  first = jax.tree.map(lambda x: np.asarray(x)[:, None], sim.outputs(state))

  def rest(state):
    done = 0
    while done < n_ticks:
      state, outs, _ = sim.run(params, state, seg, options=Options(record=True))
      yield jax.tree.map(lambda x: np.swapaxes(np.asarray(x), 0, 1), outs)
      done += seg
  return first, rest(state)


def collect(sim, params, keys, n_ticks, seg, fields, model=None):
  """Runs `n_ticks` in segments; returns `{cid: {field: (W, n_acq, ...)}}` of the delivered
  samples indexed by acquisition (sequence) number, NaN where lost, plus 'delivered'."""
  first, rest = segments(sim, params, keys, n_ticks, seg, model=model)
  first = jax.tree.map(lambda x: x[:, 0], first['sensor'])
  book = lambda d: ('new_data', 'sequence', 'sample_tick') + (   # noqa: E731
      ('count',) if isinstance(d, fifo.Batch) else ())
  chunks = {cid: {f: [] for f in fields + book(d)} for cid, d in first.items()}
  for cid, d in first.items():
    for f in fields:
      chunks[cid][f].append(np.asarray(getattr(d.sample, f))[:, None])
    for f in book(d):
      chunks[cid][f].append(np.asarray(getattr(d, f))[:, None])
  for outs in rest:
    for cid, d in outs['sensor'].items():
      for f in fields:
        chunks[cid][f].append(np.asarray(getattr(d.sample, f)))
      for f in book(d):
        chunks[cid][f].append(np.asarray(getattr(d, f)))
  out = {cid: {f: np.concatenate(v, axis=1) for f, v in c.items()} for cid, c in chunks.items()}
  # FIFO delivery: one row per batch slot (`by_sequence` reads the delivered ones)
  return {cid: fifo.rows(c) if fifo.is_batch(c) else c for cid, c in out.items()}


def by_sequence(c: dict, field: str, n_acq: int):
  """`(W, n_acq, ...)` float64 samples indexed by sequence number (NaN where not delivered)."""
  v = c[field]
  new = c['new_data'].astype(bool)
  seq = c['sequence']
  out = np.full((v.shape[0], n_acq) + v.shape[2:], np.nan)
  w, t = np.nonzero(new & (seq >= 0) & (seq < n_acq))
  out[w, seq[w, t]] = v[w, t]
  return out


# ------------------------------------------------------------------------------- timing


def timing_checks(dev, dt, sens, fig_dir):
  periods, lats, missing, total = [], [], 0, 0
  sched_err = 0
  for name, d in sens.items():
    new = np.asarray(d.new_data).astype(bool)
    st, at, seq = np.asarray(d.sample_tick), np.asarray(d.arrival_tick), np.asarray(d.sequence)
    for w in range(new.shape[0]):
      s, a, n = st[w, new[w]], at[w, new[w]], seq[w, new[w]]
      if s.size < 2:
        continue
      periods.append(np.diff(s) / np.maximum(np.diff(n), 1) * dt)
      lats.append((a - s) * dt)
      total += int(n[-1]) + 1
      missing += int(n[-1]) + 1 - s.size
      nominal = dev.phase_s + n * dev.period_s
      e = s * dt - nominal
      sched_err += int(np.sum((e < -1e-6 * dt) | (e >= dt * (1 + 1e-6))))
  periods = np.concatenate(periods)
  lats = np.concatenate(lats)
  # Reference transport (SPEC §4), NumPy: release = max(k + ceil(max(0, L + J·z)/dt), prev).
  g = np.random.default_rng(12345)
  n_ref = 200000
  k = np.arange(n_ref) * round(dev.period_s / dt)
  secs = np.maximum(0.0, dev.latency_s + dev.jitter_s * g.standard_normal(n_ref))
  rel = np.maximum.accumulate(k + np.ceil(secs / dt - 1e-6))
  ref = (rel - k) * dt
  n = lats.size
  checks = []
  ok_p = sched_err == 0
  checks.append(Check('timing.period', 'sample period [s] (mean; schedule error count)',
                      {'mean': float(periods.mean()), 'min': float(periods.min()),
                       'max': float(periods.max()), 'off_schedule': sched_err},
                      dev.period_s, f'each sample time within [t_n, t_n + dt), dt = {dt:g} s',
                      'integer-tick schedule t_n = phase + n·period rounded up to a tick', ok_p))
  tol_m = K_SIGMA * max(ref.std(), 1e-12) / math.sqrt(n) + 1e-9
  ok_l = abs(lats.mean() - ref.mean()) <= tol_m
  checks.append(Check('timing.latency', 'mean latency arrival − sample [s]', float(lats.mean()),
                      dev.latency_s, tol_m, f'vs the reference transport on {dt:g} s ticks '
                      f'(mean {ref.mean():.6g} s: latency rounded up to whole ticks); '
                      f'{K_SIGMA:g}× std error of {n} deliveries', ok_l))
  tol_j = K_SIGMA * max(ref.std(), 1e-12) / math.sqrt(2 * n) + 1e-9
  ok_j = abs(lats.std() - ref.std()) <= tol_j + dt / math.sqrt(12) * (dev.jitter_s > 0)
  checks.append(Check('timing.jitter', 'latency std [s]', float(lats.std()), dev.jitter_s,
                      tol_j, f'vs the reference transport std {ref.std():.6g} s (tick '
                      f'quantization, non-decreasing release); {K_SIGMA:g}× std error',
                      bool(ok_j)))
  p = dev.loss_probability
  frac = missing / max(total, 1)
  tol_p = K_SIGMA * math.sqrt(max(p * (1 - p), 1e-12) / max(total, 1)) + 3.0 / max(total, 1)
  checks.append(Check('timing.loss', 'fraction of sequence numbers never delivered',
                      frac, p, tol_p, f'{K_SIGMA:g}× binomial std of {total} acquisitions',
                      abs(frac - p) <= tol_p))
  return with_plot(checks, _plot_timing(fig_dir, periods, lats, ref, dev))


def with_plot(checks: list, plot) -> list:
  """`checks`, each given the figure `plot` (a path or None)."""
  for c in checks:
    c.plot = plot
  return checks


def hist_vs_reference(ax, measured, reference, bins, reference_label: str, xlabel: str):
  """Density histograms on `ax`: `measured` filled, `reference` as a black outline."""
  ax.hist(measured, bins=bins, density=True, alpha=0.6, label='measured')
  ax.hist(reference, bins=bins, density=True, histtype='step', color='k', label=reference_label)
  ax.set_xlabel(xlabel)
  ax.legend(fontsize=7)


def _plot_timing(fig_dir, periods, lats, ref, dev):
  plt = plotting.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  axes[0].hist(periods * 1e3, bins=50)
  axes[0].axvline(dev.period_s * 1e3, color='k', ls='--', label='configured')
  axes[0].set_xlabel('sample period [ms]')
  axes[0].legend(fontsize=7)
  bins = np.linspace(min(lats.min(), ref.min()), max(lats.max(), ref.max()) + 1e-9, 50) * 1e3
  axes[1].axvline(dev.latency_s * 1e3, color='r', ls='--', label='configured latency_s')
  hist_vs_reference(axes[1], lats * 1e3, ref * 1e3, bins, 'reference transport', 'latency [ms]')
  path = fig_dir / 'timing.png'
  return plotting.save(fig, path)


# ------------------------------------------------------------------------------- output


def write_rig(dirpath, name, xml, doc):
  (dirpath / f'{name}.xml').write_text(xml)
  path = dirpath / f'{name}.yaml'
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  return path


class Request(NamedTuple):
  """One `validate` request as a rig runner receives it: the component and `validate.run`'s
  options, resolved.

  Attributes:
    manifest_path: the user's manifest.
    component: the component's id; ctype: its type; cfg: its resolved config fields.
    out: the claimed output directory.
    static_duration_s: length of the static records (s).
    worlds: worlds per rig (independent realizations); seed: the first rig's seed.
    perturb: fields changed in the simulated device only (the checks use `cfg`).
    progress: prints one progress line; t0: the run's start (`time.time()`).
  """

  manifest_path: str
  component: str
  ctype: str
  cfg: dict
  out: pathlib.Path
  static_duration_s: float
  worlds: int
  seed: int
  perturb: dict
  progress: Callable[[str], None]
  t0: float


@contextlib.contextmanager
def staged_output(out):
  """The staged output directory of `out` (`fibril_mjx.io.outdir`), with `rigs/`: a reader
  never sees half a result."""
  with outdir.staged(out) as tmp:
    (tmp / 'rigs').mkdir()
    yield tmp


def _write_summary(tmp: pathlib.Path, summary: dict) -> None:
  (tmp / 'summary.json').write_text(json.dumps(summary, indent=1, ensure_ascii=False))
  (tmp / 'summary.txt').write_text(render(summary))


def finish(tmp, request: Request, checks, *, dev=None, duration_s: float | None = None):
  """The summary of a rig run (`_summary`, wall time since `request.t0`), written into `tmp`.

  Args:
    dev: what the summary names the device by (`type`, `config`); None: the request's.
    duration_s: the static record length reported; None: `request.static_duration_s`.
  """
  if dev is None:
    dev = types.SimpleNamespace(type=request.ctype, config=request.cfg)
  dur = request.static_duration_s if duration_s is None else duration_s
  summary = _summary(request.manifest_path, request.component, dev, checks, request.perturb,
                     dur, request.worlds, request.seed, time.time() - request.t0)
  _write_summary(tmp, summary)
  return summary


def segmented(ticks: int) -> tuple[int, int]:
  """`(n_ticks, seg)` for `collect`: `ticks` rounded up to whole segments of at most 5000
  ticks."""
  seg = int(math.ceil(ticks / max(1, math.ceil(ticks / 5000))))
  return int(math.ceil(ticks / seg)) * seg, seg


def _summary(manifest_path, component, dev, checks, perturb, dur, worlds, seed, wall):
  failed = [c.name for c in checks if c.passed is False]
  return {'manifest': str(manifest_path), 'component': component, 'type': dev.type,
          'config': dev.config, 'perturb': perturb, 'static_duration_s': dur, 'worlds': worlds,
          'seed': seed, 'fibril_mjx': __version__, 'wall_s': round(wall, 1),
          'k_sigma': K_SIGMA, 'passed': not failed, 'failed': failed,
          'checks': [c.as_dict() for c in checks]}


def render(summary: dict) -> str:
  """The human-readable summary: one block per check, measured vs configured."""
  lines = [f"validate {summary['component']} ({summary['type']}) from {summary['manifest']}",
           f"static records {summary['static_duration_s']:g} s, {summary['worlds']} worlds per "
           f"rig, seed {summary['seed']}, tolerances at the level of {summary['k_sigma']:g} "
           f"standard errors (Student-t quantiles where a std is estimated from the worlds) "
           f"+ stated allowances; {summary['wall_s']:g} s"]
  if summary['perturb']:
    lines.append(f"PERTURBED device (checks use the configured values): {summary['perturb']}")
  lines.append('')
  for c in summary['checks']:
    status = {True: 'PASS', False: 'FAIL', None: 'n/a '}[c['passed']]
    lines.append(f"{status}  {c['name']}: {c['quantity']}")
    lines.append(f"      measured   {fmt_any(c['measured'])}")
    lines.append(f"      configured {fmt_any(c['configured'])}")
    lines.append(f"      tolerance  {fmt_any(c['tolerance'])} — {c['basis']}")
    if c.get('note'):
      lines.append(f"      note       {c['note']}")
    if c.get('plot'):
      lines.append(f"      plot       {c['plot']}")
  n_fail = len(summary['failed'])
  lines.append('')
  lines.append('ALL CHECKS PASSED' if not n_fail else
               f"{n_fail} CHECK(S) FAILED: {', '.join(summary['failed'])}")
  return '\n'.join(lines) + '\n'


def fmt_any(v):
  if isinstance(v, dict):
    return '{' + ', '.join(f'{k}: {fmt_any(x)}' for k, x in v.items()) + '}'
  if isinstance(v, list):
    return fmt(np.asarray(v, dtype=object)) if v and not isinstance(v[0], dict) else str(v)
  return fmt(v)


# ------------------------------------------------------------------------------- registry


def as_rig(run):
  """A runner `run(request: Request) -> summary` as the registry's `validation_rig(manifest_path,
  cid, ctype, cfg, out, **options)` (options: `Request`'s fields after `out`)."""
  def rig(manifest_path, cid, ctype, cfg, out, **options):
    return run(Request(manifest_path, cid, ctype, cfg, out, **options))
  rig.__module__, rig.__doc__ = run.__module__, run.__doc__
  return rig


class Bench(NamedTuple):
  """The bench body of a static rig (`bench_xml`): its position and its box geom's half-sizes
  and extra attributes (MJCF strings)."""

  pos: str = ''
  box: str = '0.05 0.05 0.01'
  box_attrs: str = ''


class Scene(NamedTuple):
  """What a static rig has around its bench (`bench_xml`), as MJCF lines: an `<asset>` block,
  a ground geom (before the bench) and worldbody lines after the bench (e.g. landmark sites)."""

  asset: str = ''
  ground: str = ''
  world: str = ''


def bench_xml(model: str, timestep: float, sites: str, *, sensors: str = '',
              integrator: str | None = 'implicitfast', gravity: bool = True,
              bench: Bench = Bench(), scene: Scene = Scene()) -> str:
  """The MJCF of a static validation rig: a `bench` body on a free yaw hinge about the vertical
  through its centre of mass (so MuJoCo C and MJX agree) carrying the device's `sites`.

  Args:
    sites, sensors: MJCF lines of the bench's sites and of the `<sensor>` block (none: no block).
    integrator: the `<option>` integrator, None for MuJoCo's default.
    gravity: gravity `0 0 -G` (False: none, e.g. for ray sensors).
    bench, scene: the bench body and what is around it.
  """
  pos, box, box_attrs = bench
  asset, ground, world = scene
  opt = f'timestep="{timestep!r}"' + (f' integrator="{integrator}"' if integrator else '')
  opt += f' gravity="0 0 -{G!r}"' if gravity else ' gravity="0 0 0"'
  body = f' pos="{pos}"' if pos else ''
  lines = [f'<mujoco model="{model}">', f'  <option {opt}/>']
  lines += [f'  {asset}'] if asset else []
  lines += ['  <worldbody>'] + ([f'    {ground}'] if ground else [])
  lines += [f'    <body name="bench"{body}>',
            '      <joint name="bench_yaw" type="hinge" axis="0 0 1"/>',
            f'      <geom type="box" size="{box}" mass="1" contype="0" conaffinity="0"'
            f'{box_attrs}/>']
  lines += ['      ' + ln.strip() for ln in sites.strip('\n').split('\n') if ln.strip()]
  lines += ['    </body>'] + ['    ' + ln.strip() for ln in world.split('\n') if ln.strip()]
  lines += ['  </worldbody>']
  if sensors.strip():
    lines += ['  <sensor>'] + ['    ' + ln.strip() for ln in sensors.split('\n') if ln.strip()]
    lines += ['  </sensor>']
  return '\n'.join(lines + ['</mujoco>']) + '\n'
