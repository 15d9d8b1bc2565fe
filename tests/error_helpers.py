"""Helpers for asserting one-line user errors (`file: path = value: rule`), shared by the
validation tests of every layer."""

from __future__ import annotations

import errno
import os
import pathlib
import shutil

import pytest

import fibril_mjx
from fibril_mjx.errors import ConfigError, ConfigErrors, FibrilError

NO_VALUE = object()

GE0 = 'input should be greater than or equal to 0'
GT0 = 'input should be greater than 0'
FINITE = 'input should be a finite number'


def write(path: pathlib.Path, text: str) -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text, encoding='utf-8')
  return path


def load_error(manifest) -> FibrilError:
  with pytest.raises(FibrilError) as info:
    fibril_mjx.load(str(manifest))
  err = info.value
  for line in str(err).splitlines():
    assert line.strip(), f'empty line in error message: {str(err)!r}'
    assert 'Traceback' not in line
  return err


def assert_line(err: Exception, start: str, *fragments: str) -> str:
  """Some line of `err` starts with `start` and contains every fragment, in order."""
  lines = str(err).splitlines()
  for line in lines:
    if not line.startswith(start):
      continue
    pos = len(start)
    for frag in fragments:
      pos = line.find(frag, pos)
      if pos < 0:
        break
      pos += len(frag)
    else:
      return line
  raise AssertionError(f'no line starting with {start!r} containing {fragments!r} in:\n'
                       + '\n'.join(lines))


def assert_reported(err: Exception, file, path: str, value=NO_VALUE, rule: str = '') -> str:
  """A `ConfigError`-format line `file: path[ = value]: rule` is in `err`.

  Args:
    value: the repr of the bad value as the message shows it; `NO_VALUE` when it shows none.
  """
  start = f'{file}: {path}' + ('' if value is NO_VALUE else f' = {value}') + ': '
  line = assert_line(err, start, rule)
  # The structured form agrees with the text (ConfigError / ConfigErrors).
  errs = err.errors if isinstance(err, ConfigErrors) else [err] if isinstance(
      err, ConfigError) else []
  if errs:
    assert any(e.file == str(file) and e.path == path for e in errs), [
        (e.file, e.path) for e in errs]
  return line


def assert_space_and_write_errors(export, out: pathlib.Path, what: str, monkeypatch, patch_write,
                                  code: int = errno.ENOSPC) -> None:
  """`export()` writing `out` is refused in one line when the disk has 10 bytes free, and a
  write error (`code`, raised by `patch_write(monkeypatch, raise_it)`) is one line naming `out`;
  neither leaves `out` or a staging entry beside it."""
  usage = shutil.disk_usage(out.parent)
  monkeypatch.setattr(shutil, 'disk_usage', lambda p: usage._replace(free=10))
  with pytest.raises(FibrilError, match=rf'{out.name}: {what} needs about [\d.]+ MiB, 0.0 MiB '
                     'free on .*; free some space or write to another file system'):
    export()
  monkeypatch.undo()

  def raise_it(*a, **k):
    raise OSError(code, os.strerror(code), str(out))
  patch_write(monkeypatch, raise_it)
  with pytest.raises(FibrilError, match=rf'{out.name}: cannot write: {os.strerror(code)}'):
    export()
  assert not out.exists() and not list(out.parent.glob('.*partial*'))
