"""The campaign report: failure probabilities with Wilson intervals, metric quantiles,
Spearman sensitivity rankings, pass / fail and metric medians per choice of every
`dist: choice` field (profiles, static modes), passing vs failing worlds, plots, worst
worlds."""

from __future__ import annotations

import json
import pathlib

import numpy as np
from scipy import stats

from fibril_mjx.analysis import plotting
from fibril_mjx.analysis.stats.proportion import Z95, wilson  # noqa: F401 (report.wilson)
from fibril_mjx.workflows.campaign import parts
from fibril_mjx.builder.vary import choice_label

QUANTILES = (0.01, 0.05, 0.5, 0.95, 0.99)


def spearman(x, y) -> float:
  ok = np.isfinite(x) & np.isfinite(y)
  if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
    return float('nan')
  return float(stats.spearmanr(x[ok], y[ok]).statistic)


def _numeric(col) -> bool:
  return np.asarray(col).dtype.kind in 'fiub'


def _choice_labels(f: dict, col: np.ndarray) -> np.ndarray:
  """A choice field's column as text: its values, or for an index column the choices."""
  vals = f['params']['values']
  numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals)
  if _numeric(col) and not numeric:
    return np.array([choice_label(vals[int(i)]) for i in col], dtype=object)
  return np.array([f'{x:g}' if isinstance(x, float) else str(x) for x in col.tolist()],
                  dtype=object)


def by_choice(rows: dict, meta: dict) -> dict:
  """`{field path: {choice: {worlds, failures, failure_probability, wilson95, median}}}` for
  every one-column `dist: choice` field: the comparison a rank correlation cannot make for
  categories (profiles, modes)."""
  ok = rows['pass'].astype(bool) if 'pass' in rows else None
  out = {}
  for f in meta['fields']:
    if f['dist'] != 'choice' or len(f['columns']) != 1:
      continue
    labels = _choice_labels(f, np.asarray(rows[f['columns'][0]]))
    entry = {}
    for lab in dict.fromkeys(labels.tolist()):
      sel = labels == lab
      n = int(sel.sum())
      e = {'worlds': n}
      if ok is not None:
        k = int((~ok[sel]).sum())
        e.update(failures=k, failure_probability=k / n, wilson95=list(wilson(k, n)))
      med = {}
      for m in meta['metrics']:
        v = np.asarray(rows[m], np.float64)[sel]
        v = v[np.isfinite(v)]
        med[m] = float(np.median(v)) if v.size else None
      e['median'] = med
      entry[lab] = e
    out[f['path']] = dict(sorted(entry.items()))
  return out


def analyse(rows: dict, meta: dict) -> dict:
  sampled = [c for f in meta['fields'] for c in (f['columns'] if f['kind'] not in (
      'static', 'profile') else [f['path']]) if _numeric(rows[c])]
  n = len(rows['world'])
  out = {'worlds': n, 'criteria': {}, 'metrics': {}, 'sensitivity': {}, 'pass_vs_fail': {},
         'by_choice': by_choice(rows, meta)}
  for cr in meta['criteria']:
    ok = rows[f'pass.{cr["name"]}'].astype(bool)
    k = int(n - ok.sum())
    lo, hi = wilson(k, n)
    out['criteria'][cr['name']] = {'metric': cr['metric'], 'min': cr['min'], 'max': cr['max'],
                                   'failures': k, 'failure_probability': k / n if n else None,
                                   'wilson95': [lo, hi]}
  for m in meta['metrics']:
    v = np.asarray(rows[m], np.float64)
    fin = v[np.isfinite(v)]
    d = {'mean': float(fin.mean()) if fin.size else None, 'max': float(fin.max()) if fin.size
         else None, 'non_finite': int(n - fin.size)}
    for q in QUANTILES:
      d[f'p{q * 100:g}'] = float(np.quantile(fin, q)) if fin.size else None
    out['metrics'][m] = d
    rho = {c: spearman(np.asarray(rows[c], np.float64), v) for c in sampled}
    out['sensitivity'][m] = sorted(([c, r] for c, r in rho.items() if np.isfinite(r)),
                                   key=lambda t: -abs(t[1]))
  if 'pass' in rows:
    ok = rows['pass'].astype(bool)
    for c in sampled:
      x = np.asarray(rows[c], np.float64)
      entry = {'median_pass': float(np.median(x[ok])) if ok.any() else None,
               'median_fail': float(np.median(x[~ok])) if (~ok).any() else None,
               'spearman_with_failure': spearman(x, (~ok).astype(np.float64))}
      if ok.any() and (~ok).any() and np.ptp(x) > 0:
        entry['mann_whitney_p'] = float(stats.mannwhitneyu(x[ok], x[~ok]).pvalue)
      out['pass_vs_fail'][c] = entry
    out['pass_vs_fail'] = dict(sorted(
        out['pass_vs_fail'].items(),
        key=lambda t: -abs(t[1]['spearman_with_failure'])
        if np.isfinite(t[1]['spearman_with_failure']) else 0))
  return out


