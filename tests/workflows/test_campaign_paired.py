"""Paired campaigns (`designs:`, `workflows/campaign/paired.py`): the report's intervals against
their closed forms (t interval of the world-wise differences, Welch's interval, the variance
ratio `1/(1 − ρ)` of a bivariate normal NumPy model), common random numbers through the whole
stack (two designs that differ only in the gyro's noise density by ×2 give world-wise errors in
the ratio 2 exactly: same keys ⇒ same draws), determinism, and one-line validation messages."""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest
import yaml
from scipy import stats

from fibril_mjx import cli
from fibril_mjx.workflows.campaign import execute, paired, spec
from fibril_mjx.workflows import replay

ROOT = pathlib.Path(__file__).resolve().parents[2]
RIG = ROOT / 'manifests' / 'imu_delta_rig.xml'
N_LOW = 1.0e-3                     # rad/s/√Hz
METRIC = 'imu.angular_velocity_error_rms_rad_s'


# ------------------------------------------------------------------------ statistics

def test_paired_interval_is_the_closed_form_and_covers():
  """Paired t interval and Welch interval equal their formulas; the paired interval covers the
  true difference of a NumPy model at its nominal rate (binomial 4-sigma band)."""
  rng = np.random.default_rng(1)
  a = rng.normal(1.0, 0.3, 40)
  b = a + 0.1 + rng.normal(0.0, 0.05, 40)
  d = b - a
  h = stats.t.ppf(0.975, 39) * d.std(ddof=1) / math.sqrt(40)
  got = paired.paired_difference(a, b)
  np.testing.assert_allclose([got['mean'], got['ci'][0], got['ci'][1]],
                             [d.mean(), d.mean() - h, d.mean() + h], rtol=1e-12)
  u = rng.normal(1.1, 0.3, 30)
  va, vu = a.var(ddof=1) / 40, u.var(ddof=1) / 30
  df = (va + vu) ** 2 / (va ** 2 / 39 + vu ** 2 / 29)
  hw = stats.t.ppf(0.975, df) * math.sqrt(va + vu)
  w = paired.welch_difference(a, u)
  np.testing.assert_allclose([w['mean'], w['df'], w['ci'][1] - w['ci'][0]],
                             [u.mean() - a.mean(), df, 2 * hw], rtol=1e-12)
  # coverage of the true difference 0.1 over 2000 campaigns of 10 worlds
  reps, n = 2000, 10
  cover = 0
  for _ in range(reps):
    x = rng.normal(0.0, 1.0, n)
    y = 0.9 * x + 0.1 + rng.normal(0.0, 0.2, n)
    lo, hi = paired.paired_difference(x, y)['ci']
    cover += lo <= 0.1 <= hi
  assert abs(cover / reps - 0.95) < 4 * math.sqrt(0.95 * 0.05 / reps)
  # NaN worlds are left out of both designs
  got = paired.paired_difference(np.r_[a, np.nan], np.r_[b, 5.0])
  assert got['n'] == 40 and got['mean'] == pytest.approx(d.mean())


@pytest.mark.parametrize('rho', [0.5, 0.9, 0.98])
def test_variance_reduction_is_one_over_one_minus_rho(rho):
  """Equal-variance bivariate normal: var(B' − A) / var(B − A) = 1/(1 − ρ); the estimate is a
  ratio of two independent sample variances (F(n−1, n−1): relative sd ≈ 2/√n), 5 sd band."""
  rng = np.random.default_rng(2)
  n = 20000
  z = rng.normal(size=(3, n))
  a = z[0]
  b = rho * z[0] + math.sqrt(1 - rho ** 2) * z[1]
  b_indep = z[2]
  vr = paired.variance_reduction(a, b, b_indep)
  want = 1 / (1 - rho)
  assert abs(vr['factor'] / want - 1) < 5 * 2 / math.sqrt(n)
  assert abs(vr['predicted'] / want - 1) < 5 * 2 / math.sqrt(n)


# ------------------------------------------------------------------------ through the stack

def _write(d: pathlib.Path, **over) -> pathlib.Path:
  man = {'fibril_manifest': 1, 'model': str(RIG),
         'actuator_script': [{'actuator': 'roll_servo', 'amplitude': 0.15, 'frequency_hz': 2.0}],
         'components': [{'id': 'imu', 'type': 'fibril_sim/imu', 'config': {
             'gyroscope_sensor': 'imu_gyro', 'accelerometer_sensor': 'imu_accel',
             'period_s': 0.004, 'angular_velocity_noise_density': [N_LOW] * 3}}]}
  (d / 'rig.yaml').write_text(yaml.safe_dump(man, sort_keys=False))
  doc = {'fibril_campaign': 1, 'manifest': 'rig.yaml', 'worlds': 8, 'seed': 3,
         'duration_s': 0.1,
         'vary': {'imu.linear_acceleration_bias': {'dist': 'normal', 'mean': 0.0, 'std': 0.1}},
         'designs': {'low': {},
                     'high': {'set': {'imu.angular_velocity_noise_density': [2 * N_LOW] * 3}}},
         'metrics': [METRIC]}
  doc = {k: v for k, v in {**doc, **over}.items() if v is not None}   # None: key left out
  path = d / 'paired.yaml'
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  return path


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  d = tmp_path_factory.mktemp('paired')
  path = _write(d)
  res = execute.run(path, d / 'out', progress=False, report=False)
  rows = {k: execute.read_rows(d / 'out' / 'designs' / k) for k in ('low', 'high')}
  return path, d, res, rows, execute.read_rows(d / 'out' / 'unpaired' / 'high')


