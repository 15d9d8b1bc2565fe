"""`validate`'s temperature sweep with soak (`workflows/validate/thermal.py`): the configured
k1, k2 of the example manifest are recovered within the stated tolerance, and a simulated
device whose k1 differs from its configuration fails the k1 check (and only it).

The lag is shortened (τ = 0.02 s: a 0.2 s soak) and the record is 1 s per set-point so the rig
runs in seconds; the tolerance is the check's own (4 standard errors from the configured noise).
"""

from __future__ import annotations

import pathlib

import numpy as np

from fibril_mjx.workflows import validate
from fibril_mjx.workflows.validate import inertial, thermal
from fibril_mjx.workflows.validate.common import Request

REPO = pathlib.Path(__file__).resolve().parents[2]


def _sweep(tmp_path, perturb):
  ctype, cfg = validate.resolved_config(REPO / 'manifests' / 'imu_thermal.yaml', 'imu')
  cfg['temperature_time_constant_s'] = 0.02
  dev = inertial.device_from_config('imu', ctype, cfg)
  rigs = tmp_path / 'rigs'
  rigs.mkdir()
  req = Request('imu_thermal.yaml', 'imu', ctype, cfg, tmp_path, static_duration_s=1.0,
                worlds=2, seed=0, perturb=perturb, progress=lambda *a: None, t0=0.0)
  return cfg, {c.name: c for c in inertial.thermal_sweep(dev, req, rigs, 0, 1.0)}


def test_sweep_recovers_k1_k2(tmp_path):
  cfg, checks = _sweep(tmp_path, {})
  assert set(checks) == {f'thermal.{ch}.{k}' for ch in thermal.CHANNELS for k in ('k1', 'k2')}
  for c in checks.values():
    assert c.passed, (c.name, c.measured, c.configured, c.tolerance)
    # the tolerance tells every configured coefficient from zero
    nz = np.abs(np.asarray(c.configured)) > 0
    assert np.all(np.asarray(c.tolerance)[nz] < 0.6 * np.abs(np.asarray(c.configured))[nz])
  assert 'soak 0.2 s' in checks['thermal.angular_velocity.k1'].basis


def test_sweep_catches_a_wrong_k1(tmp_path):
  _, cfg0 = validate.resolved_config(REPO / 'manifests' / 'imu_thermal.yaml', 'imu')
  k1 = np.asarray(cfg0['angular_velocity_bias_temperature_k1']) * 1.2
  _, checks = _sweep(tmp_path, {'angular_velocity_bias_temperature_k1': k1.tolist()})
  assert not checks['thermal.angular_velocity.k1'].passed
  assert checks['thermal.angular_velocity.k2'].passed
  assert checks['thermal.linear_acceleration.k1'].passed


def test_other_rigs_hold_the_ambient_at_t_ref():
  ctype, cfg = validate.resolved_config(REPO / 'manifests' / 'imu_thermal.yaml', 'imu')
  dev = inertial.device_from_config('imu', ctype, cfg)
  entry = inertial.device_entry(dev, {})['config']
  assert entry['ambient_temperature_c'] == [cfg['reference_temperature_c']]
  assert entry['ambient_temperature_time_s'] == [0.0]


def test_fit_profile_fits_k1_k2_from_soaked_logs(tmp_path):
  """Five soaked logs (one world per set-point, one compiled rig) written as recordings, then
  `fit-profile --thermal`: the fitted k1, k2 agree with the simulated unit within 4 standard
  errors (+ float32) — the closed-form standard errors of the least-squares fit of the log
  means for the sample size, not the fit's own — and the fit's reported standard errors are
  within a factor 2 of them.

  Closed form: the unit's noise is white (icm42688p_nominal: noise density N, output step q,
  no drift terms), so a log mean of n samples at the rate f has variance σ²/n with
  σ² = N²·f + q²/12 (a low-pass keeps the density at 0 Hz); the five means are independent
  with equal variance, so Cov(β) = σ²/n · (XᵀX)⁻¹ with X = [1, ΔT, ΔT²] at the logs' mean
  temperatures."""
  import jax

  import fibril_mjx
  from fibril_mjx import cli
  from fibril_mjx.io import recording as rc
  from fibril_mjx.workflows.validate.common import write_rig
  ctype, cfg = validate.resolved_config(REPO / 'manifests' / 'imu_thermal.yaml', 'imu')
  plan = thermal.sweep_plan(cfg, cfg['period_s'], 1.0)
  xml, doc = thermal.sweep_rig(cfg, plan, {'ambient_temperature_time_s': [0.0],
                                           'ambient_temperature_c': [25.0]})
  rigs = tmp_path / 'rigs'
  rigs.mkdir()
  sim = fibril_mjx.load(write_rig(rigs, 'thermal', xml, doc))
  c = sim.components['pz']
  set_points = np.array([5.0, 15.0, 25.0, 35.0, 45.0])
  params = sim.default_params(len(set_points))
  params['pz'] = c.set_param(params['pz'], 'ambient_temperature_c',
                             set_points[:, None].astype(np.float32))
  _, trace, _ = sim.rollout(params, fibril_mjx.world_keys(3, len(set_points)), 1500)
  trace = jax.device_get(trace)
  paths = []
  for w in range(len(set_points)):
    p = tmp_path / f'soak_{w}.npz'
    rc.write_recording(p, rc.recording_from_trace(trace, w, sim=sim))
    paths.append(str(p))
  out = tmp_path / 'fit' / 'unit.yaml'
  assert cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'pz', '--thermal',
                   *paths, '--reference-temperature-c', '25', '--out', str(out)]) == 0
  import json
  fit = json.loads((tmp_path / 'fit' / 'unit_fit.json').read_text())
  se = {u['field']: u['se'] for u in fit['uncertainty']}
  logs = [rc.read_recording(p).sensor('pz') for p in paths]
  n = min(len(f['temperature_c']) for f in logs)
  dT = np.array([np.mean(np.asarray(f['temperature_c'], np.float64)) for f in logs]) - 25.0
  X = np.stack([np.ones_like(dT), dT, dT ** 2], -1)
  xtx_inv = np.linalg.inv(X.T @ X)
  rate = 1.0 / cfg['period_s']
  for ch in thermal.CHANNELS:
    sigma2 = (np.asarray(cfg[f'{ch}_noise_density'], np.float64) ** 2 * rate
              + np.asarray(cfg.get(f'{ch}_resolution', 0.0), np.float64) ** 2 / 12.0)
    for j, k in ((1, 'k1'), (2, 'k2')):
      name = f'{ch}_bias_temperature_{k}'
      want = np.asarray(cfg[name], np.float64)
      if k == 'k1':
        want = want + np.asarray(cfg[f'{ch}_scale_temperature_k1']) * (
            np.array([0, 0, 9.81]) if ch == 'linear_acceleration' else 0.0)
      got = np.asarray(fit['fields'][name])
      s_fit = np.array([se[f'{name}[{a}]'] for a in range(3)])
      s = np.sqrt(sigma2 / n * xtx_inv[j, j])
      assert np.all(np.abs(got - want) <= 4 * s + 1e-6 * np.abs(want) + 1e-9), (name, got, want, s)
      assert np.all((s_fit >= 0.5 * s) & (s_fit <= 2 * s)), (name, s_fit, s)
  assert fit['fields']['reference_temperature_c'] == 25.0
  assert 'Thermal: one soaked log per set-point' in (tmp_path / 'fit' / 'unit_evidence.md'
                                                     ).read_text()