def worst(rows: dict, meta: dict, k: int = 10) -> tuple[str, list]:
  """The metric that ranks worlds (the first criterion's, else the first metric) and the `k`
  worst worlds by it (largest, or smallest for a `min:` criterion)."""
  crit = meta['criteria'][0] if meta['criteria'] else None
  metric = crit['metric'] if crit else meta['metrics'][0]
  v = np.asarray(rows[metric], np.float64)
  key = np.where(np.isfinite(v), v, np.inf)
  if crit and crit['max'] is None:
    key = np.where(np.isfinite(v), -v, np.inf)
  order = np.argsort(-key, kind='stable')[:k]
  return metric, [(int(rows['world'][i]), float(v[i])) for i in order]


def write(out, plan, meta) -> dict:
  out = pathlib.Path(out)
  rows = parts.read_rows(out)
  res = analyse(rows, meta)
  metric, bad = worst(rows, meta)
  res['worst'] = {'metric': metric, 'worlds': [
      {'world': w, 'value': v, 'replay': f'fibril-mjx replay {out} --world {w} --out '
       f'{out}/replay-{w}'} for w, v in bad]}
  res['campaign'] = meta['campaign_file']
  res['options'] = meta['options']
  res['run_s'] = meta.get('run_s')
  lines = [f'fibril-mjx campaign {meta["campaign_file"]}',
           f'{res["worlds"]} worlds x {meta["options"]["ticks"]} ticks (dt '
           f'{meta["options"]["dt_s"]:g} s), seed {meta["options"]["seed"]}, '
           f'{len(meta["chunks"])} chunks'
           + (f'; physics {meta["options"]["physics"]} ({meta["physics_choice"]})'
              if meta.get('physics_choice') else ''), '']
  if res['criteria']:
    lines.append('criteria — failure probability (95 % Wilson interval)')
    for name, c in res['criteria'].items():
      lo, hi = c['wilson95']
      bound = ' and '.join(x for x in (f'>= {c["min"]:g}' if c['min'] is not None else '',
                                       f'<= {c["max"]:g}' if c['max'] is not None else '') if x)
      lines.append(f'  {name:<20} {c["metric"]} {bound}: {c["failures"]} / {res["worlds"]} '
                   f'fail = {c["failure_probability"]:.4f} [{lo:.4f}, {hi:.4f}]')
    lines.append('')
  lines.append('metrics — mean / p1 / p5 / p50 / p95 / p99 / max')
  for m, d in res['metrics'].items():
    vals = [d['mean']] + [d[f'p{q * 100:g}'] for q in QUANTILES] + [d['max']]
    lines.append(f'  {m:<40} ' + ' / '.join('nan' if x is None else f'{x:.4g}' for x in vals)
                 + (f'  ({d["non_finite"]} non-finite)' if d['non_finite'] else ''))
  lines.append('')
  lines.append('sensitivity — Spearman rank correlation of each varied field with the metric')
  for m, ranking in res['sensitivity'].items():
    top = ', '.join(f'{c} {r:+.2f}' for c, r in ranking[:5]) or '(nothing varied)'
    lines.append(f'  {m}: {top}')
  if res['by_choice']:
    lines += ['', 'by choice — worlds, failure probability (95 % Wilson interval), metric '
              'medians']
    for path, entry in res['by_choice'].items():
      lines.append(f'  {path}')
      for lab, e in entry.items():
        fail = ('' if 'failures' not in e else f'fail {e["failure_probability"]:.4f} '
                f'[{e["wilson95"][0]:.4f}, {e["wilson95"][1]:.4f}]; ')
        med = ', '.join(f'{m} {"nan" if v is None else format(v, ".4g")}'
                        for m, v in e['median'].items())
        lines.append(f'    {lab:<28} {e["worlds"]} worlds; {fail}{med}')
  if res['pass_vs_fail']:
    lines += ['', 'passing vs failing worlds — median pass / median fail (Spearman with '
              'failure)']
    for c, e in list(res['pass_vs_fail'].items())[:8]:
      fmt = lambda x: 'n/a' if x is None else f'{x:.4g}'  # noqa: E731
      lines.append(f'  {c:<40} {fmt(e["median_pass"])} / {fmt(e["median_fail"])} '
                   f'({e["spearman_with_failure"]:+.2f})')
  lines += ['', f'worst worlds by {metric}:']
  for e in res['worst']['worlds']:
    lines.append(f'  world {e["world"]:>7}  {e["value"]:.4g}   {e["replay"]}')
  (out / 'summary.txt').write_text('\n'.join(lines) + '\n')
  (out / 'summary.json').write_text(json.dumps(res, indent=2, default=float))
  _plots(out, rows, meta, res)
  print('\n'.join(lines))
  return res


