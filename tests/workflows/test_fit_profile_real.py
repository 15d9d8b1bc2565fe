"""fit-profile on what real inertial logs contain.

References outside the code under test: real logs the project did not produce
(`tests/data/imu_px4_auav_x21`, `tests/data/imu_xio_fusion`, see their READMEs), and float64
NumPy models written here (an AR(1)'s closed-form Allan variance, a quantized Gaussian,
stamped timing with known gaps, a simulated narrowband line). A fit on the first part of each
real record must reproduce the held-out last part; a log with motion left in it must be named
on the console with a distinct exit status.
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest
import yaml

from fibril_mjx import cli
from fibril_mjx.analysis import stats
from fibril_mjx.workflows.fit_profile import allan, session, spectral, verdict

DATA = pathlib.Path(__file__).resolve().parents[1] / 'data'
PX4 = DATA / 'imu_px4_auav_x21' / 'sensor_combined.csv'
FUSION = DATA / 'imu_xio_fusion' / 'sensor_data.csv'
PX4_MAP = {'component': 'imu', 'columns': {
    'sample_time_s': 'timestamp_us',
    'angular_velocity': ['gyro_rad[0]', 'gyro_rad[1]', 'gyro_rad[2]'],
    'linear_acceleration': ['accelerometer_m_s2[0]', 'accelerometer_m_s2[1]',
                            'accelerometer_m_s2[2]']}, 'scale': {'sample_time_s': 1e-6}}
FUSION_MAP = {'component': 'imu', 'columns': {
    'sample_time_s': 'Time (s)',
    'angular_velocity': ['Gyroscope X (deg/s)', 'Gyroscope Y (deg/s)', 'Gyroscope Z (deg/s)'],
    'linear_acceleration': ['Accelerometer X (g)', 'Accelerometer Y (g)',
                            'Accelerometer Z (g)']},
    'scale': {'angular_velocity': math.pi / 180, 'linear_acceleration': 9.80665}}
#: the issue's acceptance: the fitted model's Allan deviation within 25 % of the held-out
#: log's from two samples to a tenth of the record — where the estimator resolves 25 % (its
#: relative std ≤ 25 %/3); toward a tenth of the record (~10 clusters, ~20 % scatter at any
#: length) within 4 σ of the estimator's scatter instead
REL = 0.25


def run(tmp_path, name, logs, cmap, *extra):
  mp = tmp_path / f'{name}_map.yaml'
  mp.write_text(yaml.safe_dump(cmap))
  out = tmp_path / name / 'p.yaml'
  rc_ = cli.main(['fit-profile', '--type', 'fibril_sim/imu', '--component', 'imu', '--static',
                  *map(str, logs), '--csv-map', str(mp), '--out', str(out), *extra])
  return rc_, json.loads((tmp_path / name / 'p_fit.json').read_text()), yaml.safe_load(
      out.read_text())


def test_px4_log_with_a_vibration_line(tmp_path, capsys):
  """AUAV-X2.1 (PX4 `sensor_combined`, 250 Hz): one session log, motion in its first 7 s. The
  rest stretch found, the timing as stamped (checked here from the stamps), the gyro-x line
  at ≈ 117 Hz fitted as a narrowband process, and the held-out Allan deviation within 25 % on
  every axis."""
  rc_, res, prof = run(tmp_path, 'px4', [PX4], PX4_MAP, '--find-rest')
  out = capsys.readouterr().out
  raw = np.loadtxt(PX4, delimiter=',', skiprows=1)
  t = (raw[:, 0] - raw[0, 0]) * 1e-6
  d = np.diff(t)
  steps = np.maximum(np.round(d / np.median(d)), 1)
  lg = res['static_logs'][0]
  assert lg['timing']['lost'] == int(np.sum(steps - 1))
  assert lg['gap_splits'] == int(np.sum(d > session.GAP_SPLIT_PERIODS * np.median(d)))
  assert lg['timing']['period_s'] == pytest.approx(0.004, rel=1e-3)
  (a, b), = lg['rest'][0]
  # the motion (gyro up to 2.8 rad/s) ends before 7 s; the stretch must not hold any of it
  assert 6.5 < a < 9.0 and b > 67.0
  sel = (t >= a) & (t <= b)
  assert np.abs(raw[sel, 1:4] - np.median(raw[sel, 1:4], 0)).max() < 0.02
  assert 'rest: 0.5 s windows' in out and '7.58–68.09 s' in out
  # the gyro-x line: fitted centre within 4 standard errors of the PSD peak of the whole
  # stretch (an independent Welch estimate here, resolution 0.06 Hz)
  from scipy import signal
  f, p = signal.welch(raw[sel, 1] - raw[sel, 1].mean(), fs=250.0, nperseg=4096)
  peak = f[np.argmax(p * (f > 100))]
  u = {x['field']: x for x in res['uncertainty']}
  f0 = u['angular_velocity_narrowband_frequency_hz[0]']
  assert abs(f0['value'] - peak) <= 4 * f0['se'] + 0.061
  assert prof['fields']['angular_velocity_narrowband_stddev'][0] > 0
  for ax in res['verdict']:    # 25 % where the estimator resolves it, 4 σ of its scatter beyond
    assert ax['rel_max_resolved'] <= REL, ax['console']
    assert ax['beyond_sigma'] < allan.K_SIGMA, ax['console']
  # what stays unexplained is named: the averaged output's short-τ shape, not a line or motion
  if rc_ != 0:
    assert rc_ == verdict.EXIT_DISAGREE
    assert 'DISAGREES' in out and 'likely cause' in out and 'motion left' not in out


def test_fusion_session_log_with_rest_stretches_found(tmp_path, capsys):
  """x-io Fusion example log (100 Hz, deg/s and g, a hand-held session): `--find-rest` finds
  the stretches at rest itself; the fit on the first 70 % of each reproduces the held-out
  30 % on every axis (exit 0), with the output step written as the resolution."""
  rc_, res, prof = run(tmp_path, 'fusion', [FUSION], FUSION_MAP, '--find-rest')
  out = capsys.readouterr().out
  assert rc_ == 0, out
  raw = np.loadtxt(FUSION, delimiter=',', skiprows=1)
  st, _ = res['static_logs'][0]['rest']
  assert len(st) >= 3
  for a, b in st:
    sel = (raw[:, 0] >= a) & (raw[:, 0] <= b)
    # at rest: no sample of the gyro more than 1 °/s from the stretch median (hand motion
    # in this log reaches 365 °/s)
    assert np.abs(raw[sel, 1:4] - np.median(raw[sel, 1:4], 0)).max() < 1.0
  for ax in res['verdict']:
    assert ax['agrees'], ax['console']
  assert 'turn_on' not in ' '.join(prof['fields'])      # one power-up: no dispersion
  assert prof['fields']['angular_velocity_resolution'] > 0
  assert 'held-out agreement' in out and 'gyro z: agrees' in out
  ev = (tmp_path / 'fusion' / 'p_evidence.md').read_text()
  assert 'as recorded: period' in ev and 'rest stretches (windows' in ev


def test_stretch_with_motion_is_named_with_a_distinct_exit(tmp_path, capsys):
  """The issue's user path: three stretches cut by hand from the Fusion log, the one held out
  (0.5–12.5 s) ending as the hand picks the unit up. The console names the axis, the τ range,
  the frequency of the line and the motion, and the exit status is `EXIT_DISAGREE`."""
  raw = np.loadtxt(FUSION, delimiter=',', skiprows=1)
  head = FUSION.read_text().splitlines()[0]
  logs = []
  for k, (a, b) in enumerate(((119.5, 135.3), (104.5, 114.8), (0.5, 12.5))):
    p = tmp_path / f'stretch{k}.csv'
    np.savetxt(p, raw[(raw[:, 0] >= a) & (raw[:, 0] < b)], delimiter=',', header=head,
               comments='', fmt='%.10g')
    logs.append(p)
  rc_, res, _ = run(tmp_path, 'cut', logs, FUSION_MAP)
  out = capsys.readouterr().out
  assert rc_ == verdict.EXIT_DISAGREE
  gz = next(line for line in out.splitlines() if line.strip().startswith('gyro z:'))
  assert 'DISAGREES' in gz and 'Allan bump' in gz and 'τ ' in gz
  assert 'PSD line at 3.' in gz and 'motion left in the stretch at t' in gz
  assert 'likely cause: motion left in the stretch' in gz
  assert 'does not explain the held-out data on' in out
  # three stretches of one power-up: no turn-on dispersion unless marked as power-ups
  assert not any('turn_on' in u['field'] for u in res['uncertainty'])
  _, res, prof = run(tmp_path, 'marked', logs, FUSION_MAP, '--power-ups')
  assert len(prof['fields']['angular_velocity_bias_turn_on_stddev']) == 3
  assert any('std of the means of 3 power-ups' in u['method'] for u in res['uncertainty'])


# ------------------------------------------------------------ float64 references


def test_autocovariance_allan_equals_the_ar1_closed_form():
  """`spectral.allan_variance_of` (any autocovariance) on an AR(1)'s `σ²φ^k` equals the AR(1)
  closed form of `stats.allan_variance_model`; and the narrowband process's Allan variance
  matches the overlapping estimate of a long float64 simulation (5 estimator σ)."""
  phi, rate = 0.9, 100.0
  m = np.array([1, 2, 3, 5, 10, 30, 100])
  g = phi ** np.arange(2 * m.max() + 1)
  np.testing.assert_allclose(spectral.allan_variance_of(g, m),
                             stats.allan_variance_model(m, rate, ar1=[(1.0, phi)]), rtol=1e-10)
  f0, bw, sigma, n = 7.0, 0.8, 1.0, 400000
  a1, a2 = spectral.coefficients(f0, bw, 1 / rate)
  c = sigma * math.sqrt((1 + a2) * ((1 - a2) ** 2 - a1 ** 2) / (1 - a2))
  from scipy import signal
  z = np.random.default_rng(0).standard_normal(n + 2000)
  y = signal.lfilter([c], [1, -a1, -a2], z)[2000:]
  taus, adev = stats.allan_deviation(y, rate, taus=m / rate)
  rel = stats.allan_relative_sigma(n, m)
  want = np.sqrt(spectral.narrowband_avar(m, rate, f0, bw))
  assert np.all(np.abs(adev / want - 1) < 5 * rel + 0.01), adev / want


def test_quantization_step_of_a_quantized_gaussian():
  """Samples `q·round((o + x)/q)` of a Gaussian (std 3q, offset o): the step is found within
  1 %; an unquantized Gaussian has none."""
  rng = np.random.default_rng(1)
  for q, o in ((0.061, 0.013), (4.7e-3, -0.9)):
    x = q * np.round((o + 3 * q * rng.standard_normal(20000)) / q)
    assert session.quantization_step(x) == pytest.approx(q, rel=0.01)
  assert session.quantization_step(rng.standard_normal(20000)) is None


def test_timing_as_stamped():
  """Stamps with a 1 % jitter, 10 single losses and one 7-period gap: period, lost count,
  jitter and the split at the long gap, counted here."""
  rng = np.random.default_rng(2)
  k = np.arange(5000)
  keep = np.ones(k.size, bool)
  keep[rng.choice(np.arange(10, 2000), 10, replace=False) * 2] = False
  keep[3000:3006] = False
  t = 0.01 * k[keep] + 1e-4 * rng.standard_normal(keep.sum())
  tm = session.timing(t)
  assert tm['period_s'] == pytest.approx(0.01, rel=2e-3)
  assert tm['lost'] == 16
  assert tm['jitter_s'] == pytest.approx(math.sqrt(2) * 1e-4, rel=0.1)
  assert len(tm['splits']) == 1 and t[tm['splits'][0] - 1] < 30.0 < t[tm['splits'][0]]


def test_line_found_and_fitted_on_a_simulated_narrowband_process():
  """White noise (σ 1) plus a narrowband process (f0 12 Hz, B 0.5 Hz, σ 0.5) at 200 Hz,
  120 s: one line, its centre within B, its σ within 5/√(πBT) relative (the power of a
  narrowband Gaussian process measured over T has relative std ≈ 1/√(πBT)), and the Allan
  fit with it recovers the white density within 4 estimator standard errors."""
  rate, n, f0, bw, s = 200.0, 24000, 12.0, 0.5, 0.5
  a1, a2 = spectral.coefficients(f0, bw, 1 / rate)
  c = s * math.sqrt((1 + a2) * ((1 - a2) ** 2 - a1 ** 2) / (1 - a2))
  from scipy import signal
  rng = np.random.default_rng(3)
  y = signal.lfilter([c], [1, -a1, -a2], rng.standard_normal(n + 4000))[4000:]
  x = y + rng.standard_normal(n)
  lines, spec = spectral.find_lines([x], rate)
  assert len(lines) >= 1 and abs(lines[0]['f0'] - f0) < 1.0
  assert all(abs(ln['f0'] - f0) < 3.0 for ln in lines)
  fit = spectral.fit_line(spec, lines[0], rate)
  assert abs(fit['f0'] - f0) < bw
  assert abs(fit['sigma'] / s - 1) < 5 / math.sqrt(math.pi * bw * n / rate)
  a = allan.fit_allan([x], rate, lines=[fit])
  n_true = 1.0 / math.sqrt(rate)
  assert abs(a['N'] / n_true - 1) < 4 * math.sqrt(3.0 / n) + 0.02
  white = rng.standard_normal(n)
  assert spectral.find_lines([white], rate)[0] == []


def test_find_rest_needs_both_channels(tmp_path):
  """A one-line error when --find-rest is given a log without accelerometer columns."""
  mp = {'component': 'imu', 'columns': {'sample_time_s': 'Time (s)', 'angular_velocity': [
      'Gyroscope X (deg/s)', 'Gyroscope Y (deg/s)', 'Gyroscope Z (deg/s)']}}
  p = tmp_path / 'm.yaml'
  p.write_text(yaml.safe_dump(mp))
  from fibril_mjx.errors import FibrilError
  from fibril_mjx.workflows import fit_profile
  with pytest.raises(FibrilError, match='--find-rest needs both angular_velocity and '
                     'linear_acceleration'):
    fit_profile.fit_profile(component_type='fibril_sim/imu', component='imu',
                            out=tmp_path / 'o.yaml', logs=fit_profile.Logs(static=[FUSION]),
                            options=fit_profile.FitOptions(csv_map=(mp, str(p)),
                                                           find_rest=True))
