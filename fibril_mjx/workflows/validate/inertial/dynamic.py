"""The dynamic-rig checks: rate table gains, range and saturation, Bode magnitude and phase,
geometry under a known rotation."""

from __future__ import annotations

import math

import numpy as np

from fibril_mjx.workflows.validate import fifo_timing
from fibril_mjx.workflows.validate.common import (K_SIGMA, Check, axis_name, fmt, k_complex,
                                                  k_student, timing_checks)
from fibril_mjx.workflows.validate.inertial.device import (Device, RATE_SITES, SKIP, SUBSTEPS,
                                                           UNITS, WINDOW)
from fibril_mjx.workflows.validate.inertial.plots import Tones, plot_bode
from fibril_mjx.workflows.validate.inertial.rigs import DynamicPlan
from fibril_mjx.workflows.validate.inertial.signals import h_expected, reference_filter


# ---------------------------------------------------------------------- the dynamic rig


def dynamic_checks(dev: Device, plan: DynamicPlan, trace, fig_dir) -> list[Check]:
  """The checks of the dynamic rig: rate table, range, Bode, geometry under rotation and
  transport timing (`trace`: the rig's recorded `sensor` / `truth` outputs)."""
  checks = []
  dt = plan.dt
  raw, truth = trace['sensor'], trace['truth']
  # FIFO delivery: the per-sample checks read each sample at its acquisition tick
  sens = {n: fifo_timing.delivered(d) for n, d in raw.items()}
  checks += _rate_table(dev, plan, sens, truth, fig_dir)
  checks += _range(dev, plan, sens, truth, fig_dir)
  checks += _bode(dev, plan, sens, truth, fig_dir)
  checks += _geometry_rotation(dev, plan, sens)
  if fifo_timing.batched(raw):
    checks += fifo_timing.checks(dev, dt, raw, fig_dir)
  else:
    checks += timing_checks(dev, dt, sens, fig_dir)
  return checks


def _samples(d, field):
  """Delivered samples of all worlds: (W, S, ...) values, sample ticks (W, S) (equal counts
  are not assumed: a boolean mask is returned)."""
  new = np.asarray(d.new_data).astype(bool)
  return np.asarray(getattr(d.sample, field), np.float64), np.asarray(d.sample_tick), new


def _window_mask(st, new, plan):
  lo = SKIP * SUBSTEPS
  return new & (st >= lo) & (st < lo + WINDOW * SUBSTEPS)


def _rate_table(dev, plan, sens, truth, fig_dir):
  ch = dev.channels['angular_velocity']
  q = ch.resolution
  lim = ch.limit if ch.limit > 0 else np.inf
  est = np.zeros((sens['rx'].new_data.shape[0], 3, 3))
  for name, (_, a) in RATE_SITES.items():
    v, st, new = _samples(sens[name], 'angular_velocity')
    x = np.asarray(truth[name]['angular_velocity'], np.float64)
    xs = np.take_along_axis(x, np.clip(st, 0, None)[..., None], 1)
    for w in range(v.shape[0]):
      m = new[w] & (np.abs(xs[w, :, a]) * ch.gain[a, a] < 0.9 * lim) & (st[w] >= SKIP * SUBSTEPS)
      xa = xs[w, m, a]
      for j in range(3):
        est[w, j, a] = np.sum(xa * v[w, m, j]) / np.sum(xa * xa)
  h = float(h_expected(dev, ch, plan.rate_hz, plan.dt).real)
  exp = ch.gain * h
  g_mean = est.mean(0)
  g_se = est.std(0, ddof=1) / math.sqrt(est.shape[0])
  amp = 0.9 * min(plan.rate_amplitude, lim if np.isfinite(lim) else plan.rate_amplitude)
  n_s = WINDOW * 0.6
  k = k_student(est.shape[0])
  tol = k * g_se + q / (math.sqrt(12) * amp / math.sqrt(2) * math.sqrt(n_s)) + 1e-5 \
      + abs(1 - h)
  ok = bool(np.all(np.abs(g_mean - exp) <= tol))
  return [Check('rate_table.angular_velocity.gain', 'gyro gain matrix (column a: reading per '
                'rad/s about axis a) — scale and cross-axis', g_mean, ch.gain, tol,
                f'regression on |rate| < 0.9·limit, sine ±{plan.rate_amplitude:.4g} rad/s at '
                f'{plan.rate_hz:.4g} Hz; {k:.3g}× std error over {est.shape[0]} worlds (Student t, the '
                f'level of {K_SIGMA:g} σ) + LSB + filter '
                f'gain at that frequency ({h:.6f})', ok)]


