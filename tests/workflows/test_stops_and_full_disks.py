"""The edges a long job meets (issue 67): too little free space refused before the first step,
a write error (disk full, permission, read-only) in one line with nothing half-written left,
SIGTERM ending `run` (nothing kept) and `campaign` (at a chunk boundary, resumable), and a
staging directory of a killed run removed by the next run into the same --out."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import ahrs_entry, write_rig
from fibril_mjx import cli
from fibril_mjx.errors import FibrilError
from fibril_mjx.io import outdir, traces as traces_io
from fibril_mjx.workflows import run as runner, stopping
from fibril_mjx.workflows.campaign import engine, execute

pytestmark = pytest.mark.usefixtures('plain_messages')


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
  d = tmp_path_factory.mktemp('edges')
  manifest = write_rig(d, [ahrs_entry(period_s=0.004)])
  camp = d / 'campaign.yaml'
  camp.write_text(yaml.safe_dump({
      'fibril_campaign': 1, 'manifest': 'manifest.yaml', 'worlds': 4, 'seed': 1,
      'duration_s': 0.02, 'chunk_worlds': 2,
      'vary': {'ahrs.latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.01}},
      'metrics': ['ahrs.orientation_error_rms_deg']}, sort_keys=False))
  return manifest, camp


def _run(manifest, out):
  # MuJoCo C: nothing closes a loop on the physics here
  return runner.run(manifest, worlds=2, seed=0, duration_s=0.02, out=out,
                    options=runner.RunOptions(trace_worlds=1, physics='c'))


def _leftovers(d):
  return sorted(p.name for p in d.iterdir() if '.partial-' in p.name)


def _full_disk(monkeypatch, free=3 * 2 ** 20):
  usage = shutil.disk_usage('/')
  monkeypatch.setattr(shutil, 'disk_usage', lambda p: usage._replace(free=free))


def _never(*a, **k):
  raise AssertionError('a step ran')


# ------------------------------------------------------------------------ free space

def test_run_without_space_is_refused_before_the_first_step(rig, tmp_path, monkeypatch):
  manifest, _ = rig
  _full_disk(monkeypatch, free=2 ** 19)
  monkeypatch.setattr(runner, '_run_chunk', _never)
  with pytest.raises(FibrilError) as info:
    _run(manifest, tmp_path / 'out')
  assert str(info.value).startswith(f'{tmp_path / "out"}: the run needs about 1.')
  assert str(info.value).endswith(f' MiB, 0.5 MiB free on {tmp_path}; free some space or write '
                                  'to another file system')
  assert list(tmp_path.iterdir()) == []


def test_campaign_without_space_is_refused_before_the_first_step(rig, tmp_path, monkeypatch):
  _, camp = rig
  _full_disk(monkeypatch, free=2 ** 19)
  monkeypatch.setattr(engine.Plan, 'run_chunk', _never)
  with pytest.raises(FibrilError, match=r'the campaign needs about 1\.0 MiB, 0\.5 MiB free on'):
    execute.run(camp, tmp_path / 'c', progress=False)


def test_check_space_names_the_nearest_existing_parent(tmp_path, monkeypatch):
  _full_disk(monkeypatch, free=0)
  with pytest.raises(FibrilError) as info:
    outdir.check_space(tmp_path / 'a' / 'b', 2 ** 20, 'the export')
  assert str(info.value) == (f'{tmp_path / "a" / "b"}: the export needs about 1.0 MiB, 0.0 MiB '
                             f'free on {tmp_path}; free some space or write to another file '
                             'system')
  outdir.check_space(tmp_path / 'a', 0, 'nothing')


# ------------------------------------------------------------------------ write errors

@pytest.mark.parametrize('code', [errno.ENOSPC, errno.EACCES, errno.EROFS])
def test_run_write_error_is_one_line_and_keeps_nothing(rig, tmp_path, monkeypatch, code):
  manifest, _ = rig

  def fail(self, flat, lo, hi, t0):
    raise OSError(code, os.strerror(code), str(self.folder / 'x.npy'))

  monkeypatch.setattr(traces_io.TraceFile, 'write', fail)
  out = tmp_path / 'out'
  with pytest.raises(FibrilError) as info:
    _run(manifest, out)
  staged = outdir.staging_path(out)
  assert str(info.value) == (f'{staged}/.trace/x.npy: cannot write: {os.strerror(code)} '
                             f'(nothing kept: {out} is written by a complete run only; run it '
                             'again)')
  assert list(tmp_path.iterdir()) == []


def test_campaign_disk_full_keeps_the_parts_and_resumes(rig, tmp_path, monkeypatch):
  """The second part's write fails (ENOSPC): one line, the first part kept, no staged file
  left; --resume runs the second chunk only and the rows equal an uninterrupted run's."""
  _, camp = rig
  ref = tmp_path / 'ref'
  execute.run(camp, ref, progress=False, report=False)
  out = tmp_path / 'full'
  real = execute.write_part
  calls = []

  def full(path, cols):
    calls.append(path)
    if len(calls) == 2:
      raise OSError(errno.ENOSPC, 'No space left on device', str(path))
    return real(path, cols)

  monkeypatch.setattr(execute, 'write_part', full)
  with pytest.raises(FibrilError) as info:
    execute.run(camp, out, progress=False, report=False)
  assert str(info.value) == (f'{execute.part_path(out, 1)}: cannot write: No space left on '
                             f'device (1 of 2 parts kept in {out}; continue with --resume)')
  assert sorted(p.name for p in (out / 'parts').iterdir()) == ['part-00000.parquet']
  monkeypatch.setattr(execute, 'write_part', real)
  execute.run(camp, out, resume=True, progress=False, report=False)
  got, want = execute.read_rows(out), execute.read_rows(ref)
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)


