"""What a fit writes: the overlay with provenance, the text and JSON reports, the plots."""

from __future__ import annotations

import datetime
import hashlib
import json
import pathlib

import numpy as np
import yaml

from fibril_mjx.config.version import __version__
from fibril_mjx.analysis import plotting
from fibril_mjx.io import outdir
from fibril_mjx.physics import mjcf_fields
from fibril_mjx.workflows.tune import timing
from fibril_mjx.workflows.tune.optimise import TuneResult, tune


def _sha256(path) -> str:
  """SHA-256 of a file, or of a directory (a rosbag2 bag): its files' relative names and
  contents in sorted order."""
  h = hashlib.sha256()
  p = pathlib.Path(path)
  if p.is_dir():
    for f in sorted(q for q in p.rglob('*') if q.is_file()):
      h.update(str(f.relative_to(p)).encode() + b'\0' + bytes.fromhex(_sha256(f)))
    return h.hexdigest()
  with open(path, 'rb') as fh:
    for chunk in iter(lambda: fh.read(1 << 20), b''):
      h.update(chunk)
  return h.hexdigest()


def overlay_dict(res: TuneResult) -> dict:
  """The §3.4 overlay (`fibril_overlay: 1`) with the fitted values and provenance."""
  prob = res.problem
  spec = prob.spec
  comps: dict = {}
  mjcf: dict = {}
  m = prob.sim.mj_model
  for p, x in zip(prob.params, res.estimate):
    ov = p.overlay
    if ov[0] == 'component':
      _, cid, field = ov
      if (cid, field) not in comps:
        c = prob.sim.components[cid]
        comps[(cid, field)] = np.array(c.get_param(c.default_params(), field), np.float64)
      if p.index:
        comps[(cid, field)][p.index] = x
      else:
        comps[(cid, field)] = np.asarray(x, np.float64)
    else:
      _, element, name, attr, k = ov
      key = (element, name, attr)
      if k is None:
        mjcf[key] = float(x)
      else:
        if key not in mjcf:
          if element == 'actuator':
            aid = mjcf_fields.object_id(m, 'actuator', name)
            mjcf[key] = np.array(getattr(m, f'actuator_{attr}')[aid], np.float64)
          else:
            gid = mjcf_fields.object_id(m, 'geom', name)
            mjcf[key] = np.array(m.geom_friction[gid], np.float64)
        mjcf[key][k] = x

  for q in prob.timing:   # fitted latencies: the searched whole tick
    comps[q.target] = np.asarray(prob.latency[q.target], np.float64)

  def val(v):
    v = np.asarray(v, np.float64)
    return float(v) if v.ndim == 0 else [float(a) for a in v.reshape(-1)]

  def recs(items):
    out = []
    for it in items:
      pth = (it.get('csv') or it.get('bag')) if isinstance(it, dict) else it
      out.append({'file': str(pth), 'sha256': _sha256(pth)})
    return out

  return {
      'fibril_overlay': 1,
      'id': spec.overlay_id,
      'provenance': {
          'recordings': {'train': recs(spec.train), 'heldout': recs(spec.heldout)},
          'manifest': {'file': spec.manifest, 'sha256': _sha256(spec.manifest)},
          'tune_file': spec.path,
          'fitted_with': (f'fibril_mjx {__version__} tune: {res.method}, '
                          f'{_gradients(prob)}, {len(res.starts)} start(s), straight-through '
                          'quantization/saturation, stochastic terms held at zero'),
          'train_loss': res.train_loss,
          'heldout_loss': res.heldout_loss,
          'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
          'estimates': {n: {'value': float(x), 'sigma': float(s)}
                        for n, x, s in zip(res.names, res.estimate, res.sigma)},
          **({'latency_search': [timing.describe(f, prob.dt) for f in res.timing]}
             if res.timing else {}),
      },
      'mjcf': [{'element': e, 'name': n, 'attribute': a, 'value': val(v)}
               for (e, n, a), v in mjcf.items()],
      'components': [{'component': c, 'field': f, 'value': val(v)}
                     for (c, f), v in comps.items()],
  }


