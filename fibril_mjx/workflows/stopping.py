"""Ending a long command on SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption) with one line
saying what was kept, never a traceback.

The handlers are installed only while a command runs (`at_boundaries`, `promptly`), in the
main thread, and the previous ones are restored afterwards.

- `campaign` checks the flag of `at_boundaries` after each part: the signal ends it at the next
  chunk boundary with its completed parts kept (resumable with `--resume`); a second signal
  ends it at once (the chunk in progress is lost, its staged part removed).
- `run` keeps nothing of an unfinished run (its output is complete or absent), so waiting for a
  boundary would only delay the end: under `promptly` SIGTERM stops it at once, as SIGINT
  does, and its staging directory is removed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
  """A command ended by a signal; `str()` is the line saying what was kept.

  Attributes:
    signum: the signal (the CLI exits with 128 + signum: 130 for SIGINT, 143 for SIGTERM).
  """

  def __init__(self, signum: int, message: str):
    super().__init__(message)
    self.signum = signum


def name(signum: int) -> str:
  return signal.Signals(signum).name


class Flag:
  """The first signal received (`signum`), or None."""
  signum: int | None = None


@contextlib.contextmanager
def _handlers(handler) -> Iterator[None]:
  if threading.current_thread() is not threading.main_thread():
    yield   # signal handlers can only be set in the main thread: the defaults stay
    return
  old = {s: signal.signal(s, handler) for s in SIGNALS}
  try:
    yield
  finally:
    for s, h in old.items():
      signal.signal(s, h)


@contextlib.contextmanager
def at_boundaries(kept: Callable[[], str]) -> Iterator[Flag]:
  """Within the block, SIGINT and SIGTERM set the yielded `Flag` (the work checks it at its
  boundaries and raises `Stopped`); a second signal raises `Stopped` at once, saying `kept()`."""
  flag = Flag()

  def handler(signum, frame):
    if flag.signum is not None:
      raise Stopped(signum, f'stopped by {name(signum)} (a second signal): {kept()}')
    flag.signum = signum

  with _handlers(handler):
    yield flag


@contextlib.contextmanager
def promptly(message: str) -> Iterator[None]:
  """Within the block, SIGINT and SIGTERM raise `Stopped(message)` at once (between two Python
  operations: after the device call in progress)."""

  def handler(signum, frame):
    raise Stopped(signum, f'stopped by {name(signum)}: {message}')

  with _handlers(handler):
    yield
