"""fit-profile's held-out verdict says what it tests, in words, and points the right way.

Float64 NumPy signals with known Allan shapes (fixed seeds), no simulator: white noise plus an
alternating ±a sequence (the Nyquist tone: it raises the Allan variance at one sample by 2a²,
adds nothing at even cluster sizes and 2a²/m² at odd ones), a 75 Hz tone (above the model at
the band's first τ), first-order low-passed white noise (below it there), a knock in a short
held-out piece; and the CLI on a gzip-compressed CSV session log.
"""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest
import yaml
from scipy import signal

from fibril_mjx import cli
from fibril_mjx.workflows.fit_profile import allan, session, verdict

RATE = 300.0


def _white_model(fit_recs=None):
  """The fitted model of unit white noise (N = 1/√rate: per-sample std 1), with the fitting
  part's own pooled Allan curve (`taus`) that `verdict.explain` compares with."""
  f = {'N': 1.0 / math.sqrt(RATE), 'K': 0.0, 'q': 0.0}
  if fit_recs is not None:
    f['taus'] = allan.fit_allan(fit_recs, RATE)['taus']
  return f


def test_the_sigma_test_covers_exactly_the_quoted_band():
  """The Nyquist tone puts the one-sample Allan deviation 6 σ above the model; the band the
  line quotes starts at 2 samples, where it is exact, so the axis agrees — and says so."""
  g = np.random.default_rng(0)
  n = 20000
  held = [g.standard_normal(n) + 0.15 * (-1.0) ** np.arange(n) for _ in range(2)]
  h = allan.heldout_allan(held, RATE, _white_model())
  m = np.round(h['curve'][0] * RATE).astype(int)
  assert abs(h['z'][m == 1][0]) > allan.K_SIGMA          # outside the band: not tested
  assert not h['band'][m == 1][0] and h['band'][m == 2][0]
  assert h['max_dev_sigma'] == pytest.approx(np.abs(h['z'][h['band']]).max())
  assert h['within'] and h['max_dev_sigma'] < allan.K_SIGMA
  line = verdict.line('gyro x', h, [], None)
  assert line.startswith('gyro x: agrees (pass) — held-out Allan deviation at most ')
  assert f'inside the limit of {allan.K_SIGMA:g} σ' in line
  assert 'τ from 2 samples to a tenth of the record' in line


def _explained(recs):
  """The verdict of the third record held out against a white model, fitted on the first two."""
  fit_recs, held = recs[:2], recs[2:]
  f = _white_model(fit_recs)
  h = allan.heldout_allan(held, RATE, f)
  return h, *verdict.explain('gyro x', held, fit_recs, RATE, f, h)


def test_data_above_the_model_at_short_tau_is_not_blamed_on_a_low_pass_filter():
  """A 75 Hz tone (4 samples a period) sits above a white model at τ = 2 samples in both
  parts: a fail, in words, at that τ; the cause names high-frequency noise and says a low-pass
  filter would put the data below the model."""
  g = np.random.default_rng(1)
  k = np.arange(20000)
  recs = [g.standard_normal(k.size) + 0.5 * np.cos(np.pi * k / 2 + g.uniform(0, 6))
          for _ in range(3)]
  h, findings, cause = _explained(recs)
  assert not h['within']
  assert findings[0].startswith('Allan deviation above the model by up to')
  assert cause.startswith('more noise than white at the shortest τ')
  assert 'a low-pass filter would put the data below the model' in cause
  line = verdict.line('gyro x', h, findings, cause)
  assert line.startswith(f"gyro x: DISAGREES (fail) — held-out Allan deviation "
                         f"{h['max_dev_sigma']:.1f} σ from the model at τ 0.00667 s, beyond the "
                         f"limit of {allan.K_SIGMA:g} σ over τ from 2 samples")
  assert line.endswith(f'; likely cause: {cause}')


def test_data_below_the_model_at_short_tau_names_a_low_pass_filter():
  """First-order low-passed white noise (60 Hz at 300 Hz; DC gain 1, so the white model of the
  long-τ level) sits below the model at the shortest τ in both parts."""
  g = np.random.default_rng(2)
  b, a = signal.butter(1, 60.0, fs=RATE)
  recs = [signal.lfilter(b, a, g.standard_normal(20500))[500:] for _ in range(3)]
  h, findings, cause = _explained(recs)
  assert not h['within']
  assert findings[0].startswith('Allan deviation below the model by up to')
  assert cause.startswith('less noise than white at the shortest τ: an output low-pass filter')


