"""Monte Carlo campaigns (issue 10): campaign-file validation, deterministic sampling, per-world
values that take effect (component fields compiled in, latency, MJCF fields, initial state),
chunk-invariant rows, replay bitwise equal to its row, and resume after a real SIGKILL."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from conftest import SCRIPT, ahrs_entry, write_rig
from fibril_mjx import cli
from fibril_mjx.builder import vary as fl
from fibril_mjx.workflows.campaign import engine, execute, parts, spec
from fibril_mjx.errors import FibrilError
from fibril_mjx.batch.simulation import Options, Start

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIBRIL = str(ROOT / '.venv' / 'bin' / 'fibril-mjx')

VARY = {
    'ahrs.angular_velocity_noise_stddev': {'dist': 'lognormal', 'mu': -4.0, 'sigma': 0.5},
    'ahrs.angular_velocity_bias': {'dist': 'normal', 'mean': 0.0, 'std': [0.01, 0.01, 0.02]},
    'ahrs.latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.02},
    'body:yaw_stage.mass': {'dist': 'uniform', 'low': 0.5, 'high': 2.0, 'relative': True},
    'joint:tilt.damping': {'dist': 'truncated_normal', 'mean': 0.2, 'std': 0.1, 'low': 0.05,
                           'high': 0.5},
    'initial:qpos.tilt': {'dist': 'normal', 'mean': 0.0, 'std': 0.2},
}


def write_campaign(d: pathlib.Path, name='campaign.yaml', **over) -> pathlib.Path:
  doc = {'fibril_campaign': 1, 'manifest': 'manifest.yaml', 'worlds': 8, 'seed': 3,
         'duration_s': 0.06, 'chunk_worlds': 4, 'vary': VARY,
         'metrics': ['ahrs.orientation_error_rms_deg', 'ahrs.angular_velocity_error_rms_rad_s',
                     {'name': 'twice', 'expr': '2 * ahrs.orientation_error_rms_deg'}],
         'criteria': {'attitude': {'metric': 'ahrs.orientation_error_rms_deg', 'max': 0.5},
                      'rate': {'metric': 'ahrs.angular_velocity_error_rms_rad_s', 'max': 0.03}}}
  doc.update(over)
  path = d / name
  path.write_text(yaml.safe_dump(doc, sort_keys=False))
  return path


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
  d = tmp_path_factory.mktemp('campaign')
  write_rig(d, [ahrs_entry(period_s=0.004)])
  return d


@pytest.fixture(scope='module')
def reference(rig):
  """An uninterrupted local run: 8 worlds in chunks of 4."""
  path = write_campaign(rig)
  out = rig / 'ref'
  execute.run(path, out, progress=False)
  return path, out, execute.read_rows(out)


# ------------------------------------------------------------------------ validation

def _cli_errors(capsys, argv):
  rc = cli.main(argv)
  err = capsys.readouterr().err.strip().splitlines()
  return rc, [line for line in err if line.startswith('error:')]


def test_invalid_campaign_one_line_per_error_exit_2(rig, capsys, tmp_path):
  path = write_campaign(rig, 'other.yaml', vary={
      'ahrs.angular_velocity_bias': {'dist': 'normal', 'mean': 0, 'std': -1},
      'joint:tilt.damping': {'dist': 'uniform', 'low': 2, 'high': 1},
      'ahrs.period_s': {'dist': 'choice', 'values': []},
      'body:yaw_stage.mass': {'dist': 'gaussian', 'mean': 1},
      'initial:qpos.tilt': {'dist': 'lognormal', 'mu': 0, 'sigma': 1, 'scale': 2}},
      chunk_worlds=0, wrolds=3)
  rc, lines = _cli_errors(capsys, ['campaign', str(path), '--out', str(tmp_path / 'o')])
  assert rc == 2
  text = '\n'.join(lines)
  assert len(lines) == 7, text
  assert "vary.ahrs.angular_velocity_bias.std = -1: std must be >= 0" in text
  assert "vary.joint:tilt.damping.high = 2" not in text and 'low must be <= high' in text
  assert "vary.ahrs.period_s.values = []: must be a non-empty list" in text
  assert "dist = 'gaussian'" in text
  assert "unknown key for dist lognormal" in text
  assert "wrolds = 3: unknown key (did you mean 'worlds'?)" in text
  assert "chunk_worlds = 0: must be a positive integer" in text
  assert all(str(path) in line for line in lines)


def test_unknown_field_and_metric_did_you_mean(rig, capsys, tmp_path):
  path = write_campaign(rig, 'other.yaml', vary={
      'ahrs.angular_velocity_noise_stdev': {'dist': 'normal', 'mean': 0, 'std': 1}})
  rc, lines = _cli_errors(capsys, ['campaign', str(path), '--out', str(tmp_path / 'o')])
  assert rc == 2 and len(lines) == 1
  assert "did you mean 'angular_velocity_noise_stddev'?" in lines[0]
  path = write_campaign(rig, 'other.yaml', vary={'joint:tilts.damping': VARY['joint:tilt.damping']})
  rc, lines = _cli_errors(capsys, ['campaign', str(path), '--out', str(tmp_path / 'o')])
  assert rc == 2 and "no joint of that name (did you mean 'tilt'?)" in lines[0]
  path = write_campaign(rig, 'other.yaml', vary={'ahrs.period_s': {'dist': 'uniform', 'low': 0.004,
                                                     'high': 0.008}})
  rc, lines = _cli_errors(capsys, ['campaign', str(path), '--out', str(tmp_path / 'o')])
  assert rc == 2 and 'only dist: choice is allowed' in lines[0]
  path = write_campaign(rig, 'other.yaml', vary={}, metrics=['ahrs.orientation_error_rms'],
                        criteria={'a': {'metric': 'ahrs.orientation_eror_rms_deg', 'max': 1}})
  rc, lines = _cli_errors(capsys, ['campaign', str(path), '--out', str(tmp_path / 'o')])
  assert rc == 2 and len(lines) == 2
  assert "did you mean 'ahrs.orientation_error_rms_deg'?" in lines[0]
  assert "criteria.a.metric" in lines[1] and 'did you mean' in lines[1]


def test_campaign_file_rules_beyond_its_model(rig, tmp_path):
  """What `fibril_mjx.config.campaign.CampaignModel` leaves to the reader: the manifest must
  exist, the file must be there and be a mapping, and command-line values replace the file's
  (also in its messages); the model's own rules are in tests/config/test_file_formats.py."""
  path = write_campaign(rig, 'no_manifest.yaml', manifest='nope.yaml')
  with pytest.raises(FibrilError, match=r"no_manifest\.yaml: manifest = 'nope\.yaml': file not "
                     r'found \(.*nope\.yaml\)$'):
    spec.read(path)
  with pytest.raises(FibrilError, match=r'absent\.yaml: campaign file not found$'):
    spec.read(tmp_path / 'absent.yaml')
  (tmp_path / 'list.yaml').write_text('[1, 2]\n')
  with pytest.raises(FibrilError, match=r'list\.yaml: must be a mapping$'):
    spec.read(tmp_path / 'list.yaml')
  path = write_campaign(rig, 'cli_values.yaml', vary={})
  camp = spec.read(path, worlds=3, duration_s=0.5, chunk_worlds=2)
  assert (camp.worlds, camp.duration_s, camp.chunk_worlds) == (3, 0.5, 2)
  with pytest.raises(FibrilError, match=r'cli_values\.yaml: worlds = 0: must be a positive '
                     r'integer$'):
    spec.read(path, worlds=0)


