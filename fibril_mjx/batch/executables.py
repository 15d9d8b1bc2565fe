"""Compiled executables kept beside the traced programs (`programs.py`) for the next process.

A traced program read from disk is lowered again before JAX's persistent cache can find its
compilation (the cache's key is the lowered module), and that lowering is most of a new
process's start on a small problem: ~40 ms for a tune's two device programs, plus ~40 ms
setting MLIR up on the first one (measured, `bench/tune_vs_sysid.py` problem (c)). A program
that keeps its executable skips both: `compile_for` compiles it (through JAX's cache), `dumps`
serializes the executable (`jax.experimental.serialize_executable`), `loads` makes it
callable again without lowering. `keep` writes one beside its program (`*.fibril-xla`) and
lists it in its owner's index; `read` reads it back. Loading is XLA's own work and does not
hold the GIL, so `prefetch(ident)` starts loading an owner's executables on a background
thread while the process builds its problem and rolls out its first worlds, and
`prefetch_hint(text)` does so before the owner's identity is known, from what `link(text,
ident)` recorded last time (e.g. a tune file leads to its problem).

- Only an executable XLA compiled in this process is kept. One that JAX's persistent cache
  handed back serializes without its code (jaxlib 0.10.2 on CPU: the reader fails at its first
  call, `Function add_select_fusion.5 not found`), so `compile_for` reports whether JAX recorded a
  cache hit while it compiled (`/jax/compilation_cache/cache_hits`) and such a compilation is
  not kept. A call an executable refuses runs its program under `jax.jit` instead, and the
  file of one that fails its first call is removed (`programs.py`).
- The key adds the machine's processor (`machine`) to the program's: XLA compiles for the
  host's instruction set, and a cache folder may be shared between machines.
- An executable is native code: its folder is trusted as JAX's compilation cache is.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import pathlib
import pickle
import platform

import jax
from jax.experimental import serialize_executable

from fibril_mjx.batch import program_files as files

_HITS = [0]   # persistent-cache hits JAX reported in this process
_MACHINE: list = []


def _listen(event: str, **_) -> None:
  if event == '/jax/compilation_cache/cache_hits':
    _HITS[0] += 1


jax.monitoring.register_event_listener(_listen)


def machine() -> bytes:
  """The processor XLA compiles for: its vendor, model and feature flags (Linux's
  `/proc/cpuinfo`, first processor), the platform's names elsewhere; once a process."""
  if not _MACHINE:
    try:
      first = pathlib.Path('/proc/cpuinfo').read_text().split('\n\n')[0]
    except OSError:
      first = ''
    keep = ('vendor_id', 'model name', 'flags', 'Features', 'CPU implementer', 'CPU part')
    lines = [ln for ln in first.splitlines() if ln.split(':')[0].strip() in keep]
    _MACHINE.append(repr((platform.machine(), platform.processor(), lines)).encode())
  return _MACHINE[0]


def compile_for(fn, leaves) -> tuple:
  """`(jax.jit(fn) compiled for leaves, fresh)`: fresh unless JAX reported a persistent-cache
  hit while it compiled (then the executable cannot be kept, module docstring)."""
  before = _HITS[0]
  compiled = jax.jit(fn).lower(*leaves).compile()
  return compiled, _HITS[0] == before


def on_default_device(compiled) -> bool:
  """Whether every input and output of `compiled` lies on the default device alone (what
  `loads` places it on)."""
  dev = {jax.devices()[0]}
  shardings = jax.tree.leaves((compiled.input_shardings, compiled.output_shardings))
  return all(s.device_set == dev for s in shardings)


def dumps(compiled) -> bytes:
  """`compiled`'s executable and its calling convention, as bytes."""
  return pickle.dumps(serialize_executable.serialize(compiled),
                      protocol=pickle.HIGHEST_PROTOCOL)


def loads(blob: bytes):
  """`dumps`'s executable, loaded on the default device and callable as it was."""
  payload, in_tree, out_tree = pickle.loads(blob)
  return serialize_executable.deserialize_and_load(payload, in_tree, out_tree,
                                                   execution_devices=jax.devices()[:1])


class Prefetch:
  """Reads started on background threads: `start(key, read)` queues `read()` for a thread
  (at most `threads` at once, in the order started); `take(key)` returns its value, or raises
  what it raised: waited for where it is running or done, read on the caller's thread where
  it has not started yet (no wait behind the reads queued before it). None for a key never
  started (or already taken)."""

  def __init__(self, threads: int = 1):
    self._threads = threads
    self._pool = None
    self._running: dict = {}

  def start(self, key, read) -> None:
    if key in self._running:
      return
    if self._pool is None:
      self._pool = concurrent.futures.ThreadPoolExecutor(self._threads, 'fibril-prefetch')
    self._running[key] = (self._pool.submit(read), read)

  def started(self, key) -> bool:
    return key in self._running

  def take(self, key):
    job = self._running.pop(key, None)
    if job is None:
      return None
    future, read = job
    return read() if future.cancel() else future.result()

  def drop(self) -> None:
    """Forgets every read started (those running finish on their own, those queued do not
    run)."""
    for future, _ in self._running.values():
      future.cancel()
    self._running.clear()


