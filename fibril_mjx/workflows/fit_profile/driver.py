"""The thermal fit, the driver of `fibril-mjx fit-profile` and the evidence note it writes."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any, Callable, NamedTuple

import numpy as np
import yaml

from fibril_mjx.core import registry
from fibril_mjx.io import outdir
from fibril_mjx.io import recording as rc
from fibril_mjx.errors import ConfigError, FibrilError
from fibril_mjx.workflows.fit_profile.allan import CHANNELS, K_SIGMA, load
from fibril_mjx.workflows.fit_profile.geometry import fit_six, fit_timing
from fibril_mjx.workflows.fit_profile.plots import plot_timing
from fibril_mjx.workflows.fit_profile.static import fit_static
from fibril_mjx.workflows.fit_profile import imu_static, verdict


# ---------------------------------------------------------------------------- per type


@dataclasses.dataclass(frozen=True)
class ProfileFit:
  """What `fit-profile` fits for one type: its `profile_fit` part in the registry.

  Attributes:
    static: `(cid, recs, fig_dir, find_rest, power_ups, result) -> (values, rows, held_rows,
      plots, how)`: the fit of the static logs (it may add entries to `result`, fit.json).
    thermal: thermal logs fit the type's bias temperature coefficients (`fit_thermal`).
  """
  static: Callable
  thermal: bool = False


def allan_static(cid, recs, fig_dir, find_rest, power_ups, result):
  """The IMU's static fit (`imu_static`): Allan N/K/B, lines, the held-out verdict per axis."""
  pieces, report = imu_static.records(recs, cid, find_rest)
  values, rows, held_rows, plots, how, axes = imu_static.fit_imu_static(
      pieces, len(recs), fig_dir, whole_logs=len(recs) >= 3 and not find_rest,
      power_ups=power_ups)
  result['verdict'] = axes
  result['static_logs'] = [{'path': str(r['path']), 'timing': {
      k: v for k, v in r['timing'].items() if k != 'splits'}, 'gap_splits': len(
      r['timing']['splits']), 'rest': r['rest']} for r in report]
  result['records'] = [{'log': p.log, 'stretch': p.stretch, 't0': float(p.t[0]),
                        't1': float(p.t[-1]), 'samples': int(p.t.size)} for p in pieces]
  return values, rows, held_rows, plots, how


def ar1_static(cid, recs, fig_dir, find_rest, power_ups, result):
  """The AR(1) static fit of the rates and the orientation (`static.fit_static`)."""
  del find_rest, power_ups, result
  return fit_static(cid, recs, fig_dir)


# ---------------------------------------------------------------------------- driver