# ------------------------------------------------------------------------ sampling

def _field(dist, shape=(), kind='param', nominal=0.0, path='x.y'):
  d = spec.Distribution(path, dist.pop('dist'), {k: tuple(v) if isinstance(v, list) else (
      (v,) if k != 'values' else v) for k, v in dist.items() if k != 'relative'},
      dist.get('relative', False))
  return fl.Field(path, kind, d, shape, np.asarray(nominal, np.float64))


def test_sampling_depends_only_on_seed_world_and_path():
  f = _field({'dist': 'normal', 'mean': [0.0, 1.0, 2.0], 'std': [1.0, 2.0, 3.0]}, (3,))
  all_, _ = fl.sample(f, 7, np.arange(4000))
  some, _ = fl.sample(f, 7, np.array([3999, 5, 17]))
  np.testing.assert_array_equal(some, all_[[3999, 5, 17]])
  other, _ = fl.sample(_field({'dist': 'normal', 'mean': [0.0, 1.0, 2.0],
                               'std': [1.0, 2.0, 3.0]}, (3,), path='x.z'), 7, np.arange(4000))
  assert not np.any(other == all_)
  n = len(all_)
  sd = np.array([1.0, 2.0, 3.0])
  assert np.all(np.abs(all_.mean(0) - [0, 1, 2]) < 5 * sd / np.sqrt(n))
  assert np.all(np.abs(all_.std(0) / sd - 1) < 5 / np.sqrt(2 * n))
  t, _ = fl.sample(_field({'dist': 'truncated_normal', 'mean': 0.0, 'std': 1.0, 'low': -0.5,
                           'high': 2.0}), 1, np.arange(4000))
  assert t.min() >= -0.5 and t.max() <= 2.0 and abs(t.mean() - 0.4457) < 5 * 0.6 / np.sqrt(4000)
  ln, _ = fl.sample(_field({'dist': 'lognormal', 'mu': 1.0, 'sigma': 0.5}), 1, np.arange(4000))
  assert abs(np.log(ln).mean() - 1.0) < 5 * 0.5 / np.sqrt(4000)
  u, _ = fl.sample(_field({'dist': 'uniform', 'low': 2.0, 'high': 3.0, 'relative': True},
                          nominal=10.0), 1, np.arange(4000))
  assert u.min() >= 20 and u.max() <= 30 and abs(u.mean() - 25) < 5 * 2.9 / np.sqrt(4000)
  c, idx = fl.sample(_field({'dist': 'choice', 'values': (1.0, 5.0)}), 1, np.arange(4000))
  assert set(np.unique(c)) == {1.0, 5.0} and abs(idx.mean() - 0.5) < 5 * 0.5 / np.sqrt(4000)


# ------------------------------------------------------------------------ running