# --------------------------------------------------------------- kept beside the programs

MAGIC = b'fibril-executable-1\n'
SUFFIX = '.fibril-xla'
INDEXED = 16    # executables an owner's index lists
PREFETCH = 4    # of which `prefetch` starts loading


def path_for(d: pathlib.Path, name: str, program: pathlib.Path) -> pathlib.Path:
  """The file of the executable of the program kept in `program` (`name`: its file prefix),
  on this machine's processor."""
  digest = hashlib.sha256(program.name.encode() + machine()).hexdigest()
  return d / f'{name}-{digest}{SUFFIX}'


def read(path: pathlib.Path):
  """`(compiled, out_tree)` kept in `path`: taken from `prefetch` where it started reading
  it, else read now. Raises where it is absent, partial, damaged or not trusted."""
  if _reads.started(path):
    return _reads.take(path)
  return _read_now(path)


def _read_now(path: pathlib.Path):
  out_tree, body = files.unpack(path.read_bytes(), MAGIC)
  return loads(body), out_tree


def keep(d: pathlib.Path, ident: bytes, program: pathlib.Path, path: pathlib.Path, compiled,
         out_tree) -> None:
  """Writes `compiled` (and its output's structure) to `path` and lists it in its owner's
  index (newest last), which `prefetch` reads."""
  try:
    blob = files.pack(out_tree, dumps(compiled), MAGIC)
  except Exception:   # an executable XLA cannot serialize: run, never write
    return
  files.write(path, blob)
  index = _index_path(d, ident)
  try:
    names = [n for n in json.loads(index.read_bytes()) if n[1] != path.name]
  except (OSError, ValueError, TypeError, IndexError):
    names = []
  names = (names + [[program.name, path.name]])[-INDEXED:]
  files.write(index, json.dumps(names).encode())


def _index_path(d: pathlib.Path, ident: bytes) -> pathlib.Path:
  return d / f'executables-{hashlib.sha256(ident).hexdigest()}.json'


def prefetch(ident: bytes | None, held=frozenset()) -> None:
  """Starts loading the executables `ident`'s owner ran last (the `PREFETCH` newest of its
  index) on a background thread, but those of programs in `held` (paths the process holds
  already): its first calls then find them loaded. Nothing where nothing is kept."""
  d = files.cache_dir()
  if ident is None or d is None:
    return
  try:
    names = json.loads(_index_path(d, ident).read_bytes())[-PREFETCH:]
  except (OSError, ValueError, TypeError):
    return
  found = []
  for entry in names:
    try:
      program, executable = entry
      path = d / executable
      if d / program not in held:
        found.append((path.stat().st_size, path))
    except (OSError, TypeError, ValueError):   # gone, or an entry not of this format
      pass
  # the largest first: the longest to load; one the owner needs before its read has
  # started is read on the owner's thread instead (`Prefetch.take`)
  for _, path in sorted(found, key=lambda f: -f[0]):
    _reads.start(path, lambda x=path: _read_now(x))


def _hint_path(d: pathlib.Path, hint: str) -> pathlib.Path:
  return d / f'hint-{hashlib.sha256(hint.encode()).hexdigest()}.json'


def prefetch_hint(hint: str, held=frozenset()) -> None:
  """`prefetch` of the owner `hint` (a text naming the work, e.g. a tune file and its bytes)
  led to last time (`link`), before that owner's identity is known: its executables load
  while the process reads and builds what the identity needs. A hint that leads elsewhere
  this time costs background work only (a program finds its executable by its own key)."""
  d = files.cache_dir()
  if d is None:
    return
  try:
    ident = bytes.fromhex(json.loads(_hint_path(d, hint).read_bytes()))
  except (OSError, ValueError, TypeError):
    return
  prefetch(ident, held)


def link(hint: str, ident: bytes | None) -> None:
  """Records that `hint` led to the owner `ident` (read by `prefetch_hint`)."""
  d = files.cache_dir()
  if d is None or ident is None:
    return
  path, text = _hint_path(d, hint), json.dumps(ident.hex()).encode()
  try:
    if path.read_bytes() == text:
      return
  except OSError:
    pass
  files.write(path, text)


def forget() -> None:
  """Drops the reads `prefetch` started (as a new process, which has none)."""
  _reads.drop()


_reads = Prefetch()   # one thread: a 2-core host keeps a core for the caller


__all__ = ['MAGIC', 'Prefetch', 'SUFFIX', 'compile_for', 'dumps', 'forget', 'keep', 'link',
           'loads', 'machine', 'on_default_device', 'path_for', 'prefetch', 'prefetch_hint',
           'read']