def test_a_knock_in_a_short_held_out_piece_is_flagged():
  """Three held-out pieces of 1.2 s (two 0.5 s windows each, under the 4 a piece needs to be
  its own floor): a 0.6 s knock at 3× the noise in the second is named, with its time."""
  g = np.random.default_rng(3)
  n = int(1.2 * RATE)
  held = [g.standard_normal(n) for _ in range(3)]
  held[1][150:330] *= 3.0
  times = [(10.0 * j, 10.0 * j + (n - 1) / RATE) for j in range(3)]
  assert session.motion_left(held[1], RATE, times[1][0]) == []     # alone: too short to judge
  floor = session.motion_floor(held, RATE)
  assert session.motion_left(held[1], RATE, times[1][0], (), floor) == [(10.5, 11.0)]
  assert session.motion_left(held[0], RATE, times[0][0], (), floor) == []
  fit_recs = [g.standard_normal(20000) for _ in range(2)]
  f = _white_model(fit_recs)
  h = allan.heldout_allan(held, RATE, f)
  findings, cause = verdict.explain('gyro x', held, fit_recs, RATE, f, h, times)
  assert 'motion left in the stretch at t 10.5–11.0 s (window std ≥ 1.8× the median over ' \
         'the held-out part)' in findings
  assert cause == 'motion left in the stretch: the unit was not at rest'


def _session_log(path):
  """A 300 Hz session log at rest with one 1 s motion between two stretches (gzip CSV)."""
  g = np.random.default_rng(4)
  t = np.arange(int(16 * RATE)) / RATE
  gyro = 0.01 * g.standard_normal((t.size, 3))
  acc = 0.05 * g.standard_normal((t.size, 3)) + [0.0, 0.0, 9.80665]
  move = (t > 7.5) & (t < 8.5)
  gyro[move] += np.sin(2 * np.pi * 1.5 * t[move])[:, None]
  rows = np.column_stack([t, gyro, acc])
  with gzip.open(path, 'wt') as fh:
    fh.write('t,gx,gy,gz,ax,ay,az\n')
    np.savetxt(fh, rows, delimiter=',', fmt='%.9g')


MAP = {'component': 'imu', 'columns': {'sample_time_s': 't',
                                       'angular_velocity': ['gx', 'gy', 'gz'],
                                       'linear_acceleration': ['ax', 'ay', 'az']}}


def test_a_csv_gz_session_log_is_read_and_the_hold_out_rule_is_printed(tmp_path, capsys):
  log = tmp_path / 'session.csv.gz'
  _session_log(log)
  mp = tmp_path / 'map.yaml'
  mp.write_text(yaml.safe_dump(MAP))
  code = cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'imu', '--static',
                   str(log), '--csv-map', str(mp), '--find-rest', '--out',
                   str(tmp_path / 'p.yaml')])
  out = capsys.readouterr().out
  assert code in (0, verdict.EXIT_DISAGREE), out
  assert ('held-out agreement (the fit uses the first 70 % (in time) of each record — each '
          'rest stretch with --find-rest, each gap-free segment — and the last 30 % is held '
          'out to check it):') in out
  ev = (tmp_path / 'p_evidence.md').read_text()
  assert 'Held out: the fit uses the first 70 %' in ev
  verdicts = [ln for ln in ev.splitlines() if ln.startswith('- angular_velocity ')]
  assert len(verdicts) == 3
  for ln in verdicts:      # pass or fail in words on every held-out line of the evidence
    assert ln.endswith(('— agrees (pass: within 4 standard errors)',
                        '— DISAGREES (fail: beyond 4 standard errors)')), ln


def test_a_recording_in_an_unread_format_names_the_formats(tmp_path, capsys):
  bad = tmp_path / 'log.txt.xz'
  bad.write_bytes(b'')
  code = cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'imu', '--static',
                   str(bad), '--out', str(tmp_path / 'p.yaml')])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1
  assert err[0] == (f'error: {bad}: fit-profile reads .npz and .parquet recordings, .csv and '
                    '.csv.gz logs (with --csv-map) and ROS bags (with --topics), not ".txt.xz"')


def test_a_damaged_csv_gz_is_one_line_naming_the_file(tmp_path, capsys):
  bad = tmp_path / 'log.csv.gz'
  bad.write_bytes(b'not gzip at all')
  mp = tmp_path / 'map.yaml'
  mp.write_text(yaml.safe_dump(MAP))
  code = cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'imu', '--static',
                   str(bad), '--csv-map', str(mp), '--out', str(tmp_path / 'p.yaml')])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1
  assert err[0].startswith(f'error: {bad}: not a readable .csv.gz file (not gzip data: another '
                           'format?)')
