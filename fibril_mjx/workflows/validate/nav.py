"""Navigation sensors (`fibril_sim/magnetometer`, `fibril_sim/barometer`, `fibril_sim/airspeed`,
`fibril_sim/rangefinder`) in `fibril-mjx validate`: the static noise rig and, where configured,
the Gauss–Markov rig:

| check | rig | compares |
| --- | --- | --- |
| `static_noise.<field>` (magnetometer, barometer, airspeed, rangefinder) | one static site, slow terms removed | per-axis std of sample − per-world mean vs √(σ² + q²/12), lag-1 whiteness |
| `static_gauss_markov.<field>` (magnetometer, barometer) | the same with the Gauss–Markov / common-mode terms on | structure function at lags 1, 0.3τ, τ vs the configured model |
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fibril_mjx.workflows.validate.common import (rig_simulation, K_SIGMA, by_sequence, collect,
                                                  finish, fmt, staged_output, write_rig,
                                                  bench_xml, Bench, Check, Request, Scene,
                                                  k_student)
from fibril_mjx.components.sensors import airspeed, barometer, magnetometer, rangefinder
from fibril_mjx.core import registry
from fibril_mjx.mechanisms.rng import world_keys



@dataclasses.dataclass(frozen=True)
class NavRig:
  """What the static rigs need of one navigation sensor type: its `validation_rig` part in the
  registry (called like a rig function, `run_nav`).

  Attributes:
    field: the sample field checked.
    noise: the config field of the white-noise σ; resolution: of the quantization step.
    bindings: config field → what binds it in the rig: 'site', or an MJCF sensor element.
    errors: the sensor's error model (its drift terms, `drift_fields()`, are 0 in the rig).
    dropped: config fields removed in the rig (couplings to other components, shared streams).
    gauss_markov: `(σ field, τ field, in the world frame)` of each Gauss–Markov term checked
      by a second static rig.
    range: `(min field, max field)` of a ranging sensor: the site is placed inside its range
      (None: 1 m above the ground).
    noise_per_range: a config field of σ per metre of range, added at the rig's height.
  """
  field: str
  noise: str
  resolution: str
  bindings: dict
  errors: object
  dropped: tuple = ()
  gauss_markov: tuple = ()
  range: tuple | None = None
  noise_per_range: str | None = None

  def __call__(self, manifest_path, component, ctype, cfg, out, **options) -> dict:
    return run_nav(self, Request(manifest_path, component, ctype, cfg, out, **options))


NAV_SKIP = 5     # leading samples dropped (filters started at the first value: a margin only)


def nav_rig(rig: NavRig, ctype: str, cfg: dict, overrides: dict, keep_gm=False
            ) -> tuple[str, dict, float]:
  """Static rig for a navigation sensor: one site on a bench (hinge about the vertical through
  its centre of mass, at rest) looking down at a ground plane. Returns (xml, manifest, true
  range of the site above the ground). Slow terms (Gauss–Markov drift, common mode, current /
  throttle couplings) and faults are removed, so the residual about each world's mean is the
  white noise + quantization alone."""
  binds, drop, zero = rig.bindings, rig.dropped, rig.errors.drift_fields()
  h = 1.0
  if rig.range is not None:
    lo, hi = float(cfg.get(rig.range[0], 0.0)), float(cfg[rig.range[1]])
    if not lo < h < hi:
      h = 0.5 * (lo + hi)
  sensors = ''.join(f'    <{kind} name="nav_{k}" site="s_nav"/>\n'
                    for k, kind in binds.items() if kind != 'site')
  xml = bench_xml('fibril_validate_nav_static', float(cfg['period_s']),
                  '<site name="s_nav" zaxis="0 0 -1"/>', sensors=sensors,
                  bench=Bench(f'0 0 {h!r}'),
                  scene=Scene(asset='<asset><material name="ground" rgba="1 1 1 1"/></asset>',
                              ground='<geom name="ground" type="plane" size="50 50 0.1" '
                                     'material="ground" contype="0" conaffinity="0"/>'))
  c = dict(cfg, **overrides)    # a perturbed slow term only reaches the Gauss–Markov rig
  c = {k: v for k, v in c.items() if k not in drop and k != 'faults'}
  for k in zero:
    if k in c and not keep_gm:
      c[k] = [0.0, 0.0, 0.0] if isinstance(c[k], list) else 0.0
  if keep_gm and c.get('common_mode_stream') is None and 'common_mode_stream' in cfg:
    c['common_mode_stream'] = 'validate_common_mode'
  for k, kind in binds.items():
    c[k] = 's_nav' if kind == 'site' else f'nav_{k}'
  doc = {'fibril_manifest': 1, 'model': 'static.xml',
         'components': [{'id': 'dut', 'type': ctype, 'config': c}]}
  return xml, doc, h


def _nav_checks(rig: NavRig, cfg, z, h, dur_s) -> list[Check]:
  """White-noise std and lag-1 autocorrelation per axis of the static residual."""
  field, zero = rig.field, rig.errors.drift_fields()
  sig = np.broadcast_to(np.asarray(cfg.get(rig.noise, 0.0), np.float64), z.shape[2:]).copy()
  if rig.noise_per_range is not None:
    sig = sig + float(cfg.get(rig.noise_per_range, 0.0)) * h   # θ = 0: no incidence term
  q = float(cfg.get(rig.resolution, 0.0))
  expected = np.sqrt(sig ** 2 + q * q / 12.0)
  z = z[:, NAV_SKIP:]
  z = np.where(np.isfinite(z), z, np.nan)
  res = z - np.nanmean(z, axis=1, keepdims=True)
  n_valid = np.sum(np.isfinite(res), axis=(0, 1))
  dof = n_valid - z.shape[0]                        # one mean per world removed
  meas = np.sqrt(np.nansum(res ** 2, axis=(0, 1)) / np.maximum(dof, 1))
  tol = K_SIGMA * expected / np.sqrt(2.0 * np.maximum(dof, 1))
  a = np.nan_to_num(res[:, 1:])
  b = np.nan_to_num(res[:, :-1])
  rho = np.sum(a * b, axis=(0, 1)) / np.maximum(np.sum(b * b, axis=(0, 1)), 1e-300)
  tol_r = K_SIGMA / np.sqrt(np.maximum(dof, 1))
  flat = np.atleast_1d(sig < 0.5 * q)
  gm = [k for k in zero if np.any(np.asarray(cfg.get(k, 0.0)) > 0)]
  note = (f'configured Gauss–Markov / common-mode terms {", ".join(gm)} set to 0 in the rig '
          '(their own rig: static_gauss_markov)' if gm else '')
  if np.all(flat) and q > 0:
    ok, ok_r = None, None
    note = (note + '; ' if note else '') + (
        f'σ {fmt(sig)} < q/2 = {q / 2:g}: a static input is quantization-dominated, the '
        'q²/12 model does not hold (not resolvable)')
  else:
    ok = bool(np.all(np.abs(meas - expected) <= tol))
    ok_r = bool(np.all(np.abs(rho) <= tol_r))
  axes = '' if z.ndim == 2 else ' per axis'
  return [
      Check(f'static_noise.{field}', f'std of sample − per-world mean{axes}, static rig '
            f'({dur_s:g} s)', meas, {'noise_stddev': sig, 'resolution': q,
                                     'sqrt(σ²+q²/12)': expected}, tol,
            f'|measured − sqrt(σ² + q²/12)| ≤ {K_SIGMA:g}·σ/√(2N) (std error of a std '
            f'estimate), N = {fmt(dof)} samples (all worlds, less one mean per world)',
            ok, note=note),
      Check(f'static_noise_whiteness.{field}', f'lag-1 autocorrelation of the residual{axes}',
            rho, 0.0, tol_r, f'white noise: |ρ₁| ≤ {K_SIGMA:g}/√N', ok_r),
  ]


def run_nav(rig: NavRig, req: Request) -> dict:
  """`validate` for a navigation sensor: the static noise rig, then (where a Gauss–Markov
  term of `rig.gauss_markov` is configured) the Gauss–Markov rig."""
  field, cfg, worlds = rig.field, req.cfg, req.worlds
  with staged_output(req.out) as tmp:
    rigs = tmp / 'rigs'
    xml, doc, h = nav_rig(rig, req.ctype, cfg, req.perturb)
    sim = rig_simulation(write_rig(rigs, 'static', xml, doc))
    period = float(cfg['period_s'])
    n_acq = int(round(req.static_duration_s / period))
    n_seg = int(math.ceil((n_acq + 50) / 5000))
    seg = int(math.ceil((n_acq + 50) / n_seg))
    req.progress(f'static noise rig: {worlds} worlds x {n_seg * seg} ticks '
                 f'({n_seg * seg * period:g} s)')
    data = collect(sim, sim.default_params(worlds), world_keys(req.seed, worlds),
                   n_seg * seg, seg, (field,))
    z = by_sequence(data['dut'], field, n_acq)
    checks = _nav_checks(rig, cfg, z, h, req.static_duration_s)
    gm = [(sf, tf, wf) for sf, tf, wf in rig.gauss_markov
          if np.any(np.asarray(cfg.get(sf, 0.0)) > 0) and float(cfg.get(tf, 0.0)) > 0]
    if gm:
      xml, doc, h = nav_rig(rig, req.ctype, cfg, req.perturb, keep_gm=True)
      sim = rig_simulation(write_rig(rigs, 'static_gm', xml, doc))
      req.progress(f'static Gauss–Markov rig: {worlds} worlds x {n_seg * seg} ticks')
      data = collect(sim, sim.default_params(worlds), world_keys(req.seed + 1, worlds),
                     n_seg * seg, seg, (field,))
      z = by_sequence(data['dut'], field, n_acq)
      checks.append(_nav_gm_check(rig, cfg, z, gm, xml, period))
    return finish(tmp, req, checks)


def _nav_gm_check(rig: NavRig, cfg, z, gm, xml, period) -> Check:
  """Structure function E[(z[t+L] − z[t])²] at a few lags against the configured model
  2(σ_w² + q²/12) + Σ 2σ²(1 − φ^L), φ = exp(−Δ/τ) (constant biases cancel; no mean removed).
  Tolerance: 4 standard errors of the mean across worlds (independent realizations)."""
  import mujoco
  field, sig_f, q_f = rig.field, rig.noise, rig.resolution
  z = z[:, NAV_SKIP:]
  n = z.shape[1]
  shape = z.shape[2:]
  white = np.broadcast_to(np.asarray(cfg.get(sig_f, 0.0), np.float64), shape) ** 2 + \
      float(cfg.get(q_f, 0.0)) ** 2 / 12.0
  var_terms = []
  for sf, tf, world in gm:
    s2 = np.broadcast_to(np.asarray(cfg[sf], np.float64), shape) ** 2
    if world:   # common mode in the world frame: m = S·Rᵀ·d in sensor axes
      m = mujoco.MjModel.from_xml_string(xml)
      d = mujoco.MjData(m)
      mujoco.mj_kinematics(m, d)
      a = np.asarray(cfg.get('soft_iron', np.eye(3)), np.float64) @ d.site_xmat[0].reshape(3, 3).T
      s2 = (a ** 2) @ s2
    var_terms.append((s2, float(cfg[tf])))
  tau_max = max(t for _, t in var_terms)
  lags = sorted({1} | {int(x) for x in (round(0.3 * tau_max / period), round(tau_max / period))
                       if 1 < x <= n // 4})
  meas, exp_, tol, ok = [], [], [], True
  for L in lags:
    d2 = (z[:, L:] - z[:, :-L]) ** 2
    per_world = np.nanmean(d2, axis=1)                    # (W, ...)
    mu = per_world.mean(axis=0)
    se = per_world.std(axis=0, ddof=1) / math.sqrt(per_world.shape[0])
    e = 2 * white + sum(2 * s2 * (1 - math.exp(-L * period / t)) for s2, t in var_terms)
    t_ = k_student(per_world.shape[0]) * se
    ok &= bool(np.all(np.abs(mu - e) <= t_))
    meas.append(mu), exp_.append(e), tol.append(t_)
  terms = ', '.join(f'{sf} {fmt(np.asarray(cfg[sf]))} τ {cfg[tf]:g} s' for sf, tf, _ in gm)
  return Check(f'static_gauss_markov.{field}',
               f'structure function E[(z[t+L] − z[t])²] at lags L = {lags} samples '
               f'(L·Δ = {fmt(np.asarray(lags) * period)} s)',
               {f'L={L}': m for L, m in zip(lags, meas)},
               {f'L={L}': e for L, e in zip(lags, exp_)}, {f'L={L}': t for L, t in zip(lags, tol)},
               f'2(σ² + q²/12) + Σ 2σ_gm²(1 − exp(−LΔ/τ)) for {terms}; {k_student(z.shape[0]):.3g}× '
               f'std error of the mean over {z.shape[0]} worlds (Student t, the level of '
               f'{K_SIGMA:g} σ)', ok)


# The rig of each navigation type, its `validation_rig` part (validate finds this module by
# walking its package).
registry.register(magnetometer.TYPE, validation_rig=NavRig(
    'magnetic_field_ut', 'noise_stddev_ut', 'resolution_ut', {'site': 'site'},
    magnetometer.ERRORS,
    dropped=('current_components', 'current_coefficients_ut_per_a', 'common_mode_stream'),
    gauss_markov=(('bias_instability_stddev_ut', 'bias_correlation_time_s', False),
                  ('common_mode_stddev_ut', 'common_mode_correlation_time_s', True))))
registry.register(barometer.TYPE, validation_rig=NavRig(
    'pressure_pa', 'noise_stddev_pa', 'resolution_pa', {'site': 'site'}, barometer.ERRORS,
    dropped=('common_mode_stream', 'throttle_actuator', 'throttle_bias_points',
             'throttle_bias_pa', 'velocity_sensor', 'airspeed_bias_points_m_s',
             'airspeed_bias_pa'),
    gauss_markov=(('bias_instability_stddev_pa', 'bias_correlation_time_s', False),
                  ('common_mode_stddev_pa', 'common_mode_correlation_time_s', False))))
registry.register(airspeed.TYPE, validation_rig=NavRig(
    'differential_pressure_pa', 'noise_stddev_pa', 'resolution_pa',
    {'velocity_sensor': 'velocimeter'}, airspeed.ERRORS))
registry.register(rangefinder.TYPE, validation_rig=NavRig(
    'distance_m', 'noise_stddev_m', 'resolution_m', {'rangefinder_sensor': 'rangefinder'},
    rangefinder.ERRORS, range=('min_range_m', 'max_range_m'), noise_per_range='noise_fraction'))