def _gradients(prob) -> str:
  if prob.gradients == 'fd':
    shots = (f'true multiple shooting ({prob.W} windows of {prob.windows_s:g} s, free window '
             'starts with continuity residuals)' if getattr(prob, 'n_nuisance', 0)
             else 'single shooting')
    return ('MuJoCo C rollouts (forward differences of the physics, float64) with exact '
            f'forward-mode derivatives of the device model, {shots}')
  if prob.spec.window_s:
    return (f'forward-mode Jacobians through MJX, multiple shooting {prob.L * prob.dt:g} s '
            'windows (each starts from the end state of the one before)')
  return 'forward-mode Jacobians through MJX, single shooting (one window per recording)'


def render_report(res: TuneResult) -> str:
  """The text report."""
  prob = res.problem
  norm = getattr(prob.spec, 'norm', 'l2')
  lines = [f'tune: {res.method}, {res.iterations} iterations, {len(res.starts)} start(s), '
           f'{res.wall_s:.1f} s' + ('' if norm == 'l2' else
                                    f' (norm {norm}: loss = mean |weighted residual| + ε)'),
           f'gradients: {_gradients(prob)} ({prob.gradients_why})', '',
           f'{"parameter":40s} {"start":>12s} {"estimate":>12s} {"± 2σ":>10s} '
           f'{"spread":>10s}  bounds']
  for i, n in enumerate(res.names):
    lines.append(f'{n:40s} {res.start[i]:12.6g} {res.estimate[i]:12.6g} '
                 f'{2 * res.sigma[i]:10.3g} {res.spread[i]:10.3g}  '
                 f'[{res.lower[i]:g}, {res.upper[i]:g}]')
  if res.timing:
    lines += ['', 'latency search (training loss per whole tick, at the optimum):'] + [
        f'  {timing.describe(f, prob.dt)}' for f in res.timing]
  lines += ['', f'train loss {res.train_loss:.6g}' + (
      f', held-out loss {res.heldout_loss:.6g}' if res.heldout_loss is not None else ''), '',
      'residual RMS (sensor units)       before → after']
  for k in res.train_rms_before:
    b, a = res.train_rms_before[k], res.train_rms_after[k]
    lines.append(f'  train   {k:28s} {_fmt(b)} → {_fmt(a)}')
    if res.heldout_rms_before is not None:
      b, a = res.heldout_rms_before[k], res.heldout_rms_after[k]
      lines.append(f'  heldout {k:28s} {_fmt(b)} → {_fmt(a)}')
  if not res.moved:
    lines += ['', f'THE FIT DID NOT MOVE: the best start ended where it started ({res.stop}); '
              f'try: {res.advice}']
  lines += ['', 'multi-start: final loss per start: '
            + ', '.join(f'{x:.4g}' for x in res.final_losses) + f' (best: {res.best})']
  if res.collinear:
    lines += ['', 'poorly identifiable combinations at the start:'] + [
        f'  {c}' for c in res.collinear]
    if res.fixed:
      lines += ['what the data does fix (at the optimum; the single parameters of such a group '
                'are not determined apart):'] + [f'  {c}' for c in res.fixed]
  P = len(res.names)
  high = [(res.names[i], res.names[j], res.correlation[i, j]) for i in range(P)
          for j in range(i + 1, P) if abs(res.correlation[i, j]) > 0.95]
  if high:
    lines += ['', 'strongly correlated estimates (|ρ| > 0.95):'] + [
        f'  {a} / {b}: {c:+.3f}' for a, b, c in high]
  return '\n'.join(lines) + '\n'


def _fmt(v):
  return '[' + ', '.join(f'{x:.4g}' for x in np.atleast_1d(v)) + ']'