def fit_thermal(cid, recs, t_ref: float):
  """`(values, rows)`: bias temperature coefficients from soaked logs at rest (module
  docstring). Rows are `(field[axis], value, se, method)`."""
  temps, means, ses = [], {ch: [] for ch in CHANNELS}, {ch: [] for ch in CHANNELS}
  for r in recs:
    f = r.sensor(cid)
    if 'temperature_c' not in f:
      raise FibrilError(f'{r.path}: thermal logs need the sample field temperature_c '
                        '(temperature_output: true, or a temperature column)')
    temps.append(float(np.mean(np.asarray(f['temperature_c'], np.float64))))
    for ch in CHANNELS:
      x = np.asarray(f[ch], np.float64)
      nb = 10 if x.shape[0] >= 100 else max(2, x.shape[0] // 10)
      batches = np.stack([b.mean(0) for b in np.array_split(x, nb)])
      means[ch].append(x.mean(0))
      ses[ch].append(batches.std(0, ddof=1) / math.sqrt(nb))
  if len(recs) < 2:
    raise FibrilError('fit-profile --thermal: give at least 2 logs at different set-points '
                      '(3 or more to fit k2)')
  dT = np.asarray(temps) - t_ref
  order = 2 if len(recs) >= 3 else 1
  X = np.stack([dT ** j for j in range(order + 1)], -1)
  values, rows = {}, []
  for ch in CHANNELS:
    y, se = np.stack(means[ch]), np.maximum(np.stack(ses[ch]), 1e-30)
    k = {1: np.zeros(3), 2: np.zeros(3)}
    k_se = {1: np.zeros(3), 2: np.zeros(3)}
    for a in range(3):
      w = 1.0 / se[:, a] ** 2
      cov = np.linalg.inv(X.T @ (w[:, None] * X))
      beta = cov @ X.T @ (w * y[:, a])
      for j in range(1, order + 1):
        k[j][a], k_se[j][a] = beta[j], math.sqrt(cov[j, j])
    for j in range(1, order + 1):
      name = f'{ch}_bias_temperature_k{j}'
      values[name] = k[j].tolist()
      for a in range(3):
        rows.append((f'{name}[{a}]', float(k[j][a]), float(k_se[j][a]),
                     f'thermal: {len(recs)} soaked logs, T_ref {t_ref:g} °C'
                     + (' (at rest: includes ks·g on the axis holding g)'
                        if ch == 'linear_acceleration' and j == 1 else '')))
  values['reference_temperature_c'] = float(t_ref)
  return values, rows


def _round(v):
  if isinstance(v, (list, tuple, np.ndarray)):
    return [_round(x) for x in np.asarray(v).tolist()]
  return float(f'{float(v):.6g}')


class Logs(NamedTuple):
  """`fit_profile`'s recording paths by role: `static`, `six` (six orientations), `timing`,
  `thermal` (IMU: one soaked log per set-point)."""
  static: tuple = ()
  six: tuple = ()
  timing: tuple = ()
  thermal: tuple = ()


@dataclasses.dataclass(frozen=True)
class FitOptions:
  """How `fit_profile` reads its logs and fits.

  Attributes:
    profile_id: the written profile's id (None: from `out`).
    csv_map: `(mapping dict, mapping file name)` for CSV inputs.
    topics: topic mapping for ROS bag inputs (`'imu=/imu/data'`, `fibril_mjx.io.bags`).
    overwrite: replace existing outputs.
    reference_temperature_c: T_ref of the fitted thermal polynomial.
    find_rest: IMU: find the stretches at rest inside each static log (`session.find_rest`).
    power_ups: the static logs are separate power-ups (the turn-on bias dispersion across
      them is fitted, with ≥ 3); without it no dispersion is reported.
  """
  profile_id: str | None = None
  csv_map: Any = None
  topics: Any = None
  overwrite: bool = False
  reference_temperature_c: float = 25.0
  find_rest: bool = False
  power_ups: bool = False


def fit_profile(*, component_type: str, component: str, out, logs: Logs,
                options: FitOptions | None = None) -> dict:
  """Fits and writes `out` (profile YAML), `<stem>_transport.yaml` (with timing logs),
  `<stem>_evidence.md`, `<stem>_fit.json` and plots beside it.

  Args:
    component_type: `fibril_sim/imu` or `fibril_sim/ahrs`.
    component: component id of the samples in the recordings.
    logs: the recordings by role (`Logs`); options: `FitOptions`.

  Returns:
    `fit.json` content.
  """
  static, six, timing, thermal = logs
  opt = options or FitOptions()
  profile_id, csv_map, topics, overwrite = opt.profile_id, opt.csv_map, opt.topics, opt.overwrite
  reference_temperature_c, find_rest, power_ups = (opt.reference_temperature_c, opt.find_rest,
                                                   opt.power_ups)
  fit = registry.get(component_type).profile_fit
  if fit is None:
    raise ConfigError('--type', 'type', 'fit-profile supports '
                      f'{", ".join(registry.types("profile_fit"))}', component_type)
  if not (static or six or timing or thermal):
    raise FibrilError('fit-profile: give at least one of --static, --six-orientation, --timing, '
                      '--thermal')
  if thermal and not fit.thermal:
    thermal_types = [t for t in registry.types('profile_fit')
                     if registry.get(t).profile_fit.thermal]
    raise ConfigError('--type', 'type', '--thermal logs fit the thermal model of '
                      f'{", ".join(thermal_types)}', component_type)
  out = pathlib.Path(out)
  if out.suffix not in ('.yaml', '.yml'):
    raise ConfigError('--out', 'out', 'must be a .yaml file path', str(out))
  stem = out.with_suffix('')
  pid = profile_id or stem.name
  files = [out, stem.parent / f'{stem.name}_transport.yaml', stem.parent /
           f'{stem.name}_evidence.md', stem.parent / f'{stem.name}_fit.json']
  for f in files:
    outdir.claim_file(f, overwrite=overwrite)
  out.parent.mkdir(parents=True, exist_ok=True)
  recs = {role: [load(p, csv_map, topics, component_type, component) for p in paths]
          for role, paths in (('static', static), ('six', six), ('timing', timing),
                              ('thermal', thermal))}
  for role, lst in recs.items():
    for r in lst:
      r.sensor(component)
  fig_dir = out.parent
  result = {'profile_id': pid, 'component_type': component_type, 'component': component,
            'recordings': {role: [r.path for r in lst] for role, lst in recs.items()}}
  values, rows, held_rows, plots, how = {}, [], [], [], ''
  result['verdict'], result['static_logs'] = [], []
  if recs['static']:
    values, rows, held_rows, plots, how = fit.static(component, recs['static'], fig_dir,
                                                     find_rest, power_ups, result)
  if recs['thermal']:
    t_values, t_rows = fit_thermal(component, recs['thermal'], reference_temperature_c)
    values = {**values, **t_values}
    rows = list(rows) + t_rows
  six_fit = fit_six(component, recs['six']) if recs['six'] else None
  tim = fit_timing(component, recs['timing']) if recs['timing'] else None
  result['heldout_rule'] = how
  result['fields'] = {k: _round(v) for k, v in values.items()}
  result['uncertainty'] = [{'field': f, 'value': v, 'se': se, 'method': m}
                           for f, v, se, m in rows]
  result['heldout'] = [{'what': w, 'result': r, 'agrees': ok} for w, r, ok in held_rows]
  if six_fit:
    result['calibration'] = {k: _round(v) for k, v in six_fit.items()}
  if tim:
    result['timing'] = {k: v for k, v in tim.items() if k not in ('latencies', 'periods')}
    plots.append(plot_timing(fig_dir, tim))
  profile, tprof = _profiles(result, rows, pid, stem.name, component_type, tim)
  outdir.write_file(out, yaml.safe_dump(profile, sort_keys=False, allow_unicode=True).encode())
  if tprof:
    outdir.write_file(files[1], yaml.safe_dump(tprof, sort_keys=False).encode())
  outdir.write_file(files[2], _evidence(result, recs, how, six_fit, tim, plots,
                                        component).encode())
  outdir.write_file(files[3], json.dumps(result, indent=1, default=rc.json_default).encode())
  return result


def _profiles(result, rows, pid, stem, component_type, tim) -> tuple[dict, dict | None]:
  """The fitted profile and, with timing logs, the transport profile (YAML content)."""
  srcs = ', '.join(pathlib.Path(p).name for lst in result['recordings'].values() for p in lst)
  prov_fields = {f.split('[')[0]: f'FITTED by fibril-mjx fit-profile ({m}); see evidence'
                 for f, _, _, m in rows}
  profile = {'id': pid, 'kind': 'empirical', 'component_types': [component_type],
             'provenance': {'source': f'fibril-mjx fit-profile from recordings: {srcs}',
                            'evidence': f'{stem}_evidence.md',
                            'recordings': [str(p) for lst in result['recordings'].values()
                                           for p in lst],
                            'fields': prov_fields},
             'fields': result['fields'] or {}}
  if not tim:
    return profile, None
  return profile, {'id': f'{pid}_transport', 'kind': 'transport',
                   'component_types': [component_type],
                   'provenance': {'source': f'fibril-mjx fit-profile timing logs: {srcs}',
                                  'evidence': f'{stem}_evidence.md'},
                   'fields': {'latency_s': _round(tim['latency_s']),
                              'jitter_s': _round(tim['jitter_s']),
                              'loss_probability': _round(tim['loss_probability'])}}


def _evidence(result, recs, how, six_fit, tim, plots, cid) -> str:
  L = [f"# Evidence for `{result['profile_id']}`", '',
       f"Fitted by `fibril-mjx fit-profile` for component `{cid}` "
       f"(`{result['component_type']}`).", '', '## Data used', '']
  for role, lst in recs.items():
    for r in lst:
      f = r.sensor(cid)
      t = np.asarray(f[rc.SAMPLE_TIME])
      L.append(f"- {role}: `{r.path}` — {t.size} samples, {t[-1] - t[0]:.4g} s, "
               f"source: {r.meta.get('source', 'unknown')}")
  for lg in result.get('static_logs', ()):
    tm = lg['timing']
    L.append(f"- timing of `{lg['path']}` as recorded: period {tm['period_s']:.6g} s, jitter "
             f"{tm['jitter_s']:.3g} s, {100 * tm['off_nominal']:.1f} % of intervals > 5 % off "
             f"one period, {tm['lost']} samples lost ({100 * tm['loss']:.2f} %), longest gap "
             f"{tm['max_gap_periods']:.1f} periods, {lg['gap_splits']} gaps split the record")
    if lg['rest'] is not None:
      st, thr = lg['rest']
      L.append(f"  - rest stretches (windows {thr['window_s']:.3g} s; gyro std norm < "
               f"{thr['gyro']:.3g}, accel std norm < {thr['accel']:.3g}; ≥ {thr['min_s']:g} s, "
               f"trimmed {thr['trim_s']:g} s): " + ', '.join(f'{a:.2f}–{b:.2f} s' for a, b in st))
  L += ['', '## Method', '',
        '- Static logs: each log\'s mean is removed (a constant is bias, not noise); lost samples '
        'are dropped (not filled), so τ is stretched by 1/(1 − loss).',
        '- IMU noise: overlapping Allan deviation pooled over logs, fitted by weighted least '
        'squares with the exact discrete model (white N²/τ + random walk K²τ/3 + optional '
        'Gauss–Markov σ², τ_c on a grid, kept when χ² drops by > 10); weights from the '
        'overlapping-estimator edf; standard errors scaled by √(τ points per octave) because '
        'neighbouring τ share data. The white term includes the output LSB noise q²/12.',
        '- AHRS noise: stationary std and lag-1 autocorrelation per axis (AR(1)); orientation '
        'from the right error rotation about the log\'s mean attitude, linear drift removed.',
        '- Per-episode dispersions (turn-on bias, yaw-rate bias): std across logs of the log '
        'means, minus the noise variance of a mean; needs ≥ 3 logs (IMU: ≥ 3 logs marked as '
        'separate power-ups, `--power-ups`).',
        '- IMU logs as recorded: records split at gaps > 4.5 periods (shorter gaps drop the lost '
        'samples, never filled or resampled); Allan variances pooled over records of unequal '
        'length weighted by their edf; the output step q from the lattice the samples sit on '
        '(its q²/12 is taken out of the white density); per axis, spectral lines = runs of '
        'Welch PSD bins ≥ 4× a running-median floor (and the χ² false-alarm level), the '
        'strongest fitted as a narrowband process (second-order resonant Gauss–Markov: '
        'centre, bandwidth, std; closed-form PSD through the Hann kernel), its Allan column '
        'in the WLS; Gauss–Markov τ_c grid from 2Δ.',
        '- Six-orientation: poses found by the axis holding ~1 g; gain column a = '
        '(mean(+a up) − mean(−a up))/2g, bias = mean of the pose pairs.',
        '- Timing: period = median sample spacing, latency = mean(arrival − sample), jitter = '
        'its std, loss = missing sequence numbers (or sample-time gaps) / acquisitions.',
        *(['- Thermal: one soaked log per set-point at rest; per axis, the log means are '
           'fitted by weighted least squares to c0 + k1·ΔT + k2·ΔT² at the log\'s mean '
           'temperature_c (ΔT = T − T_ref), weights from batch means (10 per log); at rest the '
           'linear term of the axis holding g also holds ks·g.'] if recs.get('thermal') else []),
        f'- Held out: {how or "last 30 % of each timing / pose segment"}.', '',
        '## Fitted values', '', '| field | value | std error | method |', '| --- | --- | --- | --- |']
  for u in result['uncertainty']:
    se = '—' if u['se'] is None else f"{u['se']:.3g}"
    L.append(f"| `{u['field']}` | {u['value']:.6g} | {se} | {u['method']} |")
  if tim:
    for k in ('latency_s', 'jitter_s', 'loss_probability'):
      se = tim[{'latency_s': 'latency_se', 'jitter_s': 'jitter_se',
                'loss_probability': 'loss_se'}[k]]
      L.append(f"| `{k}` (transport profile) | {tim[k]:.6g} | {se:.3g} | timing logs |")
    L.append(f"| period (for the device profile) | {tim['period_s']:.6g} | "
             f"{tim['period_std_s']:.3g} (spread) | median spacing |")
  if six_fit:
    L += ['', 'Calibration of this unit (not written to the reusable profile; put it in an '
          'overlay or the instance config):', '',
          f"- accelerometer gain matrix (columns per axis): {np.round(six_fit['linear_acceleration_gain'], 6).tolist()}"
          f" ± {np.round(six_fit['linear_acceleration_gain_se'], 6).tolist()}",
          f"- accelerometer bias [m/s²]: {_round(six_fit['linear_acceleration_bias'])}"]
    if 'angular_velocity_bias' in six_fit:
      L.append(f"- gyro bias [rad/s]: {_round(six_fit['angular_velocity_bias'])}")
  L += ['', '## Held-out agreement', '']
  for h in result['heldout']:
    L.append(f"- {h['what']}: {h['result']} — "
             + (f"agrees (pass: within {K_SIGMA:g} standard errors)" if h['agrees'] else
                f"DISAGREES (fail: beyond {K_SIGMA:g} standard errors)"))
  if six_fit:
    L.append(f"- six-orientation: held-out pose means predicted by the fitted gain and bias "
             f"with RMS error {six_fit['heldout_pose_error_rms_m_s2']:.4g} m/s²")
  if tim:
    L.append(f"- timing: held-out latency {tim['heldout_latency_s']:.6g} s, jitter "
             f"{tim['heldout_jitter_s']:.6g} s")
  L += ['', '## Plots', ''] + [f'- `{p}`' for p in plots] + [
      '', 'Check the result with `fibril-mjx validate` on a manifest using this profile.', '']
  return '\n'.join(L)


def report(result) -> int:
  """Prints what the user must see of a fit — the static logs' timing as recorded, the rest
  stretches used and their thresholds, the held-out verdict per axis — and returns the exit
  status: 0, or `verdict.EXIT_DISAGREE` when some axis disagrees."""
  for lg in result.get('static_logs', ()):
    tm = lg['timing']
    print(f"{lg['path']}: period {tm['period_s']:.6g} s, jitter {tm['jitter_s']:.3g} s, "
          f"{100 * tm['off_nominal']:.1f} % of intervals off nominal, {tm['lost']} samples "
          f"lost ({100 * tm['loss']:.2f} %), longest gap {tm['max_gap_periods']:.1f} periods"
          + (f", split at {lg['gap_splits']} gaps" if lg['gap_splits'] else ''))
    if lg['rest'] is not None:
      st, thr = lg['rest']
      print(f"  rest: {thr['window_s']:.3g} s windows with gyro std norm < {thr['gyro']:.3g} "
            f"and accel std norm < {thr['accel']:.3g} (2× the quietest fifth), runs ≥ "
            f"{thr['min_s']:g} s trimmed {thr['trim_s']:g} s: "
            + (', '.join(f'{a:.2f}–{b:.2f} s' for a, b in st) or 'none'))
  axes = result.get('verdict', ())
  if axes:
    print(f"held-out agreement ({result.get('heldout_rule') or 'fit on the first part'}):")
    for a in axes:
      print('  ' + a['console'])
  bad = [a['name'] for a in axes if not a['agrees']]
  if bad:
    print(f"the fitted model does not explain the held-out data on: {', '.join(bad)} "
          f'(exit {verdict.EXIT_DISAGREE})')
    return verdict.EXIT_DISAGREE
  return 0


# The `profile_fit` part of each type fit-profile fits.
registry.register('fibril_sim/imu', profile_fit=ProfileFit(allan_static, thermal=True))
registry.register('fibril_sim/ahrs', profile_fit=ProfileFit(ar1_static))
