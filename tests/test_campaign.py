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

from conftest import ahrs_entry, write_rig
from fibril_mjx import cli
from fibril_mjx.campaign import engine, execute, fields as fl, spec
from fibril_mjx.errors import FibrilError

ROOT = pathlib.Path(__file__).resolve().parents[1]
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
  execute.run(path, out, chunk_worlds=8, progress=False, report=False)
  other = execute.read_rows(out)
  assert set(other) == set(rows)
  for k in rows:
    np.testing.assert_array_equal(other[k], rows[k], err_msg=k)


def test_per_world_values_take_effect(reference):
  path = reference[0]
  plan = engine.Plan(spec.read(path))
  worlds = np.array([2, 6])
  samples = plan.sample(worlds)
  _, flat = plan.run_worlds(worlds, samples, trace=True)
  sim = plan.sim
  # latency: each world's deliveries arrive its own whole number of ticks after acquisition
  lat = samples['ahrs.latency_s'][0]
  new = flat['sensor/ahrs/new_data']
  for w in range(2):
    delay = (flat['sensor/ahrs/arrival_tick'][w] - flat['sensor/ahrs/sample_tick'][w])[new[w]]
    assert np.all(delay == engine.latency_ticks(lat[w], sim.dt)), (lat[w], delay)
  # initial state: the tilt starts at its sampled offset (tick-0 truth of the site)
  from fibril_mjx.analysis import common
  pitch0 = common.rpy_deg(flat['truth/ahrs/orientation'][:, 0])[:, 1]
  q = np.degrees(samples['initial:qpos.tilt'][0])
  np.testing.assert_allclose(pitch0, q, atol=0.05)


def test_replay_equals_its_row_bitwise(reference, tmp_path):
  from fibril_mjx import replay
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


def test_sigkilled_run_resumed_yields_the_uninterrupted_rows(reference, rig, tmp_path):
  path, _, rows = reference
  out = tmp_path / 'killed'
  env = dict(os.environ, FIBRIL_MJX_NO_PROGRESS='1', FIBRIL_MJX_CACHE=str(rig / 'jaxcache'))
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