def test_rows_and_report(reference):
  path, out, rows = reference
  assert list(rows['world']) == list(range(8))
  for col in ('ahrs.angular_velocity_noise_stddev[2]', 'ahrs.latency_s', 'body:yaw_stage.mass',
              'joint:tilt.damping', 'initial:qpos.tilt', 'ahrs.orientation_error_rms_deg',
              'twice', 'pass.attitude', 'pass.rate', 'pass'):
    assert col in rows
  np.testing.assert_array_equal(rows['twice'], 2 * rows['ahrs.orientation_error_rms_deg'])
  np.testing.assert_array_equal(rows['pass'], rows['pass.attitude'] & rows['pass.rate'])
  meta = json.loads((out / 'campaign.json').read_text())
  assert meta['completed'] == [0, 1] and meta['chunks'] == [[0, 4], [4, 8]]
  assert set(meta['hashes']) == {'campaign', 'manifest', 'model', 'profiles', 'packages'}
  summary = json.loads((out / 'summary.json').read_text())
  k = int((~rows['pass.attitude']).sum())
  assert summary['criteria']['attitude']['failures'] == k
  lo, hi = summary['criteria']['attitude']['wilson95']
  assert lo <= k / 8 <= hi
  assert 'fibril-mjx replay' in (out / 'summary.txt').read_text()
  assert (out / 'metrics_hist.png').is_file()
  # the rate error follows the per-world noise std, a term compiled out in the manifest
  assert summary['sensitivity']['ahrs.angular_velocity_error_rms_rad_s'][0][0].startswith(
      'ahrs.angular_velocity_noise_stddev')


def test_rows_do_not_depend_on_chunking(reference, rig):
  path, _, rows = reference
  out = rig / 'one_chunk'
  execute.run(path, out, spec.Overrides(chunk_worlds=8), progress=False, report=False)
  other = execute.read_rows(out)
  assert set(other) == set(rows)
  for k in rows:
    np.testing.assert_array_equal(other[k], rows[k], err_msg=k)


@pytest.fixture(scope='module')
def traced(reference):
  """Worlds 2 and 6 of the reference campaign run again with their trace kept."""
  plan = engine.Plan(spec.read(reference[0]))
  worlds = np.array([2, 6])
  samples = plan.sample(worlds)
  cols, flat = plan.run_worlds(worlds, samples, trace=True)
  return plan, worlds, samples, cols, flat


def test_per_world_values_take_effect(traced):
  plan, worlds, samples, _, flat = traced
  sim = plan.sim
  # latency: each world's deliveries arrive its own whole number of ticks after acquisition
  lat = samples['ahrs.latency_s'][0]
  new = flat['sensor/ahrs/new_data']
  for w in range(2):
    delay = (flat['sensor/ahrs/arrival_tick'][w] - flat['sensor/ahrs/sample_tick'][w])[new[w]]
    r = float(lat[w]) / sim.dt                   # rounded up, float noise (1e-9) tolerated
    want = int(np.ceil(r - 1e-9 * max(r, 1.0)))
    assert np.all(delay == want), (lat[w], delay, want)
  # initial state: the tilt starts at its sampled offset (tick-0 truth of the site)
  from fibril_mjx.analysis import common
  pitch0 = common.rpy_deg(flat['truth/ahrs/orientation'][:, 0])[:, 1]
  q = np.degrees(samples['initial:qpos.tilt'][0])
  np.testing.assert_allclose(pitch0, q, atol=0.05)


def test_criteria_compare_the_metric_values(reference, traced, rig):
  """Each pass column is `min <= metric <= max` of that world's metric (NaN fails), in the
  rows and in the summary's failure counts; thresholds placed between the worlds' values make
  both outcomes occur, so an inverted or swapped comparison fails here."""
  path, out, rows = reference
  att, rate = rows['ahrs.orientation_error_rms_deg'], rows['ahrs.angular_velocity_error_rms_rad_s']
  np.testing.assert_array_equal(rows['pass.attitude'], np.isfinite(att) & (att <= 0.5))
  np.testing.assert_array_equal(rows['pass.rate'], np.isfinite(rate) & (rate <= 0.03))
  summary = json.loads((out / 'summary.json').read_text())
  for name, ok in (('attitude', rows['pass.attitude']), ('rate', rows['pass.rate'])):
    assert summary['criteria'][name]['failures'] == int((~ok).sum())
  # the same trace judged by criteria with thresholds between the two worlds' values
  plan, worlds, _, cols, flat = traced
  for m in ('ahrs.orientation_error_rms_deg', 'ahrs.angular_velocity_error_rms_rad_s'):
    np.testing.assert_array_equal(cols[m], rows[m][worlds], err_msg=m)
  m = 'ahrs.angular_velocity_error_rms_rad_s'        # differs per world (noise std varies)
  a = cols[m]
  assert a[0] != a[1]
  mid = float(a.mean())
  crit = {'below': {'metric': m, 'max': mid}, 'above': {'metric': m, 'min': mid},
          'band': {'metric': m, 'min': float(a.min()), 'max': float(a.min())},
          'nowhere': {'metric': m, 'min': float(a.max()), 'max': float(a.min())}}
  other = engine.Plan(spec.read(write_campaign(rig, 'criteria.yaml', criteria=crit)))
  got = other.metric_columns(plan.sim, flat)
  np.testing.assert_array_equal(got['pass.below'], a <= mid)
  np.testing.assert_array_equal(got['pass.above'], a >= mid)
  np.testing.assert_array_equal(got['pass.band'], a == a.min())
  np.testing.assert_array_equal(got['pass.nowhere'], [False, False])
  assert got['pass.below'].any() and not got['pass.below'].all()
  np.testing.assert_array_equal(got['pass'], got['pass.below'] & got['pass.above']
                                & got['pass.band'] & got['pass.nowhere'])
  nan = {k: (np.full_like(v, np.nan) if k.startswith('sensor/ahrs/angular_velocity')
              and np.issubdtype(v.dtype, np.floating) else v)
         for k, v in flat.items()}
  with np.errstate(all='ignore'):
    got = other.metric_columns(plan.sim, nan)
  assert np.isnan(got[m]).all()
  assert not got['pass.below'].any() and not got['pass.above'].any()


