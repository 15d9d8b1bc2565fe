"""`fibril-mjx validate`: the sensor-modelling guide (SPEC §12) minimum test set as virtual test rigs (SPEC §12).

The tool builds its own MJCF rigs around a copy of one IMU / AHRS component (the resolved
config of the user's manifest: profiles, instance fields; the user's robot is not needed),
runs them batched (many worlds = many independent realizations in one rollout) and compares
what the simulated device delivers with what its configuration says:

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
| `static_noise.<field>` (magnetometer, barometer, airspeed, rangefinder) | one static site, slow terms removed | per-axis std of sample − per-world mean vs √(σ² + q²/12), lag-1 whiteness |
| `static_gauss_markov.<field>` (magnetometer, barometer) | the same with the Gauss–Markov / common-mode terms on | structure function at lags 1, 0.3τ, τ vs the configured model |
| `position_noise.<h/v>` (GNSS) | static antenna, two receivers (one with the rig's outage) | position error std vs √(σ² + σ_cm²), std error of the correlated mean square |
| `position_correlation.<h/v>` (GNSS) | the same | lag autocorrelation at τ/4, τ/2, τ vs exp(−LΔ/τ), ratio-estimator std error |
| `velocity_noise.*` (GNSS) | the same | velocity error std, whiteness, independence of the position error |
| `accuracy_reported`, `accuracy_consistency.*` (GNSS) | the same | reported 1σ vs configured; fraction of errors within it vs 68.3 % (binomial, effective N) |
| `fix_consistency` (GNSS) | the receiver with the outage | no fix / held position / no-fix quality until reacquisition, 3D fix elsewhere |

Tolerances are sampling errors of the run (k = 4 standard errors, from the number of
samples / worlds / equivalent degrees of freedom) plus stated systematic allowances (the
output LSB, float32 rounding); each check states its basis in the summary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import pathlib
import shutil
import tempfile
import textwrap
import time

import numpy as np
import yaml

from fibril_mjx import stats
from fibril_mjx.errors import ConfigError, FibrilError

G = 9.80665
K_SIGMA = 4.0
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


# ----------------------------------------------------------------------------- model


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


def resolved_config(manifest_path, cid: str) -> tuple[str, dict]:
  """`(type, {field: value})` of component `cid` after profile layering (no sensor names).

  Builds the user's manifest (so every profile and config rule is checked once, with the
  usual one-line errors) and reads the component's resolved fields.
  """
  import fibril_mjx
  sim = fibril_mjx.load(manifest_path)
  if cid not in sim.components:
    raise ConfigError(str(manifest_path), 'components', 'no component with id '
                      f'{cid!r} (has: {", ".join(sim.components)})', cid)
  comp = sim.components[cid]
  supported = SUPPORTED + tuple(NAV_TYPES) + (GNSS_TYPE,)
  if comp.type not in supported:
    raise ConfigError(str(manifest_path), f'components[{list(sim.components).index(cid)}].type',
                      f'validate supports {", ".join(supported)}', comp.type)
  cfg = {}
  for name, fv in comp.fields:
    if name in SENSOR_FIELDS or name == 'profiles':
      continue
    cfg[name] = _plain(fv.value)
  return comp.type, cfg


def _plain(v):
  if isinstance(v, (tuple, list)):
    return [_plain(x) for x in v]
  if isinstance(v, np.generic):
    return v.item()
  return v


# ----------------------------------------------------------------------------- rigs


def _sensor_xml(prefix, site, ahrs):
  s = (f'    <gyro name="g_{prefix}" site="{site}"/>\n'
       f'    <accelerometer name="a_{prefix}" site="{site}"/>\n')
  if ahrs:
    s += f'    <framequat name="q_{prefix}" objtype="site" objname="{site}"/>\n'
  return s


def _entry(dev: Device, name, overrides):
  cfg = {k: v for k, v in dev.config.items()}
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


# ----------------------------------------------------------------------------- checks


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


def _fmt(v):
  if v is None:
    return '—'
  if isinstance(v, (list, tuple, np.ndarray)):
    return '[' + ', '.join(_fmt(x) for x in np.asarray(v, dtype=object).ravel()) + ']'
  if isinstance(v, (bool, np.bool_)):
    return str(bool(v))
  if isinstance(v, (int, np.integer)):
    return str(int(v))
  if isinstance(v, (float, np.floating)):
    return f'{float(v):.5g}'
  return str(v)


def _axes_str(i):
  return 'xyz'[i]


# ---------------------------------------------------------------------- data helpers


def _collect(sim, params, keys, n_ticks, seg, fields):
  """Runs `n_ticks` in segments; returns `{cid: {field: (W, n_acq, ...)}}` of the delivered
  samples indexed by acquisition (sequence) number, NaN where lost, plus 'delivered'."""
  import jax
  state = sim.reset(params, keys)
  first = jax.tree.map(np.asarray, sim.outputs(state))['sensor']
  chunks = {cid: {f: [] for f in fields + ('new_data', 'sequence', 'sample_tick')}
            for cid in first}
  for cid, d in first.items():
    for f in fields:
      chunks[cid][f].append(np.asarray(getattr(d.sample, f))[:, None])
    for f in ('new_data', 'sequence', 'sample_tick'):
      chunks[cid][f].append(np.asarray(getattr(d, f))[:, None])
  done = 0
  while done < n_ticks:
    state, outs = sim.run(params, state, seg, record=True)
    outs = outs['sensor']
    for cid, d in outs.items():
      for f in fields:
        chunks[cid][f].append(np.swapaxes(np.asarray(getattr(d.sample, f)), 0, 1))
      for f in ('new_data', 'sequence', 'sample_tick'):
        chunks[cid][f].append(np.swapaxes(np.asarray(getattr(d, f)), 0, 1))
    done += seg
  return {cid: {f: np.concatenate(v, axis=1) for f, v in c.items()} for cid, c in chunks.items()}


def _by_sequence(c: dict, field: str, n_acq: int):
  """`(W, n_acq, ...)` float64 samples indexed by sequence number (NaN where not delivered)."""
  v = c[field]
  new = c['new_data'].astype(bool)
  seq = c['sequence']
  out = np.full((v.shape[0], n_acq) + v.shape[2:], np.nan)
  w, t = np.nonzero(new & (seq >= 0) & (seq < n_acq))
  out[w, seq[w, t]] = v[w, t]
  return out


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


# --------------------------------------------------------------------- the static rig


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


# -------------------------------------------------------------------- the dynamic rig


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


def _timing(dev, dt, sens, fig_dir):
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
  plot = _plot_timing(fig_dir, periods, lats, ref, dev)
  for c in checks:
    c.plot = plot
  return checks


# --------------------------------------------------------------------------- plots


def _plt():
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


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


def _plot_timing(fig_dir, periods, lats, ref, dev):
  plt = _plt()
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  axes[0].hist(periods * 1e3, bins=50)
  axes[0].axvline(dev.period_s * 1e3, color='k', ls='--', label='configured')
  axes[0].set_xlabel('sample period [ms]')
  axes[0].legend(fontsize=7)
  bins = np.linspace(min(lats.min(), ref.min()), max(lats.max(), ref.max()) + 1e-9, 50) * 1e3
  axes[1].hist(lats * 1e3, bins=bins, density=True, alpha=0.6, label='measured')
  axes[1].hist(ref * 1e3, bins=bins, density=True, histtype='step', color='k',
               label='reference transport')
  axes[1].axvline(dev.latency_s * 1e3, color='r', ls='--', label='configured latency_s')
  axes[1].set_xlabel('latency [ms]')
  axes[1].legend(fontsize=7)
  path = fig_dir / 'timing.png'
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path.name


# --------------------------------------------------------------------------- driver


def _write_rig(dirpath, name, xml, doc):
  (dirpath / f'{name}.xml').write_text(xml)
  path = dirpath / f'{name}.yaml'
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  return path


def run(manifest_path, component: str, out, *, static_duration_s: float = 100.0,
        worlds: int = 16, seed: int = 0, perturb: dict | None = None, overwrite=False,
        progress=print) -> dict:
  """Runs every check and writes `out/` (summary.txt/json, plots, the rig files).

  Args:
    manifest_path: the user's manifest; `component` the id of an IMU / AHRS in it.
    out: output directory (must not exist unless `overwrite`).
    static_duration_s: length of the static records (longer resolves slower terms).
    worlds: worlds per rig (independent realizations).
    perturb: manifest fields changed in the simulated device only (the checks still use the
      configured values): a deliberate mismatch, to see which checks catch it.

  Returns:
    the summary dict (`passed`, `checks`, ...).
  """
  import jax

  import fibril_mjx
  t0 = time.time()
  out = pathlib.Path(out)
  if out.exists() and not overwrite:
    raise FibrilError(f'{out}: output directory exists (use --overwrite)')
  ctype, cfg = resolved_config(manifest_path, component)
  perturb = dict(perturb or {})
  for k in perturb:
    if k not in cfg:
      raise ConfigError('--perturb', k, 'not a field of this component', perturb[k])
  if ctype == GNSS_TYPE:
    return run_gnss(manifest_path, component, cfg, out, static_duration_s=static_duration_s,
                    worlds=worlds, seed=seed, perturb=perturb, progress=progress, t0=t0)
  if ctype in NAV_TYPES:
    return run_nav(manifest_path, component, ctype, cfg, out,
                   static_duration_s=static_duration_s, worlds=worlds, seed=seed,
                   perturb=perturb, progress=progress, t0=t0)
  dev = device_from_config(component, ctype, cfg)
  with _staged_output(out) as tmp:
    fig_dir = tmp
    rigs = tmp / 'rigs'
    # ---- static rig: long records, segments keep memory flat.
    xml, doc = static_rig(dev, perturb)
    sim = fibril_mjx.load(_write_rig(rigs, 'static', xml, doc))
    n_acq = int(round(static_duration_s / dev.period_s))
    n_seg = int(math.ceil((n_acq + 50) / 5000))
    seg = int(math.ceil((n_acq + 50) / n_seg))
    n_ticks = n_seg * seg
    fields = ('angular_velocity', 'linear_acceleration') + (
        ('orientation',) if ctype == 'fibril_sim/ahrs' else ())
    progress(f'static rig: {len(POSES)} poses x {worlds} worlds x {n_ticks} ticks '
             f'({n_ticks * dev.period_s:g} s)')
    data = _collect(sim, sim.default_params(worlds), fibril_mjx.world_keys(seed, worlds),
                    n_ticks, seg, fields)
    progress(f'  simulated ({time.time() - t0:.0f} s); analysing')
    checks = _static_checks(dev, data, n_acq, None, fig_dir)
    del data
    progress(f'  static checks done ({time.time() - t0:.0f} s)')
    # ---- dynamic rig: rate table, range, sweeps, timing.
    plan = dynamic_plan(dev)
    xml, doc = dynamic_rig(dev, plan, perturb)
    sim = fibril_mjx.load(_write_rig(rigs, 'dynamic', xml, doc))
    progress(f'dynamic rig: 7 sensors x {worlds} worlds x {plan.n_ticks} ticks '
             f'(dt {plan.dt:g} s)')
    _, trace = sim.rollout(sim.default_params(worlds), fibril_mjx.world_keys(seed + 1, worlds),
                           plan.n_ticks, observe_truth=True)
    trace = jax.tree.map(np.asarray, trace)
    progress(f'  simulated ({time.time() - t0:.0f} s); analysing')
    checks += _dynamic_checks(dev, plan, trace, fig_dir)
    progress(f'  dynamic checks done ({time.time() - t0:.0f} s)')
    summary = _summary(manifest_path, component, dev, checks, perturb, static_duration_s,
                       worlds, seed, time.time() - t0)
    _write_summary(tmp, summary)
  return summary


@contextlib.contextmanager
def _staged_output(out: pathlib.Path):
  """A temporary directory beside `out` (with `rigs/`) that replaces `out` when the block
  completes and is removed when it raises: a reader never sees half a result."""
  tmp = pathlib.Path(tempfile.mkdtemp(prefix='.validate_', dir=out.parent if out.parent.exists()
                                      else None))
  try:
    (tmp / 'rigs').mkdir()
    yield tmp
    if out.exists():
      shutil.rmtree(out)
    os.replace(tmp, out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise


def _write_summary(tmp: pathlib.Path, summary: dict) -> None:
  (tmp / 'summary.json').write_text(json.dumps(summary, indent=1, ensure_ascii=False))
  (tmp / 'summary.txt').write_text(render(summary))


def _summary(manifest_path, component, dev, checks, perturb, dur, worlds, seed, wall):
  import fibril_mjx
  failed = [c.name for c in checks if c.passed is False]
  return {'manifest': str(manifest_path), 'component': component, 'type': dev.type,
          'config': dev.config, 'perturb': perturb, 'static_duration_s': dur, 'worlds': worlds,
          'seed': seed, 'fibril_mjx': fibril_mjx.__version__, 'wall_s': round(wall, 1),
          'k_sigma': K_SIGMA, 'passed': not failed, 'failed': failed,
          'checks': [c.as_dict() for c in checks]}


def render(summary: dict) -> str:
  """The human-readable summary: one block per check, measured vs configured."""
  lines = [f"validate {summary['component']} ({summary['type']}) from {summary['manifest']}",
           f"static records {summary['static_duration_s']:g} s, {summary['worlds']} worlds per "
           f"rig, seed {summary['seed']}, tolerances {summary['k_sigma']:g} standard errors "
           f"+ stated allowances; {summary['wall_s']:g} s"]
  if summary['perturb']:
    lines.append(f"PERTURBED device (checks use the configured values): {summary['perturb']}")
  lines.append('')
  for c in summary['checks']:
    status = {True: 'PASS', False: 'FAIL', None: 'n/a '}[c['passed']]
    lines.append(f"{status}  {c['name']}: {c['quantity']}")
    lines.append(f"      measured   {_fmt_any(c['measured'])}")
    lines.append(f"      configured {_fmt_any(c['configured'])}")
    lines.append(f"      tolerance  {_fmt_any(c['tolerance'])} — {c['basis']}")
    if c.get('note'):
      lines.append(f"      note       {c['note']}")
    if c.get('plot'):
      lines.append(f"      plot       {c['plot']}")
  n_fail = len(summary['failed'])
  lines.append('')
  lines.append('ALL CHECKS PASSED' if not n_fail else
               f"{n_fail} CHECK(S) FAILED: {', '.join(summary['failed'])}")
  return '\n'.join(lines) + '\n'


def _fmt_any(v):
  if isinstance(v, dict):
    return '{' + ', '.join(f'{k}: {_fmt_any(x)}' for k, x in v.items()) + '}'
  if isinstance(v, list):
    return _fmt(np.asarray(v, dtype=object)) if v and not isinstance(v[0], dict) else str(v)
  return _fmt(v)


# ------------------------------------------------------------ navigation sensors (noise)

# type -> (sample field, white-noise σ field, resolution field, binding fields -> rig sensor
# kind ('site' or an MJCF sensor element), slow terms set to zero in the rig, terms removed).
NAV_TYPES = {
    'fibril_sim/magnetometer': (
        'magnetic_field_ut', 'noise_stddev_ut', 'resolution_ut', {'site': 'site'},
        ('bias_instability_stddev_ut', 'common_mode_stddev_ut'),
        ('current_components', 'current_coefficients_ut_per_a', 'common_mode_stream')),
    'fibril_sim/barometer': (
        'pressure_pa', 'noise_stddev_pa', 'resolution_pa', {'site': 'site'},
        ('bias_instability_stddev_pa', 'common_mode_stddev_pa'),
        ('common_mode_stream', 'throttle_actuator', 'throttle_bias_points', 'throttle_bias_pa',
         'velocity_sensor', 'airspeed_bias_points_m_s', 'airspeed_bias_pa')),
    'fibril_sim/airspeed': (
        'differential_pressure_pa', 'noise_stddev_pa', 'resolution_pa',
        {'velocity_sensor': 'velocimeter'}, (), ()),
    'fibril_sim/rangefinder': (
        'distance_m', 'noise_stddev_m', 'resolution_m', {'rangefinder_sensor': 'rangefinder'},
        (), ()),
}
# Gauss–Markov terms checked by a second static rig: (σ field, τ field, in the world frame).
NAV_GM = {
    'fibril_sim/magnetometer': (('bias_instability_stddev_ut', 'bias_correlation_time_s', False),
                                ('common_mode_stddev_ut', 'common_mode_correlation_time_s',
                                 True)),
    'fibril_sim/barometer': (('bias_instability_stddev_pa', 'bias_correlation_time_s', False),
                             ('common_mode_stddev_pa', 'common_mode_correlation_time_s', False)),
}
NAV_SKIP = 5     # leading samples dropped (filters started at the first value: a margin only)


def nav_rig(ctype: str, cfg: dict, overrides: dict, keep_gm=False) -> tuple[str, dict, float]:
  """Static rig for a navigation sensor: one site on a bench (hinge about the vertical through
  its centre of mass, at rest) looking down at a ground plane. Returns (xml, manifest, true
  range of the site above the ground). Slow terms (Gauss–Markov drift, common mode, current /
  throttle couplings) and faults are removed, so the residual about each world's mean is the
  white noise + quantization alone."""
  _, _, _, binds, zero, drop = NAV_TYPES[ctype]
  h = 1.0
  if ctype == 'fibril_sim/rangefinder':
    lo, hi = float(cfg.get('min_range_m', 0.0)), float(cfg['max_range_m'])
    if not lo < h < hi:
      h = 0.5 * (lo + hi)
  sensors = ''.join(f'    <{kind} name="nav_{k}" site="s_nav"/>\n'
                    for k, kind in binds.items() if kind != 'site')
  xml = textwrap.dedent(f"""\
      <mujoco model="fibril_validate_nav_static">
        <option timestep="{float(cfg['period_s'])!r}" integrator="implicitfast" gravity="0 0 -{G!r}"/>
        <asset><material name="ground" rgba="1 1 1 1"/></asset>
        <worldbody>
          <geom name="ground" type="plane" size="50 50 0.1" material="ground" contype="0"
                conaffinity="0"/>
          <body name="bench" pos="0 0 {h!r}">
            <joint name="bench_yaw" type="hinge" axis="0 0 1"/>
            <geom type="box" size="0.05 0.05 0.01" mass="1" contype="0" conaffinity="0"/>
            <site name="s_nav" zaxis="0 0 -1"/>
          </body>
        </worldbody>
      """) + (f'  <sensor>\n{sensors}  </sensor>\n' if sensors else '') + '</mujoco>\n'
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


def _nav_checks(ctype, cfg, z, h, dur_s) -> list[Check]:
  """White-noise std and lag-1 autocorrelation per axis of the static residual."""
  field, sig_f, q_f, _, zero, _ = NAV_TYPES[ctype]
  sig = np.broadcast_to(np.asarray(cfg.get(sig_f, 0.0), np.float64), z.shape[2:]).copy()
  if ctype == 'fibril_sim/rangefinder':
    sig = sig + float(cfg.get('noise_fraction', 0.0)) * h   # θ = 0: no incidence term
  q = float(cfg.get(q_f, 0.0))
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
        f'σ {_fmt(sig)} < q/2 = {q / 2:g}: a static input is quantization-dominated, the '
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
            f'estimate), N = {_fmt(dof)} samples (all worlds, less one mean per world)',
            ok, note=note),
      Check(f'static_noise_whiteness.{field}', f'lag-1 autocorrelation of the residual{axes}',
            rho, 0.0, tol_r, f'white noise: |ρ₁| ≤ {K_SIGMA:g}/√N', ok_r),
  ]


def run_nav(manifest_path, component, ctype, cfg, out, *, static_duration_s, worlds, seed,
            perturb, progress, t0) -> dict:
  """`validate` for a navigation sensor: the static noise rig only."""
  import types

  import fibril_mjx
  out = pathlib.Path(out)
  field = NAV_TYPES[ctype][0]
  with _staged_output(out) as tmp:
    rigs = tmp / 'rigs'
    xml, doc, h = nav_rig(ctype, cfg, perturb)
    sim = fibril_mjx.load(_write_rig(rigs, 'static', xml, doc))
    period = float(cfg['period_s'])
    n_acq = int(round(static_duration_s / period))
    n_seg = int(math.ceil((n_acq + 50) / 5000))
    seg = int(math.ceil((n_acq + 50) / n_seg))
    progress(f'static noise rig: {worlds} worlds x {n_seg * seg} ticks '
             f'({n_seg * seg * period:g} s)')
    data = _collect(sim, sim.default_params(worlds), fibril_mjx.world_keys(seed, worlds),
                    n_seg * seg, seg, (field,))
    z = _by_sequence(data['dut'], field, n_acq)
    checks = _nav_checks(ctype, cfg, z, h, static_duration_s)
    gm = [(sf, tf, wf) for sf, tf, wf in NAV_GM.get(ctype, ())
          if np.any(np.asarray(cfg.get(sf, 0.0)) > 0) and float(cfg.get(tf, 0.0)) > 0]
    if gm:
      xml, doc, h = nav_rig(ctype, cfg, perturb, keep_gm=True)
      sim = fibril_mjx.load(_write_rig(rigs, 'static_gm', xml, doc))
      progress(f'static Gauss–Markov rig: {worlds} worlds x {n_seg * seg} ticks')
      data = _collect(sim, sim.default_params(worlds), fibril_mjx.world_keys(seed + 1, worlds),
                      n_seg * seg, seg, (field,))
      z = _by_sequence(data['dut'], field, n_acq)
      checks.append(_nav_gm_check(ctype, cfg, z, gm, xml, period))
    dev = types.SimpleNamespace(type=ctype, config=cfg)
    summary = _summary(manifest_path, component, dev, checks, perturb, static_duration_s,
                       worlds, seed, time.time() - t0)
    _write_summary(tmp, summary)
  return summary


def _nav_gm_check(ctype, cfg, z, gm, xml, period) -> Check:
  """Structure function E[(z[t+L] − z[t])²] at a few lags against the configured model
  2(σ_w² + q²/12) + Σ 2σ²(1 − φ^L), φ = exp(−Δ/τ) (constant biases cancel; no mean removed).
  Tolerance: 4 standard errors of the mean across worlds (independent realizations)."""
  import mujoco
  field, sig_f, q_f = NAV_TYPES[ctype][:3]
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
    t_ = K_SIGMA * se
    ok &= bool(np.all(np.abs(mu - e) <= t_))
    meas.append(mu), exp_.append(e), tol.append(t_)
  terms = ', '.join(f'{sf} {_fmt(np.asarray(cfg[sf]))} τ {cfg[tf]:g} s' for sf, tf, _ in gm)
  return Check(f'static_gauss_markov.{field}',
               f'structure function E[(z[t+L] − z[t])²] at lags L = {lags} samples '
               f'(L·Δ = {_fmt(np.asarray(lags) * period)} s)',
               {f'L={L}': m for L, m in zip(lags, meas)},
               {f'L={L}': e for L, e in zip(lags, exp_)}, {f'L={L}': t for L, t in zip(lags, tol)},
               f'2(σ² + q²/12) + Σ 2σ_gm²(1 − exp(−LΔ/τ)) for {terms}; {K_SIGMA:g}× std error '
               f'of the mean over {z.shape[0]} worlds', ok)


# ----------------------------------------------------------------- GNSS (SPEC §5, "Model GNSS")

GNSS_TYPE = 'fibril_sim/gnss'
GNSS_SUBSTEPS = (4, 40)  # physics ticks per solution period in the rig: the fewest in this
                         # range that make latency_s a whole number of ticks (else 20)
GNSS_DROP = ('outage_start_s', 'outage_end_s', 'faults', 'angular_velocity_sensor',
             'velocity_sensor')
E7_STEP_M = 0.0112      # 1e-7 degree of latitude, m (the geodetic output's resolution)
P_ONE_SIGMA = math.erf(1 / math.sqrt(2))   # P(|x| ≤ σ) of a normal error, 0.6827
NO_FIX_DOP = 99.99


def gnss_outage_window(period: float) -> tuple[float, float]:
  """The rig's own outage `(start, end)` s: half a period off the solution grid, ten
  solutions long (the user's outage times are a scenario, not a device property)."""
  return 10.5 * period, 20.5 * period


def gnss_substeps(period: float, latency: float) -> int:
  """Physics ticks per solution period: the fewest in `GNSS_SUBSTEPS` that resolve the
  configured latency exactly (20 when none does)."""
  lo, hi = GNSS_SUBSTEPS
  for k in range(lo, hi + 1):
    x = latency * k / period
    if abs(x - round(x)) < 1e-9:
      return k
  return 20


def gnss_rig(cfg: dict, overrides: dict) -> tuple[str, dict]:
  """Static GNSS rig: the antenna site at rest 1 m above the origin on a bench (hinge about
  the vertical through its centre of mass), timestep = solution period / `gnss_substeps`.

  Two copies of the device: `dut` with no outage (position / velocity noise, accuracy,
  timing) and `dut_outage` with the rig's outage window (fix / no-fix behaviour). Faults, the
  user's outages and the lever arm are removed (the antenna is the site)."""
  period = float(cfg['period_s'])
  dt = period / gnss_substeps(period, float(cfg.get('latency_s', 0.0)))
  xml = textwrap.dedent(f"""\
      <mujoco model="fibril_validate_gnss">
        <option timestep="{dt!r}" integrator="implicitfast" gravity="0 0 -{G!r}"/>
        <worldbody>
          <body name="bench" pos="0 0 1">
            <joint name="bench_yaw" type="hinge" axis="0 0 1"/>
            <geom type="box" size="0.05 0.05 0.01" mass="1" contype="0" conaffinity="0"/>
            <site name="s_nav"/>
          </body>
        </worldbody>
        <sensor>
          <velocimeter name="nav_vel" site="s_nav"/>
        </sensor>
      </mujoco>
      """)
  c = {k: v for k, v in dict(cfg, **overrides).items() if k not in GNSS_DROP}
  c['velocity_sensor'] = 'nav_vel'
  c['lever_arm_m'] = [0.0, 0.0, 0.0]
  start, end = gnss_outage_window(period)
  comps = [{'id': 'dut', 'type': GNSS_TYPE, 'config': dict(c)},
           {'id': 'dut_outage', 'type': GNSS_TYPE,
            'config': dict(c, outage_start_s=[start], outage_end_s=[end])}]
  return xml, {'fibril_manifest': 1, 'model': 'static.xml', 'components': comps}


def gnss_terms(cfg: dict, axis: str) -> list[tuple[float, float]]:
  """Configured Gauss–Markov terms `[(σ, τ), ...]` of one position error component
  (`axis` 'horizontal' or 'vertical'): the receiver's own error and the common mode."""
  terms = [(float(cfg.get(f'{axis}_error_stddev_m', 0.0)),
            float(cfg.get(f'{axis}_correlation_time_s', 0.0))),
           (float(cfg.get(f'common_mode_{axis}_stddev_m', 0.0)),
            float(cfg.get('common_mode_correlation_time_s', 0.0)))]
  return [(s, t) for s, t in terms if s > 0 and t > 0]


def gm_autocov(terms, lags_s) -> np.ndarray:
  """Autocovariance Σ σ²·exp(−|lag|/τ) of a sum of independent Gauss–Markov terms, m²."""
  lags = np.abs(np.asarray(lags_s, np.float64))
  return sum((s * s * np.exp(-lags / t) for s, t in terms), np.zeros_like(lags))


def _mean_var_of_correlated(cov_k: np.ndarray, n: int) -> float:
  """Variance of the mean of `n` samples of a stationary series with autocovariance
  `cov_k[k]`, k = 0 … n−1: (1/n²)·Σ_{i,j} cov(|i−j|)."""
  k = np.arange(n)
  w = np.where(k == 0, n, 2.0 * (n - k))
  return float(np.sum(w * cov_k[:n]) / n ** 2)


def _sq_error_se(terms, period, n, m) -> float:
  """Standard error of the mean squared error over `n` samples × `m` independent series of a
  zero-mean Gaussian process: Cov(e_t², e_s²) = 2·C(t − s)²."""
  c = gm_autocov(terms, np.arange(n) * period)
  return math.sqrt(_mean_var_of_correlated(2.0 * c ** 2, n) / max(m, 1))


def _series(e: np.ndarray) -> np.ndarray:
  """`(W, n, A)` → `(W·A, n)`: one independent series per world and axis."""
  return np.moveaxis(e, -1, 1).reshape(-1, e.shape[1])


def gnss_position_noise_check(axis: str, e: np.ndarray, cfg: dict, period: float) -> Check:
  """Std (about the known zero mean) of the position error `e` `(W, n, A)` vs the configured
  √(σ² + σ_cm² + q²/12); tolerance K standard errors of the pooled mean square of the
  correlated Gauss–Markov samples (SPEC §5, "Model GNSS"), via the delta method."""
  terms = gnss_terms(cfg, axis)
  q2 = E7_STEP_M ** 2 / 12.0 if axis == 'horizontal' else 0.0
  series = _series(e)
  n_ok = np.isfinite(series)
  meas = float(np.sqrt(np.nanmean(series ** 2)))
  expected = math.sqrt(sum(s * s for s, _ in terms) + q2)
  n = int(series.shape[1])
  if terms:
    se = _sq_error_se(terms, period, n, series.shape[0]) / (2 * expected)
    tol = K_SIGMA * se + E7_STEP_M
  else:
    tol = E7_STEP_M
  return Check(f'position_noise.{axis}', f'{axis} position error std (reported − truth, '
               f'{series.shape[0]} series of {n} solutions, static rig)', meas,
               {'stddev_m': [s for s, _ in terms], 'correlation_time_s': [t for _, t in terms],
                'sqrt(Σσ²+q²/12)': expected}, tol,
               f'{K_SIGMA:g}× std error of the pooled mean square of a Gauss–Markov process '
               f'(2·C(k)² summed over lags, {n_ok.sum()} samples) + the 1e-7° output step',
               abs(meas - expected) <= tol)


def gnss_correlation_lags(terms, period: float, n: int) -> list[int]:
  """Lags (solutions) for the correlation-time check: τ/4, τ/2, τ of the slowest term,
  keeping those with at least half the record left."""
  if not terms:
    return []
  tau = max(t for _, t in terms)
  return sorted({L for L in (round(tau / (4 * period)), round(tau / (2 * period)),
                             round(tau / period)) if 1 <= L <= n // 2})


def lag_correlation(series: np.ndarray, lag: int) -> tuple[float, float]:
  """Pooled autocorrelation ρ̂(L) = Σ e[t]·e[t+L] / Σ e[t]² (known zero mean, same t range)
  over independent series `(m, n)`, and its ratio-estimator standard error across series."""
  a = np.nan_to_num(series[:, lag:] * series[:, :-lag])
  b = np.nan_to_num(series[:, :-lag] ** 2)
  a_s, b_s = a.mean(axis=1), b.mean(axis=1)
  rho = float(a_s.sum() / max(b_s.sum(), 1e-300))
  m = len(a_s)
  se = math.sqrt(np.sum((a_s - rho * b_s) ** 2) / max(m * (m - 1), 1)) / max(b_s.mean(), 1e-300)
  return rho, se


def gnss_correlation_check(axis: str, e: np.ndarray, cfg: dict, period: float) -> Check:
  """Lag autocorrelation of the position error vs exp(−LΔ/τ) (the variance-weighted sum for
  several terms) at lags τ/4, τ/2, τ; tolerance K ratio-estimator standard errors across the
  independent series (worlds × axes)."""
  terms = gnss_terms(cfg, axis)
  series = _series(e)
  lags = gnss_correlation_lags(terms, period, series.shape[1])
  name = f'position_correlation.{axis}'
  quantity = f'{axis} position error autocorrelation at lags L·Δ'
  if not lags:
    return Check(name, quantity, None, {'terms': terms}, None, 'needs a configured '
                 'Gauss–Markov term and a record of at least 2·τ/4', None,
                 note='not resolvable: no Gauss–Markov term or record too short')
  c0 = gm_autocov(terms, [0.0])[0]
  meas, exp_, tol, tau_hat, ok = {}, {}, {}, {}, True
  for L in lags:
    rho, se = lag_correlation(series, L)
    key = f'{L * period:g}s'
    meas[key], exp_[key] = rho, float(gm_autocov(terms, [L * period])[0] / c0)
    tol[key] = K_SIGMA * se
    tau_hat[key] = -L * period / math.log(rho) if 0 < rho < 1 else float('nan')
    ok &= abs(rho - exp_[key]) <= tol[key]
  return Check(name, quantity, meas, exp_, tol,
               f'ρ(L) = Σσ²·exp(−LΔ/τ)/Σσ² for {terms} (σ, τ s); {K_SIGMA:g}× ratio-estimator '
               f'std error over {series.shape[0]} independent series', ok,
               note=f'equivalent τ = −LΔ/ln ρ̂: {_fmt_any(tau_hat)} s')


def gnss_velocity_checks(ev: np.ndarray, e: np.ndarray, cfg: dict) -> list[Check]:
  """Velocity error `ev` `(W, n, 3)`: std per horizontal / vertical vs the configured white
  σ (K·σ/√(2N)), lag-1 whiteness and independence of the position error `e` (correlation of
  the velocity error with the position error and with its increment, |r| ≤ K/√N): the
  receiver measures Doppler, not the derivative of its position (SPEC §5)."""
  checks = []
  for axis, sl, f in (('horizontal', slice(0, 2), 'horizontal_velocity_noise_stddev_m_s'),
                      ('vertical', slice(2, 3), 'vertical_velocity_noise_stddev_m_s')):
    sig = float(cfg.get(f, 0.0))
    x = ev[..., sl]
    n = int(np.isfinite(x).sum())
    meas = float(np.sqrt(np.nanmean(x ** 2)))
    tol = K_SIGMA * sig / math.sqrt(2.0 * max(n, 1)) + 1e-6
    checks.append(Check(f'velocity_noise.{axis}', f'{axis} velocity error std (static rig)',
                        meas, sig, tol, f'{K_SIGMA:g}·σ/√(2N), N = {n} (white, known zero '
                        'mean) + 1e-6 m/s float rounding', abs(meas - sig) <= tol))
  s = _series(ev)
  n = int(np.isfinite(s).sum())
  on = any(float(cfg.get(f, 0.0)) > 0 for f in ('horizontal_velocity_noise_stddev_m_s',
                                                 'vertical_velocity_noise_stddev_m_s'))
  tol_r = K_SIGMA / math.sqrt(max(n, 1))
  rho1, _ = lag_correlation(s, 1)
  p = _series(e)
  dp = np.diff(p, axis=1)
  r_pos = _corr(s, p)
  r_inc = _corr(s[:, 1:], dp)
  checks.append(Check('velocity_noise.whiteness', 'lag-1 autocorrelation of the velocity error',
                      rho1, 0.0, tol_r, f'white: |ρ₁| ≤ {K_SIGMA:g}/√N, N = {n}',
                      abs(rho1) <= tol_r if on else None,
                      note='' if on else 'no velocity noise configured'))
  checks.append(Check('velocity_noise.independence', 'correlation of the velocity error with '
                      'the position error and with its increment (same axis)',
                      {'position_error': r_pos, 'position_increment': r_inc}, 0.0, tol_r,
                      f'independent: |r| ≤ {K_SIGMA:g}/√N, N = {n}',
                      max(abs(r_pos), abs(r_inc)) <= tol_r if on else None,
                      note='' if on else 'no velocity noise configured'))
  return checks


def _corr(a: np.ndarray, b: np.ndarray) -> float:
  """Correlation Σab / √(Σa²·Σb²) over finite pairs (zero-mean series)."""
  ok = np.isfinite(a) & np.isfinite(b)
  a, b = np.where(ok, a, 0.0), np.where(ok, b, 0.0)
  return float(np.sum(a * b) / max(math.sqrt(np.sum(a * a) * np.sum(b * b)), 1e-300))


def indicator_cov(r: np.ndarray, p: float = P_ONE_SIGMA) -> np.ndarray:
  """Cov(1{|X| ≤ 1}, 1{|Y| ≤ 1}) of standard normals with correlation `r` (Gauss–Legendre
  quadrature of P(|X| ≤ 1, |Y| ≤ 1) = ∫₋₁¹ φ(x)·[Φ((1 − r·x)/s) − Φ((−1 − r·x)/s)] dx,
  s = √(1 − r²))."""
  from scipy.special import ndtr
  x, w = np.polynomial.legendre.leggauss(64)
  r = np.asarray(r, np.float64)[..., None]
  s = np.sqrt(np.maximum(1 - r * r, 1e-24))
  phi = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
  both = np.sum(w * phi * (ndtr((1 - r * x) / s) - ndtr((-1 - r * x) / s)), axis=-1)
  return both - p * p


def fraction_tolerance(rho_k: np.ndarray, n: int, m: int) -> tuple[float, float]:
  """`(tolerance, N_eff)` of the fraction of errors within their 1σ: K binomial standard
  errors √(p(1−p)/N_eff), with N_eff of `m` independent series of `n` samples whose
  correlation at lag k is `rho_k[k]` (N_eff = m·n for white errors)."""
  p = P_ONE_SIGMA
  var = _mean_var_of_correlated(indicator_cov(rho_k[:n]), n) / max(m, 1)
  n_eff = p * (1 - p) / max(var, 1e-300)
  return K_SIGMA * math.sqrt(p * (1 - p) / n_eff), n_eff


def gnss_accuracy_checks(sol: dict, cfg: dict, period: float) -> list[Check]:
  """Reported quality with a fix (SPEC §5, "Covariance i raportowana jakość"): the reported 1σ
  equal to the configured √(σ² + σ_cm²) (σ_vh for speed), and the fraction of error components
  within the reported 1σ ≈ 68.3 % within K binomial standard errors of the effective sample
  size (the Gauss–Markov samples are correlated; the velocity errors are white)."""
  fixed = sol['fix_type'] == 3
  conf = {'horizontal': math.sqrt(sum(s * s for s, _ in gnss_terms(cfg, 'horizontal'))),
          'vertical': math.sqrt(sum(s * s for s, _ in gnss_terms(cfg, 'vertical'))),
          'speed': float(cfg.get('horizontal_velocity_noise_stddev_m_s', 0.0))}
  reported = {k: sol[f] for k, f in (('horizontal', 'horizontal_accuracy_m'),
                                    ('vertical', 'vertical_accuracy_m'),
                                    ('speed', 'speed_accuracy_m_s'))}
  rep_vals = {k: np.unique(v[fixed]).tolist()[:5] for k, v in reported.items()}
  ok_rep = all(np.all(np.abs(v[fixed] - conf[k]) <= 1e-6 * max(conf[k], 1.0))
               for k, v in reported.items())
  checks = [Check('accuracy_reported', 'reported 1σ with a fix (distinct values)', rep_vals,
                  conf, '1e-6 relative (float32)', 'horizontal/vertical = √(σ² + σ_cm²) per '
                  'component, speed = σ_vh per horizontal component', ok_rep)]
  n = sol['fix_type'].shape[1]
  parts = (('horizontal', sol['position_error_m'][..., :2], reported['horizontal'][..., None]),
           ('vertical', sol['position_error_m'][..., 2:], reported['vertical'][..., None]),
           ('speed', sol['velocity_error_m_s'][..., :2], reported['speed'][..., None]))
  for axis, err, acc in parts:
    ok = np.isfinite(err) & fixed[..., None] & (acc > 0)
    inside = np.abs(err) <= acc
    frac = float(np.sum(inside & ok) / max(ok.sum(), 1))
    m = err.shape[0] * err.shape[2]
    if axis == 'speed':
      rho_k = np.r_[1.0, np.zeros(n - 1)]
    else:
      terms = gnss_terms(cfg, axis)
      c = gm_autocov(terms, np.arange(n) * period)
      rho_k = c / c[0] if terms else np.r_[1.0, np.zeros(n - 1)]
    tol, n_eff = fraction_tolerance(rho_k, n, m)
    resolvable = conf[axis] > 0 and ok.sum() > 0
    checks.append(Check(f'accuracy_consistency.{axis}', f'fraction of {axis} error components '
                        'within the reported 1σ', frac, P_ONE_SIGMA, tol,
                        f'{K_SIGMA:g}× binomial std error, effective N = {n_eff:.0f} of '
                        f'{int(ok.sum())} correlated samples ({m} independent series)',
                        abs(frac - P_ONE_SIGMA) <= tol if resolvable else None,
                        note='' if resolvable else 'no error term configured'))
  return checks


def gnss_fix_check(sol_noise: dict, sol: dict, cfg: dict, dt: float) -> Check:
  """Fix / no-fix consistency: with the rig's outage [a, b) and `reacquisition_s` r, a
  solution sampled in [a, b + r) has `fix_type` 0, the last fixed position and velocity,
  `satellites_no_fix`, DOP 99.99 and every accuracy `no_fix_accuracy_m`; every other solution
  (and every solution of the outage-free copy) is a 3D fix with the configured satellites and
  DOP. Solutions within half a tick of a window edge are not judged."""
  a, b = gnss_outage_window(float(cfg['period_s']))
  r = float(cfg.get('reacquisition_s', 0.0))
  t = sol['sample_tick'] * dt
  got = np.isfinite(t)
  edge = (np.abs(t - a) <= 0.5 * dt) | (np.abs(t - (b + r)) <= 0.5 * dt)
  want_none = got & ~edge & (t >= a) & (t < b + r)
  want_fix = got & ~edge & ~want_none
  fix_ok = (sol['fix_type'] == 3) & (sol['satellites'] == int(cfg.get('satellites', 12))) & \
      np.isclose(sol['hdop'], float(cfg.get('hdop', 0.9)), rtol=1e-6) & \
      np.isclose(sol['vdop'], float(cfg.get('vdop', 1.3)), rtol=1e-6)
  big = float(cfg.get('no_fix_accuracy_m', 9999.0))
  held = _held_last_fix(sol)
  none_ok = (sol['fix_type'] == 0) & (sol['satellites'] == int(cfg.get('satellites_no_fix', 0))) \
      & np.isclose(sol['hdop'], NO_FIX_DOP) & np.isclose(sol['vdop'], NO_FIX_DOP) & held
  for f in ('horizontal_accuracy_m', 'vertical_accuracy_m', 'speed_accuracy_m_s'):
    none_ok &= np.isclose(sol[f], big, rtol=1e-6)
  noise_fixed = np.isfinite(sol_noise['fix_type'])
  noise_ok = int(np.sum(sol_noise['fix_type'][noise_fixed] == 3))
  bad_fix = int(np.sum(want_fix & ~fix_ok))
  bad_none = int(np.sum(want_none & ~none_ok))
  bad_noise = int(noise_fixed.sum()) - noise_ok
  first = t[got & (sol['fix_type'] == 3) & (t >= b)]
  measured = {'fixed as expected': f'{int(np.sum(want_fix & fix_ok))}/{int(want_fix.sum())}',
              'no-fix as expected': f'{int(np.sum(want_none & none_ok))}/{int(want_none.sum())}',
              'outage-free copy fixed': f'{noise_ok}/{int(noise_fixed.sum())}',
              'first fix after the outage end [s]': float(first.min()) if first.size else None}
  return Check('fix_consistency', 'fix type, satellites, DOP, accuracy and held position in '
               'and out of an outage', measured,
               {'outage (rig)': [a, b], 'reacquisition_s': r, 'no_fix_accuracy_m': big,
                'satellites / no fix': [int(cfg.get('satellites', 12)),
                                        int(cfg.get('satellites_no_fix', 0))]},
               'every solution', f'no fix for samples in [{a:g}, {b + r:g}) s (outage end + '
               'reacquisition), a 3D fix elsewhere; never a no-fix with a fix accuracy',
               bad_fix == 0 and bad_none == 0 and bad_noise == 0 and want_none.sum() > 0)


def _held_last_fix(sol: dict) -> np.ndarray:
  """`(W, n)` bool: each solution's position / velocity equals the last fixed solution's
  before it (True where there is none before it)."""
  fields = ('latitude_e7', 'longitude_e7', 'height_m', 'velocity_enu_m_s')
  fixed = sol['fix_type'] == 3
  n = fixed.shape[1]
  idx = np.where(fixed, np.arange(n), -1)
  last = np.maximum.accumulate(np.concatenate([np.full((fixed.shape[0], 1), -1),
                                               idx[:, :-1]], axis=1), axis=1)
  ok = np.ones(fixed.shape, bool)
  pick = np.clip(last, 0, None)
  for f in fields:
    v = sol[f]
    prev = np.take_along_axis(v, pick.reshape(pick.shape + (1,) * (v.ndim - 2)), axis=1)
    same = np.all((v == prev).reshape(v.shape[:2] + (-1,)), axis=-1)
    ok &= same | (last < 0)
  return ok


def _gnss_collect(sim, params, keys, n_ticks, seg, n_acq, origin) -> dict:
  """Runs the rig in segments; per component `{field: (W, n_acq, ...)}` float64 of the
  delivered solutions by sequence number (NaN where not delivered), with `sample_tick`,
  `arrival_tick`, the ENU position error (geodetic output converted back on the host,
  `fibril_mjx.geodesy`, minus the true antenna) and the velocity error."""
  import jax

  from fibril_mjx import geodesy
  state = sim.reset(params, keys)
  out = {}

  def take(sensor, truth):
    for cid, d in sensor.items():
      new = np.asarray(d.new_data).astype(bool)
      seq = np.asarray(d.sequence)
      w, t = np.nonzero(new & (seq >= 0) & (seq < n_acq))
      rows = {f: np.asarray(v) for f, v in d.sample._asdict().items()}
      rows['sample_tick'] = np.asarray(d.sample_tick)
      rows['arrival_tick'] = np.asarray(d.arrival_tick)
      for f in ('antenna_position_m', 'antenna_velocity_m_s'):
        rows[f] = np.asarray(truth[cid][f])
      c = out.setdefault(cid, {f: np.full((new.shape[0], n_acq) + v.shape[2:], np.nan)
                               for f, v in rows.items()})
      for f, v in rows.items():
        c[f][w, seq[w, t]] = v[w, t]

  first = jax.tree.map(lambda x: np.asarray(x)[:, None], sim.outputs(state))
  take(first['sensor'], first['truth'])
  done = 0
  while done < n_ticks:
    state, outs = sim.run(params, state, seg, record=True, observe_truth=True)
    outs = jax.tree.map(lambda x: np.swapaxes(np.asarray(x), 0, 1), outs)
    take(outs['sensor'], outs['truth'])
    done += seg
  for c in out.values():
    enu = geodesy.geodetic_e7_to_enu(origin, c['latitude_e7'], c['longitude_e7'], c['height_m'])
    c['position_error_m'] = enu - c['antenna_position_m']
    c['velocity_error_m_s'] = c['velocity_enu_m_s'] - c['antenna_velocity_m_s']
  return out


def _timing_view(sol: dict):
  """A Delivered-like view `(W, n_acq)` of collected solutions for `_timing`."""
  import types
  got = np.isfinite(sol['sample_tick'])
  as_int = lambda a: np.where(got, a, -1).astype(np.int64)  # noqa: E731
  return types.SimpleNamespace(new_data=got, sample_tick=as_int(sol['sample_tick']),
                               arrival_tick=as_int(sol['arrival_tick']),
                               sequence=np.broadcast_to(np.arange(got.shape[1]), got.shape))


def gnss_checks(noise: dict, outage: dict, cfg: dict, dt: float, fig_dir) -> list[Check]:
  """Every GNSS check from the collected solutions of the two rig copies."""
  import types
  period = float(cfg['period_s'])
  e = noise['position_error_m']
  checks = [gnss_position_noise_check('horizontal', e[..., :2], cfg, period),
            gnss_position_noise_check('vertical', e[..., 2:], cfg, period),
            gnss_correlation_check('horizontal', e[..., :2], cfg, period),
            gnss_correlation_check('vertical', e[..., 2:], cfg, period)]
  checks += gnss_velocity_checks(noise['velocity_error_m_s'], e, cfg)
  checks += gnss_accuracy_checks(noise, cfg, period)
  checks.append(gnss_fix_check(noise, outage, cfg, dt))
  dev = types.SimpleNamespace(period_s=period, phase_s=float(cfg.get('phase_s', 0.0)),
                              latency_s=float(cfg.get('latency_s', 0.0)),
                              jitter_s=float(cfg.get('jitter_s', 0.0)),
                              loss_probability=float(cfg.get('loss_probability', 0.0)))
  checks += _timing(dev, dt, {'dut': _timing_view(noise), 'dut_outage': _timing_view(outage)},
                    fig_dir)
  return checks


def run_gnss(manifest_path, component, cfg, out, *, static_duration_s, worlds, seed, perturb,
             progress, t0) -> dict:
  """`validate` for `fibril_sim/gnss`: the static GNSS rig (`gnss_rig`, `gnss_checks`)."""
  import types

  import fibril_mjx
  from fibril_mjx import geodesy
  out = pathlib.Path(out)
  with _staged_output(out) as tmp:
    rigs = tmp / 'rigs'
    xml, doc = gnss_rig(cfg, perturb)
    sim = fibril_mjx.load(_write_rig(rigs, 'static', xml, doc))
    period = float(cfg['period_s'])
    dt = sim.dt
    n_acq = int(round(static_duration_s / period))
    lat_ticks = int(math.ceil((float(cfg.get('latency_s', 0.0)) + 6 * float(
        cfg.get('jitter_s', 0.0))) / dt)) + 1
    k = int(round(period / dt))
    n_ticks = (n_acq + 1) * k + lat_ticks
    n_seg = int(math.ceil(n_ticks / 5000))
    seg = int(math.ceil(n_ticks / n_seg))
    progress(f'static GNSS rig: 2 receivers x {worlds} worlds x {n_seg * seg} ticks '
             f'(dt {dt:g} s, {n_acq} solutions)')
    origin = geodesy.Origin.build(float(cfg['origin_latitude_deg']),
                                  float(cfg['origin_longitude_deg']),
                                  float(cfg.get('origin_height_m', 0.0)))
    sols = _gnss_collect(sim, sim.default_params(worlds), fibril_mjx.world_keys(seed, worlds),
                         n_seg * seg, seg, n_acq, origin)
    progress(f'  simulated ({time.time() - t0:.0f} s); analysing')
    checks = gnss_checks(sols['dut'], sols['dut_outage'], cfg, dt, tmp)
    dev = types.SimpleNamespace(type=GNSS_TYPE, config=cfg)
    summary = _summary(manifest_path, component, dev, checks, perturb, static_duration_s,
                       worlds, seed, time.time() - t0)
    _write_summary(tmp, summary)
  return summary
