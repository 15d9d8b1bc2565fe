"""Ending a long command on SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption) at the next
chunk boundary, with one line saying what was kept, never a traceback.

The handlers are installed only while a command runs (`at_boundaries`), in the main thread,
and the previous ones are restored afterwards. A signal only sets a flag, which the command
checks between two chunks (a chunk is one device program: raising inside it would leave the
XLA runtime mid-call): `campaign` keeps its completed parts (resumable with `--resume`), `run`
keeps nothing (its output is complete or absent) and removes its staging directory. A second
signal ends the command at once, losing the chunk in progress.
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

  def check(self, kept: str) -> None:
    """At a boundary: raises `Stopped` saying `kept` when a signal came."""
    if self.signum is not None:
      raise Stopped(self.signum, f'stopped by {name(self.signum)}: {kept}')


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
