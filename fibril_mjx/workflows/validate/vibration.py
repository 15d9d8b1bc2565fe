"""The rotor-vibration check of `fibril-mjx validate` for a `fibril_sim/imu` with a vibration
term (`components/sensors/vibration.py`): line amplitudes at a known rotor speed.

Rig: the device on a static bench (z up) and, apart from it, a rotor on a hinge joint named as
the device's `vibration_joint`, held by a velocity servo at `vibration_reference_speed_rad_s`
(so `s(ω) = 1`); timestep = the output period. After a settling time the record is fitted per
world and axis by least squares to a constant plus a cosine and a sine at each line frequency
`order_k · ω / 2π` (the rig's known speed); the complex line phasors are averaged over the
worlds (the rotor angle is the same in every world) and their magnitudes compared with the
configured line `|G · (g ∘ A_k ∘ e^{iφ_k})|` per axis, times the configured low-pass response at
that frequency (`G` the channel's gain, `g` the transmission gain). Tolerance: 4 standard errors
of the averaged phasor, `√(S(f)·2/n)/√W` (n samples, W worlds), with `S(f)` the configured
noise's spectral density at the line frequency in per-sample units (white noise σ² → σ²), from
the configuration, not the fit's residual: the broadband floor through `g`, `G` and the low-pass
`|H(f)|²`, the white noise (through `|H(f)|²` with `noise_before_filter`), AR(1) terms
`σ²(1−φ²)/|1−φe^{−iω}|²`, the random walk `K²Δ/(4 sin²(ω/2))` and the LSB `q²/12`
(ω = 2πfΔ); plus float32 rounding. A line above the output Nyquist frequency is not resolvable
(n/a). The other rigs run without the vibration term (`neutral`).

| check | compares |
| --- | --- |
| `vibration.<channel>.line<k>` | fitted amplitude per axis of line k with the configured one |
"""

from __future__ import annotations

import math

import numpy as np

from fibril_mjx.workflows.validate import thermal
from fibril_mjx.workflows.validate.common import K_SIGMA, Check, Scene, bench_xml

CHANNELS = ('angular_velocity', 'linear_acceleration')
UNITS = {'angular_velocity': 'rad/s', 'linear_acceleration': 'm/s²'}
SETTLE_S = 0.5
ROTOR = 'fibril_validate_rotor'


def has_vibration(cfg: dict) -> bool:
  """Whether a resolved IMU config has line amplitudes to check."""
  return bool(cfg.get('vibration_joint')) and any(
      np.any(np.asarray(cfg.get(f'{ch}_vibration_amplitude') or [], np.float64) != 0)
      for ch in CHANNELS)


def neutral(cfg: dict) -> dict:
  """Overrides that switch the vibration term off (the other rigs have no rotor)."""
  return {'vibration_joint': ''} if cfg.get('vibration_joint') else {}


def n_ticks(period_s: float, window_s: float) -> int:
  return int(math.ceil((SETTLE_S + max(window_s, 1.0)) / period_s)) + 1


def rig(cfg: dict, period_s: float, overrides: dict) -> tuple[str, dict]:
  """The MJCF and manifest of the rotor rig."""
  joint = cfg['vibration_joint']
  rotor = (f'<body name="{ROTOR}" pos="0.4 0 0.2"><joint name="{joint}" type="hinge" '
           'axis="1 0 0"/><geom type="cylinder" size="0.06 0.004" euler="0 90 0" mass="0.1" '
           'contype="0" conaffinity="0"/></body>')
  xml = bench_xml('fibril_validate_vibration', period_s, '<site name="s_pz"/>',
                  sensors='<gyro name="g_pz" site="s_pz"/>\n'
                          '<accelerometer name="a_pz" site="s_pz"/>', scene=Scene(world=rotor))
  xml = xml.replace('</mujoco>', f'  <actuator>\n    <velocity name="{ROTOR}_motor" '
                    f'joint="{joint}" kv="0.05"/>\n  </actuator>\n</mujoco>')
  c = dict(cfg)
  c.update(thermal.neutral_ambient(cfg))   # the thermal sweep has its own rig
  c.update(overrides)
  c.update({'gyroscope_sensor': 'g_pz', 'accelerometer_sensor': 'a_pz'})
  omega = float(cfg.get('vibration_reference_speed_rad_s', 1.0))
  script = {'actuator': f'{ROTOR}_motor', 'waveform': 'sine', 'amplitude': 0.0,
            'offset': omega}
  return xml, {'fibril_manifest': 1, 'model': 'vibration.xml', 'actuator_script': [script],
               'components': [{'id': 'pz', 'type': 'fibril_sim/imu', 'config': c}]}


def _rows(cfg, name, k):
  v = cfg.get(name) or []
  return np.asarray(v, np.float64).reshape(-1, 3) if len(v) else np.zeros((k, 3))


