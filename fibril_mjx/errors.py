"""User-facing errors: one line naming the file, the field path, the value and the rule;
`Strict`, the pydantic base of every validated document (file formats in `config/`, the
config fields a mechanism declares in `mechanisms/`), so a bad value fails the same way at
every layer; and the deprecation path of moved public names (`MOVED`)."""

from __future__ import annotations

import difflib
import importlib
import pathlib
import sys
from typing import Any, Iterable
import warnings

import pydantic


class FibrilError(Exception):
  """An error in user input (manifest, profile, model). Printed as one line, no traceback."""


class ConfigError(FibrilError):
  """A field of a manifest, profile or overlay broke a rule.

  Attributes:
    file: the file the value came from.
    path: field path such as `components[0].config.period_s`.
    value: the offending value (or `None` when the field is missing).
    rule: what the value must satisfy.
  """

  _MISSING = object()

  def __init__(self, file: str, path: str, rule: str, value: Any = _MISSING):
    self.file, self.path, self.rule = str(file), path, rule
    self.value = None if value is ConfigError._MISSING else value
    where = f'{self.file}: {path}' if path else self.file
    shown = '' if value is ConfigError._MISSING else f' = {_short(value)}'
    super().__init__(f'{where}{shown}: {rule}')


def plain(value: Any) -> Any:
  """`value` with NumPy / JAX scalars and arrays as Python numbers and lists (so a message
  reads `0.51`, not `np.float64(0.51)`), inside lists, tuples and dicts too."""
  if isinstance(value, (list, tuple)):
    return type(value)(plain(v) for v in value)
  if isinstance(value, dict):
    return {plain(k): plain(v) for k, v in value.items()}
  if hasattr(value, 'tolist') and not isinstance(value, (str, bytes)):
    return value.tolist()
  return value


def _short(value: Any) -> str:
  text = repr(plain(value))
  return text if len(text) <= 80 else text[:77] + '...'


def did_you_mean(name: str, choices: Iterable[str]) -> str:
  """` (did you mean 'x'?)` or an empty string."""
  close = difflib.get_close_matches(str(name), sorted(choices), n=1, cutoff=0.6)
  return f" (did you mean '{close[0]}'?)" if close else ''


def join_path(prefix: str, loc: Iterable[Any]) -> str:
  """`components[0].config` + ('period_s',) -> `components[0].config.period_s`."""
  out = prefix
  for part in loc:
    if isinstance(part, int):
      out += f'[{part}]'
    else:
      out = f'{out}.{part}' if out else str(part)
  return out


AGAIN = 'copy or export it again (an interrupted copy leaves a truncated file)'


def unreadable(file, kind: str, reason: Any, remedy: str = AGAIN) -> FibrilError:
  """`file: not a readable KIND (REASON); REMEDY`: an empty, truncated, damaged or wrong-format
  input file, in one line.

  Args:
    kind: what the file should have been, e.g. `.npz file`, `ROS bag`.
    reason: a phrase, or the exception the reader raised (its first line, the file's name
      shortened to `the file`, at most 120 characters). An empty file says so instead.
    remedy: what to do.
  """
  try:
    empty = pathlib.Path(file).stat().st_size == 0 and pathlib.Path(file).is_file()
  except OSError:
    empty = False
  if empty:
    text = 'the file is empty (0 bytes)'
  elif isinstance(reason, str):
    text = reason
  elif isinstance(reason, UnicodeDecodeError):
    text = 'binary data where text was expected: another format?'
  else:
    lines = str(reason).strip().splitlines()
    text = ' '.join(lines[0].split()) if lines else type(reason).__name__
    text = text.replace(f"'{file}'", 'the file').replace(str(file), 'the file')
    text = text if len(text) <= 120 else text[:117] + '...'
  return FibrilError(f'{file}: not a readable {kind} ({text}); {remedy}')


class ConfigErrors(FibrilError):
  """Several `ConfigError`s, printed one per line."""

  def __init__(self, errors: list[ConfigError]):
    self.errors = errors
    super().__init__('\n'.join(str(e) for e in errors))


def field_origin(file: str, path: str):
  """`field -> (file, 'path.field')`: where a config field sits, for error messages."""
  return lambda field: (file, f'{path}.{field}' if path else field)


class Strict(pydantic.BaseModel):
  """Base of every validated document: unknown keys forbidden, numbers finite, frozen."""
  model_config = pydantic.ConfigDict(extra='forbid', frozen=True, allow_inf_nan=False,
                                     strict=False)


# ---------------------------------------------------------------- moved public names