def _plots(out, rows, meta, res):
  plt = plotting.pyplot()

  ok = rows['pass'].astype(bool) if 'pass' in rows else None
  ms = meta['metrics']
  fig, axes = plt.subplots(len(ms), 1, figsize=(8, 2.4 * len(ms) + 0.5), squeeze=False)
  for ax, m in zip(axes[:, 0], ms):
    v = np.asarray(rows[m], np.float64)
    v = v[np.isfinite(v)]
    ax.hist(v, bins=60, color='tab:blue')
    for cr in meta['criteria']:
      if cr['metric'] == m:
        for b in (cr['min'], cr['max']):
          if b is not None:
            ax.axvline(b, color='tab:red', ls='--', label=f'criterion {cr["name"]}')
        ax.legend(fontsize=7)
    ax.set_title(m, fontsize=9)
    ax.set_ylabel('worlds')
  fig.tight_layout()
  fig.savefig(out / 'metrics_hist.png', dpi=90)
  plt.close(fig)
  if ok is None:
    return
  top = [c for c in res['pass_vs_fail']][:4]
  if top:
    fig, axes = plt.subplots(1, len(top), figsize=(3.6 * len(top), 3.2), squeeze=False)
    for ax, c in zip(axes[0], top):
      x = np.asarray(rows[c], np.float64)
      edges = np.unique(np.quantile(x, np.linspace(0, 1, 11)))
      if len(edges) < 2:
        continue
      b = np.clip(np.searchsorted(edges, x, side='right') - 1, 0, len(edges) - 2)
      rate = [np.mean(~ok[b == i]) if np.any(b == i) else np.nan for i in range(len(edges) - 1)]
      ax.plot(0.5 * (edges[1:] + edges[:-1]), rate, 'o-')
      ax.set_xlabel(c, fontsize=8)
      ax.set_ylabel('failure rate')
      ax.set_ylim(-0.02, 1.02)
    fig.suptitle('failure rate vs the most influential varied fields (deciles)', fontsize=9)
    fig.tight_layout()
    fig.savefig(out / 'failure_vs_fields.png', dpi=90)
    plt.close(fig)
  if len(top) >= 2:
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    x, y = (np.asarray(rows[c], np.float64) for c in top[:2])
    ax.scatter(x[ok], y[ok], s=4, c='tab:green', label='pass')
    ax.scatter(x[~ok], y[~ok], s=6, c='tab:red', label='fail')
    ax.set_xlabel(top[0], fontsize=8)
    ax.set_ylabel(top[1], fontsize=8)
    ax.legend(fontsize=8)
    ax.set_title('top pair of varied fields, pass / fail', fontsize=9)
    fig.tight_layout()
    fig.savefig(out / 'scatter_top_pair.png', dpi=90)
    plt.close(fig)
