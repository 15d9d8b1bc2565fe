"""The tune and export tutorials at a small size (see test_tutorials.py)."""

from __future__ import annotations

import numpy as np

from _load import example, is_png


def test_tune_recovers_the_recording_values(tmp_path):
  mod = example('tutorial_tune')
  res = mod.main(['--small', '--out', str(tmp_path)])
  assert is_png(tmp_path / 'figure.png')
  assert (tmp_path / 'result' / 'overlay.yaml').is_file()
  # every estimate within its own ± 2σ of the value manifests/tuning/make_recordings.py used
  assert res['within_2sigma'] and all(v is True for v in res['within_2sigma'].values()), \
      res['within_2sigma']
  # fitted down to the noise: weights are 1/σ of the noise, so the loss is about 1
  assert 0.8 < res['train_loss'] < 1.3


def test_export_mcap_and_mavlink(tmp_path):
  mod = example('tutorial_export')
  res = mod.main(['--small', '--out', str(tmp_path)])
  assert is_png(tmp_path / 'figure.png')
  # 1 s at the profiles' rates, stamps 0 .. 1 s inclusive: ICM-42688-P 500 Hz -> 501 samples,
  # NEO-M8N 5 Hz -> 5 fixes (0.0 .. 0.8 s), MS5611 100 Hz -> 101
  topics = res['mcap_topics']
  for w in ('0000', '0001'):
    assert topics[f'/world_{w}/imu/imu'] == 501
    assert topics[f'/world_{w}/gnss/fix'] == 5
    assert topics[f'/world_{w}/baro/pressure'] == 101
  # one HIL_SENSOR per tick on which a sensor delivered (the IMU delivers every 2 ms tick
  # it samples), one HIL_GPS per fix
  assert res['mavlink'] == {'HIL_SENSOR': 501, 'HIL_GPS': 5}
