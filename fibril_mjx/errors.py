"""User-facing errors: one line naming the file, the field path, the value and the rule; and
`Strict`, the pydantic base of every validated document (file formats in `config/`, the
config fields a mechanism declares in `mechanisms/`), so a bad value fails the same way at
every layer."""

from __future__ import annotations

import difflib
import pathlib
from typing import Any, Iterable

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
