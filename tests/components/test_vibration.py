"""Rotor vibration at the IMU (`components/sensors/vibration.py`), `manifests/imu_vibration.yaml`.

Reference, float64 NumPy / SciPy, written here: with the rotor at its commanded speed ω, line k
of axis a is a sinusoid at `order_k · ω / 2π` Hz of amplitude `g_a · (ω/ω_ref)² · A[k, a]`
(least-squares phasor at the known frequency, standard error `σ·√(2/n)` from the configured
noise budget); a SciPy notch (`iirnotch` at the blade-pass frequency, applied forward-backward)
removes that line, keeps the shaft line at `|H(f)|²` of its amplitude, and leaves the broadband
floor, whose one-sided PSD `2σ²/f_s` (white: vibration floor, white noise density, LSB) is
compared with a Welch estimate within its sampling error. World 1 halves ω_ref² (per-world
Params), which must double every line.
"""

from __future__ import annotations

import math
import pathlib

import jax
import numpy as np
import pytest
from scipy import signal as sps

import fibril_mjx
from fibril_mjx.analysis.common import flatten

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = REPO / 'manifests' / 'imu_vibration.yaml'
N_TICKS = 2400
SETTLE = 400       # samples dropped (servo spin-up)
K = 4.0


@pytest.fixture(scope='module')
def run():
  sim = fibril_mjx.load(MANIFEST)
  c = sim.components['imu']
  params = sim.default_params(2)
  ref = np.array(c.get_param(params['imu'], 'vibration_reference_speed_rad_s'))
  ref[1] = ref[1] / math.sqrt(2.0)                    # world 1: lines × 2
  params['imu'] = c.set_param(params['imu'], 'vibration_reference_speed_rad_s', ref)
  final, trace, _ = sim.rollout(params, fibril_mjx.world_keys(0, 2), N_TICKS)
  dof = sim.mj_model.joint(c.vibration.probe.joint).dofadr[0]
  omega = np.asarray(final.data.qvel)[..., dof]
  # shared physics (a sensor-only Monte Carlo) has no world axis
  return sim, c, flatten(jax.device_get(trace)), np.broadcast_to(omega, (2,)), ref


def _samples(z, ch, w):
  new = z['sensor/imu/new_data'][w] & z['sensor/imu/valid'][w]
  return z[f'sensor/imu/{ch}'][w][new].astype(np.float64)[SETTLE:]


def _amplitude(x, t, f):
  """Least-squares amplitude of a sinusoid at f (with a mean), per column."""
  X = np.stack([np.ones_like(t), np.cos(2 * np.pi * f * t), np.sin(2 * np.pi * f * t)], -1)
  beta = np.linalg.lstsq(X, x, rcond=None)[0]
  return np.hypot(beta[1], beta[2])


def _sigma(cfg, ch, s=1.0):
  """Per-sample std of the broadband part: vibration floor (× transmission × speed factor s),
  white noise, LSB."""
  g = np.asarray(cfg.vibration_transmission_gain) * s
  floor = g * np.asarray(getattr(cfg, f'{ch}_vibration_floor_stddev'))
  white = np.asarray(getattr(cfg, f'{ch}_noise_density')) / math.sqrt(cfg.period_s)
  q = getattr(cfg, f'{ch}_resolution')
  return np.sqrt(floor ** 2 + white ** 2 + q ** 2 / 12)