def test_same_keys_give_the_same_draws(run):
  """Same worlds, same vary: samples, and the same noise draws: the gyro error of `high` (×2
  density) is exactly twice `low`'s in every world; on independent keys it is not."""
  _, _, _, rows, unp = run
  low, high = rows['low'], rows['high']
  np.testing.assert_array_equal(low['world'], high['world'])
  for k in ('imu.linear_acceleration_bias[0]', 'imu.linear_acceleration_bias[2]'):
    np.testing.assert_array_equal(low[k], high[k])
    assert not np.any(unp[k] == low[k])
  np.testing.assert_allclose(high[METRIC] / low[METRIC], 2.0, rtol=1e-5)
  assert np.abs(unp[METRIC] / low[METRIC] - 2.0).max() > 0.05


def test_report_numbers_against_the_rows(run):
  """paired.json's paired interval and variance reduction recomputed from the rows; with
  `high = 2·low` world by world, var(high − low) = var(low) and the predicted factor is
  (var(low) + 4 var(low)) / var(low) = 5."""
  _, d, res, rows, unp = run
  low, high, u = rows['low'][METRIC], rows['high'][METRIC], unp[METRIC]
  e = json.loads((d / 'out' / 'paired.json').read_text())['metrics'][METRIC]
  diff = e['differences']['high']
  dd = high - low
  h = stats.t.ppf(0.975, 7) * dd.std(ddof=1) / math.sqrt(8)
  np.testing.assert_allclose(diff['paired']['ci'], [dd.mean() - h, dd.mean() + h], rtol=1e-9)
  vr = diff['variance_reduction']
  assert vr['predicted'] == pytest.approx(5.0, rel=1e-4)
  assert vr['factor'] == pytest.approx(np.var(u - low, ddof=1) / np.var(dd, ddof=1), rel=1e-9)
  assert 'variance reduction x' in (d / 'out' / 'paired.txt').read_text()
  assert res['unpaired_seeds'] == {'high': 4}


def test_a_design_alone_reproduces_its_rows(run):
  """Determinism: one design run on its own gives its paired rows bitwise."""
  path, d, _, rows, _ = run
  execute.run(path, d / 'alone', spec.Overrides(design='high'), progress=False, report=False)
  again = execute.read_rows(d / 'alone')
  for k, v in rows['high'].items():
    np.testing.assert_array_equal(again[k], v)


def test_replay_of_a_design_and_of_an_unpaired_rerun(run):
  """`replay` of one world of a design's directory (and of an unpaired rerun, its own seed)
  reproduces that directory's row: the design and seed recorded in its options are read
  back, so its hashes match."""
  _, d, _, rows, unp = run
  for sub, want in (('designs/high', rows['high']), ('unpaired/high', unp)):
    res = replay.replay(d / 'out' / sub, 3, d / f'replay_{sub.replace("/", "_")}')
    assert res['equal_to_campaign_row'], sub
    assert res['metrics'][METRIC] == float(want[METRIC][want['world'] == 3][0])


# ------------------------------------------------------------------------ validation

def _errors(capsys, path, out):
  rc = cli.main(['campaign', str(path), '--out', str(out)])
  err = capsys.readouterr().err.strip().splitlines()
  return rc, [line for line in err if line.startswith('error:')]


@pytest.mark.parametrize('over, line', [
    ({'designs': {'only': {}}},
     "designs = {'only': {}}: must be a mapping of two or more design names (letters, digits, "
     "_ and -) → {manifest: PATH, set: {field path: value}}"),
    ({'designs': {'a': 3, 'b': {}}},
     "designs.a = 3: must be a mapping with manifest: and/or set: (or {} for the campaign's "
     'manifest as is)'),
    ({'designs': {'a': {'sett': {}}, 'b': {}}},
     "designs.a.sett = {}: unknown key (did you mean 'set'?)"),
    ({'designs': {'a': {'manifest': 'nope.yaml'}, 'b': {}}},
     "designs.a.manifest = 'nope.yaml': file not found ({d}/nope.yaml)"),
    ({'designs': {'a': {'set': {'imu.linear_acceleration_bias': [0.1, 0, 0]}}, 'b': {}}},
     'designs.a.set.imu.linear_acceleration_bias = [0.1, 0, 0]: also in vary: (a design fixes a '
     'field the worlds do not vary)'),
    ({'unpaired': 1}, 'unpaired = 1: must be true or false'),
    ({'designs': None, 'unpaired': False},
     'unpaired = False: only for a paired campaign (designs:)'),
    ({'designs': {'a': {}, 'b': {'set': {'imu.angular_velocity_noise_dens': 0.1}}}},
     "designs.b.set.imu.angular_velocity_noise_dens = 0.1: not a field of fibril_sim/imu (did "
     "you mean 'angular_velocity_noise_density'?)"),
    ({'designs': {'a': {}, 'b': {'set': {'imu.angular_velocity_noise_density': [1, 2]}}}},
     'designs.b.set.imu.angular_velocity_noise_density = [1, 2]: must be a number or a list of 3'),
])
def test_validation_messages(tmp_path, capsys, over, line):
  path = _write(tmp_path, **over)
  rc, lines = _errors(capsys, path, tmp_path / 'o')
  assert rc == 2
  assert lines == [f'error: {path}: ' + line.replace('{d}', str(tmp_path.resolve()))]
  assert not (tmp_path / 'o').exists()
