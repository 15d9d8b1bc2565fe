"""Where a workflow writes its results: one output directory (or file), refused when it already
holds something unless `--overwrite`, written into a staging sibling and put in place only
when complete.

Why staged: a reader (a person, a script, `--resume`) must never mistake an interrupted or
failed run for a finished one. The staging sibling `.NAME.partial-PID` sits in the same
directory as `out`, so putting it in place is one rename on one file system; a run that dies
without cleaning up leaves only a hidden `.partial-` entry, never a half-written `out`.

  out = outdir.claim(out, overwrite=overwrite)     # early: before any expensive work
  ...
  with outdir.staged(out) as tmp:                  # write everything under tmp
    (tmp / 'summary.json').write_text(...)

A single output file is the same with `claim_file` and `staged_file`.

Before the first step a workflow checks the free space for what it will write (`check_space`:
needed, available, path, in one line), and while it writes, a full disk, a quota, a permission
or a read-only file system is one line naming the file (`write_errors`), the staging entry
removed as for any failure.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import pathlib
import shutil
from collections.abc import Iterator

from fibril_mjx.errors import FibrilError

OVERWRITE_HINT = 'use --overwrite'


def staging_path(out) -> pathlib.Path:
  """The staging sibling of `out`: hidden, beside it, unique to this process."""
  out = pathlib.Path(out)
  return out.parent / f'.{out.name}.partial-{os.getpid()}'


def _remove(path: pathlib.Path) -> None:
  if path.is_dir() and not path.is_symlink():
    shutil.rmtree(path, ignore_errors=True)
  else:
    path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------- directories


def claim(out, *, overwrite: bool = False, hint: str = OVERWRITE_HINT) -> pathlib.Path:
  """`out` as a path, refused when it holds something and `overwrite` is off.

  An empty existing directory is free (e.g. made beforehand by a job script); it is replaced
  when the results are in place.

  Args:
    out: the output directory.
    overwrite: accept an existing, non-empty `out` (replaced only once the new results are
      complete).
    hint: how to get past the refusal, in the message (another workflow may say `--resume`).

  Raises:
    FibrilError: `out` exists and is not an empty directory (one line).
  """
  out = pathlib.Path(out)
  if overwrite or not out.exists() and not out.is_symlink():
    return out
  if not out.is_dir():
    raise FibrilError(f'{out}: exists and is not a directory ({hint})')
  if any(out.iterdir()):
    raise FibrilError(f'{out}: output directory exists and is not empty ({hint})')
  return out


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:   # another user's process
    return True
  return True


def remove_stale(out) -> list[pathlib.Path]:
  """Removes the staging entries of `out` whose process is no longer alive (a run killed by
  SIGKILL or a power loss leaves one); returns them. Process ids are this host's: on a file
  system shared between hosts, run one writer per `out` at a time."""
  out = pathlib.Path(out)
  gone = []
  for p in out.parent.glob(f'.{glob.escape(out.name)}.partial-*'):
    pid = p.name.rsplit('-', 1)[-1]
    if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
      _remove(p)
      gone.append(p)
  return gone


def stage(out) -> pathlib.Path:
  """Creates the (empty) staging directory of `out`, and its parents; returns it. Staging
  directories left by dead processes are removed first (`remove_stale`)."""
  remove_stale(out)
  tmp = staging_path(out)
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  return tmp


def commit(tmp, out) -> pathlib.Path:
  """Puts the complete staging directory `tmp` in place of `out` (replacing what was there)."""
  out = pathlib.Path(out)
  _remove(out)
  os.replace(tmp, out)
  return out


def discard(tmp) -> None:
  """Removes a staging directory or file (after a failure)."""
  _remove(pathlib.Path(tmp))


@contextlib.contextmanager
def staged(out) -> Iterator[pathlib.Path]:
  """A staging directory for `out`: put in place when the block completes, removed when it
  raises (or is interrupted). Call `claim` first: this replaces whatever `out` holds."""
  out = pathlib.Path(out)
  tmp = stage(out)
  try:
    yield tmp
    commit(tmp, out)
  except BaseException:
    discard(tmp)
    raise


# ------------------------------------------------------------------------------- files


def claim_file(out, *, overwrite: bool = False) -> pathlib.Path:
  """`out` (an output file) as a path, refused when it exists and `overwrite` is off.

  Raises:
    FibrilError: `out` exists (one line).
  """
  out = pathlib.Path(out)
  if out.exists() and not overwrite:
    raise FibrilError(f'{out}: already exists (use --overwrite to replace it)')
  return out


@contextlib.contextmanager
def staged_file(out, *, fsync: bool = False) -> Iterator[pathlib.Path]:
  """A staging path for the file `out`: renamed onto `out` when the block completes (after an
  `fsync` of its contents where asked: a file another run counts as done, e.g. a campaign
  part), removed when it raises."""
  out = pathlib.Path(out)
  remove_stale(out)
  tmp = staging_path(out)
  try:
    yield tmp
    if fsync:
      with open(tmp, 'rb') as f:
        os.fsync(f.fileno())
    os.replace(tmp, out)
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise


def write_file(out, data: bytes, *, fsync: bool = False) -> pathlib.Path:
  """Writes `data` to `out` through `staged_file`: `out` is either complete or untouched."""
  with staged_file(out, fsync=fsync) as tmp:
    tmp.write_bytes(data)
  return pathlib.Path(out)


# ------------------------------------------------------------------------------- space, errors

# The errors of writing that are the place's, not the program's: disk full, quota, permission,
# read-only file system.
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS)


def mib(n: float) -> str:
  """A byte count as `12.3 MiB`."""
  return f'{n / 2 ** 20:.1f} MiB'


def check_space(out, needed: float, what: str) -> None:
  """Refuses to start when the file system that will hold `out` has less than `needed` bytes
  free (`shutil.disk_usage` of `out`'s nearest existing parent).

  Raises:
    FibrilError: `out: WHAT needs about N MiB, M MiB free on PATH; ...` (one line).
  """
  probe = pathlib.Path(out).absolute()
  while not probe.exists() and probe != probe.parent:
    probe = probe.parent
  free = shutil.disk_usage(probe).free
  if free < needed:
    raise FibrilError(f'{out}: {what} needs about {mib(needed)}, {mib(free)} free on {probe}; '
                      'free some space or write to another file system')


def write_error(e: OSError, out, kept: str) -> FibrilError | None:
  """The one-line error of `e` when it is one of `WRITE_ERRNOS` (writing under `out`): the
  file, the reason and what was `kept`; None for any other error."""
  if e.errno not in WRITE_ERRNOS:
    return None
  return FibrilError(f'{e.filename or out}: cannot write: {e.strerror or os.strerror(e.errno)}'
                     f' ({kept})')


@contextlib.contextmanager
def write_errors(out, kept: str = 'nothing was kept') -> Iterator[None]:
  """`write_error` of an `OSError` raised in the block; any other error passes through."""
  try:
    yield
  except OSError as e:
    err = write_error(e, out, kept)
    if err is None:
      raise
    raise err from None