@pytest.mark.parametrize('k,n', [(0, 8), (1, 8), (3, 8), (8, 8), (0, 1), (1, 1), (7, 100),
                                 (50, 100), (999, 1000)])
def test_wilson_interval_is_the_closed_form(k, n):
  """The report's 95 % Wilson interval against SciPy's (the score interval of a binomial
  proportion), and each end solves the score equation |k − np| = z·sqrt(np(1−p))."""
  from scipy import stats
  from fibril_mjx.workflows.campaign import report
  lo, hi = report.wilson(k, n)
  ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method='wilson')
  np.testing.assert_allclose([lo, hi], [ci.low, ci.high], rtol=1e-12, atol=1e-15)
  z = stats.norm.ppf(0.975)
  for p in (lo, hi):
    if 0 < p < 1:
      assert abs(abs(k - n * p) - z * np.sqrt(n * p * (1 - p))) < 1e-9 * max(1, n)
  assert lo <= k / n <= hi


def test_summary_wilson_intervals_are_those_of_the_failure_counts(reference):
  from scipy import stats
  _, out, rows = reference
  summary = json.loads((out / 'summary.json').read_text())
  for name in ('attitude', 'rate'):
    k = int((~rows[f'pass.{name}']).sum())
    ci = stats.binomtest(k, 8).proportion_ci(confidence_level=0.95, method='wilson')
    np.testing.assert_allclose(summary['criteria'][name]['wilson95'], [ci.low, ci.high],
                               rtol=1e-12, atol=1e-15)
    assert summary['criteria'][name]['failure_probability'] == k / 8


def test_replay_equals_its_row_bitwise(reference, tmp_path):
  from fibril_mjx.workflows import replay
  _, out, rows = reference
  res = replay.replay(out, 5, tmp_path / 'r5')
  assert res['equal_to_campaign_row'] is True
  for k, v in res['metrics'].items():
    assert np.asarray(v, rows[k].dtype) == rows[k][5], k
  assert (tmp_path / 'r5' / 'trace.npz').is_file()


def test_static_choice_groups_compile_once_each(rig, tmp_path):
  path = write_campaign(rig, 'other.yaml', vary={
      'ahrs.period_s': {'dist': 'choice', 'values': [0.004, 0.008]},
      'ahrs.angular_velocity_bias': VARY['ahrs.angular_velocity_bias']}, worlds=6,
      chunk_worlds=6)
  plan = engine.Plan(spec.read(path))
  rows = plan.run_chunk(0, 6)
  assert set(plan.group_sims) == {(0,), (1,)}
  per = np.asarray(rows['ahrs.period_s'])
  assert set(per) == {0.004, 0.008}
  for g, p in ((0, 0.004), (1, 0.008)):
    assert np.all(per[rows['group'] == g] == p)
    assert plan.group_sims[(g,)].components['ahrs'].cfg.period_s == p


# ------------------------------------------------------------------------ resume

def test_resume_refuses_when_a_hash_differs(reference, tmp_path):
  path, out, _ = reference
  changed = tmp_path / 'campaign.yaml'
  text = path.read_text().replace('manifest: manifest.yaml',
                                  f'manifest: {path.parent / "manifest.yaml"}')
  changed.write_text(text + '# edited\n')
  with pytest.raises(FibrilError, match=r'cannot resume: hashes\.campaign differ'):
    execute.run(changed, out, resume=True, progress=False)
  with pytest.raises(FibrilError, match='not empty .*--resume'):
    execute.run(path, out, progress=False)


def test_resume_runs_only_the_unfinished_chunks(reference, tmp_path, monkeypatch):
  """A directory with chunk 0 of 2 finished: resume runs chunk 1 (worlds 4-8) and nothing
  else, and the rows equal the uninterrupted run; resuming a finished run runs no chunk."""
  import shutil
  path, ref_out, rows = reference
  out = tmp_path / 'half'
  shutil.copytree(ref_out / 'parts', out / 'parts')
  meta = json.loads((ref_out / 'campaign.json').read_text())
  meta['completed'] = [0]
  (out / 'campaign.json').write_text(json.dumps(meta))
  (out / 'parts' / 'part-00001.parquet').unlink()
  ran = []
  real = engine.Plan.run_chunk

  def counted(self, lo, hi):
    ran.append((lo, hi))
    return real(self, lo, hi)

  monkeypatch.setattr(engine.Plan, 'run_chunk', counted)
  got_meta = execute.run(path, out, resume=True, progress=False, report=False)
  assert ran == [(4, 8)]
  assert got_meta['completed'] == [0, 1]
  got = execute.read_rows(out)
  for k in rows:
    np.testing.assert_array_equal(got[k], rows[k], err_msg=k)
  ran.clear()
  execute.run(path, out, resume=True, progress=False, report=False)
  assert ran == []


