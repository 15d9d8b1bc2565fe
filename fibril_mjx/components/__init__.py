"""Component types: one module per device type, in `sensors/`, `actuators/` and `estimators/`.

Each module (see `fibril_mjx/core/protocol.py` for the contract) defines `TYPE`, its config
model and `build(cid, raw_config, ctx, catalog) -> component`, and registers them at its end
with the one registration call (`registry.register`, which is `fibril_mjx.register`). No list
names the modules: the builder imports every module of these folders (`registry.discover`), so
a new module is all a new built-in type needs. Host-side metrics and plots of a type live apart,
in `fibril_mjx.analysis`, and register there by type.
"""

from fibril_mjx.errors import moved_attribute


def __getattr__(name):   # PEP 562: names moved away, with a warning (fibril_mjx.errors.MOVED)
  return moved_attribute(__name__, name)