@pytest.mark.parametrize('ch', ['linear_acceleration', 'angular_velocity'])
def test_lines_at_the_configured_amplitudes(run, ch):
  sim, c, z, omega, ref = run
  cfg = c.cfg
  assert np.allclose(omega, 314.159265, rtol=1e-5)    # the servo holds the commanded speed
  g = np.asarray(cfg.vibration_transmission_gain)
  amp = np.asarray(getattr(cfg, f'{ch}_vibration_amplitude'))
  for w in (0, 1):
    x = _samples(z, ch, w)
    t = np.arange(x.shape[0]) * cfg.period_s
    s = (omega[w] / ref[w]) ** 2
    se = _sigma(cfg, ch, s) * math.sqrt(2.0 / x.shape[0])
    for k, order in enumerate(cfg.vibration_orders):
      f = order * omega[w] / (2 * np.pi)
      want = g * s * amp[k]
      got = _amplitude(x, t, f)
      np.testing.assert_array_less(np.abs(got - want), K * se + 1e-4 * want + 1e-9)
  assert s == pytest.approx(2.0, rel=1e-5)


def test_notch_removes_the_blade_pass_line_and_leaves_the_floor(run):
  sim, c, z, omega, _ = run
  cfg = c.cfg
  fs = 1.0 / cfg.period_s
  ch = 'linear_acceleration'
  x = _samples(z, ch, 0)
  n = x.shape[0]
  t = np.arange(n) * cfg.period_s
  f_bp, f_shaft = 2 * omega[0] / (2 * np.pi), omega[0] / (2 * np.pi)
  b, a = sps.iirnotch(f_bp, 30.0, fs)
  y = sps.filtfilt(b, a, x, axis=0)
  sigma = _sigma(cfg, ch)
  se = sigma * math.sqrt(2.0 / n)
  g = np.asarray(cfg.vibration_transmission_gain)
  amp = np.asarray(cfg.linear_acceleration_vibration_amplitude)
  # the blade-pass line is gone (below the estimator's noise), the shaft line passes at |H|²
  assert np.all(_amplitude(y[200:-200], t[200:-200], f_bp) < K * se * 1.5)
  h_shaft = abs(sps.freqz(b, a, worN=[f_shaft], fs=fs)[1][0]) ** 2
  np.testing.assert_array_less(np.abs(_amplitude(y, t, f_shaft) - h_shaft * g * amp[0]),
                               K * se + 1e-3)
  # the floor stays: one-sided PSD 2σ²/fs in a band clear of the lines, before and after
  nper = 256
  for sig in (x, y):
    f, p = sps.welch(sig - sig.mean(0), fs=fs, nperseg=nper, axis=0)
    band = (f > 200) & (f < 450)
    level = p[band].mean(0)
    segs = 2 * n // nper - 1                                  # 50 % overlap
    rel = 1.0 / math.sqrt(segs * band.sum() / 1.5)            # overlap-correlated segments
    np.testing.assert_allclose(level, 2 * sigma ** 2 / fs, rtol=K * rel)


def test_plan_and_compiled_out(run):
  from fibril_mjx.workflows import plan
  assert "vibration: joint 'rotor_spin', orders [1.0, 2.0]" in plan.render(run[0])
  sim = fibril_mjx.load(REPO / 'manifests' / 'icm42688p_bus.yaml')
  c = sim.components['imu']
  assert c.vibration is None and 'vibration_transmission_gain' in c.compiled_out()
  state = jax.eval_shape(lambda: c.init(c.default_params(), fibril_mjx.world_keys(0, 1)[0]))
  assert 'linear_acceleration_vibration_floor' not in state.streams


def test_config_errors(tmp_path):
  import yaml
  doc = yaml.safe_load(MANIFEST.read_text())
  doc['model'] = str(REPO / 'assets' / 'examples' / 'vibration_rig.xml')
  cfg = doc['components'][0]['config']
  cfg['vibration_orders'] = [1, 2, 3]
  p = tmp_path / 'bad.yaml'
  p.write_text(yaml.safe_dump(doc))
  with pytest.raises(fibril_mjx.FibrilError, match='vibration_orders has 3'):
    fibril_mjx.load(p)
  cfg['vibration_orders'] = [1, 2]
  cfg['vibration_joint'] = 'frame'
  p.write_text(yaml.safe_dump(doc))
  with pytest.raises(fibril_mjx.FibrilError, match='no joint of that name'):
    fibril_mjx.load(p)