# ------------------------------------------------------------------------ signals

def _dead_pid() -> int:
  p = subprocess.Popen([sys.executable, '-c', 'pass'])
  p.wait()
  return p.pid


def test_stale_staging_entries_of_dead_processes_are_removed(tmp_path):
  out = tmp_path / 'out'
  dead = tmp_path / f'.out.partial-{_dead_pid()}'
  (dead / 'sub').mkdir(parents=True)
  dead_file = tmp_path / f'.out.partial-{_dead_pid()}0'   # a file, as staged_file leaves
  alive = tmp_path / f'.out.partial-{os.getppid()}'
  alive.mkdir()
  other = tmp_path / f'.outer.partial-{_dead_pid()}'
  other.mkdir()
  dead_file.write_text('x')
  tmp = outdir.stage(out)
  assert _leftovers(tmp_path) == sorted([tmp.name, alive.name, other.name])


def test_sigterm_ends_run_keeping_nothing(rig, tmp_path, monkeypatch, capsys):
  """SIGTERM during the first chunk: exit status 143, one line, no --out, no staging directory
  (and the one a SIGKILLed run left is gone too); the handlers are restored afterwards."""
  manifest, _ = rig
  out = tmp_path / 'out'
  (tmp_path / f'.out.partial-{_dead_pid()}').mkdir()
  real = runner._run_chunk

  def preempted(*a, **k):
    real(*a, **k)
    os.kill(os.getpid(), signal.SIGTERM)

  monkeypatch.setattr(runner, '_run_chunk', preempted)
  before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
  assert cli.main(['run', str(manifest), '--worlds', '2', '--duration', '0.02', '--out',
                   str(out), '--chunk-worlds', '1', '--physics', 'c']) == 128 + signal.SIGTERM
  assert capsys.readouterr().err.splitlines()[-1] == (
      f'stopped by SIGTERM: nothing kept: {out} is written by a complete run only; run it again')
  assert list(tmp_path.iterdir()) == []
  assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_sigterm_ends_campaign_at_a_chunk_boundary(rig, tmp_path, monkeypatch):
  """SIGTERM during chunk 0: chunk 0 finishes and is kept, chunk 1 does not start; --resume
  runs chunk 1 only."""
  _, camp = rig
  out = tmp_path / 'c'
  real = engine.Plan.run_chunk
  ran = []

  def preempted(self, lo, hi):
    ran.append(lo)
    if lo == 0:
      os.kill(os.getpid(), signal.SIGTERM)
    return real(self, lo, hi)

  monkeypatch.setattr(engine.Plan, 'run_chunk', preempted)
  with pytest.raises(stopping.Stopped) as info:
    execute.run(camp, out, progress=False, report=False)
  assert info.value.signum == signal.SIGTERM
  assert str(info.value) == (f'stopped by SIGTERM: 1 of 2 parts kept in {out}; continue with '
                             '--resume')
  assert ran == [0]
  assert _leftovers(out / 'parts') == [] and _leftovers(out) == []
  execute.run(camp, out, resume=True, progress=False, report=False)
  assert ran == [0, 2]
