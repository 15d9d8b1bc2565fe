"""Traced programs kept on disk (`jax.export`) for the next process.

JAX's persistent compilation cache saves a new process the XLA compilation but not the tracing:
it traces the pipeline (MJX's step, the latency queue, schedules, quantization, filters) again
before it can even look the compiled program up — for a small model most of a warm start.
`Program` serializes the traced program (StableHLO, `jax.export`) beside the compilation cache,
keyed by everything the trace depends on, so the next process deserializes it and goes
straight to the (cached) compilation. `Simulation.reset / step / run` (on any number of
devices; never with a controller) and a tune's programs (the device programs of
`fibril_mjx.workflows.tune.rollouts`, the window programs of `gradients: exact` in
`fibril_mjx.workflows.tune.problem`) use it.

The key is the SHA-256 of:
- every file of the installed `fibril_mjx` package (the code that is traced; `package_digest`);
- the versions of jax, jaxlib, mujoco and numpy, JAX's configuration (every setting but
  those of its caches, logging and dumps), `XLA_FLAGS`, the backend;
- the owner's identity: for a simulation (`built_identity`) the built model's key (manifest
  sha256, the built components' static configuration, scripts, dcmotor binding, vary), the
  compiled `MjModel`s' binaries (the MJX model and initial data are made from the physics
  model by the MuJoCo version above, so their arrays are not read: `physics='c'` makes
  neither); for a tune
  problem (`identity`) that plus the default and fitted parameters, the loss, the keys and the
  problem's class;
- the name of the program (for a simulation: the verb, the layout and its static options),
  the structure, shapes and dtypes of its arguments, and whether quantization is traced with
  straight-through derivatives.

Anything whose text is not stable across processes (a `repr` with an object address, e.g. a
controller function) makes the program uncached: traced as `jax.jit`, never written. The
output's pytree structure is kept beside the program (pickled; read back by an unpickler
that builds nothing but classes of jax, jaxlib, mujoco.mjx, numpy and fibril_mjx). The
process that writes a program runs it in its exported form too, so a process that reads it
computes bitwise what the writer did. The programs live in `$FIBRIL_MJX_PROGRAM_CACHE`, else
in `fibril_programs/` of JAX's compilation cache directory (the CLI's
`~/.cache/fibril_mjx/jax`, or `$FIBRIL_MJX_CACHE`); with neither, or with
`FIBRIL_MJX_NO_PROGRAM_CACHE=1`, nothing is kept. A process also holds the last `HELD`
programs it ran, by file, so another owner of the same program in that process (a second
`Simulation` or tune problem of the same model) runs it without reading, lowering or
compiling it again; `forget()` drops them.

A program on the default device (`devices` None: a tune's programs, the device pass over
MuJoCo C) also keeps the executable XLA compiled for it (`executables.py`), keyed by the
program's file and the processor: the next process loads it without lowering the program,
and `prefetch(ident)` / `prefetch_hint(text)` start loading an owner's executables on a
background thread before its first call needs them. The files beside the programs (folder,
writes, the output's structure) are `program_files.py`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import pathlib
import platform
import re
import sys

import jax
import jaxlib
import mujoco
import numpy as np
import pydantic

from fibril_mjx.batch import executables, worlds
from fibril_mjx.batch import program_files as files
from fibril_mjx.batch.program_files import cache_dir, cached_array, cached_value
from fibril_mjx.mechanisms import signal as sig

SUFFIX = '.fibril-export'
_MAGIC = b'fibril-program-1\n'
_UNSTABLE = re.compile(r' at 0x[0-9a-f]+')
# JAX settings that do not change a traced program: its caches, logging, dumps, profiling
_UNTRACED = re.compile(r'cache|log|dump|explain|profil|traceback')
_PACKAGE: list = []


def _package_digest() -> str:
  """SHA-256 of every file of the installed package (its code and data), once a process;
  see `package_digest`."""
  if not _PACKAGE:
    _PACKAGE.append(package_digest(pathlib.Path(__file__).resolve().parents[1], cache_dir()))
  return _PACKAGE[0]


def package_digest(root: pathlib.Path, d: pathlib.Path | None) -> str:
  """SHA-256 of the names and bytes of the files under `root` (not bytecode). Hashing the
  package's 1.4 MB takes ~8 ms; in `d` the digest is kept under its files' names, sizes and
  modification times (what Python's bytecode cache trusts a source file by), so a later
  process whose files have not changed reads it (~1 ms); one whose files changed, or were
  only touched, hashes them again."""
  found = []
  for folder, subfolders, names in os.walk(root):
    subfolders[:] = sorted(f for f in subfolders if f != '__pycache__')
    found += [pathlib.Path(folder, n) for n in sorted(names) if not n.endswith(('.pyc', '.pyo'))]
  try:
    stats = [f.stat() for f in found]
  except OSError:
    d = None
  path = None
  if d is not None:
    listing = '\n'.join(f'{f.relative_to(root)}\0{s.st_size}\0{s.st_mtime_ns}'
                         for f, s in zip(found, stats))
    path = d / f'package-{hashlib.sha256(listing.encode()).hexdigest()}.txt'
    try:
      kept = path.read_text()
      if re.fullmatch('[0-9a-f]{64}', kept):
        return kept
    except (OSError, UnicodeDecodeError):
      pass
  h = hashlib.sha256()
  for f in found:
    h.update(str(f.relative_to(root)).encode() + b'\0' + f.read_bytes() + b'\0')
  digest = h.hexdigest()
  if path is not None:
    files.write(path, digest.encode())
  return digest


def _environment() -> bytes:
  settings = sorted((k, repr(v)) for k, v in jax.config.values.items()
                    if not _UNTRACED.search(k))
  return repr((jax.__version__, jaxlib.__version__, mujoco.__version__, np.__version__,
               sys.version_info[:2], platform.machine(), jax.default_backend(),
               settings, os.environ.get('XLA_FLAGS', ''))).encode()


def canon(x) -> str:
  """A text of `x` that is the same in every process: `repr`, but sets sorted (their order
  follows the string hash seed), dataclasses (the fields their equality compares) and pydantic
  models field by field, arrays by their bytes."""
  if isinstance(x, (set, frozenset)):
    return '{' + ', '.join(sorted(canon(v) for v in x)) + '}'
  if isinstance(x, dict):
    return '{' + ', '.join(f'{canon(k)}: {canon(v)}' for k, v in x.items()) + '}'
  if isinstance(x, (list, tuple)):
    return f'{type(x).__qualname__}(' + ', '.join(canon(v) for v in x) + ')'
  if isinstance(x, np.ndarray):
    return f'array({x.dtype}, {x.shape}, {hashlib.sha256(x.tobytes()).hexdigest()})'
  if dataclasses.is_dataclass(x) and not isinstance(x, type):   # the fields its == compares
    return f'{type(x).__qualname__}(' + ', '.join(           # (not e.g. a field's source file)
        f'{f.name}={canon(getattr(x, f.name))}' for f in dataclasses.fields(x) if f.compare) + ')'
  if isinstance(x, pydantic.BaseModel):
    items = [(k, getattr(x, k)) for k in type(x).model_fields] + \
        sorted((x.model_extra or {}).items())
    return f'{type(x).__qualname__}(' + ', '.join(f'{k}={canon(v)}' for k, v in items) + ')'
  if isinstance(x, type):
    return f'{x.__module__}.{x.__qualname__}{getattr(x, "_fields", "")}'
  text = repr(x)
  slots = getattr(type(x), '__slots__', None)
  if _UNSTABLE.search(text) and (slots or hasattr(x, '__dict__')):   # e.g. MJX's array wrapper
    fields = {k: getattr(x, k) for k in slots} if slots else vars(x)
    return f'{type(x).__qualname__}(' + canon(fields) + ')'
  return text


def tree_text(tree) -> str:
  """`canon` of a pytree structure: node types, their data and children (its `str` may hold
  object addresses, and equal structures pickle to different bytes)."""
  node = tree.node_data()
  if node is None:
    return '*'
  return canon(node) + '[' + ', '.join(tree_text(c) for c in tree.children()) + ']'


def _model_bytes(m: mujoco.MjModel) -> bytes:
  buf = np.zeros(mujoco.mj_sizeModel(m), np.uint8)
  mujoco.mj_saveModel(m, None, buf)
  return buf.tobytes()


def _leaves_bytes(tree) -> bytes:
  h = hashlib.sha256()
  for x in jax.tree.leaves(tree):
    a = np.asarray(x)
    h.update(repr((a.shape, str(a.dtype))).encode() + a.tobytes())
  return h.digest()


def _digest(text: str, *parts: bytes) -> bytes | None:
  if _UNSTABLE.search(text):
    return None
  h = hashlib.sha256()
  for part in (_package_digest().encode(), _environment(), text.encode()) + parts:
    h.update(hashlib.sha256(part).digest())
  return h.digest()


def built_identity(built) -> bytes | None:
  """What a simulation's traced programs depend on beside their arguments and static options
  (module docstring), or None where some part has no stable text (then nothing is kept)."""
  return _digest(canon(('Simulation', built._key())), _model_bytes(built.mj_model),
                 _model_bytes(built.physics_model))


def identity(problem) -> bytes | None:
  """What a tune problem's traced programs depend on beside their arguments (module
  docstring), or None where some part has no stable text (then nothing is kept)."""
  model = built_identity(problem.sim.built)
  fitted = [(p.kind, p.target, p.index, p.log) for p in problem.params]   # what `_apply` reads
  text = canon((type(problem).__module__, type(problem).__qualname__, fitted, problem.spec.loss,
                getattr(problem, 'paired', None), getattr(problem, 'L', None)))
  if model is None:
    return None
  return _digest(text, model, _leaves_bytes(problem._base), _leaves_bytes(problem._keys))


# --------------------------------------------------------------- programs

class Program:
  """`jax.jit(fn)` whose traced program is read from and written to disk (module docstring).

  `Program(fn, name, ident)(*args)`: args are pytrees of arrays; `ident` from `identity` or
  `built_identity` (None: traced every process, as `jax.jit`); `name` a text naming what
  else the trace depends on. Traced arguments (inside a user's `jit`) run `jax.jit(fn)` as it
  is. `.traced` counts the traces this process made for disk, `.loaded` the programs read
  (traced programs or executables), `.executables` the compiled executables read
  (`executables.py`; kept for a program on the default device, `devices` None), `.reused`
  those another owner in this process already held (`held`).
  """

  def __init__(self, fn, name: str, ident: bytes | None, devices=None):
    self.fn, self.name, self.ident = fn, name, ident
    # a program over several devices: its inputs are placed on all of them (replicated)
    self._place = None
    if devices is not None and len(devices) > 1:
      mesh = jax.sharding.Mesh(np.asarray(devices), ('all',))
      self._place = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    self._executable = devices is None   # on the default device: its executable is kept
    self._calls: dict = {}
    self._plain = jax.jit(fn)
    self.traced = self.loaded = self.reused = self.executables = 0
    self._file = re.match(r'[A-Za-z0-9_]*', name).group()[:40] or 'program'

  def __call__(self, *args):
    d = cache_dir()
    if self.ident is None or d is None:
      return self._plain(*args)
    leaves, tree = jax.tree.flatten(args)
    if worlds.is_traced(leaves):
      return self._plain(*args)
    if self._place is not None:
      leaves = [jax.device_put(x, self._place) for x in leaves]
    specs = tuple(jax.ShapeDtypeStruct(np.shape(x), x.dtype if hasattr(x, 'dtype')
                                       else np.result_type(x)) for x in leaves)
    # the trace also reads the straight-through switch (quantization's derivative)
    local = (tree, sig.straight_through_active(), tuple((s.shape, str(s.dtype)) for s in specs))
    call = self._calls.get(local)
    if call is None:
      text = repr((self.name, tree_text(tree), local[1:]))
      if _UNSTABLE.search(text):   # no stable text: plain `jax.jit`
        call = self._plain_on(tree)
      else:
        key = hashlib.sha256(self.ident + text.encode()).hexdigest()
        path = d / f'{self._file}-{key}{SUFFIX}'
        call = _held.get(path)
        if call is None:
          call = self._load(d, path, tree, specs, leaves)
          if path.is_file():   # the kept program (not a plain-jit fallback): hold it
            _hold(path, call)
        else:
          _held.move_to_end(path)
          self.reused += 1
      self._calls[local] = call
    return call(*leaves)

  def _plain_on(self, tree):
    """`jax.jit(fn)` called with the leaves of `tree`."""
    return lambda *leaves: self._plain(*jax.tree.unflatten(tree, leaves))

  def _cache_size(self) -> int:
    """Programs held by this process (as `jax.jit(...)._cache_size()`)."""
    return len(self._calls) + self._plain._cache_size()

  def _load(self, d, path: pathlib.Path, tree, specs, leaves):
    """The program's call: its kept executable, else the traced program read from `path` (or
    traced and written) and compiled, its executable kept where it was compiled here."""
    if not self._executable:
      return self._jitted(path, tree, specs)
    xpath = executables.path_for(d, self._file, path)
    try:
      compiled, out_tree = executables.read(xpath)
    except Exception:   # absent, partial, damaged or foreign: the traced program
      pass
    else:
      self.loaded += 1
      self.executables += 1
      return _Run(compiled, out_tree, lambda: self._jitted(path, tree, specs), xpath)
    traced = self._traced(path, tree, specs)
    if traced is None:
      return self._plain_on(tree)
    exp, out_tree = traced
    compiled, fresh = executables.compile_for(exp.call, leaves)
    if fresh and path.is_file() and executables.on_default_device(compiled):
      executables.keep(d, self.ident, path, xpath, compiled, out_tree)
    return _Run(compiled, out_tree, lambda: _exported(exp, out_tree))

  def _jitted(self, path, tree, specs):
    """The traced program under `jax.jit` (read from `path`, else traced), as without
    executables."""
    traced = self._traced(path, tree, specs)
    return self._plain_on(tree) if traced is None else _exported(*traced)

  def _traced(self, path: pathlib.Path, tree, specs):
    """`(exported program, output structure)` read from `path`, else traced and written
    there; None where `jax.export` refuses the function (then it runs as `jax.jit`)."""
    if path.is_file():
      try:
        out_tree, body = files.unpack(path.read_bytes(), _MAGIC)
        exp = jax.export.deserialize(bytearray(body))
        self.loaded += 1
        return exp, out_tree
      except Exception:   # a partial, damaged or foreign file: trace again and rewrite it
        pass
    out = []

    def flat(*leaves):
      res, out_tree = jax.tree.flatten(self.fn(*jax.tree.unflatten(tree, leaves)))
      out.append(out_tree)
      return res

    self.traced += 1
    try:
      exp = jax.export.export(jax.jit(flat))(*specs)
    except Exception:   # e.g. a host callback, which `jax.export` refuses: plain `jax.jit`
      return None
    try:
      blob = files.pack(out[0], exp.serialize(), _MAGIC)
    except Exception:   # a structure or program that cannot be serialized: run, never write
      blob = None
    if blob is not None:
      files.write(path, blob)
    return exp, out[0]


class _Run:
  """A compiled executable as a program's call. A call it refuses (an executable that cannot
  run here, `executables.py`; inputs on other devices than the first call's) switches the
  program to `instead()` — the traced program under `jax.jit`, as without executables — and
  where that was the first call of an executable read from disk (`xpath`), its file is
  removed."""

  def __init__(self, compiled, out_tree, instead, xpath=None):
    self._compiled, self._out_tree, self._instead, self._xpath = compiled, out_tree, instead, xpath
    self._jit, self._ran = None, False

  def __call__(self, *leaves):
    if self._jit is not None:
      return self._jit(*leaves)
    try:
      out = self._compiled(*leaves)
    except Exception:
      if self._xpath is not None and not self._ran:
        try:
          self._xpath.unlink()
        except OSError:
          pass
      self._jit = self._instead()
      return self._jit(*leaves)
    self._ran = True
    return jax.tree.unflatten(self._out_tree, out)


# The programs this process holds, by file: another owner of the same program (a second
# `Simulation` or tune problem of the same model in this process) runs it at once, without
# reading, lowering or compiling it again. The last `HELD` used are kept.
HELD = 64
_held: collections.OrderedDict = collections.OrderedDict()


def _hold(path, call) -> None:
  _held[path] = call
  while len(_held) > HELD:
    _held.popitem(last=False)


def forget() -> None:
  """Drops the programs this process holds and the executables it started reading: the next
  owner reads them from disk, as a new process does."""
  _held.clear()
  executables.forget()


def prefetch(ident: bytes | None) -> None:
  """`executables.prefetch` of the programs this process does not hold."""
  executables.prefetch(ident, set(_held))


def prefetch_hint(hint: str) -> None:
  """`executables.prefetch_hint` of the programs this process does not hold."""
  executables.prefetch_hint(hint, set(_held))


link = executables.link


def _exported(exp, out_tree):
  call = jax.jit(exp.call)
  return lambda *leaves: jax.tree.unflatten(out_tree, call(*leaves))


__all__ = ['Program', 'built_identity', 'cache_dir', 'cached_array', 'cached_value', 'canon',
           'forget', 'identity', 'link', 'package_digest', 'prefetch', 'prefetch_hint']
