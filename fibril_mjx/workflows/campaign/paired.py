"""Paired campaigns (common random numbers): two or more designs run on the same worlds — the
same world keys (so every named RNG stream of every component gives the same draws) and the
same `vary:` samples — and the report compares them world by world.

Outputs under the campaign directory: `designs/NAME/` (one ordinary campaign directory per
design), `unpaired/NAME/` (each design after the first again, on independent keys: seed
`seed + i` for design i), `paired.txt` / `paired.json`:

- per design and metric: the mean and its 95 % t interval;
- per design after the first (the baseline is the first), the world-wise differences
  `d_w = m_design(w) − m_baseline(w)`: mean, standard deviation `s_d`, 95 % t interval
  `mean ± t_{0.975, n−1} · s_d/√n`;
- the same difference from the unpaired run (`m_unpaired(w) − m_baseline(w)`, independent
  draws): mean, its Welch 95 % interval, and the variance-reduction factor
  `var(unpaired differences) / var(paired differences)` — measured, not assumed; also the
  factor the paired run alone predicts, `(s_base² + s_design²) / s_d²`.

With equal variances the factor is `1 / (1 − ρ)`, ρ the world-wise correlation of the two
designs' metrics: shared draws make what the designs have in common (the trajectory, per-unit
biases, the noise sequence scaled by each design's density) cancel in the difference.
"""

from __future__ import annotations

import json
import math

import numpy as np
from scipy import stats

from fibril_mjx.errors import ConfigError, ConfigErrors
from fibril_mjx.io import outdir
from fibril_mjx.workflows.campaign import engine, parts
from fibril_mjx.workflows.campaign import spec as sp

LEVEL = 0.95


def _finite(*cols):
  ok = np.ones(len(cols[0]), bool)
  for c in cols:
    ok &= np.isfinite(c)
  return [np.asarray(c, np.float64)[ok] for c in cols]


def mean_interval(x, level: float = LEVEL) -> dict:
  """Mean and its t interval over the finite values of `x` `(n,)`.

  Returns:
    `{n, mean, std, ci: [lo, hi]}` (`std` with ddof 1; NaN where n < 2).
  """
  (x,) = _finite(np.asarray(x, np.float64))
  n = x.size
  if n < 2:
    return {'n': n, 'mean': float(x.mean()) if n else math.nan, 'std': math.nan,
            'ci': [math.nan, math.nan]}
  m, s = float(x.mean()), float(x.std(ddof=1))
  h = float(stats.t.ppf(0.5 + level / 2, n - 1)) * s / math.sqrt(n)
  return {'n': n, 'mean': m, 'std': s, 'ci': [m - h, m + h]}


def paired_difference(base, other, level: float = LEVEL) -> dict:
  """World-wise differences `other − base` `(n,)` (worlds finite in both): `mean_interval`."""
  b, o = _finite(base, other)
  return mean_interval(o - b, level)


def welch_difference(base, other, level: float = LEVEL) -> dict:
  """Difference of means `mean(other) − mean(base)` of independent samples: Welch's interval.

  Returns:
    `{mean, se, df, ci: [lo, hi]}`.
  """
  (b,), (o,) = _finite(base), _finite(other)
  vb, vo = b.var(ddof=1) / b.size, o.var(ddof=1) / o.size
  se = math.sqrt(vb + vo)
  df = (vb + vo) ** 2 / (vb ** 2 / (b.size - 1) + vo ** 2 / (o.size - 1)) if se > 0 else math.inf
  m = float(o.mean() - b.mean())
  h = float(stats.t.ppf(0.5 + level / 2, df)) * se
  return {'mean': m, 'se': se, 'df': float(df), 'ci': [m - h, m + h]}


def variance_reduction(base, other, other_unpaired) -> dict:
  """Var of the world-wise differences without and with pairing, over worlds finite in all.

  Args:
    base, other: the two designs' metric on the same worlds `(n,)`.
    other_unpaired: `other`'s metric on independent keys `(n,)`.

  Returns:
    `{var_paired, var_unpaired, factor, predicted}`: `factor = var_unpaired / var_paired`
    (measured), `predicted = (var(base) + var(other)) / var_paired` (from the paired run).
  """
  b, o, u = _finite(base, other, other_unpaired)
  vp, vu = float(np.var(o - b, ddof=1)), float(np.var(u - b, ddof=1))
  pred = float(np.var(b, ddof=1) + np.var(o, ddof=1))
  div = lambda a, c: a / c if c > 0 else (math.inf if a > 0 else math.nan)  # noqa: E731
  return {'var_paired': vp, 'var_unpaired': vu, 'factor': div(vu, vp),
          'predicted': div(pred, vp)}


def analyse(rows: dict, unpaired: dict, metrics: list[str]) -> dict:
  """The paired report's numbers.

  Args:
    rows: `{design: {column: (n,)}}` of the paired runs, the baseline first (same worlds).
    unpaired: `{design: rows}` of the unpaired reruns (may be empty).
    metrics: metric columns to compare.
  """
  names = list(rows)
  base = names[0]
  for n in names[1:]:
    if not np.array_equal(rows[n]['world'], rows[base]['world']):
      raise ValueError(f'design {n} ran other worlds than {base}')
  out = {'baseline': base, 'designs': names, 'metrics': {}}
  for m in metrics:
    entry = {'per_design': {n: mean_interval(rows[n][m]) for n in names}, 'differences': {}}
    for n in names[1:]:
      d = {'paired': paired_difference(rows[base][m], rows[n][m])}
      if n in unpaired:
        d['unpaired'] = welch_difference(rows[base][m], unpaired[n][m])
        d['variance_reduction'] = variance_reduction(rows[base][m], rows[n][m], unpaired[n][m])
      entry['differences'][n] = d
    out['metrics'][m] = entry
  return out


