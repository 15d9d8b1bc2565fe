"""One registry of component types: manifest `type` → every part the package knows it by.

A component type has up to six parts, each owned by one layer:

| part | owner | signature |
| --- | --- | --- |
| `build` | components | `(cid, raw_config, ctx, catalog) -> component` (host side; the component satisfies `core/protocol.py` for its roles) |
| `config_model` | components | the pydantic model of its `config` mapping (`fibril-mjx schema`) |
| `metrics` | analysis | `(sensor, truth) -> {metric: (nworld,)}`: per-world statistics from the flattened trace fields of the component (`{field: (nworld, T, ...)}`) |
| `plot` | analysis | `(path, cid, time_s, sensor, truth, world, metrics, title)`: one PNG |
| `validation_rig` | workflows/validate | `(manifest_path, cid, ctype, cfg, out, *, static_duration_s, worlds, seed, perturb, progress, t0) -> summary dict` (`fibril-mjx validate`) |
| `ros` | io/mcap_export | `(sample, header, ctx) -> [(topic suffix, message)]`: one delivered sample as ROS 2 messages (`fibril-mjx export-mcap`) |

A new type registers every part in one call, `register(type, build=..., config_model=...,
metrics=..., plot=..., validation_rig=..., ros=...)` (`fibril_mjx.register`). The built-in
types are registered part by part, each part by the module that defines it (`add` at the end
of `components/sensors/imu.py`, of `analysis/imu.py`, of `workflows/validate/inertial.py`,
...). There is no list of those modules: the layer that reads a part first imports every module
of the package that provides it (`discover`: the builder walks `components/`, the workflows walk
`analysis/` and `workflows/validate/`), so a module dropped into the folder is found.

This module sits in `core/`, below the layers whose parts it holds: it stores their callables
and never imports them.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import types as _types
from typing import Callable, Mapping

from fibril_mjx.errors import MOVED


@dataclasses.dataclass(frozen=True)
class Entry:
  """What the package knows of one component type (None: a part the type does not have).

  Attributes:
    type: manifest `type`, e.g. `fibril_sim/imu`.
    build: `(cid, raw_config, ctx, catalog) -> component`.
    config_model: pydantic model of its `config` mapping.
    metrics: `(sensor, truth) -> {metric: (nworld,)}`, host side.
    plot: `(path, cid, time_s, sensor, truth, world, metrics, title)`, one PNG.
    validation_rig: `(manifest_path, cid, ctype, cfg, out, **options) -> summary dict`.
    ros: `(sample, header, ctx) -> [(topic suffix, message)]`, ROS 2 messages of a sample.
  """
  type: str
  build: Callable | None = None
  config_model: type | None = None
  metrics: Callable | None = None
  plot: Callable | None = None
  validation_rig: Callable | None = None
  ros: Callable | None = None


PARTS = tuple(f.name for f in dataclasses.fields(Entry) if f.name != 'type')

_ENTRIES: dict[str, Entry] = {}
ENTRIES: Mapping[str, Entry] = _types.MappingProxyType(_ENTRIES)   # read-only, live


def _where(part) -> str:
  mod = inspect.getmodule(part)
  return f' (by {mod.__name__})' if mod is not None else ''


def register(type_name: str, *, build: Callable, config_model: type | None = None,
             metrics: Callable | None = None, plot: Callable | None = None,
             validation_rig: Callable | None = None, ros: Callable | None = None,
             replace: bool = False) -> Entry:
  """Makes a new component type available to manifests and to every workflow, in one call.

  Args:
    type_name: the manifest `type` (`vendor/name`).
    build, config_model, metrics, plot, validation_rig, ros: its parts (module doc); only
      `build` is required: a type without the others is built, run and traced, just not
      summarized, validated or exported.
    replace: replace an existing registration of `type_name` (every part).

  Raises:
    ValueError: `type_name` is already registered (naming it and who registered it).
  """
  if type_name in _ENTRIES and not replace:
    old = _ENTRIES[type_name]
    raise ValueError(f'component type {type_name!r} is already registered'
                     + _where(old.build or next((getattr(old, p) for p in PARTS
                                                 if getattr(old, p) is not None), None))
                     + '; pass replace=True to replace it')
  entry = Entry(type_name, build, config_model, metrics, plot, validation_rig, ros)
  _ENTRIES[type_name] = entry
  return entry


def add(type_name: str, *, replace: bool = False, **parts) -> Entry:
  """Adds the parts one layer owns to a type (how the built-in modules register theirs).

  Args:
    type_name: the manifest `type`; its entry is created when this is its first part.
    replace: replace parts already set (else setting one is an error).
    **parts: some of `PARTS` (module doc), e.g. `metrics=host_metrics, plot=plot`.

  Raises:
    ValueError: an unknown part name, or a part already set (naming the type and the part).
  """
  unknown = sorted(set(parts) - set(PARTS))
  if unknown:
    raise ValueError(f'component type {type_name!r}: unknown part(s) {", ".join(unknown)} '
                     f'(parts: {", ".join(PARTS)})')
  old = _ENTRIES.get(type_name, Entry(type_name))
  if not replace:
    for name, value in parts.items():
      if value is not None and getattr(old, name) is not None:
        raise ValueError(f'component type {type_name!r} is already registered with a '
                         f'{name}' + _where(getattr(old, name)))
  entry = dataclasses.replace(old, **parts)
  _ENTRIES[type_name] = entry
  return entry


def unregister(type_name: str) -> None:
  """Removes a type and every part of it (no error when it is not registered)."""
  _ENTRIES.pop(type_name, None)


def get(type_name: str) -> Entry:
  """The entry of a type; an empty one (every part None) when nothing is registered for it."""
  return _ENTRIES.get(type_name) or Entry(type_name)


def types(part: str = 'build') -> list[str]:
  """The sorted types that have `part` (default `build`: the types a manifest may name)."""
  if part not in PARTS:
    raise ValueError(f'unknown part {part!r} (parts: {", ".join(PARTS)})')
  return sorted(t for t, e in _ENTRIES.items() if getattr(e, part) is not None)


def discover(*packages: _types.ModuleType) -> None:
  """Imports every module under each package (recursively), so that the modules register
  their parts; modules already imported are not imported again, nor the shims left at moved
  modules' old paths (`fibril_mjx.errors.MOVED`: importing one warns).

  Args:
    packages: imported packages, e.g. `fibril_mjx.components.sensors` (passed by the layer
      that reads the parts, since this module may not import the layers above it).
  """
  for pkg in packages:
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):
      if info.name not in MOVED:
        importlib.import_module(info.name)
