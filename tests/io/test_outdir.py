"""fibril_mjx.io.outdir: the one output directory / file of every workflow — refused when it
holds something (unless overwrite), staged beside it, in place only when complete."""

from __future__ import annotations

import os

import pytest

from fibril_mjx.errors import FibrilError
from fibril_mjx.io import outdir


def _hidden(d):
  return sorted(p.name for p in d.iterdir() if p.name.startswith('.'))


def test_claim_refuses_a_non_empty_directory_and_accepts_an_empty_one(tmp_path):
  out = tmp_path / 'out'
  assert outdir.claim(out) == out                  # absent: free
  out.mkdir()
  assert outdir.claim(str(out)) == out             # empty: free
  (out / 'summary.txt').write_text('old')
  with pytest.raises(FibrilError, match=r'out: output directory exists and is not empty '
                     r'\(use --overwrite\)$'):
    outdir.claim(out)
  with pytest.raises(FibrilError, match=r'\(use --resume to continue it\)$'):
    outdir.claim(out, hint='use --resume to continue it')
  assert outdir.claim(out, overwrite=True) == out
  f = tmp_path / 'file'
  f.write_text('x')
  with pytest.raises(FibrilError, match=r'file: exists and is not a directory'):
    outdir.claim(f)


def test_staged_replaces_only_when_complete(tmp_path):
  out = tmp_path / 'a' / 'out'                      # parents are created
  with outdir.staged(out) as tmp:
    assert tmp.parent == out.parent and tmp.name == f'.out.partial-{os.getpid()}'
    (tmp / 'x.txt').write_text('1')
    assert not out.exists()                         # nothing visible while writing
  assert (out / 'x.txt').read_text() == '1' and _hidden(out.parent) == []
  # overwrite: the old results stay until the new ones are complete, then vanish entirely
  with outdir.staged(out) as tmp:
    (tmp / 'y.txt').write_text('2')
    assert (out / 'x.txt').read_text() == '1'
  assert sorted(p.name for p in out.iterdir()) == ['y.txt']


@pytest.mark.parametrize('exc', [RuntimeError, KeyboardInterrupt])
def test_a_failed_or_interrupted_block_leaves_nothing(tmp_path, exc):
  out = tmp_path / 'out'
  with pytest.raises(exc):
    with outdir.staged(out) as tmp:
      (tmp / 'half.txt').write_text('half')
      raise exc()
  assert not out.exists() and _hidden(tmp_path) == []
  # an existing result is kept as it was
  out.mkdir()
  (out / 'old.txt').write_text('old')
  with pytest.raises(exc):
    with outdir.staged(out) as tmp:
      raise exc()
  assert sorted(p.name for p in out.iterdir()) == ['old.txt'] and _hidden(tmp_path) == []


def test_functional_stage_commit_discard(tmp_path):
  out = tmp_path / 'out'
  tmp = outdir.stage(out)
  (tmp / 'a').write_text('a')
  outdir.commit(tmp, out)
  assert (out / 'a').is_file() and not tmp.exists()
  tmp = outdir.stage(out)
  outdir.discard(tmp)
  assert not tmp.exists() and (out / 'a').is_file()


@pytest.mark.parametrize('fsync', [False, True])
def test_files(tmp_path, fsync):
  out = tmp_path / 'x.mcap'
  assert outdir.claim_file(out) == out
  outdir.write_file(out, b'abc', fsync=fsync)
  assert out.read_bytes() == b'abc'
  with pytest.raises(FibrilError, match=r'x\.mcap: already exists \(use --overwrite to '
                     r'replace it\)$'):
    outdir.claim_file(out)
  assert outdir.claim_file(out, overwrite=True) == out
  with pytest.raises(ValueError):
    with outdir.staged_file(out, fsync=fsync) as tmp:
      tmp.write_bytes(b'partial')
      raise ValueError
  assert out.read_bytes() == b'abc' and _hidden(tmp_path) == []
  with outdir.staged_file(out, fsync=fsync) as tmp:
    tmp.write_bytes(b'new')
    assert out.read_bytes() == b'abc'
  assert out.read_bytes() == b'new' and _hidden(tmp_path) == []
