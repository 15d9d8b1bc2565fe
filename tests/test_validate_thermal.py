"""`validate`'s temperature sweep with soak (`validate/thermal.py`): the configured k1, k2 of the
example manifest are recovered within the stated tolerance, and a simulated device whose k1
differs from its configuration fails the k1 check (and only it).

The lag is shortened (τ = 0.02 s: a 0.2 s soak) and the record is 1 s per set-point so the rig
runs in seconds; the tolerance is the check's own (4 standard errors from the configured noise).
"""

from __future__ import annotations

import pathlib

import numpy as np

from fibril_mjx import validate
from fibril_mjx.validate import inertial, thermal

REPO = pathlib.Path(__file__).resolve().parents[1]


def _sweep(tmp_path, perturb):
  ctype, cfg = validate.resolved_config(REPO / 'manifests' / 'imu_thermal.yaml', 'imu')
  cfg['temperature_time_constant_s'] = 0.02
  dev = inertial.device_from_config('imu', ctype, cfg)
  rigs = tmp_path / 'rigs'
  rigs.mkdir()
  return cfg, {c.name: c for c in inertial._thermal_sweep(
      dev, cfg, perturb, rigs, 2, 0, 1.0, lambda *a: None, 0.0)}


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
  entry = inertial._entry(dev, 'px', {})['config']
  assert entry['ambient_temperature_c'] == [cfg['reference_temperature_c']]
  assert entry['ambient_temperature_time_s'] == [0.0]
