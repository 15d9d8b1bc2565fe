"""Traced device programs of a tune, kept on disk (`jax.export`) for the next process.

JAX's persistent compilation cache saves a second fit the XLA compilation but not the tracing:
a new process traces the device pipeline (latency queue, schedule, quantization, filters)
again before it can even look the compiled program up — on a small problem most of a warm fit.
`Program` serializes the traced program (StableHLO, `jax.export`) beside the compilation cache,
keyed by everything the trace depends on, so the next process deserializes it and goes
straight to the (cached) compilation.

The key is the SHA-256 of:
- every file of the installed `fibril_mjx` package (the code that is traced);
- the versions of jax, jaxlib, mujoco and numpy, `jax_enable_x64`, `XLA_FLAGS`, the backend;
- the problem's identity (`identity(problem)`): the built model's key (manifest sha256, the
  built components' static configuration, scripts, dcmotor binding, vary), the compiled
  `MjModel`s' binaries and the MJX model's arrays, the default parameters, the fitted
  parameters, the loss, the keys, and the problem's class;
- the name of the program, the structure, shapes and dtypes of its arguments, and whether
  quantization is traced with straight-through derivatives.

Anything whose text is not stable across processes (a `repr` with an object address) makes the
program uncached: traced as before, never written. The process that writes a program runs it
in its exported form too, so a fit that reads it is bitwise the fit that wrote it. The programs
live in
`$FIBRIL_MJX_PROGRAM_CACHE`, else in `fibril_programs/` of JAX's compilation cache directory
(the CLI's `~/.cache/fibril_mjx/jax`, or `$FIBRIL_MJX_CACHE`); with neither, or with
`FIBRIL_MJX_NO_PROGRAM_CACHE=1`, nothing is kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import platform
import re
import sys
import tempfile

import jax
import jaxlib
import mujoco
import numpy as np
import pydantic

from fibril_mjx.mechanisms import signal as sig

SUFFIX = '.fibril-export'
_UNSTABLE = re.compile(r' at 0x[0-9a-f]+')
_PACKAGE: list = []


def _package_digest() -> str:
  """SHA-256 of every file of the installed package (its code and data), once a process."""
  if not _PACKAGE:
    root = pathlib.Path(__file__).resolve().parents[2]     # the fibril_mjx package
    h = hashlib.sha256()
    for f in sorted(root.rglob('*')):
      if f.is_file() and '__pycache__' not in f.parts and f.suffix not in ('.pyc', '.pyo'):
        h.update(str(f.relative_to(root)).encode() + b'\0' + f.read_bytes() + b'\0')
    _PACKAGE.append(h.hexdigest())
  return _PACKAGE[0]


def _environment() -> bytes:
  return repr((jax.__version__, jaxlib.__version__, mujoco.__version__, np.__version__,
               sys.version_info[:2], platform.machine(), jax.default_backend(),
               bool(jax.config.jax_enable_x64), os.environ.get('XLA_FLAGS', ''))).encode()


def _canon(x) -> str:
  """A text of `x` that is the same in every process: `repr`, but sets sorted (their order
  follows the string hash seed), dataclasses and pydantic models field by field, arrays by
  their bytes."""
  if isinstance(x, (set, frozenset)):
    return '{' + ', '.join(sorted(_canon(v) for v in x)) + '}'
  if isinstance(x, dict):
    return '{' + ', '.join(f'{_canon(k)}: {_canon(v)}' for k, v in x.items()) + '}'
  if isinstance(x, (list, tuple)):
    return f'{type(x).__qualname__}(' + ', '.join(_canon(v) for v in x) + ')'
  if isinstance(x, np.ndarray):
    return f'array({x.dtype}, {x.shape}, {hashlib.sha256(x.tobytes()).hexdigest()})'
  if dataclasses.is_dataclass(x) and not isinstance(x, type):
    return f'{type(x).__qualname__}(' + ', '.join(
        f'{f.name}={_canon(getattr(x, f.name))}' for f in dataclasses.fields(x)) + ')'
  if isinstance(x, pydantic.BaseModel):
    items = [(k, getattr(x, k)) for k in type(x).model_fields] + \
        sorted((x.model_extra or {}).items())
    return f'{type(x).__qualname__}(' + ', '.join(f'{k}={_canon(v)}' for k, v in items) + ')'
  return repr(x)


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


def identity(problem) -> bytes | None:
  """What a tune problem's traced programs depend on beside their arguments (see the module
  docstring), or None where some part has no stable text (then nothing is cached)."""
  sim = problem.sim
  fitted = [(p.kind, p.target, p.index, p.log) for p in problem.params]   # what `_apply` reads
  text = _canon((type(problem).__module__, type(problem).__qualname__, sim.built._key(),
                 fitted, problem.spec.loss, getattr(problem, 'paired', None)))
  if _UNSTABLE.search(text):
    return None
  h = hashlib.sha256()
  for part in (_package_digest().encode(), _environment(), text.encode(),
               _model_bytes(sim.built.mj_model), _model_bytes(sim.built.physics_model),
               _leaves_bytes(sim.mx), _leaves_bytes(problem._base),
               _leaves_bytes(problem._keys)):
    h.update(hashlib.sha256(part).digest())
  return h.digest()


def cache_dir() -> pathlib.Path | None:
  """`$FIBRIL_MJX_PROGRAM_CACHE`, else `fibril_programs/` in JAX's compilation cache directory;
  None (nothing kept) without one or with `FIBRIL_MJX_NO_PROGRAM_CACHE=1`."""
  if os.environ.get('FIBRIL_MJX_NO_PROGRAM_CACHE') == '1':
    return None
  if os.environ.get('FIBRIL_MJX_PROGRAM_CACHE'):
    return pathlib.Path(os.environ['FIBRIL_MJX_PROGRAM_CACHE'])
  d = jax.config.jax_compilation_cache_dir
  return pathlib.Path(d) / 'fibril_programs' if d else None


class Program:
  """`jax.jit(fn)` whose traced program is read from and written to disk (module docstring).

  `Program(fn, name, ident)(*args)`: args are pytrees of arrays; `ident` from `identity`
  (None: traced every process, as `jax.jit`). `.traced` counts the traces this process made,
  `.loaded` the programs read from disk.
  """

  def __init__(self, fn, name: str, ident: bytes | None):
    self.fn, self.name, self.ident = fn, name, ident
    self._calls: dict = {}
    self._plain = jax.jit(fn)
    self.traced = self.loaded = 0

  def __call__(self, *args):
    d = cache_dir()
    if self.ident is None or d is None:
      return self._plain(*args)
    leaves, tree = jax.tree.flatten(args)
    if _UNSTABLE.search(str(tree)):
      return self._plain(*args)
    specs = tuple(jax.ShapeDtypeStruct(np.shape(x), np.result_type(x)) for x in leaves)
    # the trace also reads the straight-through switch (quantization's derivative)
    key = hashlib.sha256(self.ident + repr((self.name, str(tree), sig.straight_through_active(),
                                            [(s.shape, str(s.dtype)) for s in specs]))
                         .encode()).hexdigest()
    call = self._calls.get(key)
    if call is None:
      call = self._load(d / f'{self.name}-{key}{SUFFIX}', tree, specs)
      self._calls[key] = call
    return call(*leaves)

  def _cache_size(self) -> int:
    """Programs held by this process (as `jax.jit(...)._cache_size()`)."""
    return len(self._calls) + self._plain._cache_size()

  def _load(self, path: pathlib.Path, tree, specs):
    exp = None
    if path.is_file():
      try:
        exp = jax.export.deserialize(bytearray(path.read_bytes()))
        self.loaded += 1
      except Exception:   # a partial or foreign file: trace again and rewrite it
        exp = None
    if exp is None:
      def flat(*leaves):
        return self.fn(*jax.tree.unflatten(tree, leaves))
      self.traced += 1
      exp = jax.export.export(jax.jit(flat))(*specs)
      try:
        blob = exp.serialize()
      except Exception:   # an output pytree JAX cannot serialize: run it, never write it
        blob = None
      if blob is not None:
        try:
          path.parent.mkdir(parents=True, exist_ok=True)
          fd, tmp = tempfile.mkstemp(dir=path.parent, prefix='.tmp-')
          with os.fdopen(fd, 'wb') as f:
            f.write(blob)
          os.replace(tmp, path)      # whole or not at all, for a process reading beside it
        except OSError:              # a read-only or full disk: this fit runs, uncached
          pass
    return jax.jit(exp.call)


__all__ = ['Program', 'cache_dir', 'identity']
