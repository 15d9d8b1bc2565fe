"""The temperature sweep of `fibril-mjx validate` for a `fibril_sim/imu` with a thermal model
(`components/sensors/thermal.py`): a chamber test — soak at each set-point, then record.

Rig: one static pose (z up, so the accelerometer holds +g on z) under an ambient staircase at
`T_ref + (−20, −10, 0, +10, +20)` °C; each plateau is a soak of `10 τ` (the sensor's lag then
leaves less than `e^−10 ≈ 5e−5` of a 10 K step) followed by a record of `window_s`. Per world
and axis, the plateau means are fitted by least squares to `c0 + k1' ΔT + k2 ΔT²` with
`ΔT = set-point − T_ref` (the chamber set-point, as a lab would after soaking). At rest the
thermal scale multiplies the static input `x = G·(0, 0, g)` (zero for the gyro), so the linear
coefficient measured is `k1' = k1 + ks·x`. Tolerance: 4 standard errors of the pooled
estimate (the regression covariance of plateau means whose variance is the configured white
noise over the window plus q²/12, and σ_gm² + K²·T for slow bias processes, over the worlds) plus
float32 rounding.

| check | compares |
| --- | --- |
| `thermal.<channel>.k1` | fitted linear coefficient per axis with `k1 + ks·x` |
| `thermal.<channel>.k2` | fitted quadratic coefficient per axis with `k2` |
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fibril_mjx.workflows.validate.common import G, K_SIGMA, bench_xml, Check

LEVELS_K = (-20.0, -10.0, 0.0, 10.0, 20.0)
CHANNELS = ('angular_velocity', 'linear_acceleration')
UNITS = {'angular_velocity': 'rad/s', 'linear_acceleration': 'm/s²'}


def has_thermal(cfg: dict) -> bool:
  """Whether a resolved IMU config sets any thermal coefficient."""
  return any(np.any(np.asarray(cfg.get(f'{ch}_{c}', (0, 0, 0)), np.float64) != 0)
             for ch in CHANNELS for c in ('bias_temperature_k1', 'bias_temperature_k2',
                                          'scale_temperature_k1'))


def neutral_ambient(cfg: dict) -> dict:
  """Overrides that hold the ambient at T_ref (the other rigs then see no thermal term)."""
  if 'ambient_temperature_c' not in cfg:
    return {}
  return {'ambient_temperature_time_s': [0.0],
          'ambient_temperature_c': [float(cfg.get('reference_temperature_c', 25.0))]}


@dataclasses.dataclass
class SweepPlan:
  t_ref: float
  tau: float
  soak_s: float
  window_s: float
  period_s: float
  starts_s: tuple      # plateau start times
  n_ticks: int

  @property
  def plateau_s(self) -> float:
    return self.soak_s + self.window_s


def sweep_plan(cfg: dict, period_s: float, window_s: float) -> SweepPlan:
  tau = float(cfg.get('temperature_time_constant_s', 0.0))
  soak = max(10.0 * tau, 50 * period_s)
  window = max(float(window_s), 200 * period_s)
  starts = tuple(i * (soak + window) for i in range(len(LEVELS_K)))
  n_ticks = int(math.ceil((starts[-1] + soak + window) / period_s)) + 2
  return SweepPlan(float(cfg.get('reference_temperature_c', 25.0)), tau, soak, window,
                   period_s, starts, n_ticks)


def sweep_rig(cfg: dict, plan: SweepPlan, overrides: dict) -> tuple[str, dict]:
  """The MJCF and manifest of the sweep (timestep = the output period)."""
  xml = bench_xml('fibril_validate_thermal', plan.period_s, '<site name="s_pz"/>',
                  sensors='<gyro name="g_pz" site="s_pz"/>\n'
                          '<accelerometer name="a_pz" site="s_pz"/>')
  times, temps = [], []
  eps = plan.period_s / 2
  for s, lvl in zip(plan.starts_s, LEVELS_K):
    times += [s, s + plan.plateau_s - eps]
    temps += [plan.t_ref + lvl] * 2
  c = dict(cfg)
  if c.get('vibration_joint'):   # the rotor has its own rig (workflows/validate/vibration.py)
    c['vibration_joint'] = ''
  c.update({'ambient_temperature_time_s': times, 'ambient_temperature_c': temps})
  c.update(overrides)
  c.update({'gyroscope_sensor': 'g_pz', 'accelerometer_sensor': 'a_pz'})
  return xml, {'fibril_manifest': 1, 'model': 'thermal.xml',
               'components': [{'id': 'pz', 'type': 'fibril_sim/imu', 'config': c}]}


def _vec(cfg, name):
  return np.asarray(cfg.get(name, (0.0, 0.0, 0.0)), np.float64).reshape(3)


def sweep_checks(dev, cfg: dict, plan: SweepPlan, samples: dict) -> list[Check]:
  """Checks from `samples = {field: (W, n_acq, 3)}` indexed by acquisition number."""
  n_acq = samples['angular_velocity'].shape[1]
  t = dev.phase_s + np.arange(n_acq) * plan.period_s
  dT = np.asarray(LEVELS_K)
  X = np.stack([np.ones_like(dT), dT, dT ** 2], -1)
  xtx_inv = np.linalg.inv(X.T @ X)
  checks = []
  for ch_name in CHANNELS:
    ch = dev.channels[ch_name]
    v = samples[ch_name]
    w_ = v.shape[0]
    means, counts = [], []
    for s in plan.starts_s:
      m = (t >= s + plan.soak_s) & (t < s + plan.plateau_s - plan.period_s)
      means.append(np.nanmean(v[:, m], axis=1))
      counts.append(int(m.sum()))
    y = np.stack(means, 1)                                    # (W, levels, 3)
    beta = np.einsum('kl,wla->wka', xtx_inv @ X.T, y)         # (W, 3 coeffs, 3 axes)
    n_w = min(counts)
    var_mean = ch.white_sigma ** 2 / n_w + ch.resolution ** 2 / 12 / n_w
    slow = np.array([sum(s ** 2 for s, _ in ch.ar1[i]) for i in range(3)])
    var_mean = var_mean + slow + ch.random_walk ** 2 * plan.n_ticks * plan.period_s
    x = ch.gain @ (np.array([0.0, 0.0, G]) if ch_name == 'linear_acceleration' else np.zeros(3))
    want = {'k1': _vec(cfg, f'{ch_name}_bias_temperature_k1')
            + _vec(cfg, f'{ch_name}_scale_temperature_k1') * x,
            'k2': _vec(cfg, f'{ch_name}_bias_temperature_k2')}
    for j, k in ((1, 'k1'), (2, 'k2')):
      est = beta[:, j].mean(0)
      se = np.sqrt(xtx_inv[j, j] * var_mean / w_)
      tol = K_SIGMA * se + 1e-6 * (np.abs(want[k]) + np.abs(x) / 20 ** j + 1e-7)
      ok = bool(np.all(np.abs(est - want[k]) <= tol))
      unit = f'{UNITS[ch_name]}/K' + ('²' if j == 2 else '')
      checks.append(Check(
          f'thermal.{ch_name}.{k}', f'bias temperature coefficient {k} [{unit}]'
          + (' (k1 + ks·x at rest)' if j == 1 else ''), est, want[k], tol,
          f'{K_SIGMA:g}× std error: least squares over {len(LEVELS_K)} soaked set-points '
          f'(soak {plan.soak_s:g} s = 10τ, record {plan.window_s:g} s, {n_w} samples each), '
          f'{w_} worlds; + float32', ok))
  return checks
