"""One registry of component types: manifest `type` → every part the package knows it by.

A component type has up to ten parts, each owned by one layer:

| part | owner | what |
| --- | --- | --- |
| `build` | components | `(cid, raw_config, ctx, catalog) -> component` (host side; the component satisfies `core/protocol.py` for its roles) |
| `config_model` | components | the pydantic model of its `config` mapping (`fibril-mjx schema`) |
| `metrics` | analysis | `(sensor, truth) -> {metric: (nworld,)}`: per-world statistics from the flattened trace fields of the component (`{field: (nworld, T, ...)}`) |
| `plot` | analysis | `(path, cid, time_s, sensor, truth, world, metrics, title)`: one PNG |
| `validation_rig` | workflows/validate | `(manifest_path, cid, ctype, cfg, out, *, static_duration_s, worlds, seed, perturb, progress, t0) -> summary dict` (`fibril-mjx validate`); a built-in rig is a small record of what its rig needs of the type (sample field, σ field, bindings, ...), called like a function |
| `ros` | io/ros_messages | `(sample, header, ctx) -> [(topic suffix, message)]`: one delivered sample as ROS 2 messages (`fibril-mjx export-mcap`) |
| `bag` | io/bag_fields | `{ROS type: reader}`: how a recorded message becomes this type's sample fields where the shared reader of that ROS type does not fit (`fibril_mjx.io.bags`) |
| `profile_fit` | workflows/fit_profile | what `fibril-mjx fit-profile` fits for the type (a record: the static-log fit, whether thermal logs apply) |
| `mavlink` | io/mavlink_hil | the MAVLink HIL source the type feeds (`'imu'`, `'mag'`, `'baro'`, `'airspeed'`, `'gps'`): preferred for it when several components have its fields (`fibril-mjx export-mavlink`) |
| `assembly_channels` | components | the config fields naming the MuJoCo actuators an assembly (SPEC §3.3) binds: its gear is written into each (`fibril_mjx.physics.assemblies`); a type without it cannot be bound |

Every type, built-in or a user's, registers with one call, `register(type, build=...,
config_model=..., ...)` (`fibril_mjx.register`): it adds the parts it is given to the type's
entry. A user's module passes every part at once; a built-in type's parts are registered by
the module that defines each (the end of `components/sensors/imu.py`, of `analysis/imu.py`, of
`workflows/validate/inertial/driver.py`, ...). There is no list of those modules: the layer that
reads a part first imports every module of the package that provides it (`discover`: the
builder walks `components/`, the workflows walk `analysis/` and `workflows/validate/`), so a
module dropped into the folder is found.

This module sits in `core/`, below the layers whose parts it holds: it stores their callables
and records and never imports them.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import types as _types
from typing import Callable, Mapping

from fibril_mjx.errors import MOVED, moved_attribute


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
    bag: `{ROS type: reader}`, recorded messages → sample fields (`fibril_mjx.io.bag_fields`).
    profile_fit: what `fit-profile` fits (`fibril_mjx.workflows.fit_profile.driver.ProfileFit`).
    mavlink: the MAVLink HIL source it feeds (`fibril_mjx.io.mavlink_hil`).
    assembly_channels: config fields naming the actuators an assembly's gear is written into.
  """
  type: str
  build: Callable | None = None
  config_model: type | None = None
  metrics: Callable | None = None
  plot: Callable | None = None
  validation_rig: Callable | None = None
  ros: Callable | None = None
  bag: Mapping | None = None
  profile_fit: object | None = None
  mavlink: str | None = None
  assembly_channels: tuple[str, ...] | None = None


PARTS = tuple(f.name for f in dataclasses.fields(Entry) if f.name != 'type')

_ENTRIES: dict[str, Entry] = {}
ENTRIES: Mapping[str, Entry] = _types.MappingProxyType(_ENTRIES)   # read-only, live


def _where(part) -> str:
  mod = inspect.getmodule(part if callable(part) or isinstance(part, type) else type(part))
  return f' (by {mod.__name__})' if mod is not None else ''


def register(type_name: str, build: Callable | None = None, *, replace: bool = False,
             **parts) -> Entry:
  """Makes a component type, or more parts of one, available to manifests and workflows: the
  one registration call (`fibril_mjx.register`).

  Args:
    type_name: the manifest `type` (`vendor/name`); its entry is created by its first call.
    build: its `build` part (a type with one is a type a manifest may name).
    replace: replace parts already set (else setting one again is an error).
    **parts: its other parts by name (`PARTS`: config_model, metrics, plot, validation_rig,
      ros, bag, profile_fit, mavlink, assembly_channels; module doc; None: not given). A type without them is
      built, run and traced, just not summarized, validated or exported.

  Returns:
    The type's entry after the call.

  Raises:
    ValueError: an unknown part name, or a part given is already set (naming the type, the
      part and its module).
  """
  unknown = sorted(set(parts) - set(PARTS))
  if unknown:
    raise ValueError(f'component type {type_name!r}: unknown part(s) {", ".join(unknown)} '
                     f'(parts: {", ".join(PARTS)})')
  parts = {name: value for name, value in dict(parts, build=build).items() if value is not None}
  old = _ENTRIES.get(type_name, Entry(type_name))
  if not replace:
    for name in parts:
      if getattr(old, name) is not None:
        raise ValueError(f'component type {type_name!r} is already registered with a '
                         f'{name}{_where(getattr(old, name))}; pass replace=True to replace it')
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


def __getattr__(name):   # PEP 562: names moved away, with a warning (fibril_mjx.errors.MOVED)
  return moved_attribute(__name__, name)
