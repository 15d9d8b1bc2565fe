"""YAML loading and pydantic validation turned into one-line `ConfigError`s."""

from __future__ import annotations

import collections.abc
import math
import pathlib
import re
import types
import typing
from typing import Any, Callable, TypeVar

import pydantic
import yaml

from fibril_mjx.errors import (ConfigError, ConfigErrors, FibrilError, did_you_mean, join_path,
                               unreadable)
from fibril_mjx.errors import Strict  # noqa: F401  (the models of config/ import it here)

M = TypeVar('M', bound=pydantic.BaseModel)


def is_number(x) -> bool:
  """A finite int or float (not a bool)."""
  return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check(test: Callable[[Any], bool], rule: str) -> pydantic.BeforeValidator:
  """A before-validator: a value passes when `test(value)`, else its error says `rule` (the
  message of the field, in place of the type's own)."""
  def run(v):
    if not test(v):
      raise ValueError(rule)
    return v
  return pydantic.BeforeValidator(run)


# libyaml's safe loader where PyYAML was built with it (the same documents, faster: a tune or
# campaign reads dozens of profile files; docs/internals/performance.md, "Reading YAML"); a
# syntax error is reported by the pure-Python one, whose messages name what it expected
_LOADER = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)


def load_yaml(path: pathlib.Path) -> Any:
  """Safe-loads a YAML file; an empty or binary file or a syntax error is a one-line
  `FibrilError`."""
  try:
    text = pathlib.Path(path).read_text(encoding='utf-8')
  except OSError as e:
    raise FibrilError(f'{path}: cannot read: {e.strerror}') from None
  except UnicodeDecodeError as e:
    raise unreadable(path, 'YAML file', e, 'is it the right file?') from None
  if not text.strip():
    raise unreadable(path, 'YAML file', 'the file is empty', 'is it the right file?')
  try:
    return yaml.load(text, Loader=_LOADER)   # noqa: S506 — a safe loader
  except yaml.YAMLError:
    pass
  try:
    return yaml.safe_load(text)
  except yaml.YAMLError as e:
    mark = getattr(e, 'problem_mark', None)
    line = f' line {mark.line + 1}' if mark else ''
    problem = getattr(e, 'problem', None) or str(e).splitlines()[0]
    raise FibrilError(f'{path}:{line}: invalid YAML: {problem}') from None


def _unwrap(ann: Any) -> Any:
  """`ann` without `Annotated[...]` and without a `None` member of an optional."""
  while True:
    if typing.get_origin(ann) is typing.Annotated:
      ann = typing.get_args(ann)[0]
      continue
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
      members = [a for a in typing.get_args(ann) if a is not type(None)]
      if len(members) == 1:
        ann = members[0]
        continue
    return ann


def _member(members: tuple, label: Any) -> Any:
  """The member of a tagged union that the tag `label` (a loc part) selects, else None."""
  for m in members:
    if typing.get_origin(m) is typing.Annotated:
      if any(isinstance(x, pydantic.Tag) and x.tag == label for x in typing.get_args(m)[1:]):
        return m
    inner = _unwrap(m)
    if isinstance(inner, type) and issubclass(inner, pydantic.BaseModel):
      for f in inner.model_fields.values():
        if typing.get_origin(f.annotation) is typing.Literal and label in typing.get_args(
            f.annotation):
          return m
  return None


def _walk(model: type[pydantic.BaseModel], loc: tuple) -> tuple[tuple, Any, Any]:
  """`(loc without the member tags of tagged unions, the model the last part is a key of, the
  annotation at loc)`.

  pydantic puts the tag of a tagged union's member into `loc` (`vary.x.uniform.high`); the
  user's file has no such level, so it is left out of the path the message names.
  """
  clean: list = []
  ann: Any = model
  holder: Any = model
  parts = list(loc)
  i = 0
  while i < len(parts):
    part = parts[i]
    ann = _unwrap(ann)
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
      ann = _member(typing.get_args(ann), part)   # the tag: not a level of the file
      i += 1
      continue
    clean.append(part)
    i += 1
    if isinstance(ann, type) and issubclass(ann, pydantic.BaseModel):
      holder = ann
      field = ann.model_fields.get(part)
      ann = field.annotation if field is not None else None
    elif origin in (dict, collections.abc.Mapping):
      holder, ann = None, typing.get_args(ann)[1]
    elif origin in (list, collections.abc.Sequence):
      holder, ann = None, typing.get_args(ann)[0]
    elif origin is tuple:
      args = typing.get_args(ann)
      holder = None
      ann = args[0] if len(args) == 2 and args[1] is Ellipsis else (
          args[part] if isinstance(part, int) and part < len(args) else None)
    else:
      holder, ann = None, None
  return tuple(clean), holder, ann


def _tags(ann: Any, key: str) -> list[str]:
  """The tags of a union discriminated by the field `key` (its members' `Literal` values)."""
  out = []
  for m in typing.get_args(_unwrap(ann)):
    inner = _unwrap(m)
    field = getattr(inner, 'model_fields', {}).get(key)
    if field is not None and typing.get_origin(field.annotation) is typing.Literal:
      out += [str(a) for a in typing.get_args(field.annotation)]
  return out


def _field_names(model: type[pydantic.BaseModel], loc: tuple) -> list[str]:
  """Field names of the (possibly nested) model that `loc[:-1]` points into."""
  _, holder, _ = _walk(model, loc)
  return list(getattr(holder, 'model_fields', {}))


def _rule(model: type[pydantic.BaseModel], err: dict) -> str:
  """The rule a pydantic error broke, as the message says it.

  A model may word its own: `unknown_key_rule(key)` for a key it does not have and
  `missing_rule(key)` for a required one that is absent (classmethods).
  """
  kind, loc = err['type'], err['loc']
  _, holder, ann = _walk(model, loc)
  if kind == 'extra_forbidden':
    hook = getattr(holder, 'unknown_key_rule', None)
    if hook is not None:
      return hook(str(loc[-1]))
    return 'unknown field' + did_you_mean(str(loc[-1]), _field_names(model, loc))
  if kind == 'missing':
    hook = getattr(holder, 'missing_rule', None)
    return hook(str(loc[-1])) if hook is not None else 'required field is missing'
  if kind in ('union_tag_invalid', 'union_tag_not_found'):
    ctx = err.get('ctx') or {}
    tags = re.findall(r"'([^']*)'", str(ctx.get('expected_tags', ''))) or _tags(
        ann, str(ctx.get('discriminator', '')).strip("'"))
    return 'must be one of ' + ', '.join(tags) + did_you_mean(str(ctx.get('tag', '')), tags)
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
      rule = _rule(model, err)
      loc, _, _ = _walk(model, tuple(err['loc']))
      if err['type'] in ('union_tag_invalid', 'union_tag_not_found'):
        # the tag field is what is wrong (`dist = 'gaussian'`), not the whole entry
        key = str((err.get('ctx') or {}).get('discriminator', '')).strip("'")
        if key.isidentifier():
          where_file, where_path = origin(loc + (key,)) if origin else (
              file, join_path(prefix, loc + (key,)))
          errors.append(ConfigError(where_file, where_path, rule,
                                    (err.get('ctx') or {}).get('tag')))
          continue
      where_file, where_path = origin(loc) if origin else (file, join_path(prefix, loc))
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