def _range(dev, plan, sens, truth, fig_dir):
  checks = []
  sites = {'angular_velocity': [(n, a) for n, (_, a) in RATE_SITES.items()],
           'linear_acceleration': [('cout', 0), ('cin', 0)]}
  for ch_name, lst in sites.items():
    ch = dev.channels[ch_name]
    noise = math.sqrt(ch.white_sigma.max() ** 2 + sum(s * s for t in ch.ar1 for s, _ in t)
                      + ch.episode_stddev.max() ** 2) + float(np.abs(ch.bias).max())
    margin = 5 * noise + ch.resolution + 1e-5 * max(ch.limit, 1.0)
    n_hi = n_lo = bad_hi = bad_lo = bad_val = 0
    count_ok = True
    max_abs = 0.0
    for name, a in lst:
      v, st, new = _samples(sens[name], ch_name)
      flags = np.asarray(getattr(sens[name].sample, f'{ch_name}_saturated')).astype(bool)
      counts = np.asarray(getattr(sens[name].sample, f'{ch_name}_clip_count'))
      x = np.asarray(truth[name][ch_name], np.float64)
      stc = np.clip(st, 0, None)
      for w in range(v.shape[0]):
        ticks = stc[w, new[w]]
        z = reference_filter(dev, ch, x[w] @ ch.gain.T, ticks, plan.dt)[:, a]
        vv, ff = v[w, new[w], a], flags[w, new[w], a]
        max_abs = max(max_abs, float(np.abs(vv).max()))
        if ch.limit > 0:
          hi = np.abs(z) > ch.limit + margin
          lo = np.abs(z) < ch.limit - margin
          n_hi += int(hi.sum())
          n_lo += int(lo.sum())
          bad_hi += int(np.sum(hi & ~ff))
          bad_lo += int(np.sum(lo & ff))
          bad_val += int(np.sum(hi & (np.abs(np.abs(vv) - ch.limit) > ch.resolution / 2 + 1e-5
                                      * ch.limit)))
        else:
          bad_lo += int(ff.sum())
          n_lo += ff.size
        c = counts[w, new[w], a]
        if dev.loss_probability == 0:
          count_ok &= bool(c[-1] == int(ff.sum()))
        else:
          count_ok &= bool(c[-1] >= int(ff.sum()))
    if ch.limit > 0:
      ok = bad_hi == 0 and bad_lo == 0 and bad_val == 0 and count_ok and n_hi > 0
      checks.append(Check(
          f'range.{ch_name}', f'saturation at ±limit [{UNITS[ch_name]}]',
          {'max_abs_sample': max_abs, 'beyond_limit_samples': n_hi, 'unflagged_beyond': bad_hi,
           'flagged_within': bad_lo, 'wrong_value_beyond': bad_val, 'clip_counts_match': count_ok},
          ch.limit, f'margin {margin:.3g}', 'samples whose noiseless filtered input exceeds '
          'the limit by the margin (5σ noise + |bias| + LSB) must read ±limit (±LSB/2) and be '
          'flagged; those inside by the margin must not; cumulative clip count = flagged '
          'deliveries (≥ with loss)', ok))
    else:
      ok = bad_lo == 0 and count_ok
      checks.append(Check(f'range.{ch_name}', 'saturation disabled (limit 0): no flags',
                          {'max_abs_sample': max_abs, 'flagged': bad_lo}, 0.0, '0 flags',
                          'limit 0 disables saturation', ok))
  return checks


def _lsq_phasors(t, y, freqs):
  """Least-squares phasors `c_k` with y ≈ c0 + Σ Re(c_k e^{j2πf_k t})` (per column)."""
  cols = [np.ones_like(t)]
  for f in freqs:
    cols += [np.cos(2 * np.pi * f * t), np.sin(2 * np.pi * f * t)]
  a = np.stack(cols, -1)
  coef, *_ = np.linalg.lstsq(a, y, rcond=None)
  return coef[1::2] - 1j * coef[2::2]


