"""The files kept beside the traced programs (`programs.py`): their folder (`cache_dir`),
writes that land whole or not at all (`write`), values and arrays computed once and read back
(`cached_value`, `cached_array`), and the pytree structure of a program's output, pickled
into a file (`pack`) and read back by an unpickler that builds nothing but classes of jax,
jaxlib, mujoco.mjx, numpy and fibril_mjx (`unpack`, `Unpickler`)."""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import pathlib
import pickle
import sys
import tempfile

import jax
import numpy as np


def cache_dir() -> pathlib.Path | None:
  """`$FIBRIL_MJX_PROGRAM_CACHE`, else `fibril_programs/` in JAX's compilation cache directory;
  None (nothing kept) without one or with `FIBRIL_MJX_NO_PROGRAM_CACHE=1`."""
  if os.environ.get('FIBRIL_MJX_NO_PROGRAM_CACHE') == '1':
    return None
  if os.environ.get('FIBRIL_MJX_PROGRAM_CACHE'):
    return pathlib.Path(os.environ['FIBRIL_MJX_PROGRAM_CACHE'])
  d = jax.config.jax_compilation_cache_dir
  return pathlib.Path(d) / 'fibril_programs' if d else None


def cached_value(ident: bytes | None, name: str, compute):
  """`compute()` (a JSON value found by tracing, e.g. a simulation's LAPACK-safe sub-batch),
  kept on disk beside the programs under `ident` and `name`; computed every time where
  nothing is kept."""
  return _on_disk(ident, name, '.json', compute, lambda v: json.dumps(v).encode(),
               lambda b: json.loads(b.decode()))


def cached_array(ident: bytes | None, name: str, compute) -> np.ndarray:
  """`compute()` (an array a traced program computes from `ident`'s static configuration
  alone, e.g. the actuator script's controls), kept on disk as `cached_value`: a new process
  reads it instead of tracing, lowering and loading the program."""
  def dump(a):
    f = io.BytesIO()
    np.save(f, np.asarray(a), allow_pickle=False)
    return f.getvalue()
  return _on_disk(ident, name, '.npy', lambda: np.asarray(compute()), dump,
               lambda b: np.load(io.BytesIO(b), allow_pickle=False))


def _on_disk(ident, name, suffix, compute, dump, load):
  """`compute()` read from / written to its file beside the programs (`dump` / `load` its
  bytes); computed every time where nothing is kept."""
  d = cache_dir()
  if ident is None or d is None:
    return compute()
  path = d / f'{name}-{hashlib.sha256(ident + name.encode()).hexdigest()}{suffix}'
  try:
    return load(path.read_bytes())
  except (OSError, ValueError):   # absent, partial or damaged: computed and written again
    pass
  value = compute()
  write(path, dump(value))
  return value


def write(path: pathlib.Path, blob: bytes) -> None:
  """`blob` to `path`, whole or not at all (a process may be reading beside it); a read-only
  or full disk leaves nothing written."""
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix='.tmp-')
    with os.fdopen(fd, 'wb') as f:
      f.write(blob)
    os.replace(tmp, path)
  except OSError:
    pass


_TRUSTED = ('jax', 'jaxlib', 'mujoco.mjx', 'fibril_mjx', 'numpy')
_FUNCTIONS = {('jax._src.tree_util', 'default_registry')} | {
    (f'numpy.{core}.{module}', name) for core in ('_core', 'core')
    for module, name in (('multiarray', '_reconstruct'), ('multiarray', 'scalar'),
                         ('numeric', '_frombuffer'))}


def _module_types() -> dict:
  """`{id(class): (module, name)}` of the classes held by loaded fibril_mjx modules — the
  sample, params and state types their factories build (e.g. `imu.SampleWithTemperature`,
  whose own name does not find it) are pickled by where they are held."""
  found = {}
  for name, mod in sorted(sys.modules.items()):
    if name.startswith('fibril_mjx') and mod is not None:
      for attr, v in list(vars(mod).items()):
        if isinstance(v, type):
          found.setdefault(id(v), (name, attr))
  return found


class _Pickler(pickle.Pickler):
  def __init__(self, f, types):
    super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
    self._types = types

  def persistent_id(self, obj):
    if not isinstance(obj, type) or getattr(sys.modules.get(obj.__module__),
                                            obj.__qualname__, None) is obj:
      return None      # pickled by its own name
    return self._types.get(id(obj))


class Unpickler(pickle.Unpickler):
  """Builds nothing but classes of trusted modules and the few functions a pytree structure
  pickles through (`_FUNCTIONS`)."""

  def find_class(self, module, name):
    if (module, name) not in _FUNCTIONS:
      if module.split('.')[0] not in _TRUSTED and not module.startswith('mujoco.mjx.'):
        raise pickle.UnpicklingError(f'{module}.{name} is not of a trusted module')
      obj = super().find_class(module, name)
      if not isinstance(obj, type):
        raise pickle.UnpicklingError(f'{module}.{name} is not a class')
      return obj
    return super().find_class(module, name)

  def persistent_load(self, pid):
    module, name = pid
    if not module.startswith('fibril_mjx.'):
      raise pickle.UnpicklingError(f'{module}.{name} is not of fibril_mjx')
    obj = getattr(importlib.import_module(module), name)
    if not isinstance(obj, type):
      raise pickle.UnpicklingError(f'{module}.{name} is not a class')
    return obj


def pack(out_tree, body: bytes, magic: bytes) -> bytes:
  """A file: the header `magic`, the output's pytree structure pickled, `body` (an exported
  program, a compiled executable)."""
  f = io.BytesIO()
  _Pickler(f, _module_types()).dump(out_tree)
  tree = f.getvalue()
  return magic + len(tree).to_bytes(8, 'little') + tree + body


def unpack(blob: bytes, magic: bytes):
  """`(out_tree, body)` of a `pack`ed file; ValueError where it does not start with `magic`,
  `pickle.UnpicklingError` where its structure names what `Unpickler` does not build."""
  if not blob.startswith(magic):
    raise ValueError('not a fibril program')
  i = len(magic)
  n = int.from_bytes(blob[i:i + 8], 'little')
  out_tree = Unpickler(io.BytesIO(blob[i + 8:i + 8 + n])).load()
  return out_tree, blob[i + 8 + n:]


__all__ = ['Unpickler', 'cache_dir', 'cached_array', 'cached_value', 'pack', 'unpack', 'write']