def checks(dev, cfg: dict, samples: dict, h_expected) -> list[Check]:
  """Checks from `samples = {channel: (W, n_acq, 3)}` indexed by acquisition number.

  Args:
    h_expected: `(channel, f) -> complex` response of the configured low-pass.
  """
  omega = float(cfg.get('vibration_reference_speed_rad_s', 1.0))
  orders = np.asarray(cfg.get('vibration_orders') or [], np.float64)
  freqs = orders * omega / (2 * math.pi)
  fs = 1.0 / dev.period_s
  phase = _rows(cfg, 'vibration_phase_rad', orders.size)
  g = np.asarray(cfg.get('vibration_transmission_gain', (1.0, 1.0, 1.0)), np.float64)
  out = []
  for ch in CHANNELS:
    amp = _rows(cfg, f'{ch}_vibration_amplitude', orders.size)
    if not np.any(amp != 0):
      continue
    v = samples[ch]
    n_acq = v.shape[1]
    t = dev.phase_s + np.arange(n_acq) * dev.period_s
    keep = (t >= SETTLE_S) & np.all(np.isfinite(v), axis=(0, 2))
    x, tk = v[:, keep], t[keep]
    ok_f = freqs < 0.5 * fs * (1 - 1e-6)
    cols = [np.ones_like(tk)]
    for f in freqs[ok_f]:
      cols += [np.cos(2 * np.pi * f * tk), np.sin(2 * np.pi * f * tk)]
    X = np.stack(cols, -1)
    beta, *_ = np.linalg.lstsq(X, x.transpose(1, 0, 2).reshape(tk.size, -1), rcond=None)
    res = x.transpose(1, 0, 2).reshape(tk.size, -1) - X @ beta
    w_n, n = x.shape[0], tk.size
    sigma = res.std(axis=0).reshape(w_n, 3)
    beta = beta.reshape(X.shape[1], w_n, 3)
    gain = dev.channels[ch].gain
    j = 0
    for k, f in enumerate(freqs):
      name = f'vibration.{ch}.line{k}'
      quantity = (f'amplitude of line {k} (order {orders[k]:g}, {f:.6g} Hz) per axis '
                  f'[{UNITS[ch]}]')
      c = g * amp[k] * np.exp(1j * phase[k])                    # sine-basis phasor, input
      want = np.abs(gain @ c) * np.abs(h_expected(ch, f))
      if not ok_f[k]:
        out.append(Check(name, quantity, None, want, None, f'above the output Nyquist '
                         f'frequency {fs / 2:g} Hz: not resolvable', None))
        continue
      # a·cos + b·sin = A·sin(2πft + φ): the phasor b + i·a, averaged over the worlds
      ph = (beta[2 + 2 * j] + 1j * beta[1 + 2 * j]).mean(0)
      j += 1
      se = np.sqrt(2.0 / n * noise_psd(dev, cfg, ch, f, h_expected)) / math.sqrt(w_n)
      tol = K_SIGMA * se + 1e-6 * want + 1e-7 * np.abs(beta[0]).mean(0)
      meas = np.abs(ph)
      out.append(Check(name, quantity, meas, want, tol,
                       f'{K_SIGMA:g}× std error of the world-averaged phasor from the '
                       f'configured noise at the line (fit residual std '
                       f'{_fmt3(sigma.mean(0))}), {n} samples, {w_n} worlds) + float32; '
                       f'rotor held at ω_ref = {omega:g} rad/s',
                       bool(np.all(np.abs(meas - want) <= tol))))
  return out


def noise_psd(dev, cfg: dict, ch: str, f: float, h_expected) -> np.ndarray:
  """Configured noise density of channel `ch` at `f` Hz, per axis `(3,)`, in per-sample units
  (white noise of per-sample std σ gives σ²): floor, white noise, AR(1), random walk, LSB
  (module docstring)."""
  c = dev.channels[ch]
  dt = dev.period_s
  w = 2 * math.pi * f * dt
  h2 = abs(h_expected(ch, f)) ** 2
  g = np.asarray(cfg.get('vibration_transmission_gain', (1.0, 1.0, 1.0)), np.float64)
  floor = g * np.asarray(cfg.get(f'{ch}_vibration_floor_stddev') or (0.0, 0.0, 0.0),
                         np.float64)
  s = (c.gain ** 2) @ (floor ** 2) * h2
  s = s + c.white_sigma ** 2 * (h2 if cfg.get('noise_before_filter') else 1.0)
  for i in range(3):
    for sig, phi in c.ar1[i]:
      s[i] += sig ** 2 * (1 - phi ** 2) / abs(1 - phi * np.exp(-1j * w)) ** 2
  s = s + c.random_walk ** 2 * dt / max(4 * math.sin(w / 2) ** 2, 1e-30)
  return s + c.resolution ** 2 / 12.0


def _fmt3(v) -> str:
  return '[' + ', '.join(f'{x:.3g}' for x in v) + ']'