def write_outputs(res: TuneResult, out, *, overwrite: bool = False) -> pathlib.Path:
  """Writes `overlay.yaml`, `report.txt`, `report.json`, `loss_curve.png`,
  `heldout_traces.png` to `out` (a temporary sibling renamed when complete)."""
  out = outdir.claim(out, overwrite=overwrite)
  with outdir.staged(out) as tmp:
    ov = overlay_dict(res)
    (tmp / 'overlay.yaml').write_text(
        '# written by fibril-mjx tune; include with parameter_overlays: [{file: <this file>}]\n'
        + yaml.safe_dump(ov, sort_keys=False))
    (tmp / 'report.txt').write_text(render_report(res))
    js = {'names': res.names, 'estimate': res.estimate.tolist(), 'sigma': res.sigma.tolist(),
          'start': res.start.tolist(), 'spread': res.spread.tolist(),
          'final_losses': res.final_losses.tolist(), 'best': res.best,
          'loss_curve': res.loss_curve.tolist(), 'train_loss': res.train_loss,
          'heldout_loss': res.heldout_loss, 'train_rms_before': res.train_rms_before,
          'train_rms_after': res.train_rms_after, 'heldout_rms_before': res.heldout_rms_before,
          'heldout_rms_after': res.heldout_rms_after, 'method': res.method,
          'iterations': res.iterations, 'wall_s': res.wall_s, 'collinear': res.collinear,
          'fixed_combinations': res.fixed, 'moved': res.moved, 'stop': res.stop,
          'gradients': res.problem.gradients, 'latency_search': res.timing}
    (tmp / 'report.json').write_text(json.dumps(js, indent=2))
    _plots(res, tmp)
  return out


def _plots(res: TuneResult, d: pathlib.Path):
  plt = plotting.pyplot()
  fig, ax = plt.subplots(figsize=(6, 4))
  ax.semilogy(res.loss_curve)
  ax.set_xlabel('iteration')
  ax.set_ylabel('training loss (mean squared weighted residual)')
  ax.set_title(f'{res.method}: one line per start')
  fig.tight_layout()
  fig.savefig(d / 'loss_curve.png', dpi=100)
  plt.close(fig)
  if not res.traces:
    return
  rows = sum(items[0][1].shape[1] for items in res.traces.values())
  fig, axes = plt.subplots(rows, 1, figsize=(9, 2.0 * rows), squeeze=False, sharex=True)
  r = 0
  for name, items in res.traces.items():
    # first held-out recording's windows: concatenate valid samples in time order
    pred = np.concatenate([p for p, _, _, _ in items], axis=1)    # (2, M, D)
    y = np.concatenate([yy for _, yy, _, _ in items], axis=0)
    w = np.concatenate([ww for _, _, ww, _ in items], axis=0)
    ts = np.concatenate([tt for _, _, _, tt in items])
    ok = np.isfinite(ts) & np.any(w != 0, axis=1)
    order = np.argsort(ts[ok])
    for k in range(y.shape[1]):
      ax = axes[r, 0]
      ax.plot(ts[ok][order], y[ok][order, k], 'k.', ms=2, label='recorded')
      ax.plot(ts[ok][order], pred[0][ok][order, k], '-', color='tab:gray', lw=0.8,
              label='start')
      ax.plot(ts[ok][order], pred[1][ok][order, k], '-', color='tab:red', lw=1.0,
              label='fitted')
      ax.set_ylabel(f'{name}[{k}]', fontsize=7)
      r += 1
  axes[0, 0].legend(fontsize=7, loc='upper right')
  axes[-1, 0].set_xlabel('sample time (s), held-out recordings')
  fig.tight_layout()
  fig.savefig(d / 'heldout_traces.png', dpi=90)
  plt.close(fig)


def run_cli(tune_file, out, *, overwrite=False) -> TuneResult:
  """`fibril-mjx tune TUNE.yaml --out DIR` (`DIR` is refused before the fit, not after it, as
  is a file system without `REPORT_BYTES` free; a write error is one line, nothing kept)."""
  outdir.claim(out, overwrite=overwrite)
  outdir.check_space(out, REPORT_BYTES, 'the tune report')
  res = tune(tune_file)
  with outdir.write_errors(out, f'nothing kept: {out} is written complete or not at all'):
    write_outputs(res, out, overwrite=overwrite)
  return res


# About the bytes of a tune's report: overlay.yaml, report.txt / .json and a few plots.
REPORT_BYTES = 8 * 2 ** 20