def _g(x) -> str:
  return 'nan' if x is None or not math.isfinite(x) and not math.isinf(x) else f'{x:.4g}'


def lines(res: dict, camp, seeds: dict) -> list[str]:
  """The text of `paired.txt`."""
  base = res['baseline']
  out = [f'paired campaign {camp.file}',
         f'designs: {", ".join(res["designs"])} (baseline {base}); {camp.worlds} worlds on the '
         f'same world keys (seed {camp.seed})', '',
         'per design — mean [95 % t interval]']
  for m, e in res['metrics'].items():
    out.append(f'  {m}')
    for n, s in e['per_design'].items():
      out.append(f'    {n:<24} {_g(s["mean"])} [{_g(s["ci"][0])}, {_g(s["ci"][1])}]  '
                 f'(n {s["n"]})')
  out += ['', f'differences vs {base} — paired (same keys): mean [95 % t interval], sd; '
          'unpaired (independent keys): mean [Welch 95 %]; variance reduction = var(unpaired '
          'world differences) / var(paired)']
  for m, e in res['metrics'].items():
    out.append(f'  {m}')
    for n, d in e['differences'].items():
      p = d['paired']
      out.append(f'    {n} − {base}: paired {_g(p["mean"])} [{_g(p["ci"][0])}, '
                 f'{_g(p["ci"][1])}], sd {_g(p["std"])}')
      if 'unpaired' in d:
        u, vr = d['unpaired'], d['variance_reduction']
        out.append(f'      unpaired (seed {seeds[n]}): {_g(u["mean"])} [{_g(u["ci"][0])}, '
                   f'{_g(u["ci"][1])}]; variance reduction x{_g(vr["factor"])} measured '
                   f'(x{_g(vr["predicted"])} predicted by the paired run)')
  return out


def unpaired_seed(seed: int, i: int) -> int:
  """The seed of design `i`'s unpaired rerun (independent of `seed`'s streams)."""
  return (seed + i) % 2 ** 31


def _design_error(e: ConfigError, design: sp.Design) -> ConfigError:
  """An error of a `set:` value (raised as the `vary:` entry it becomes) at its own path."""
  for fp, value in design.set:
    at = f'vary.{fp}'
    if e.path == at or e.path.startswith(at + '.'):
      rule = e.rule[len('each choice '):] if e.rule.startswith('each choice ') else e.rule
      return ConfigError(e.file, f'designs.{design.name}.set.{fp}', rule, value)
  return e


def plan(file, design: sp.Design, over: sp.Overrides) -> engine.Plan:
  """The `engine.Plan` of one design (`over`: the values replacing the file's, e.g. `seed`);
  errors of its `set:` values name them."""
  camp = sp.read(file, **over._replace(design=design.name)._asdict())
  try:
    return engine.Plan(camp)
  except ConfigErrors as e:
    raise ConfigErrors([_design_error(x, design) for x in e.errors]) from None
  except ConfigError as e:
    raise _design_error(e, design) from None


def run(camp, out, run_one, over: sp.Overrides, **options) -> dict:
  """Runs every design of the paired campaign `camp`, the unpaired reruns, and the report.

  Args:
    camp: the paired `spec.Campaign` (its `designs`).
    out: the campaign directory.
    run_one: `execute.run` (one design: `run_one(file, out, over, plan=, **options)`).
    over: the values replacing the file's (`design` and `seed` are set per run here).
    options: `execute.run`'s keyword options (resume, report, progress, backend, ...).

  Returns:
    `paired.json`'s content.
  """
  out = outdir.claim(out, overwrite=options.get('resume', False),
                     hint='use --resume to continue it, or another --out')
  # every design's plan first: a bad design fails before anything runs
  plans = {d.name: plan(camp.file, d, over) for d in camp.designs}
  out.mkdir(parents=True, exist_ok=True)
  rows, unpaired, seeds = {}, {}, {}
  for d in camp.designs:
    run_one(camp.file, out / 'designs' / d.name, over._replace(design=d.name),
            plan=plans[d.name], **options)
    rows[d.name] = parts.read_rows(out / 'designs' / d.name)
  if camp.unpaired:
    for i, d in enumerate(camp.designs[1:], 1):
      seeds[d.name] = unpaired_seed(camp.seed, i)
      one = over._replace(seed=seeds[d.name])
      run_one(camp.file, out / 'unpaired' / d.name, one._replace(design=d.name),
              plan=plan(camp.file, d, one), **options)
      unpaired[d.name] = parts.read_rows(out / 'unpaired' / d.name)
  meta = json.loads((out / 'designs' / camp.designs[0].name / 'campaign.json').read_text())
  metrics = [m for m in meta['metrics'] if all(m in r for r in rows.values())
             and np.asarray(rows[camp.designs[0].name][m]).dtype.kind in 'fiu']
  res = analyse(rows, unpaired, metrics)
  res['campaign'] = str(camp.file)
  res['seed'], res['unpaired_seeds'] = camp.seed, seeds
  text = lines(res, camp, seeds)
  parts.write_atomic(out / 'paired.txt', ('\n'.join(text) + '\n').encode())
  parts.write_atomic(out / 'paired.json', json.dumps(res, indent=2, default=float).encode())
  if options.get('report', True):
    print('\n'.join(text))
  return res
