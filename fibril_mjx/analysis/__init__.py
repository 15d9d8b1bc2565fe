"""Host-side analysis of runs (NumPy, matplotlib), apart from the traced component code.

Each component type may have two host-side parts in the registry (`fibril_mjx.core.registry`):

- `metrics(sensor, truth) -> {metric: (nworld,)}` — per-world statistics of a run, from the
  flattened trace fields of that component (`sensor`: `{field: (nworld, T, ...)}` delivered
  output, `truth`: `{field: (nworld, T, ...)}`);
- `plot(path, cid, time_s, sensor, truth, world, metrics, title)` — one PNG.

Each module here is the analysis of one built-in type and registers its two parts at its end
(`registry.register`, which is `fibril_mjx.register`); no list names the modules: the workflows import every module of this
folder (`registry.discover`) before they look the parts up by component type. A type with
none is run and traced, just not summarized.
"""

from __future__ import annotations

from fibril_mjx.core import registry
from fibril_mjx.errors import moved_attribute


def for_type(type_name: str) -> registry.Entry:
  """The registry entry of a type: its `metrics` and `plot` (None where it has none)."""
  return registry.get(type_name)


def __getattr__(name):   # PEP 562: names moved away, with a warning (fibril_mjx.errors.MOVED)
  return moved_attribute(__name__, name)
