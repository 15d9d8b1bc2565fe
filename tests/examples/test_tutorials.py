"""The tutorials of docs/tutorials/ run at a small size (`--small`), so the docs cannot rot:
each script runs end to end, writes its figure, and its printed claims hold against a
reference outside the code under test (the values that made the data, closed-form sample
counts, standard errors from the sample size)."""

from __future__ import annotations

import math

import numpy as np
import yaml

from _load import example, is_png


def test_imu_ahrs_on_your_robot(tmp_path):
  mod = example('tutorial_imu_ahrs')
  res = mod.main(['--small', '--out', str(tmp_path)])
  assert is_png(tmp_path / 'figure.png')
  # the arm pitches by up to ~46°; an attitude estimate within a few degrees of truth (both
  # devices, every world) is what the page claims, far below the motion itself
  for k in ('ekf', 'ahrs'):
    assert 0.0 < res[k] < 3.0, (k, res[k])
  # the manifest the page shows is what ran: the IMU at the profile's 1 kHz-class ODR
  doc = yaml.safe_load((tmp_path / 'arm.yaml').read_text())
  assert [c['type'] for c in doc['components']] == [
      'fibril_sim/imu', 'fibril_mjx/attitude_ekf', 'fibril_sim/ahrs']


def test_fit_profile_from_csv_then_bag(tmp_path):
  mod = example('tutorial_fit_profile')
  res = mod.main(['--small', '--out', str(tmp_path)])
  assert is_png(tmp_path / 'figure.png')
  true = np.asarray(res['true'])
  # fit-profile holds out the last 30 % of >= 3 logs: 2 of the 3 logs, 60 s at 200 Hz each.
  m = 2 * 60 * 200
  # the white density's standard error is about 0.87/sqrt(m) of its value (Allan variance of
  # white noise); 4 of a 2/sqrt(m) bound, as tests/workflows/test_fit_profile.py uses
  tol = 4 * 2.0 / math.sqrt(m) * true
  np.testing.assert_array_less(np.abs(np.asarray(res['csv']) - true), tol)
  # the bag holds the same samples: the same fit (CSV is written to 9 digits)
  np.testing.assert_allclose(res['bag'], res['csv'], rtol=1e-6)


def test_campaign_local(tmp_path):
  mod = example('tutorial_campaign')
  # Ray's equality with the local backend is tested in tests/workflows/test_campaign_ray.py
  # (with a Ray head started once); starting one here would cost more than the campaign
  res = mod.main(['--small', '--no-ray', '--out', str(tmp_path)])
  assert is_png(tmp_path / 'figure.png')
  from fibril_mjx.workflows.campaign import parts
  rows = parts.read_rows(tmp_path / 'local')
  assert len(rows['world']) == 16
  fails = int(np.sum(~rows['pass'].astype(bool)))
  assert res['failure_probability'] == fails / 16
