"""Component types: one module per device type, in `sensors/`, `actuators/` and `estimators/`.

Each module (see `fibril_mjx/core/protocol.py` for the contract) defines `TYPE`, its config
model and `build(cid, raw_config, ctx, catalog) -> component`, and registers them at its end
in the one registry, `fibril_mjx.core.registry` (with `registry.add`). No list names the
modules: the builder imports every module of these folders (`registry.discover`), so a new
module is all a new built-in type needs. Host-side metrics and plots of a type live apart, in
`fibril_mjx.analysis`, and register there by type.

`register` / `unregister` / `TYPES` are the earlier names of the registry's component part,
kept for code that uses them; a new type registers all its parts in one call with
`fibril_mjx.register`.
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

from fibril_mjx.core import registry
from fibril_mjx.core.registry import Entry as ComponentType  # noqa: F401  (type, build, config_model, ...)


class _Types(Mapping):
  """`{type: entry}` of the registered types that have a `build` (live, read-only)."""

  def __getitem__(self, type_name: str) -> ComponentType:
    entry = registry.ENTRIES.get(type_name)
    if entry is None or entry.build is None:
      raise KeyError(type_name)
    return entry

  def __iter__(self) -> Iterator[str]:
    return (t for t, e in registry.ENTRIES.items() if e.build is not None)

  def __len__(self) -> int:
    return sum(1 for _ in self)


TYPES: Mapping[str, ComponentType] = _Types()


def register(type_name: str, build: Callable, *, config_model: type | None = None,
             replace: bool = False) -> None:
  """Makes `type_name` available to manifests (its `build` and `config_model` parts).

  Args:
    type_name: the manifest `type` (`vendor/name`).
    build: `(cid, raw_config, ctx, catalog) -> component`; the component must satisfy
      `fibril_mjx.core.protocol` for its declared roles (checked at build).
    config_model: the pydantic model of its `config` mapping (used by `fibril-mjx schema`).
    replace: allow re-registering an existing type.
  """
  if type_name in TYPES and not replace:
    raise ValueError(f'component type {type_name!r} is already registered')
  registry.add(type_name, build=build, config_model=config_model, replace=True)


def unregister(type_name: str) -> None:
  """Removes the type and every part registered for it."""
  registry.unregister(type_name)
