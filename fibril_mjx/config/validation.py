"""YAML loading and pydantic validation turned into one-line `ConfigError`s."""

from __future__ import annotations

import pathlib
from typing import Any, Callable, TypeVar

import pydantic
import yaml

from fibril_mjx.errors import ConfigError, ConfigErrors, FibrilError, did_you_mean, join_path

M = TypeVar('M', bound=pydantic.BaseModel)


class Strict(pydantic.BaseModel):
  """Base of every validated document: unknown keys forbidden, numbers finite, frozen."""
  model_config = pydantic.ConfigDict(extra='forbid', frozen=True, allow_inf_nan=False,
                                     strict=False)


def load_yaml(path: pathlib.Path) -> Any:
  """Safe-loads a YAML file; a syntax error is a one-line `FibrilError`."""
  try:
    text = pathlib.Path(path).read_text(encoding='utf-8')
  except OSError as e:
    raise FibrilError(f'{path}: cannot read: {e.strerror}') from None
  try:
    return yaml.safe_load(text)
  except yaml.YAMLError as e:
    mark = getattr(e, 'problem_mark', None)
    line = f' line {mark.line + 1}' if mark else ''
    problem = getattr(e, 'problem', None) or str(e).splitlines()[0]
    raise FibrilError(f'{path}:{line}: invalid YAML: {problem}') from None


def _field_names(model: type[pydantic.BaseModel], loc: tuple) -> list[str]:
  """Field names of the (possibly nested) model that `loc[:-1]` points into."""
  current: Any = model
  for part in loc[:-1]:
    if isinstance(part, int):
      continue
    field = getattr(current, 'model_fields', {}).get(part)
    if field is None:
      return []
    ann = field.annotation
    for arg in (getattr(ann, '__args__', None) or (ann,)):
      if isinstance(arg, type) and issubclass(arg, pydantic.BaseModel):
        current = arg
        break
      for sub in getattr(arg, '__args__', ()) or ():
        if isinstance(sub, type) and issubclass(sub, pydantic.BaseModel):
          current = sub
  return list(getattr(current, 'model_fields', {}))


def _rule(model: type[pydantic.BaseModel], err: dict) -> str:
  kind, loc = err['type'], err['loc']
  if kind == 'extra_forbidden':
    return 'unknown field' + did_you_mean(str(loc[-1]), _field_names(model, loc))
  if kind == 'missing':
    return 'required field is missing'
  msg = err['msg']
  for prefix in ('Value error, ', 'Assertion failed, '):
    if msg.startswith(prefix):
      msg = msg[len(prefix):]
  return msg[0].lower() + msg[1:] if msg else msg


def _extra_items(model, loc) -> int:
  """Items after index `loc[-1]` in the fixed-length tuple field that `loc` points into."""
  field = getattr(model, 'model_fields', {}).get(loc[0]) if loc else None
  args = getattr(getattr(field, 'annotation', None), '__args__', None)
  return max(0, len(args) - loc[-1] - 1) if args and len(loc) == 2 else 0


def validate(model: type[M], data: Any, *, file: str, prefix: str = '',
             origin: Callable[[tuple], tuple[str, str]] | None = None) -> M:
  """Validates `data` against `model`; every problem becomes one line.

  Args:
    model: the pydantic model.
    data: parsed YAML.
    file: the file the data came from.
    prefix: field path of `data` inside that file.
    origin: optional `loc -> (file, path)` for data merged from several files.

  Raises:
    ConfigErrors: one `ConfigError` per problem.
  """
  if data is None:
    data = {}
  if not isinstance(data, dict):
    raise ConfigErrors([ConfigError(file, prefix, 'must be a mapping', data)])
  try:
    return model.model_validate(data)
  except pydantic.ValidationError as exc:
    errors = []
    for err in exc.errors():
      loc = tuple(err['loc'])
      where_file, where_path = origin(loc) if origin else (file, join_path(prefix, loc))
      rule = _rule(model, err)
      if err['type'] == 'missing' and loc and isinstance(loc[-1], int):
        # A fixed-length vector that is too short: report the vector, not its missing item.
        parent = data
        for part in loc[:-1]:
          parent = parent[part] if isinstance(parent, (dict, list)) else None
        where_file, where_path = origin(loc[:-1]) if origin else (file, join_path(prefix,
                                                                                  loc[:-1]))
        rule = f'must have {loc[-1] + 1 + _extra_items(model, loc)} items, got ' + (
            str(len(parent)) if isinstance(parent, (list, tuple)) else 'fewer')
        errors.append(ConfigError(where_file, where_path, rule, parent))
        continue
      if err['type'] == 'missing':
        errors.append(ConfigError(where_file, where_path, rule))
      else:
        errors.append(ConfigError(where_file, where_path, rule, err.get('input')))
    raise ConfigErrors(errors) from None