REMOVAL = 'fibril_mjx 0.3 (not before 2027-01-07)'
# Public names that moved, old dotted path -> new: each still works, with a DeprecationWarning
# naming the new place, until REMOVAL (docs/reference/api.md, "Deprecations"). An old module
# inside a package is a shim file at its old path (`components/motion_motor.py`); a name of an
# existing module (and an old module at the package root, where only `__init__` and `errors`
# live) comes from that module's `__getattr__` (PEP 562), which calls `moved_attribute`.
MOVED = {
    # modules (the layering of 2026-12-01)
    'fibril_mjx.components.motion_motor': 'fibril_mjx.components.actuators.motion_motor',
    'fibril_mjx.components.motor': 'fibril_mjx.components.actuators.motor',
    'fibril_mjx.campaign': 'fibril_mjx.workflows.campaign',
    'fibril_mjx.dcmotor': 'fibril_mjx.physics.dcmotor',
    'fibril_mjx.envs': 'fibril_mjx.rl.env',
    'fibril_mjx.geodesy': 'fibril_mjx.mechanisms.geodesy',
    'fibril_mjx.icm42688p': 'fibril_mjx.io.icm42688p',
    'fibril_mjx.mavlink_hil': 'fibril_mjx.io.mavlink_hil',
    'fibril_mjx.mcap_export': 'fibril_mjx.io.mcap_export',
    'fibril_mjx.recording': 'fibril_mjx.io.recording',
    'fibril_mjx.signal': 'fibril_mjx.mechanisms.signal',
    'fibril_mjx.smallmat': 'fibril_mjx.mechanisms.smallmat',
    'fibril_mjx.tune': 'fibril_mjx.workflows.tune',
    'fibril_mjx.worlds': 'fibril_mjx.batch.worlds',
    # names (2026-12-04: a sensor's common fields declared on SensorBase; 2026-12-05: the
    # LAPACK-safe sub-batch in batch/lapack.py)
    'fibril_mjx.components.base.SensorFields': 'fibril_mjx.components.base.SensorBase',
    'fibril_mjx.components.base.FaultySensorFields': 'fibril_mjx.components.base.SensorBase',
    'fibril_mjx.batch.worlds.lapack_safe_sub_batch':
        'fibril_mjx.batch.lapack.lapack_safe_sub_batch',
    # 2026-12-07: one registration call, one registry
    'fibril_mjx.components.register': 'fibril_mjx.register',
    'fibril_mjx.components.unregister': 'fibril_mjx.core.registry.unregister',
    'fibril_mjx.components.TYPES': 'fibril_mjx.core.registry.ENTRIES',
    'fibril_mjx.components.ComponentType': 'fibril_mjx.core.registry.Entry',
    'fibril_mjx.core.registry.add': 'fibril_mjx.register',
    'fibril_mjx.analysis.register': 'fibril_mjx.register',
    # 2026-12-07: one RL env (FibrilEnv, built from a Playground env by from_playground) and
    # one set of wrappers
    'fibril_mjx.rl.playground.DeviceEnv': 'fibril_mjx.rl.playground.from_playground',
    'fibril_mjx.rl.playground.wrap_for_brax_training': 'fibril_mjx.rl.wrappers.wrap_for_training',
}


def resolve(dotted: str) -> Any:
  """The module or object at a dotted path (its longest importable module, then attributes)."""
  parts = dotted.split('.')
  for i in range(len(parts), 0, -1):
    try:
      obj = importlib.import_module('.'.join(parts[:i]))
    except ModuleNotFoundError:
      continue
    for name in parts[i:]:
      obj = getattr(obj, name)
    return obj
  raise ModuleNotFoundError(dotted)


def moved(old: str, stacklevel: int) -> Any:
  """Warns that `old` moved (`MOVED`), naming its new place, and returns the new object;
  `stacklevel` points the warning at the user's line."""
  new = MOVED[old]
  warnings.warn(f'{old} moved to {new}; the old name is removed in {REMOVAL}',
                DeprecationWarning, stacklevel=stacklevel + 1)
  return resolve(new)


def moved_attribute(module: str, name: str) -> Any:
  """The body of an old module's `__getattr__` (PEP 562): the moved name, with its warning,
  or the usual AttributeError."""
  if f'{module}.{name}' not in MOVED:
    raise AttributeError(f'module {module!r} has no attribute {name!r}')
  return moved(f'{module}.{name}', stacklevel=3)   # the user's line, past the hook


def moved_module(old: str) -> Any:
  """The body of a shim file at a moved module's old path: the new module (the same object,
  so `isinstance` and monkeypatching agree; the caller puts it in `sys.modules[old]`), with
  its warning. Submodules of a moved package that are loaded already get their old names
  too, so that importing one by its old path finds it rather than loading it twice."""
  new = moved(old, stacklevel=3)   # past the shim module (the import system's frames are
  # skipped by `warnings`)
  for name, mod in list(sys.modules.items()):
    if name.startswith(new.__name__ + '.'):
      sys.modules.setdefault(old + name[len(new.__name__):], mod)
  return new
