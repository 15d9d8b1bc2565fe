"""The IMU's static fit from logs as recorded: the logs cut into records (rest stretches, gaps),
the output step, spectral lines, the Allan fit with them, the held-out verdict per axis and the
turn-on dispersion across power-ups the user marked."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fibril_mjx.io import recording as rc
from fibril_mjx.errors import FibrilError
from fibril_mjx.workflows.fit_profile import session, spectral, verdict
from fibril_mjx.workflows.fit_profile.allan import (CHANNELS, HELDOUT, episode_dispersion,
                                                    fit_allan, heldout_allan)
from fibril_mjx.workflows.fit_profile.plots import plot_allan

AXES = {'angular_velocity': 'gyro', 'linear_acceleration': 'accel'}
#: records shorter than this many samples are not used (a rest stretch or gap-free segment)
MIN_RECORD = 200


@dataclasses.dataclass
class Record:
  """A piece of one log used by the static fit.

  Attributes:
    log: index of the log (power-up) it comes from; `stretch`: index of its rest stretch.
    t: `(n,)` sample times (s); `data`: `{channel: (n, 3)}`.
  """
  log: int
  stretch: int
  t: np.ndarray
  data: dict


def records(recs, cid, find_rest=False):
  """The logs cut into records: rest stretches (with `find_rest`), then gap-free segments
  (gaps over `session.GAP_SPLIT_PERIODS` periods split; shorter ones drop the lost samples).

  Returns:
    `(records, report)`: the `Record`s, and per log a dict `path`, `timing`
    (`session.timing`), `rest` (`(stretches [(t0, t1)], thresholds)` or None).
  """
  out, report = [], []
  for li, r in enumerate(recs):
    f = r.sensor(cid)
    t = np.asarray(f[rc.SAMPLE_TIME], np.float64)
    data = {ch: np.asarray(f[ch], np.float64) for ch in CHANNELS if ch in f}
    tim = session.timing(t)
    rest = None
    spans = [(0, t.size)]
    if find_rest:
      if set(data) != set(CHANNELS):
        raise FibrilError(f'{r.path}: --find-rest needs both angular_velocity and '
                          'linear_acceleration')
      spans, thr = session.find_rest(t, data['angular_velocity'], data['linear_acceleration'])
      rest = ([(float(t[a]), float(t[b - 1])) for a, b in spans], thr)
    for si, (a, b) in enumerate(spans):
      splits = [i - a for i in tim['splits'] if a < i < b]
      for piece in np.split(np.arange(a, b), splits):
        if piece.size >= MIN_RECORD:
          out.append(Record(li, si, t[piece], {ch: x[piece] for ch, x in data.items()}))
    report.append({'path': r.path, 'timing': tim, 'rest': rest})
  if not out:
    raise FibrilError('fit-profile --static: no record of at least '
                      f'{MIN_RECORD} samples at rest' + (' (see the stretches found above)'
                                                         if find_rest else ''))
  return out, report


def split(recs_, n_logs, whole_logs):
  """`(fit, held, how)`: the last ~30 % of the logs when `whole_logs` (≥ 3 separate logs),
  else the last 30 % in time of every record."""
  if whole_logs:
    k = max(1, int(round(HELDOUT * n_logs)))
    held_logs = set(range(n_logs - k, n_logs))
    return ([r for r in recs_ if r.log not in held_logs], [r for r in recs_ if r.log in
                                                          held_logs],
            f'last {k} of {n_logs} logs held out')
  fit, held = [], []
  for r in recs_:
    cut = int(round((1 - HELDOUT) * r.t.size))
    fit.append(Record(r.log, r.stretch, r.t[:cut], {c: x[:cut] for c, x in r.data.items()}))
    held.append(Record(r.log, r.stretch, r.t[cut:], {c: x[cut:] for c, x in r.data.items()}))
  return fit, held, (f'the fit uses the first {100 - int(HELDOUT * 100)} % (in time) of each '
                     'record — each rest stretch with --find-rest, each gap-free segment — and '
                     f'the last {int(HELDOUT * 100)} % is held out to check it')


def turn_on_dispersion(recs_, ch, n_logs, noise_density, random_walk, rate, rows) -> list:
  """Per axis, the std of the mean of each power-up's log less what its noise explains
  (`episode_dispersion`); appends a `(field, value, se, method)` row per axis fitted."""
  means = np.stack([np.concatenate([r.data[ch] for r in recs_ if r.log == li]).mean(0)
                    for li in range(n_logs)])
  n = min(sum(r.t.size for r in recs_ if r.log == li) for li in range(n_logs))
  disp = []
  for i in range(3):
    var_noise = (noise_density[i] ** 2 * rate) / n + random_walk[i] ** 2 * n / rate / 3
    s, se = episode_dispersion(means[:, i], var_noise)
    if s is not None:
      disp.append(s)
      rows.append((f'{ch}_bias_turn_on_stddev[{i}]', s, se,
                   f'std of the means of {n_logs} power-ups'))
  return disp


def fit_imu_static(recs_, n_logs, fig_dir, *, whole_logs, power_ups):
  """Noise terms of each IMU channel from the records.

  Returns:
    `(values, rows, held_rows, plots, how, axes)`: profile fields, `(field, value, se, method)`
    rows, `(what, result, agrees)` rows, plot paths, the split, and per axis a dict `name`,
    `agrees`, `rel_max`, `max_dev_sigma`, `findings`, `cause`, `console` (the verdict line),
    `lines_found` (all lines of the fitting part).
  """
  period = float(np.median(np.concatenate([np.diff(r.t) for r in recs_])))
  rate = 1.0 / period
  fit_r, held_r, how = split(recs_, n_logs, whole_logs)
  values, rows, held_rows, plots, axes = {}, [], [], [], []
  for ch in CHANNELS:
    if not all(ch in r.data for r in recs_):
      continue
    fit_x = [r.data[ch] for r in fit_r]
    held_x = [r.data[ch] for r in held_r]
    times = [(float(r.t[0]), float(r.t[-1])) for r in held_r]
    qs = [session.quantization_step(np.concatenate([x[:, i] - np.median(x[:, i])
                                                    for x in fit_x])) for i in range(3)]
    found = [q for q in qs if q is not None]
    q = float(np.median(found)) if len(found) >= 2 else 0.0
    if q:
      values[f'{ch}_resolution'] = q
      rows.append((f'{ch}_resolution', q, float(np.std(found)) / math.sqrt(len(found)),
                   f'output step: lattice of the samples ({len(found)} axes)'))
    cols = {k: [] for k in ('N', 'K', 'gs', 'gt', 'ns', 'nf', 'nb')}
    fig = []
    for i in range(3):
      name = f'{AXES[ch]} {"xyz"[i]}'
      xs = [x[:, i] for x in fit_x]
      found_lines, spec = spectral.find_lines(xs, rate)
      fitted = None
      for ln in found_lines[:1]:
        fitted = spectral.fit_line(spec, ln, rate)
      lines = [{'f0': fitted['f0'], 'bandwidth_hz': fitted['bandwidth_hz'],
                'sigma': fitted['sigma']}] if fitted else []
      f = fit_allan(xs, rate, lines=lines, q=q)
      h = heldout_allan([x[:, i] for x in held_x], rate, f)
      findings, cause = verdict.explain(name, [x[:, i] for x in held_x], xs, rate, f, h,
                                        times)
      cols['N'].append(f['N'])
      cols['K'].append(f['K'])
      cols['gs'].append(f.get('gm_sigma', 0.0))
      cols['gt'].append(f.get('gm_tau_s', 0.0))
      rows.append((f'{ch}_noise_density[{i}]', f['N'], f['N_se'], 'Allan WLS'
                   + (f' (white less the output step q²/12, q = {q:.4g})' if q else '')))
      rows.append((f'{ch}_random_walk[{i}]', f['K'], f['K_se'], 'Allan WLS'))
      if 'gm_sigma' in f:
        rows.append((f'{ch}_bias_instability_stddev[{i}]', f['gm_sigma'], f['gm_sigma_se'],
                     f'Allan WLS, τ_c grid → {f["gm_tau_s"]:.4g} s'))
      if f['lines'] and f['lines'][0]['sigma'] > 0:
        ln = f['lines'][0]
        cols['ns'].append(ln['sigma'])
        cols['nf'].append(fitted['f0'])
        cols['nb'].append(fitted['bandwidth_hz'])
        how_line = (f"Welch PSD line {found_lines[0]['ratio']:.0f}× the floor; closed-form "
                    'PSD fit' + ('' if fitted['resolved'] else ', narrower than the '
                                 f"resolution {fitted['resolution_hz']:.3g} Hz"))
        rows.append((f'{ch}_narrowband_stddev[{i}]', ln['sigma'], fitted['sigma_se'],
                     how_line))
        rows.append((f'{ch}_narrowband_frequency_hz[{i}]', fitted['f0'], fitted['f0_se'],
                     how_line))
        rows.append((f'{ch}_narrowband_bandwidth_hz[{i}]', fitted['bandwidth_hz'],
                     fitted['bandwidth_se'], how_line))
      else:
        for k in ('ns', 'nf', 'nb'):
          cols[k].append(0.0)
      held_rows.append((f'{ch} {"xyz"[i]}', f'Allan deviation of held-out logs vs fitted model: '
                        f'max {h["max_dev_sigma"]:.2f} σ, at most {100 * h["rel_max"]:.0f} % '
                        'off from 2 samples to a tenth of the record'
                        + ('' if h['within'] else ' — ' + '; '.join(findings)
                           + (f' (likely cause: {cause})' if cause else '')), h['within']))
      axes.append({'name': name, 'channel': ch, 'axis': i, 'agrees': h['within'],
                   'rel_max': h['rel_max'], 'rel_max_resolved': h['rel_max_resolved'],
                   'tau_resolved_s': h['tau_resolved_s'], 'beyond_sigma': h['beyond_sigma'],
                   'max_dev_sigma': h['max_dev_sigma'],
                   'findings': findings, 'cause': cause,
                   'console': verdict.line(name, h, findings, cause),
                   'lines_found': [{k: v for k, v in ln.items() if k != 'threshold'}
                                   for ln in found_lines[:5]]})
      fig.append(('xyz'[i], f['taus'], h['curve']))
    values[f'{ch}_noise_density'] = cols['N']
    values[f'{ch}_random_walk'] = cols['K']
    if any(cols['gs']):
      values[f'{ch}_bias_instability_stddev'] = cols['gs']
      values[f'{ch}_bias_correlation_time_s'] = [t if t > 0 else 1.0 for t in cols['gt']]
    if any(cols['ns']):
      values[f'{ch}_narrowband_stddev'] = cols['ns']
      values[f'{ch}_narrowband_frequency_hz'] = cols['nf']
      values[f'{ch}_narrowband_bandwidth_hz'] = cols['nb']
    if power_ups and n_logs >= 3:
      disp = turn_on_dispersion(recs_, ch, n_logs, cols['N'], cols['K'], rate, rows)
      if len(disp) == 3:
        values[f'{ch}_bias_turn_on_stddev'] = disp
    plots.append(plot_allan(fig_dir, ch, fig))
  return values, rows, held_rows, plots, how, axes