def test_damaged_parts_are_named_and_redone_by_resume(reference, tmp_path, monkeypatch, capsys):
  """Part 0 truncated to half, part 1 deleted (issue 67): campaign.json's record names them;
  reading the rows and replay say which part and --resume in one line; --resume says which
  and why and runs those two chunks again, and the rows equal the undamaged run's."""
  import shutil
  from fibril_mjx.workflows import replay
  path, ref_out, rows = reference
  meta = json.loads((ref_out / 'campaign.json').read_text())
  for i, (lo, hi) in enumerate(meta['chunks']):
    p = execute.part_path(ref_out, i)
    assert meta['parts'][str(i)] == {'rows': hi - lo, 'sha256': parts.sha256(p)}
  out = tmp_path / 'damaged'
  shutil.copytree(ref_out, out)
  part0, part1 = execute.part_path(out, 0), execute.part_path(out, 1)
  part0.write_bytes(part0.read_bytes()[:part0.stat().st_size // 2])
  part1.unlink()
  for read in (lambda: execute.read_rows(out), lambda: replay.replay(out, 5, tmp_path / 'r')):
    with pytest.raises(FibrilError) as info:
      read()
    assert str(info.value) == (f'{part0}: campaign part damaged or replaced: its SHA-256 is not '
                               'the one campaign.json recorded; run the campaign again with '
                               f'--resume --out {out} to redo it')
  ran = []
  real = engine.Plan.run_chunk
  monkeypatch.setattr(engine.Plan, 'run_chunk',
                      lambda self, lo, hi: ran.append((lo, hi)) or real(self, lo, hi))
  capsys.readouterr()
  execute.run(path, out, resume=True, progress=False, report=False)
  assert ran == [(0, 4), (4, 8)]
  assert capsys.readouterr().err.splitlines() == [
      f'resume: {part0}: damaged or replaced: its SHA-256 is not the one campaign.json '
      'recorded; running chunk 0 (worlds 0..3) again',
      f'resume: {part1}: missing; running chunk 1 (worlds 4..7) again']
  got = execute.read_rows(out)
  for k in rows:
    np.testing.assert_array_equal(got[k], rows[k], err_msg=k)


def test_sigkilled_run_resumed_yields_the_uninterrupted_rows(reference, rig, tmp_path):
  path, _, rows = reference
  out = tmp_path / 'killed'
  # The suite's compilation cache (tests/conftest.py), warm after the first run: the kill
  # lands after the first chunk's part file, when every program of the run is compiled (its
  # chunks all have 2 worlds), so the race between the kill and the other chunks is the same
  # as with a cold private cache, which cost two cold compiles of the CLI per run.
  env = dict(os.environ, FIBRIL_MJX_NO_PROGRESS='1')
  cmd = [FIBRIL, 'campaign', str(path), '--out', str(out), '--chunk-worlds', '2']
  proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  try:
    deadline = time.monotonic() + 300
    while not list((out / 'parts').glob('part-*.parquet')):
      assert proc.poll() is None, proc.stderr.read().decode()
      assert time.monotonic() < deadline
      time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
  finally:
    proc.kill()
    proc.wait()
  done = json.loads((out / 'campaign.json').read_text())['completed']
  assert len(done) < 4
  r = subprocess.run(cmd + ['--resume'], env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr
  got = execute.read_rows(out)
  assert set(got) == set(rows)
  for k in rows:
    np.testing.assert_array_equal(got[k], rows[k], err_msg=k)
  assert not list((out / 'parts').glob('.*'))   # no temporary files left behind


# ------------------------------------------------------------------------ profiles per world

IMU = {'id': 'imu', 'type': 'fibril_sim/imu',
       'config': {'profiles': {'device': 'icm42688p_nominal'}, 'gyroscope_sensor': 'gyro',
                  'accelerometer_sensor': 'accel'}}
PROFILES = ['icm42688p_nominal', 'bmi088_nominal']


def _plain_trace(manifest, worlds, seed, n_ticks, sub_batch, physics='mjx', **kw):
  """A plain `fibril_mjx.load` rollout of `worlds` (global indices), laid out as the campaign
  lays out a batch (padded on the host by repeating worlds, the same sub-batch), on the
  campaign's physics backend (`plan.physics`)."""
  import jax
  import jax.numpy as jnp
  import fibril_mjx
  from fibril_mjx.batch import worlds as worlds_axis
  from fibril_mjx.analysis import common
  sim = fibril_mjx.load(manifest, physics=physics)
  n = len(worlds)
  per = len(worlds_axis.resolve_devices(None)) * sub_batch
  idx = np.arange(-(-n // per) * per) % n
  keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(
      jnp.asarray(np.asarray(worlds)[idx], jnp.uint32))
  _, tr, _ = sim.rollout(sim.default_params(len(idx)), keys, n_ticks, **kw,
                         options=Options(sub_batch=sub_batch))
  return common.flatten(jax.tree.map(lambda x: np.asarray(x)[:n], tr))


@pytest.fixture(scope='module')
def imu_rig(tmp_path_factory):
  d = tmp_path_factory.mktemp('imu_campaign')
  write_rig(d, [IMU])
  return d


def test_profile_choice_per_world_equals_a_plain_load(imu_rig, tmp_path):
  path = write_campaign(imu_rig, 'profiles.yaml', worlds=6, chunk_worlds=6, duration_s=0.04,
                        vary={'imu.profiles.device': {'dist': 'choice', 'values': PROFILES}},
                        metrics=None, criteria={
                            'rate': {'metric': 'imu.angular_velocity_error_rms_rad_s',
                                     'max': 0.002}})
  out = tmp_path / 'out'
  execute.run(path, out, progress=False)
  rows = execute.read_rows(out)
  chosen = rows['imu.profiles.device']
  assert set(chosen) == set(PROFILES)           # the profile id per world, as a string
  plan = engine.Plan(spec.read(path))
  assert len(plan.group_sims) == 1              # a plan builds a group when it runs one
  for k, pid in enumerate(PROFILES):
    worlds = np.nonzero(chosen == pid)[0]
    samples = plan.sample(worlds)
    cols, flat = plan.run_worlds(worlds, samples, trace=True)
    sim = plan.group_sims[(k,)]
    assert sim.components['imu'].cfg.period_s == {'icm42688p_nominal': 0.002,
                                                  'bmi088_nominal': 0.0025}[pid]
    manifest = write_rig(tmp_path / pid, [{**IMU, 'config': {
        **IMU['config'], 'profiles': {'device': pid}}}])
    ref = _plain_trace(manifest, worlds, 3, plan.n_ticks, plan.sub_batch(sim), plan.physics)
    assert set(ref) == set(flat)
    for name in flat:
      np.testing.assert_array_equal(flat[name], ref[name], err_msg=f'{pid}: {name}')
    for m, v in cols.items():
      np.testing.assert_array_equal(rows[m][worlds], v, err_msg=m)
  summary = json.loads((out / 'summary.json').read_text())
  per = summary['by_choice']['imu.profiles.device']
  assert set(per) == set(PROFILES)
  for pid in PROFILES:
    sel = chosen == pid
    assert per[pid]['worlds'] == int(sel.sum())
    assert per[pid]['failures'] == int((~rows['pass'][sel]).sum())
  assert 'by choice' in (out / 'summary.txt').read_text()


@pytest.mark.parametrize('values, message', [
    (['icm42688p_nominal', 'bmi088_nomimal'],
     "vary.imu.profiles.device.values[1] = 'bmi088_nomimal': unknown profile (did you mean "
     "'bmi088_nominal'?); device profiles for fibril_sim/imu: bmi088_nominal, "
     "icm42688p_nominal"),
    (['r6093u_nominal'],
     "vary.imu.profiles.device.values[0] = 'r6093u_nominal': profile 'r6093u_nominal' is for "
     "fibril_sim/ahrs, not fibril_sim/imu (component 'imu')"),
    (['r6093u_empirical'], "is for fibril_sim/ahrs, not fibril_sim/imu"),
])
def test_bad_profile_choice_is_one_line(imu_rig, capsys, tmp_path, values, message):
  path = write_campaign(imu_rig, 'bad_profiles.yaml', metrics=None, criteria={},
                        vary={'imu.profiles.device': {'dist': 'choice', 'values': values}})
  rc, lines = _cli_errors(capsys, ['campaign', str(path), '--out', str(tmp_path / 'o')])
  assert rc == 2 and len(lines) == 1, lines
  assert message in lines[0] and str(path) in lines[0]


def test_profile_layer_and_dist_rules(imu_rig, capsys, tmp_path):
  for vary, message in (
      ({'imu.profiles.devise': {'dist': 'choice', 'values': PROFILES}},
       "unknown profile layer (did you mean 'device'?)"),
      ({'imu.profiles.device': {'dist': 'uniform', 'low': 0, 'high': 1}},
       'only dist: choice is allowed'),
      ({'imu.profiles': {'dist': 'choice', 'values': ['bmi088_nominal']}},
       "each choice must be a mapping of profile layer to profile id")):
    path = write_campaign(imu_rig, 'bad_profiles.yaml', metrics=None, criteria={}, vary=vary)
    rc, lines = _cli_errors(capsys, ['campaign', str(path), '--out', str(tmp_path / 'o')])
    assert rc == 2 and len(lines) == 1 and message in lines[0], lines


# ------------------------------------------------------------------------ scenario

STILL_YAW = [{'actuator': 'yaw_motor', 'amplitude': 0.0},
             {'actuator': 'tilt_motor', 'waveform': 'square', 'amplitude': 2.0,
              'frequency_hz': 5.0}]


def test_scenario_replaces_the_manifest_drive(rig, tmp_path):
  base = write_campaign(rig, 'nominal.yaml', vary={}, worlds=2, chunk_worlds=2)
  path = write_campaign(rig, 'scenario.yaml', vary={}, worlds=2, chunk_worlds=2,
                        scenario={'actuator_script': STILL_YAW})
  flats = {}
  for name, p in (('nominal', base), ('scenario', path)):
    plan = engine.Plan(spec.read(p))
    _, flats[name] = plan.run_worlds(np.arange(2), trace=True)
  sim = plan.sim
  assert tuple(s.amplitude for s in sim.actuator_script.entries) == (0.0, 2.0)
  w_nom, w_sc = (flats[k]['truth/ahrs/angular_velocity'] for k in ('nominal', 'scenario'))
  # yaw held at rest: no yaw rate reaches the IMU; the square tilt drive swings the tilt fast
  assert np.abs(w_nom[..., 2]).max() > 0.05 and np.abs(w_sc[..., 2]).max() < 1e-6
  assert np.abs(w_sc[..., 1]).max() > 1.5 * np.abs(w_nom[..., 1]).max()
  # the same as the manifest written with that drive
  manifest = write_rig(tmp_path / 'm', [ahrs_entry(period_s=0.004)], script=STILL_YAW)
  ref = _plain_trace(manifest, np.arange(2), 3, plan.n_ticks, plan.sub_batch(sim), plan.physics)
  for name in ref:
    np.testing.assert_array_equal(flats['scenario'][name], ref[name], err_msg=name)


@pytest.mark.parametrize('scenario, message', [
    ({'actuator_scripts': []},
     "scenario.actuator_scripts = []: unknown key; expected actuator_script or command_script "
     "(did you mean 'actuator_script'?)"),
    ({'actuator_script': [{'actuator': 'yaw_motor', 'amplitude': 'big'}]},
     "scenario.actuator_script[0].amplitude = 'big'"),
    ({'actuator_script': [{'actuator': 'yaw_motr', 'amplitude': 1.0}]},
     "scenario.actuator_script[0].actuator = 'yaw_motr': no MuJoCo actuator of that name "
     "(did you mean 'yaw_motor'?)"),
    ({'command_script': [{'component': 'ahrs', 'kind': 'value'}]},
     "scenario.command_script[0].component = 'ahrs': 'ahrs' is a fibril_sim/ahrs, not an "
     "actuator component"),
])
def test_bad_scenario_is_one_line(rig, capsys, tmp_path, scenario, message):
  path = write_campaign(rig, 'bad_scenario.yaml', vary={}, scenario=scenario)
  rc, lines = _cli_errors(capsys, ['campaign', str(path), '--out', str(tmp_path / 'o')])
  assert rc == 2 and len(lines) == 1, lines
  assert message in lines[0] and str(path) in lines[0], lines[0]


# ------------------------------------------------------------------------ per-world latency

def test_per_world_latency_equals_the_manifest_latency_bitwise(tmp_path):
  """`Simulation.rollout(latency=)`, the public input the campaign uses, against builds with
  each latency in the manifest (with jitter: the seconds path of the queue too)."""
  import fibril_mjx
  from fibril_mjx.errors import FibrilError as Err
  lat = np.array([0.0, 0.004, 0.0121, 0.004])
  worlds = np.arange(len(lat))
  entry = lambda v: ahrs_entry(period_s=0.004, latency_s=v, jitter_s=0.001)  # noqa: E731
  big = fibril_mjx.load(write_rig(tmp_path / 'max', [entry(float(lat.max()))]))
  assert big.latency_fields() == {'ahrs': ('latency_s',)}
  got = _plain_trace(big.manifest.path, worlds, 5, 30, 2,
                     start=Start(latency={'ahrs': {'latency_s': lat}}))
  for v in np.unique(lat):
    ref = _plain_trace(write_rig(tmp_path / f'{v:g}', [entry(float(v))]), worlds, 5, 30, 2)
    sel = lat == v
    for name in ref:
      np.testing.assert_array_equal(got[name][sel], ref[name][sel], err_msg=f'{v}: {name}')
  delay = got['sensor/ahrs/arrival_tick'] - got['sensor/ahrs/sample_tick']
  new = got['sensor/ahrs/new_data'].astype(bool)
  assert delay[0][new[0]].max() < delay[3][new[3]].min()   # 0 s vs 12.1 ms (± jitter)
  keys = fibril_mjx.world_keys(0, 2)
  p = big.default_params(2)
  with pytest.raises(Err, match=r"exceeds the built latency_s 0.0121 s, which sized the queue"):
    big.reset(p, keys, start=Start(latency={'ahrs': {'latency_s': [0.0, 0.02]}}))
  with pytest.raises(Err, match=r"component 'ahr': no component of that id \(did you mean "
                                r"'ahrs'\?\)"):
    big.reset(p, keys, start=Start(latency={'ahr': {'latency_s': 0.0}}))
  with pytest.raises(Err, match=r"not a transport latency of fibril_sim/ahrs \(latency_s\) "
                                r"\(did you mean 'latency_s'\?\)"):
    big.reset(p, keys, start=Start(latency={'ahrs': {'latency': 0.0}}))
  with pytest.raises(Err, match='finite and >= 0'):
    big.reset(p, keys, start=Start(latency={'ahrs': {'latency_s': [-0.001, 0.0]}}))


def test_per_world_model_fields_as_a_mapping(rig):
  """`rollout(model={field: (nworld, ...)})` (what the campaign passes: the rest of the model
  stays compiled in) agrees with each world's model as an `mjx.Model` traced as an argument
  (one world at a time), and is checked."""
  import jax
  import jax.numpy as jnp
  import fibril_mjx
  from fibril_mjx.errors import FibrilError as Err
  sim = fibril_mjx.load(rig / 'manifest.yaml')
  damping = np.array([[0.05, 0.2], [3.0, 0.01]], np.float32)
  keys, p = fibril_mjx.world_keys(0, 2), sim.default_params(2)
  quiet = Options(record=False, share_physics=False)   # a world's own physics, as the mapping's
  a, _, _ = sim.rollout(p, keys, 30, model={'dof_damping': damping}, options=quiet)
  host = jax.tree.map(np.asarray, sim.mx)   # an argument may go to any device
  for w in range(2):
    one = jax.tree.map(lambda x: x[w:w + 1], p)
    b, _, _ = sim.rollout(one, keys[w:w + 1], 30, options=quiet,
                          model=host.replace(dof_damping=jnp.asarray(damping[w])))
    np.testing.assert_allclose(np.asarray(a.data.qvel)[w], np.asarray(b.data.qvel)[0],
                               rtol=1e-5, atol=1e-6)
  assert abs(float(a.data.qvel[1, 0])) < abs(float(a.data.qvel[0, 0]))   # more yaw damping
  with pytest.raises(Err, match=r"no field 'dof_dampin' \(did you mean 'dof_damping'\?\)"):
    sim.rollout(p, keys, 2, model={'dof_dampin': damping})
  with pytest.raises(Err, match='leading world axis'):
    sim.rollout(p, keys, 2, model={'dof_damping': damping[:1]})


def test_per_world_mjcf_values_reach_the_physics_as_in_mujoco_c(traced, rig):
  """The campaign path (sampled `body:yaw_stage.mass`, `joint:tilt.damping` and
  `initial:qpos.tilt` of worlds 2 and 6, through `Plan.run_worlds`) against MuJoCo C, float64,
  with each world's values written into its own `MjModel`: the AHRS truth gyro (the MuJoCo
  gyro at the site, before any device error) agrees tick by tick; the damping or the initial
  tilt put back to its nominal value moves the C gyro by far more than that tolerance, so
  either value sampled but not reaching the physics fails here. (The yaw stage's mass sits on
  its axis: its value is in the C model too, but moves this gyro by ~1e-7 only.)"""
  import mujoco
  plan, worlds, samples, _, flat = traced
  got = np.asarray(flat['truth/ahrs/angular_velocity'], np.float64)     # (2, T + 1, 3)
  ticks = got.shape[1] - 1
  m0 = mujoco.MjModel.from_xml_path(str(rig / 'rig.xml'))
  body = mujoco.mj_name2id(m0, mujoco.mjtObj.mjOBJ_BODY, 'yaw_stage')
  tilt = mujoco.mj_name2id(m0, mujoco.mjtObj.mjOBJ_JOINT, 'tilt')
  gyro = m0.sensor_adr[mujoco.mj_name2id(m0, mujoco.mjtObj.mjOBJ_SENSOR, 'gyro')]
  script = [(mujoco.mj_name2id(m0, mujoco.mjtObj.mjOBJ_ACTUATOR, s['actuator']),
             s['amplitude'], s['frequency_hz']) for s in SCRIPT]

  def c_gyro(mass, damping, tilt0):
    m = mujoco.MjModel.from_xml_path(str(rig / 'rig.xml'))
    m.body_mass[body] = mass
    m.dof_damping[m.jnt_dofadr[tilt]] = damping
    d = mujoco.MjData(m)
    d.qpos[m.jnt_qposadr[tilt]] += tilt0
    out = []
    for k in range(ticks + 1):    # tick k: its controls, forward, read; then the step
      for a, amp, f in script:
        d.ctrl[a] = amp * np.sin(2 * np.pi * f * k * m.opt.timestep)
      mujoco.mj_forward(m, d)
      out.append(d.sensordata[gyro:gyro + 3].copy())
      mujoco.mj_step(m, d)
    return np.asarray(out)

  tol = 1e-5 * np.abs(got).max() + 1e-6      # float32 MJX over 30 ticks (seen: 3e-8)
  for w in range(len(worlds)):
    values = [float(samples[k][0][w]) for k in ('body:yaw_stage.mass', 'joint:tilt.damping',
                                                  'initial:qpos.tilt')]
    ref = c_gyro(*values)
    np.testing.assert_allclose(got[w], ref, rtol=0, atol=tol, err_msg=f'world {worlds[w]}')
    for i, nom in ((1, m0.dof_damping[m0.jnt_dofadr[tilt]]), (2, 0.0)):
      other = c_gyro(*[nom if j == i else v for j, v in enumerate(values)])
      assert np.abs(got[w] - other).max() > 10 * tol, (i, values)
