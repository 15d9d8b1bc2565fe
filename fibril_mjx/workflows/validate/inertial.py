"""IMU / AHRS (`fibril_sim/imu`, `fibril_sim/ahrs`) rigs and checks of `fibril-mjx validate`:

| check | rig | compares |
| --- | --- | --- |
| `static_allan.<channel>` | static bench, long run | pooled overlapping Allan deviation per axis with the exact curve of the configured error model; N / B / K by slope fits vs the same extraction on that curve |
| `static_noise.<channel>` (AHRS) | static bench | stationary std and AR(1) ρ per axis |
| `six_orientation.<channel>` | six static poses | accelerometer gain matrix (scale, cross-axis) and bias; gyro bias and its unit-to-unit dispersion |
| `orientation_noise` (AHRS) | static poses | orientation residual std / ρ, yaw-rate bias dispersion |
| `rate_table` | hinge under a slow sine rate | gyro gain matrix (scale, cross-axis) |
| `range.<channel>` | the rate table / an off-axis site | saturation value, flags and clip counts at and beyond the limit |
| `bode.<channel>` | nested hinges / slides, one tone each | magnitude and phase against the configured first-order filter, one tone above the output Nyquist frequency (shown at its alias) |
| `timing` | all rig sensors | sample period, latency, jitter, loss vs the configured transport |
| `geometry` | static poses, known rotation | sign and unit of each axis under gravity and a known rotation |
| `thermal.<channel>.k1/k2` | one static pose under a soaked temperature staircase (IMU with a thermal model; `validate/thermal.py`) | bias temperature coefficients |

The other rigs hold the ambient at `reference_temperature_c`, so a thermal model leaves them
unchanged.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import textwrap
import time

import numpy as np

from fibril_mjx.analysis import stats
from fibril_mjx.workflows.validate import thermal
from fibril_mjx.workflows.validate.common import (G, K_SIGMA, Check, _axes_str, _by_sequence, _collect, _fmt, _plt, _staged_output, _summary, _timing, _write_rig, _write_summary)
from fibril_mjx.batch.simulation import load as load_simulation
from fibril_mjx.core import registry
from fibril_mjx.mechanisms.rng import world_keys

SUPPORTED = ('fibril_sim/imu', 'fibril_sim/ahrs')
CHANNELS = ('angular_velocity', 'linear_acceleration')
UNITS = {'angular_velocity': 'rad/s', 'linear_acceleration': 'm/s²'}
SENSOR_FIELDS = ('orientation_sensor', 'gyroscope_sensor', 'accelerometer_sensor')
# six static poses: site name -> (xyaxes, axis pointing up, sign)
POSES = {'px': ('0 0 1 0 1 0', 0, 1.0), 'mx': ('0 0 -1 0 1 0', 0, -1.0),
         'py': ('1 0 0 0 0 1', 1, 1.0), 'my': ('1 0 0 0 0 -1', 1, -1.0),
         'pz': ('1 0 0 0 1 0', 2, 1.0), 'mz': ('1 0 0 0 -1 0', 2, -1.0)}
RATE_SITES = {'rx': ('0 0 1 0 1 0', 0), 'ry': ('1 0 0 0 0 1', 1), 'rz': ('1 0 0 0 1 0', 2)}
# Sweep tones as fractions of the output rate f_s; the last lies above Nyquist (alias 0.29 f_s).
TONES = (0.01, 0.04, 0.12, 0.22, 0.38, 0.71)
WINDOW = 1000      # sweep / rate-table analysis window, samples
SKIP = 200         # samples discarded before it (servo and filter transients)
SUBSTEPS = 4       # physics ticks per output period in the dynamic rig


# -------------------------------------------------------------------------------- model


@dataclasses.dataclass
class Channel:
  """Configured error model of one rate channel, normalized across component types."""
  name: str
  white_sigma: np.ndarray      # (3,) per-sample std of white noise (0 if none)
  ar1: list                    # per axis [(sigma, phi), ...]
  random_walk: np.ndarray      # (3,) K
  episode_stddev: np.ndarray   # (3,) per-episode bias std (turn-on, AHRS yaw-rate bias)
  bias: np.ndarray             # (3,)
  gain: np.ndarray             # (3, 3) I + diag(scale − 1) + M
  bandwidth_hz: float
  limit: float
  resolution: float
  noise_density: np.ndarray | None   # (3,) IMU only, for the report
  gm_sigma: np.ndarray | None
  gm_tau: np.ndarray | None


@dataclasses.dataclass
class Device:
  """The component under test: type, resolved config and its normalized model."""
  cid: str
  type: str
  config: dict                 # manifest field -> value (resolved, no sensor names)
  period_s: float
  channels: dict               # name -> Channel
  latency_s: float
  jitter_s: float
  loss_probability: float
  phase_s: float
  filter_rate: str = 'output'  # 'physics': the low-pass runs every physics tick (IMU option)
  orientation_sigma: np.ndarray | None = None
  orientation_rho: np.ndarray | None = None
  orientation_resolution: float = 0.0
  yaw_sign: float = 1.0


def _vec(v):
  return np.asarray(v, np.float64).reshape(3)


def device_from_config(cid: str, ctype: str, cfg: dict) -> Device:
  """Normalizes a resolved `fibril_sim/imu` / `fibril_sim/ahrs` config (manifest fields)."""
  p = float(cfg['period_s'])
  chans = {}
  for ch in CHANNELS:
    if ctype == 'fibril_sim/imu':
      nd = _vec(cfg.get(f'{ch}_noise_density', (0, 0, 0)))
      gm_s = _vec(cfg.get(f'{ch}_bias_instability_stddev', (0, 0, 0)))
      gm_t = _vec(cfg.get(f'{ch}_bias_correlation_time_s', (0, 0, 0)))
      white = nd / math.sqrt(p)
      bw = float(cfg.get(f'{ch}_bandwidth_hz', 0.0))
      ar1 = []
      for i in range(3):
        terms = []
        if gm_s[i] > 0:
          terms.append((gm_s[i], math.exp(-p / gm_t[i])))
        ar1.append(terms)
      if cfg.get('noise_before_filter') and bw > 0:
        # White noise through the first-order filter is AR(1) with φ = 1 − α.
        a = 1.0 - math.exp(-2 * math.pi * bw * p)
        for i in range(3):
          if white[i] > 0:
            ar1[i].append((white[i] * math.sqrt(a / (2 - a)), 1 - a))
        white = np.zeros(3)
      gain = np.diag(_vec(cfg.get(f'{ch}_scale', (1, 1, 1)))) + np.asarray(
          cfg.get(f'{ch}_misalignment', np.zeros((3, 3))), np.float64)
      chans[ch] = Channel(ch, white, ar1, _vec(cfg.get(f'{ch}_random_walk', (0, 0, 0))),
                          _vec(cfg.get(f'{ch}_bias_turn_on_stddev', (0, 0, 0))),
                          _vec(cfg.get(f'{ch}_bias', (0, 0, 0))), gain, bw,
                          float(cfg.get(f'{ch}_limit', 0.0)),
                          float(cfg.get(f'{ch}_resolution', 0.0)), nd, gm_s, gm_t)
    else:
      sig = _vec(cfg.get(f'{ch}_noise_stddev', (0, 0, 0)))
      rho = _vec(cfg.get(f'{ch}_noise_correlation', (0, 0, 0)))
      ep = np.zeros(3)
      if ch == 'angular_velocity':
        ep[2] = float(cfg.get('yaw_rate_bias_stddev_rad_s', 0.0))
      lim = 'angular_velocity_limit_rad_s' if ch == 'angular_velocity' else \
          'linear_acceleration_limit_m_s2'
      chans[ch] = Channel(ch, np.zeros(3), [[(sig[i], rho[i])] if sig[i] > 0 else []
                                            for i in range(3)],
                          np.zeros(3), ep, _vec(cfg.get(f'{ch}_bias', (0, 0, 0))),
                          np.diag(_vec(cfg.get(f'{ch}_scale', (1, 1, 1)))),
                          float(cfg.get(f'{ch}_bandwidth_hz', 0.0)), float(cfg.get(lim, 0.0)),
                          float(cfg.get(f'{ch}_resolution', 0.0)), None, None, None)
  dev = Device(cid, ctype, cfg, p, chans, float(cfg.get('latency_s', 0.0)),
               float(cfg.get('jitter_s', 0.0)), float(cfg.get('loss_probability', 0.0)),
               float(cfg.get('phase_s', 0.0)), str(cfg.get('filter_rate', 'output')))
  if ctype == 'fibril_sim/ahrs':
    dev.orientation_sigma = _vec(cfg.get('orientation_noise_stddev_rad', (0, 0, 0)))
    dev.orientation_rho = _vec(cfg.get('orientation_noise_correlation', (0, 0, 0)))
    dev.orientation_resolution = float(cfg.get('orientation_resolution_rad', 0.0))
    dev.yaw_sign = float(cfg.get('orientation_yaw_sign', 1.0))
  return dev


# --------------------------------------------------------------------------------- rigs


def _sensor_xml(prefix, site, ahrs):
  s = (f'    <gyro name="g_{prefix}" site="{site}"/>\n'
       f'    <accelerometer name="a_{prefix}" site="{site}"/>\n')
  if ahrs:
    s += f'    <framequat name="q_{prefix}" objtype="site" objname="{site}"/>\n'
  return s


def _entry(dev: Device, name, overrides):
  cfg = {k: v for k, v in dev.config.items()}
  cfg.update(thermal.neutral_ambient(cfg))   # the thermal sweep has its own rig
  cfg.update(overrides)
  cfg['gyroscope_sensor'] = f'g_{name}'
  cfg['accelerometer_sensor'] = f'a_{name}'
  if dev.type == 'fibril_sim/ahrs':
    cfg['orientation_sensor'] = f'q_{name}'
  return {'id': name, 'type': dev.type, 'config': cfg}


def static_rig(dev: Device, overrides) -> tuple[str, dict]:
  """Six static poses on a bench (hinge about the vertical through its centre of mass, so
  MuJoCo C and MJX agree), timestep = the output period."""
  ahrs = dev.type == 'fibril_sim/ahrs'
  sites = '\n'.join(f'      <site name="s_{n}" xyaxes="{ax}"/>' for n, (ax, _, _) in POSES.items())
  sensors = ''.join(_sensor_xml(n, f's_{n}', ahrs) for n in POSES)
  xml = textwrap.dedent(f"""\
      <mujoco model="fibril_validate_static">
        <option timestep="{dev.period_s!r}" integrator="implicitfast" gravity="0 0 -{G!r}"/>
        <worldbody>
          <body name="bench">
            <joint name="bench_yaw" type="hinge" axis="0 0 1"/>
            <geom type="box" size="0.05 0.05 0.01" mass="1" contype="0" conaffinity="0"/>
      {sites}
          </body>
        </worldbody>
        <sensor>
      {sensors}  </sensor>
      </mujoco>
      """)
  comps = [_entry(dev, n, overrides) for n in POSES]
  return xml, {'fibril_manifest': 1, 'model': 'static.xml', 'components': comps}


@dataclasses.dataclass
class DynamicPlan:
  dt: float
  rate_amplitude: float        # rad/s, rate table sine
  rate_hz: float
  radius_m: float              # off-axis accelerometer sites
  tone_hz: tuple
  gyro_tone_amp: float         # rad/s each
  accel_tone_amp: float        # m/s² each
  n_ticks: int


def dynamic_plan(dev: Device) -> DynamicPlan:
  p = dev.period_s
  fs = 1.0 / p
  w_lim = dev.channels['angular_velocity'].limit
  a_lim = dev.channels['linear_acceleration'].limit
  rate_amp = 1.3 * w_lim if w_lim > 0 else 10.0
  radius = 1.3 * a_lim / rate_amp ** 2 if a_lim > 0 else 0.1
  bins = [round(f * WINDOW) for f in TONES]
  tones = tuple(b * fs / WINDOW for b in bins)
  n = len(tones)
  g_amp = min(1.0, 0.5 * w_lim / n) if w_lim > 0 else 1.0
  a_amp = min(2.0, 0.5 * a_lim / n) if a_lim > 0 else 2.0
  return DynamicPlan(p / SUBSTEPS, rate_amp, fs / WINDOW, radius, tones, g_amp, a_amp,
                     (SKIP + WINDOW) * SUBSTEPS + SUBSTEPS)


INERTIA = 0.01   # kg·m² of each driven body about its joint (kg for the slide)


def dynamic_rig(dev: Device, plan: DynamicPlan, overrides) -> tuple[str, dict]:
  """Rate table (three sites, one axis each along the spin axis; two off-axis sites for the
  accelerometer range), a hinge about z and a slide along x driven by one motor per sweep
  tone. Motors apply `I·A·2πf·cos(2πft + φ)`, so the rate (or the acceleration) is an exact
  sum of sines on a linear system (no servo in the loop). Timestep = output period / 4."""
  ahrs = dev.type == 'fibril_sim/ahrs'
  r = plan.radius_m
  rate_sites = '\n'.join(f'      <site name="s_{n}" xyaxes="{ax}"/>' for n, (ax, _) in
                         RATE_SITES.items())
  inertial = (f'<inertial pos="0 0 0" mass="{INERTIA!r}" '
              f'diaginertia="{INERTIA!r} {INERTIA!r} {INERTIA!r}"/>')
  w = 2 * math.pi * plan.rate_hz
  acts = ['    <motor name="rate_motor" joint="rate"/>']
  script = [{'actuator': 'rate_motor', 'amplitude': INERTIA * plan.rate_amplitude * w,
             'frequency_hz': plan.rate_hz, 'phase_rad': math.pi / 2}]
  for k, f in enumerate(plan.tone_hz):
    acts.append(f'    <motor name="sw_m{k}" joint="sweep"/>')
    acts.append(f'    <motor name="ln_m{k}" joint="lin"/>')
    script.append({'actuator': f'sw_m{k}', 'frequency_hz': f, 'phase_rad': math.pi / 2 + 0.7 * k,
                   'amplitude': INERTIA * plan.gyro_tone_amp * 2 * math.pi * f})
    script.append({'actuator': f'ln_m{k}', 'frequency_hz': f, 'phase_rad': 0.3 + 0.9 * k,
                   'amplitude': INERTIA * plan.accel_tone_amp})
  names = list(RATE_SITES) + ['cout', 'cin', 'sweep', 'lin']
  sensors = ''.join(_sensor_xml(n, f's_{n}', ahrs) for n in names)
  xml = textwrap.dedent(f"""\
      <mujoco model="fibril_validate_dynamic">
        <option timestep="{plan.dt!r}" integrator="Euler" gravity="0 0 -{G!r}"/>
        <worldbody>
          <body name="table">
            <joint name="rate" type="hinge" axis="0 0 1"/>
            {inertial}
      {rate_sites}
            <site name="s_cout" pos="{r!r} 0 0"/>
            <site name="s_cin" pos="{r!r} 0 0" xyaxes="-1 0 0 0 -1 0"/>
          </body>
          <body name="sweep_body">
            <joint name="sweep" type="hinge" axis="0 0 1"/>
            {inertial}
            <site name="s_sweep"/>
          </body>
          <body name="lin_body">
            <joint name="lin" type="slide" axis="1 0 0"/>
            {inertial}
            <site name="s_lin"/>
          </body>
        </worldbody>
        <actuator>
      """) + '\n'.join(acts) + '\n  </actuator>\n  <sensor>\n' + sensors + \
      '  </sensor>\n</mujoco>\n'
  comps = [_entry(dev, n, overrides) for n in names]
  return xml, {'fibril_manifest': 1, 'model': 'dynamic.xml', 'actuator_script': script,
               'components': comps}


# ------------------------------------------------------------------------- data helpers


def _fill(x):
  """Forward-fills NaN (lost samples) along axis 1; leading NaN take the first value."""
  x = x.copy()
  for idx in np.ndindex(x.shape[0], *x.shape[2:]):
    row = x[(idx[0], slice(None)) + idx[1:]]
    bad = np.isnan(row)
    if bad.any() and not bad.all():
      good = np.nonzero(~bad)[0]
      fill_idx = np.maximum.accumulate(np.where(bad, 0, np.arange(row.size)))
      fill_idx[:good[0]] = good[0]
      row[:] = row[fill_idx]
  return x


def _lowpass(x, bw, period):
  """Reference first-order filter of SPEC §5.1 on axis 1 (float64 NumPy)."""
  if bw <= 0:
    return x
  a = 1.0 - math.exp(-2 * math.pi * bw * period)
  y = np.empty_like(x)
  y[:, 0] = x[:, 0]
  for k in range(1, x.shape[1]):
    y[:, k] = y[:, k - 1] + a * (x[:, k] - y[:, k - 1])
  return y


def _h_discrete(f, bw, fs):
  if bw <= 0:
    return np.ones_like(np.asarray(f, np.float64), dtype=complex)
  a = 1.0 - math.exp(-2 * math.pi * bw / fs)
  return a / (1.0 - (1.0 - a) * np.exp(-2j * np.pi * np.asarray(f) / fs))


def _h_expected(dev, ch, f_true, dt):
  """Response of the configured low-pass to a tone of true frequency `f_true`, as seen in
  the samples (scale applied by the caller): at the output rate, the discrete filter at the
  alias frequency of the sampled tone; at the physics rate (`filter_rate: physics`), the
  filter at `1/dt` before sampling. For tones above the output Nyquist frequency the
  returned value is the conjugate convention of `_bode` (sampled tone phasor = conj(U))."""
  fs = 1.0 / dev.period_s
  f_true = np.asarray(f_true, np.float64)
  above = f_true > fs / 2
  if dev.filter_rate == 'physics':
    h = _h_discrete(f_true, ch.bandwidth_hz, 1.0 / dt)
    return np.where(above, np.conj(h), h)
  return _h_discrete(np.where(above, fs - f_true, f_true), ch.bandwidth_hz, fs)


def _reference_filter(dev, ch, x_ticks, ticks, dt):
  """Noiseless filtered input at the sample ticks: `x_ticks` `(T, 3)` per physics tick."""
  if dev.filter_rate == 'physics' and ch.bandwidth_hz > 0:
    return _lowpass(x_ticks[None], ch.bandwidth_hz, dt)[0][ticks]
  return _lowpass(x_ticks[ticks][None], ch.bandwidth_hz, dev.period_s)[0]


def _quat_err_vec(q, q_ref):
  """Small rotation vectors `2·vec(q_ref⁻¹ ⊗ q)` (body frame), float64."""
  q = np.asarray(q, np.float64)
  p = np.asarray(q_ref, np.float64)
  w = p[..., :1] * q[..., :1] + np.sum(p[..., 1:] * q[..., 1:], -1, keepdims=True)
  v = p[..., :1] * q[..., 1:] - q[..., :1] * p[..., 1:] - np.cross(p[..., 1:], q[..., 1:])
  return 2.0 * v * np.sign(w + 1e-30)


# ----------------------------------------------------------------------- the static rig


def _static_checks(dev: Device, data, n_acq, plots, fig_dir) -> list[Check]:
  checks = []
  fs = 1.0 / dev.period_s
  for ch_name, ch in dev.channels.items():
    units = UNITS[ch_name]
    x = np.stack([_fill(_by_sequence(data[n], ch_name, n_acq)) for n in POSES], 1)
    w_, u_, n_, _ = x.shape                      # worlds, poses, samples, axes
    rec = x.reshape(w_ * u_, n_, 3)
    q = ch.resolution
    # --- Allan deviation per axis vs the exact curve of the configured model.
    fig_rows = []
    allan_ok, worst, nbk_rows = True, 0.0, []
    for i in range(3):
      r = rec[:, :, i] - rec[:, :, i].mean(axis=1, keepdims=True)
      noise_var = ch.white_sigma[i] ** 2 + sum(s * s for s, _ in ch.ar1[i])
      qv = q * q / 12.0 if q > 0 and noise_var > (q / 2) ** 2 else 0.0
      if noise_var + ch.random_walk[i] ** 2 == 0 or np.all(r == 0):
        std = float(np.std(r))
        bound = q / math.sqrt(12) + 1e-6 * G if noise_var == 0 else None
        ok = (std <= bound) if bound is not None else False
        checks.append(Check(f'static_allan.{ch_name}.{_axes_str(i)}', f'residual std [{units}]',
                            std, 0.0, bound, 'no noise configured: at most the LSB '
                            'quantization std q/√12 + float32 rounding', ok))
        allan_ok &= ok
        continue
      m = stats.allan_cluster_sizes(n_, min_clusters=9)
      taus, adev, rel = stats.allan_deviation_pooled(r, fs, m)
      model = np.sqrt(stats.allan_variance_model(m, fs, white_sigma=math.sqrt(
          ch.white_sigma[i] ** 2 + qv), ar1=ch.ar1[i], random_walk=ch.random_walk[i]))
      dev_sig = np.abs(adev / model - 1) / rel
      ok = bool(np.all(dev_sig < K_SIGMA))
      worst = max(worst, float(dev_sig.max()))
      allan_ok &= ok
      fig_rows.append((i, taus, adev, model, rel))
      meas, ref = stats.allan_nbk(taus, adev, rel), stats.allan_nbk(taus, model)
      configured = {'N': None if ch.noise_density is None else ch.noise_density[i],
                    'B': None if ch.gm_sigma is None else ch.gm_sigma[i],
                    'K': ch.random_walk[i] if dev.type == 'fibril_sim/imu' else None}
      for term in ('N', 'B', 'K'):
        mv, rv = meas[term]['value'], ref[term]['value']
        if mv is None or rv is None:
          checks.append(Check(
              f'static_allan.{ch_name}.{term}.{_axes_str(i)}', _TERM[term], mv,
              configured[term], None, f'{term} not resolvable in a {n_ / fs:g} s record '
              '(no Allan slope of ' + {'N': '−1/2', 'B': '0', 'K': '+1/2'}[term]
              + ' in the measured or the configured curve)', None,
              note=f'expected from the configured model: {_fmt(rv)}'))
          continue
        tol = K_SIGMA * meas[term]['rel_sigma']
        if term == 'N' and qv > 0:
          # Uniform-quantization-noise approximation (q²/12, white): allow 10 % of its share.
          tol += 0.1 * 0.5 * qv / (ch.white_sigma[i] ** 2 + qv)
        ok_t = abs(mv / rv - 1) <= tol
        allan_ok &= ok_t
        nbk_rows.append((term, i, mv, rv))
        checks.append(Check(
            f'static_allan.{ch_name}.{term}.{_axes_str(i)}', _TERM[term], mv, configured[term],
            f'±{100 * tol:.1f} %', f'relative to {_fmt(rv)} = the same slope fit on the '
            f'exact Allan curve of the configured model (incl. LSB q²/12 as white noise); '
            f'{K_SIGMA:g}× the edf-based std (+ 10 % of the LSB share of N) of the fitted τ range {meas[term]["taus"]} s, '
            f'{w_ * u_} records of {n_ / fs:g} s', ok_t))
    plot = _plot_allan(fig_dir, ch_name, units, fig_rows) if fig_rows else ''
    checks.append(Check(f'static_allan.{ch_name}', 'Allan deviation vs configured model',
                        f'max |dev|/σ = {worst:.2f}', 'exact closed-form curve', f'{K_SIGMA:g} σ',
                        f'every τ (9+ clusters): relative σ from the overlapping-estimator edf '
                        f'pooled over {w_ * u_} records of {n_ / fs:g} s', allan_ok, plot))
    if dev.type == 'fibril_sim/ahrs':
      checks += _ar1_checks(f'static_noise.{ch_name}', rec, [c[0] if c else (0.0, 0.0)
                                                             for c in ch.ar1], q, units)
    # --- six orientations: per-unit means.
    means = np.nanmean(x, axis=2)                  # (W, 6, 3)
    checks += _six_orientation(dev, ch, means, n_, fig_dir)
  # --- AHRS orientation residual and yaw-rate bias dispersion.
  if dev.type == 'fibril_sim/ahrs':
    checks += _orientation_static(dev, data, n_acq)
  checks += _geometry_gravity(dev, data, n_acq)
  return checks


_TERM = {'N': 'white noise N [units/√Hz]', 'B': 'bias instability B [units]',
         'K': 'random walk K [units/√s]'}


def _ar1_checks(name, rec, sig_rho, q, units):
  out = []
  for i in range(3):
    s_c, r_c = sig_rho[i]
    s, r, s_rel, r_se = stats.ar1_fit(rec[:, :, i])
    s_exp = math.sqrt(s_c ** 2 + (q * q / 12 if s_c > q / 2 else 0.0))
    if s_c == 0:
      ok = s <= q / math.sqrt(12) + 1e-6 * G
      out.append(Check(f'{name}.std.{_axes_str(i)}', f'residual std [{units}]', s, 0.0,
                       q / math.sqrt(12), 'no noise configured: ≤ LSB quantization std', ok))
      continue
    tol = K_SIGMA * s_rel * s_exp + (q * q / 12) / (2 * s_exp)
    out.append(Check(f'{name}.std.{_axes_str(i)}', f'stationary std [{units}]', s, s_c,
                     tol, f'{K_SIGMA:g}× AR(1) sampling std of the std '
                     f'({rec.shape[0]}×{rec.shape[1]} samples) + half the q²/12 LSB term; '
                     f'expected √(σ²+q²/12) = {s_exp:.5g}', abs(s - s_exp) <= tol))
    tol_r = K_SIGMA * r_se + 2.0 / rec.shape[1] + (q * q / 12) / s_exp ** 2
    r_exp = r_c * s_c ** 2 / s_exp ** 2
    out.append(Check(f'{name}.rho.{_axes_str(i)}', 'AR(1) lag-1 correlation', r, r_c, tol_r,
                     f'{K_SIGMA:g}× large-sample std of ρ̂ + O(1/n) estimator bias + LSB share; '
                     f'expected {r_exp:.4f} after the white LSB term', abs(r - r_exp) <= tol_r))
  return out


def _episode_var_of_mean(ch: Channel, i, n):
  """Variance of the record mean of the noise processes of axis i over n samples."""
  v = ch.white_sigma[i] ** 2 / n
  for s, phi in ch.ar1[i]:
    pm = phi ** n
    s1 = (n * phi * (1 - phi) - phi * (1 - pm)) / (1 - phi) ** 2
    v += s * s / (n * n) * (n + 2 * s1)
  return v


def _six_orientation(dev, ch: Channel, means, n_, fig_dir) -> list[Check]:
  checks = []
  units = UNITS[ch.name]
  w_ = means.shape[0]
  q = ch.resolution
  names = list(POSES)
  up = [names.index(f'p{a}') for a in 'xyz']
  dn = [names.index(f'm{a}') for a in 'xyz']
  if ch.name == 'linear_acceleration':
    # Pose p{a} holds +g along axis a: reading = G·(±g e_a) + bias.
    gain = np.stack([(means[:, up[a]] - means[:, dn[a]]) / (2 * G) for a in range(3)], -1)
    bias = np.mean([(means[:, up[a]] + means[:, dn[a]]) / 2 for a in range(3)], axis=0)
    g_mean, g_se = gain.mean(0), gain.std(0, ddof=1) / math.sqrt(w_)
    tol_g = K_SIGMA * g_se + q / (2 * G) + 2e-6
    ok = bool(np.all(np.abs(g_mean - ch.gain) <= tol_g))
    checks.append(Check(f'six_orientation.{ch.name}.gain', 'gain matrix I + diag(scale−1) + M '
                        '(column a = reading per g along axis a)', g_mean, ch.gain, tol_g,
                        f'{K_SIGMA:g}× std error over {w_} worlds (each pose a separate unit: '
                        'turn-on bias dispersion included) + LSB/2g + float32', ok))
  else:
    bias = means.mean(axis=1)                       # gyro at rest reads its bias
  b_mean, b_se = bias.mean(0), bias.std(0, ddof=1) / math.sqrt(w_)
  tol_b = K_SIGMA * b_se + q / 2 + 2e-6 * G
  ok = bool(np.all(np.abs(b_mean - ch.bias) <= tol_b))
  checks.append(Check(f'six_orientation.{ch.name}.bias', f'bias [{units}]', b_mean, ch.bias,
                      tol_b, f'{K_SIGMA:g}× std error of the mean over {w_} worlds + LSB/2', ok))
  # Unit-to-unit dispersion of the per-record means: turn-on (+ yaw-rate) bias and noise.
  per_unit = means.reshape(-1, 3)
  s_meas = per_unit.std(0, ddof=1)
  n_u = per_unit.shape[0]
  s_pred = np.sqrt(ch.episode_stddev ** 2 + np.array(
      [_episode_var_of_mean(ch, i, n_) + ch.random_walk[i] ** 2 * dev.period_s
       * (n_ - 1) * (2 * n_ - 1) / (6 * n_) for i in range(3)]))
  if ch.name == 'linear_acceleration':
    # poses differ in the axis holding g: compare the spread of the axes at ~0 g only
    zero = np.ones((6, 3), bool)
    for p_i, (_, a, _) in enumerate(POSES.values()):
      zero[p_i, a] = False
    vals = [means[:, zero[:, i], i].ravel() for i in range(3)]
    s_meas = np.array([v.std(ddof=1) for v in vals])
    n_u = vals[0].size
  rel = 1.0 / math.sqrt(2 * (n_u - 1))
  tol = K_SIGMA * rel * s_pred + q / math.sqrt(12) + 2e-6 * G
  ok = bool(np.all(np.abs(s_meas - s_pred) <= tol))
  checks.append(Check(f'six_orientation.{ch.name}.unit_dispersion',
                      f'std across units of the record mean [{units}]', s_meas, s_pred, tol,
                      f'predicted from turn-on / yaw-rate bias std and the noise processes '
                      f'averaged over {n_} samples; {K_SIGMA:g}× the χ std 1/√(2(n−1)) of '
                      f'{n_u} units + LSB', ok))
  return checks


def _orientation_static(dev: Device, data, n_acq) -> list[Check]:
  out = []
  recs = []
  for n in ('py', 'my', 'pz', 'mz'):     # no pitch ±90° poses (Euler resolution singular)
    q = _by_sequence(data[n], 'orientation', n_acq)
    q = _fill(q)
    q = q * np.sign(q[..., :1] + 1e-30)
    qm = q.mean(axis=1, keepdims=True)
    qm = qm / np.linalg.norm(qm, axis=-1, keepdims=True)
    e = _quat_err_vec(q, qm)
    t = np.arange(e.shape[1]) * dev.period_s
    tc = t - t.mean()
    slope = np.sum(e * tc[None, :, None], axis=1) / np.sum(tc * tc)
    recs.append((e - slope[:, None, :] * tc[None, :, None], slope))
  res = np.concatenate([r for r, _ in recs], 0)
  q = dev.orientation_resolution
  out += _ar1_checks('orientation_noise', res, list(zip(dev.orientation_sigma,
                                                        dev.orientation_rho)), q, 'rad')
  # Yaw drift rate of the pz pose = sign·b_ψ: its dispersion is the yaw-rate bias std.
  slope_z = recs[2][1][:, 2]
  s_cfg = dev.channels['angular_velocity'].episode_stddev[2]
  s_meas = float(slope_z.std(ddof=1)) if slope_z.size > 1 else 0.0
  n_ = res.shape[1]
  t_len = n_ * dev.period_s
  noise_floor = 0.0
  if dev.orientation_sigma[2] > 0:
    s, rho = dev.orientation_sigma[2], dev.orientation_rho[2]
    noise_floor = s * math.sqrt(12 / n_ * (1 + rho) / (1 - rho)) / t_len
  s_pred = math.sqrt(s_cfg ** 2 + noise_floor ** 2)
  tol = K_SIGMA * s_pred / math.sqrt(2 * max(slope_z.size - 1, 1)) + q / t_len
  out.append(Check('orientation_noise.yaw_rate_bias_dispersion', 'std across units of the yaw '
                   'drift rate [rad/s]', s_meas, s_cfg, tol,
                   f'expected √(σ_ψ² + residual-noise slope variance) = {s_pred:.4g}; '
                   f'{K_SIGMA:g}× χ std of {slope_z.size} units + LSB/T',
                   abs(s_meas - s_pred) <= tol))
  return out


def _geometry_gravity(dev: Device, data, n_acq) -> list[Check]:
  rows, ok = [], True
  for n, (_, a, sign) in POSES.items():
    m = np.nanmean(_by_sequence(data[n], 'linear_acceleration', n_acq), axis=(0, 1))
    good = (0.5 * G < sign * m[a] < 2 * G) and all(abs(m[j]) < 0.5 * G for j in range(3)
                                                   if j != a)
    ok &= good
    rows.append(f'{n}: {_fmt(m)}')
  return [Check('geometry.gravity', 'specific force at rest, axis up reads +g', '; '.join(rows),
                f'+{G} on the up axis, ~0 elsewhere', 'sign, and 0.5 g < |up| < 2 g',
                'gross check of sign and unit (m/s², not g) per axis', ok)]


# ---------------------------------------------------------------------- the dynamic rig


def _dynamic_checks(dev: Device, plan: DynamicPlan, trace, fig_dir) -> list[Check]:
  checks = []
  dt = plan.dt
  sens, truth = trace['sensor'], trace['truth']
  checks += _rate_table(dev, plan, sens, truth, fig_dir)
  checks += _range(dev, plan, sens, truth, fig_dir)
  checks += _bode(dev, plan, sens, truth, fig_dir)
  checks += _geometry_rotation(dev, plan, sens)
  checks += _timing(dev, dt, sens, fig_dir)
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
  h = float(_h_expected(dev, ch, plan.rate_hz, plan.dt).real)
  exp = ch.gain * h
  g_mean = est.mean(0)
  g_se = est.std(0, ddof=1) / math.sqrt(est.shape[0])
  amp = 0.9 * min(plan.rate_amplitude, lim if np.isfinite(lim) else plan.rate_amplitude)
  n_s = WINDOW * 0.6
  tol = K_SIGMA * g_se + q / (math.sqrt(12) * amp / math.sqrt(2) * math.sqrt(n_s)) + 1e-5 \
      + abs(1 - h)
  ok = bool(np.all(np.abs(g_mean - exp) <= tol))
  return [Check('rate_table.angular_velocity.gain', 'gyro gain matrix (column a: reading per '
                'rad/s about axis a) — scale and cross-axis', g_mean, ch.gain, tol,
                f'regression on |rate| < 0.9·limit, sine ±{plan.rate_amplitude:.4g} rad/s at '
                f'{plan.rate_hz:.4g} Hz; {K_SIGMA:g}× std error over worlds + LSB + filter '
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
        z = _reference_filter(dev, ch, x[w] @ ch.gain.T, ticks, plan.dt)[:, a]
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
    se = np.abs(h_meas - h).std(0, ddof=1) / math.sqrt(h_meas.shape[0]) if \
        h_meas.shape[0] > 1 else np.zeros(len(tones))
    amp = np.abs(u_s)
    h_exp = ch.gain[a, a] * _h_expected(dev, ch, tones, plan.dt)
    # LSB: the quantization error (≤ q/2 a sample) moves a fitted phasor by at most q/(2A)
    # relative (deterministic bound: noiseless inputs quantize the same way in every world).
    tol = K_SIGMA * se + ch.resolution / (2 * amp) + 1e-4
    err = np.abs(h - h_exp)
    ok = bool(np.all(err <= tol))
    plot = _plot_bode(fig_dir, ch_name, tones, alias, above, h, h_exp, fs, ch.bandwidth_hz,
                      dev.filter_rate, plan.dt)
    checks.append(Check(
        f'bode.{ch_name}', f'|H| and ∠H (deg) per tone, axis {_axes_str(a)}; tones {_fmt(tones)} Hz '
        f'(output Nyquist {fs / 2:g} Hz; {_fmt(tones[above])} Hz shows at {_fmt(alias[above])} Hz)',
        {'gain': np.abs(h), 'phase_deg': np.degrees(np.angle(h))},
        {'bandwidth_hz': ch.bandwidth_hz, 'gain': np.abs(h_exp),
         'phase_deg': np.degrees(np.angle(h_exp))}, tol,
        f'complex |H − H_expected| ≤ {K_SIGMA:g}× std error over {h_meas.shape[0]} worlds + LSB '
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
    rows.append(f'{_axes_str(a)} about +z: slope {slope:.3f}')
  checks = [Check('geometry.rotation', 'gyro reading per commanded rad/s about the axis '
                  'pointing along +world z', '; '.join(rows), '+1 (rad/s)', '0.5 … 2',
                  'sign and unit (rad/s, not deg/s) per axis under a known rotation', ok)]
  if dev.type == 'fibril_sim/ahrs':
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


# -------------------------------------------------------------------------------- plots


def _plot_allan(fig_dir, ch_name, units, rows):
  plt = _plt()
  fig, ax = plt.subplots(figsize=(7, 5))
  for (i, taus, adev, model, rel), c in zip(rows, ('tab:red', 'tab:green', 'tab:blue')):
    ax.loglog(taus, adev, '.', color=c, label=f'{_axes_str(i)} measured')
    ax.fill_between(taus, model * (1 - K_SIGMA * rel), model * (1 + K_SIGMA * rel), color=c,
                    alpha=0.15)
    ax.loglog(taus, model, '-', color=c, lw=0.8, label=f'{_axes_str(i)} configured')
  ax.set_xlabel('τ [s]')
  ax.set_ylabel(f'Allan deviation [{units}]')
  ax.set_title(f'static run: {ch_name} (band: ±{K_SIGMA:g}σ)')
  ax.grid(True, which='both', alpha=0.3)
  ax.legend(fontsize=7)
  path = fig_dir / f'static_allan_{ch_name}.png'
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path.name


def _plot_bode(fig_dir, ch_name, tones, alias, above, h, h_exp, fs, bw, rate, dt):
  plt = _plt()
  fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
  f = np.linspace(fs / 1000, fs / 2, 500)
  hc = _h_discrete(f, bw, 1 / dt if rate == 'physics' else fs)
  a1.semilogx(f, 20 * np.log10(np.abs(hc)), 'k-', lw=0.8, label=f'configured ({rate} rate)')
  a1.semilogx(alias, 20 * np.log10(np.abs(h_exp)), 'k+', ms=8, label='expected per tone')
  a2.semilogx(f, np.degrees(np.angle(hc)), 'k-', lw=0.8)
  a1.semilogx(alias[~above], 20 * np.log10(np.abs(h[~above])), 'o', label='measured tone')
  a1.semilogx(alias[above], 20 * np.log10(np.abs(h[above])), 's', color='tab:red',
              label=f'tone {tones[above][0]:.4g} Hz > Nyquist, at its alias')
  a2.semilogx(alias, np.degrees(np.angle(h)), 'o')
  a2.semilogx(alias[above], np.degrees(np.angle(h[above])), 's', color='tab:red')
  a1.axvline(fs / 2, color='gray', ls=':')
  a1.set_ylabel('gain [dB]')
  a2.set_ylabel('phase [deg]')
  a2.set_xlabel('frequency at the output [Hz]')
  a1.legend(fontsize=7)
  a1.set_title(f'sine sweep: {ch_name} (bandwidth {bw:g} Hz, output rate {fs:g} Hz)')
  path = fig_dir / f'bode_{ch_name}.png'
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path.name


# ------------------------------------------------------------------------------- driver


def _thermal_sweep(dev, cfg, perturb, rigs, worlds, seed, window_s, progress, t0):
  """The temperature sweep with soak (`validate/thermal.py`)."""
  plan = thermal.sweep_plan(cfg, dev.period_s, window_s)
  xml, doc = thermal.sweep_rig(cfg, plan, perturb)
  sim = load_simulation(_write_rig(rigs, 'thermal', xml, doc))
  progress(f'thermal sweep: {len(thermal.LEVELS_K)} set-points x {worlds} worlds x '
           f'{plan.n_ticks} ticks (soak {plan.soak_s:g} s, record {plan.window_s:g} s)')
  n_seg = int(math.ceil(plan.n_ticks / 5000))
  seg = int(math.ceil(plan.n_ticks / n_seg))
  data = _collect(sim, sim.default_params(worlds), world_keys(seed, worlds),
                  n_seg * seg, seg, CHANNELS)['pz']
  n_acq = plan.n_ticks - 1
  samples = {ch: _by_sequence(data, ch, n_acq) for ch in CHANNELS}
  progress(f'  simulated ({time.time() - t0:.0f} s); thermal checks')
  return thermal.sweep_checks(dev, cfg, plan, samples)


def run_inertial(manifest_path, component, ctype, cfg, out, *, static_duration_s, worlds, seed,
                 perturb, progress, t0) -> dict:
  """`validate` for `fibril_sim/imu` / `fibril_sim/ahrs`: the static and the dynamic rig."""
  import jax

  out = pathlib.Path(out)
  dev = device_from_config(component, ctype, cfg)
  with _staged_output(out) as tmp:
    fig_dir = tmp
    rigs = tmp / 'rigs'
    # ---- static rig: long records, segments keep memory flat.
    xml, doc = static_rig(dev, perturb)
    sim = load_simulation(_write_rig(rigs, 'static', xml, doc))
    n_acq = int(round(static_duration_s / dev.period_s))
    n_seg = int(math.ceil((n_acq + 50) / 5000))
    seg = int(math.ceil((n_acq + 50) / n_seg))
    n_ticks = n_seg * seg
    fields = ('angular_velocity', 'linear_acceleration') + (
        ('orientation',) if ctype == 'fibril_sim/ahrs' else ())
    progress(f'static rig: {len(POSES)} poses x {worlds} worlds x {n_ticks} ticks '
             f'({n_ticks * dev.period_s:g} s)')
    data = _collect(sim, sim.default_params(worlds), world_keys(seed, worlds),
                    n_ticks, seg, fields)
    progress(f'  simulated ({time.time() - t0:.0f} s); analysing')
    checks = _static_checks(dev, data, n_acq, None, fig_dir)
    del data
    progress(f'  static checks done ({time.time() - t0:.0f} s)')
    # ---- dynamic rig: rate table, range, sweeps, timing.
    plan = dynamic_plan(dev)
    xml, doc = dynamic_rig(dev, plan, perturb)
    sim = load_simulation(_write_rig(rigs, 'dynamic', xml, doc))
    progress(f'dynamic rig: 7 sensors x {worlds} worlds x {plan.n_ticks} ticks '
             f'(dt {plan.dt:g} s)')
    _, trace = sim.rollout(sim.default_params(worlds), world_keys(seed + 1, worlds),
                           plan.n_ticks, observe_truth=True)
    trace = jax.tree.map(np.asarray, trace)
    progress(f'  simulated ({time.time() - t0:.0f} s); analysing')
    checks += _dynamic_checks(dev, plan, trace, fig_dir)
    progress(f'  dynamic checks done ({time.time() - t0:.0f} s)')
    if ctype == 'fibril_sim/imu' and thermal.has_thermal(cfg):
      checks += _thermal_sweep(dev, cfg, perturb, rigs, worlds, seed + 2,
                               static_duration_s / len(thermal.LEVELS_K), progress, t0)
    summary = _summary(manifest_path, component, dev, checks, perturb, static_duration_s,
                       worlds, seed, time.time() - t0)
    _write_summary(tmp, summary)
  return summary


# The rig of these types (validate finds this module by walking its package).
for _type in SUPPORTED:
  registry.add(_type, validation_rig=run_inertial)
