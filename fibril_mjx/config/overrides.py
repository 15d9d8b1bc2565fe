"""`--set` assignments of the command line turned into `load(..., overrides=)` (SPEC §8).

`ID.FIELD=VALUE` overrides a component config field; `ELEMENT:NAME.ATTRIBUTE=VALUE` a MJCF
attribute (as `parameter_overlays` do). `VALUE` is YAML (`0.02`, `[0, 0, 0.01]`, `true`).
"""

from __future__ import annotations

import yaml

from fibril_mjx.errors import FibrilError

FORMS = 'ID.FIELD=VALUE or ELEMENT:NAME.ATTRIBUTE=VALUE'


def parse_assignments(items) -> dict | None:
  """`['ahrs.period_s=0.02', 'joint:yaw.damping=0.3']` → `{'components': [...], 'mjcf': [...]}`.

  Entries keep their order, so `components[i]` / `mjcf[i]` in an error message is the i-th
  assignment of that kind. Returns None for no assignments.

  Raises:
    FibrilError: a malformed assignment (one line).
  """
  if not items:
    return None
  out = {'components': [], 'mjcf': []}
  for item in items:
    key, sep, text = item.partition('=')
    target, dot, attr = key.rpartition('.')
    if not sep or not dot or not target or not attr:
      raise FibrilError(f'--set {item!r}: expected {FORMS}')
    try:
      value = yaml.safe_load(text)
    except yaml.YAMLError:
      raise FibrilError(f'--set {item!r}: the value is not valid YAML') from None
    element, colon, name = target.partition(':')
    if colon:
      if not element or not name:
        raise FibrilError(f'--set {item!r}: expected {FORMS}')
      out['mjcf'].append({'element': element, 'name': name, 'attribute': attr, 'value': value})
    else:
      out['components'].append({'component': target, 'field': attr, 'value': value})
  return out