def _bode(dev, plan, sens, truth, fig_dir):
  checks = []
  fs = 1.0 / dev.period_s
  tones = np.asarray(plan.tone_hz)
  alias = np.where(tones > fs / 2, fs - tones, tones)
  above = tones > fs / 2
  for ch_name, name, a in (('angular_velocity', 'sweep', 2), ('linear_acceleration', 'lin', 0)):
    ch = dev.channels[ch_name]
    d = sens[name]
    v, st, new = _samples(d, ch_name)
    x = np.asarray(truth[name][ch_name], np.float64)[..., a]
    h_meas = []
    lo = SKIP * SUBSTEPS
    hi = lo + WINDOW * SUBSTEPS
    t_phys = np.arange(lo, hi) * plan.dt
    for w in range(v.shape[0]):
      u = _lsq_phasors(t_phys, x[w, lo:hi], tones)
      m = _window_mask(st[w], new[w], plan)
      y = _lsq_phasors(st[w, m] * plan.dt, v[w, m, a], alias)
      u_s = np.where(above, np.conj(u), u)
      h_meas.append(y / u_s)
    h_meas = np.asarray(h_meas)
    h = h_meas.mean(0)
    w_ = h_meas.shape[0]
    # RMS standard error of the complex mean (√(Σ|h_i − h̄|²/(n − 1)/n)), radius by F(2, 2n − 2)
    se = np.sqrt(np.sum(np.abs(h_meas - h) ** 2, 0) / (w_ - 1) / w_) if w_ > 1 else \
        np.zeros(len(tones))
    amp = np.abs(u_s)
    h_exp = ch.gain[a, a] * h_expected(dev, ch, tones, plan.dt)
    # LSB: the quantization error (≤ q/2 a sample) moves a fitted phasor by at most q/(2A)
    # relative (deterministic bound: noiseless inputs quantize the same way in every world).
    tol = k_complex(w_) * se + ch.resolution / (2 * amp) + 1e-4
    err = np.abs(h - h_exp)
    ok = bool(np.all(err <= tol))
    plot = plot_bode(fig_dir, ch_name, Tones(tones, alias, above, h, h_exp), fs,
                     ch.bandwidth_hz, dev.filter_rate, plan.dt)
    checks.append(Check(
        f'bode.{ch_name}', f'|H| and ∠H (deg) per tone, axis {axis_name(a)}; tones {fmt(tones)} Hz '
        f'(output Nyquist {fs / 2:g} Hz; {fmt(tones[above])} Hz shows at {fmt(alias[above])} Hz)',
        {'gain': np.abs(h), 'phase_deg': np.degrees(np.angle(h))},
        {'bandwidth_hz': ch.bandwidth_hz, 'gain': np.abs(h_exp),
         'phase_deg': np.degrees(np.angle(h_exp))}, tol,
        f'complex |H − H_expected| ≤ {k_complex(w_):.3g}× RMS std error of the complex mean '
        f'over {w_} worlds (F(2, {2 * w_ - 2}) radius, the level of {K_SIGMA:g} σ) + LSB '
        f'bound q/(2A) + 1e-4; H_expected = scale · first-order filter ' + (
            f'run every physics tick (filter_rate: physics, dt {plan.dt:g} s) at the tone '
            f'frequency, then sampled' if dev.filter_rate == 'physics' else
            'run on the samples, at the alias frequency') + ' — a tone above Nyquist appears '
        'at its alias (shown, not hidden)', ok, plot))
  return checks


def _geometry_rotation(dev, plan, sens):
  rows, ok = [], True
  for name, (_, a) in RATE_SITES.items():
    v, st, new = _samples(sens[name], 'angular_velocity')
    m = new & (st >= SKIP * SUBSTEPS)
    t = st[m] * plan.dt
    cmd = plan.rate_amplitude * np.sin(2 * np.pi * plan.rate_hz * t)
    y = v[..., a][m]
    small = np.abs(cmd) < 0.5 * (dev.channels['angular_velocity'].limit or np.inf)
    slope = float(np.sum(cmd[small] * y[small]) / np.sum(cmd[small] ** 2))
    good = 0.5 < slope < 2.0
    ok &= good
    rows.append(f'{axis_name(a)} about +z: slope {slope:.3f}')
  checks = [Check('geometry.rotation', 'gyro reading per commanded rad/s about the axis '
                  'pointing along +world z', '; '.join(rows), '+1 (rad/s)', '0.5 … 2',
                  'sign and unit (rad/s, not deg/s) per axis under a known rotation', ok)]
  if dev.rig.orientation:
    v, st, new = _samples(sens['rz'], 'orientation')
    slopes = []
    for w in range(v.shape[0]):
      m = new[w] & (st[w] >= SKIP * SUBSTEPS)
      qq = v[w, m]
      yaw = np.unwrap(np.arctan2(2 * (qq[:, 0] * qq[:, 3] + qq[:, 1] * qq[:, 2]),
                                 1 - 2 * (qq[:, 2] ** 2 + qq[:, 3] ** 2)))
      t = st[w, m] * plan.dt
      rate = np.gradient(yaw, t)
      cmd = plan.rate_amplitude * np.sin(2 * np.pi * plan.rate_hz * t)
      slopes.append(np.sum(rate * cmd) / np.sum(cmd * cmd))
    s = float(np.median(slopes))
    checks.append(Check('geometry.yaw_sign', 'd(device yaw)/dt per rad/s about +world z',
                        s, dev.yaw_sign, 'same sign, 0.5 … 2 in magnitude',
                        'orientation_yaw_sign under a known rotation',
                        0.5 < s * dev.yaw_sign < 2.0))
  return checks
