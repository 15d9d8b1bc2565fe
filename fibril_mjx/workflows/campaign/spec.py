"""The campaign file (`fibril_campaign: 1`): parsing and validation of its structure.

Field paths, metric names and criteria are checked against the built manifest later
(`fields.resolve`, `engine.Plan`); here every key, type and distribution parameter is checked,
with one `file: path = value: rule` line per error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import pathlib
from typing import Any

from fibril_mjx.config.manifest import CommandScriptEntry, ScriptEntry
from fibril_mjx.config.validation import load_yaml, validate
from fibril_mjx.errors import ConfigError, ConfigErrors, did_you_mean

DISTRIBUTIONS = {
    'uniform': ('low', 'high'),
    'normal': ('mean', 'std'),
    'truncated_normal': ('mean', 'std', 'low', 'high'),
    'lognormal': ('mu', 'sigma'),
    'choice': ('values',),
}
OPTIONAL = {'relative', 'weights'}
TOP_KEYS = ('fibril_campaign', 'manifest', 'worlds', 'seed', 'duration_s', 'chunk_worlds',
            'scenario', 'vary', 'metrics', 'criteria')
# `scenario:` keys: the manifest's open-loop drives, replaced entry list by entry list
SCENARIO_KEYS = ('actuator_script', 'command_script')


@dataclasses.dataclass(frozen=True)
class Distribution:
  """One `vary:` entry.

  Attributes:
    path: the field path as written (`ahrs.angular_velocity_bias`, `joint:yaw.damping`).
    dist: distribution name; params: its parameters (numbers or per-axis lists).
    relative: the sampled value multiplies the nominal value.
    weights: choice weights (None: equal).
  """
  path: str
  dist: str
  params: dict
  relative: bool = False
  weights: tuple | None = None


@dataclasses.dataclass(frozen=True)
class Metric:
  """A user-named metric: `name = expr` over other metrics (`+ - * / **`, abs, min, max, sqrt)."""
  name: str
  expr: str


@dataclasses.dataclass(frozen=True)
class Criterion:
  """Pass when `min <= metric <= max` (either bound optional); NaN fails."""
  name: str
  metric: str
  min: float | None
  max: float | None

  def describe(self) -> str:
    parts = []
    if self.min is not None:
      parts.append(f'{self.metric} >= {self.min:g}')
    if self.max is not None:
      parts.append(f'{self.metric} <= {self.max:g}')
    return ' and '.join(parts)


@dataclasses.dataclass(frozen=True)
class Campaign:
  """A validated campaign file (manifest path resolved relative to it)."""
  file: pathlib.Path
  sha256: str
  manifest: pathlib.Path
  worlds: int
  seed: int
  duration_s: float
  chunk_worlds: int
  vary: tuple[Distribution, ...]
  metrics: tuple | None        # names kept (None: every component metric)
  scenario: dict | None        # {'actuator_script' | 'command_script': (validated entries)}
  user_metrics: tuple[Metric, ...]
  criteria: tuple[Criterion, ...]


def _num(x) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _numbers(v):
  """A number or a flat list of numbers → list of floats, else None."""
  if _num(v):
    return [float(v)]
  if isinstance(v, list) and v and all(_num(x) for x in v):
    return [float(x) for x in v]
  return None


def _check_dist(file, fp, entry, errors) -> Distribution | None:
  path = f'vary.{fp}'
  if not isinstance(entry, dict):
    errors.append(ConfigError(file, path, 'must be a mapping with dist: and its parameters',
                              entry))
    return None
  dist = entry.get('dist')
  if dist not in DISTRIBUTIONS:
    errors.append(ConfigError(file, f'{path}.dist', 'must be one of '
                              + ', '.join(DISTRIBUTIONS) + did_you_mean(dist, DISTRIBUTIONS),
                              dist))
    return None
  need = DISTRIBUTIONS[dist]
  ok = True
  for k in entry:
    if k != 'dist' and k not in need and k not in OPTIONAL:
      errors.append(ConfigError(file, f'{path}.{k}', f'unknown key for dist {dist}; expected '
                                + ', '.join(need) + did_you_mean(k, list(need) + list(OPTIONAL)),
                                entry[k]))
      ok = False
  for k in need:
    if k not in entry:
      errors.append(ConfigError(file, f'{path}.{k}', f'required by dist {dist}'))
      ok = False
  if not ok:
    return None
  rel = entry.get('relative', False)
  if not isinstance(rel, bool):
    errors.append(ConfigError(file, f'{path}.relative', 'must be true or false', rel))
    return None
  params, weights = {}, None
  if dist == 'choice':
    vals = entry['values']
    if not isinstance(vals, list) or not vals:
      errors.append(ConfigError(file, f'{path}.values', 'must be a non-empty list', vals))
      return None
    params['values'] = tuple(tuple(v) if isinstance(v, list) else v for v in vals)
    if 'weights' in entry:
      w = _numbers(entry['weights'])
      if w is None or len(w) != len(vals) or min(w) < 0 or sum(w) <= 0:
        errors.append(ConfigError(file, f'{path}.weights', f'must be {len(vals)} numbers '
                                  '>= 0 with a positive sum', entry['weights']))
        return None
      weights = tuple(w)
    return Distribution(fp, dist, params, rel, weights)
  if 'weights' in entry:
    errors.append(ConfigError(file, f'{path}.weights', 'only for dist choice', entry['weights']))
    return None
  for k in need:
    v = _numbers(entry[k])
    if v is None:
      errors.append(ConfigError(file, f'{path}.{k}', 'must be a finite number or a per-axis '
                                'list of finite numbers', entry[k]))
      return None
    params[k] = v
  sizes = {len(v) for v in params.values()} - {1}
  if len(sizes) > 1:
    errors.append(ConfigError(file, path, 'per-axis lists must have one length',
                              {k: entry[k] for k in need}))
    return None
  n = max(len(v) for v in params.values())
  full = {k: v * n if len(v) == 1 else v for k, v in params.items()}
  rules = {
      'uniform': [('high', lambda p, i: p['low'][i] <= p['high'][i], 'low must be <= high')],
      'normal': [('std', lambda p, i: p['std'][i] >= 0, 'std must be >= 0')],
      'truncated_normal': [('std', lambda p, i: p['std'][i] > 0, 'std must be > 0'),
                           ('high', lambda p, i: p['low'][i] < p['high'][i],
                            'low must be < high')],
      'lognormal': [('sigma', lambda p, i: p['sigma'][i] >= 0, 'sigma must be >= 0')],
  }[dist]
  for key, rule, text in rules:
    for i in range(n):
      if not rule(full, i):
        errors.append(ConfigError(file, f'{path}.{key}', text, entry[key]))
        return None
  return Distribution(fp, dist, {k: tuple(v) for k, v in params.items()}, rel)


def _check_metric_expr(file, path, expr, errors):
  import ast
  try:
    tree = ast.parse(expr, mode='eval')
  except SyntaxError:
    errors.append(ConfigError(file, path, 'not a valid expression', expr))
    return
  allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Name, ast.Constant,
             ast.Load, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd,
             ast.Attribute)
  for node in ast.walk(tree):
    if not isinstance(node, allowed):
      errors.append(ConfigError(file, path, 'only numbers, metric names, + - * / ** and '
                                'abs/min/max/sqrt are allowed', expr))
      return


def _check_scenario(file, raw, errors) -> dict | None:
  """`scenario:` — `actuator_script:` and/or `command_script:` entry lists in the manifest's
  own vocabulary, each replacing the manifest's list (an empty list: no such drive)."""
  if raw is None:
    return None
  if not isinstance(raw, dict) or not raw:
    errors.append(ConfigError(file, 'scenario', 'must be a mapping with actuator_script: and/or '
                              'command_script: (entry lists as in the manifest)', raw))
    return None
  models = dict(zip(SCENARIO_KEYS, (ScriptEntry, CommandScriptEntry)))
  out = {}
  for key, entries in raw.items():
    if key not in models:
      errors.append(ConfigError(file, f'scenario.{key}', 'unknown key; expected '
                                + ' or '.join(SCENARIO_KEYS) + did_you_mean(key, SCENARIO_KEYS),
                                entries))
      continue
    if not isinstance(entries, list):
      errors.append(ConfigError(file, f'scenario.{key}', 'must be a list of entries as in the '
                                f"manifest's {key}", entries))
      continue
    ok = []
    for i, e in enumerate(entries):
      try:
        ok.append(validate(models[key], e, file=file, prefix=f'scenario.{key}[{i}]'))
      except ConfigErrors as exc:
        errors.extend(exc.errors)
    out[key] = tuple(ok)
  return out


def read(path, *, worlds: int | None = None, duration_s: float | None = None,
         chunk_worlds: int | None = None) -> Campaign:
  """Reads and validates a campaign file; command-line values replace the file's.

  Raises:
    ConfigErrors: every structural error, one line each.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise ConfigErrors([ConfigError(str(path), '', 'campaign file not found')])
  file = str(path)
  data = load_yaml(path)
  errors: list[ConfigError] = []
  if not isinstance(data, dict):
    raise ConfigErrors([ConfigError(file, '', 'must be a mapping')])
  for k in data:
    if k not in TOP_KEYS:
      errors.append(ConfigError(file, k, 'unknown key' + did_you_mean(k, TOP_KEYS), data[k]))
  if data.get('fibril_campaign') != 1:
    errors.append(ConfigError(file, 'fibril_campaign', 'must be 1 (the schema version)',
                              data.get('fibril_campaign')))
  man = data.get('manifest')
  manifest = None
  if not isinstance(man, str):
    errors.append(ConfigError(file, 'manifest', 'required: the manifest path, relative to the '
                              'campaign file', man))
  else:
    manifest = (path.resolve().parent / man).resolve()
    if not manifest.is_file():
      errors.append(ConfigError(file, 'manifest', f'file not found ({manifest})', man))

  def pos_int(key, given, default=None):
    v = given if given is not None else data.get(key, default)
    if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
      errors.append(ConfigError(file, key, 'must be a positive integer', v))
      return 1
    return v
  n_worlds = pos_int('worlds', worlds)
  chunk = pos_int('chunk_worlds', chunk_worlds, 1024)
  seed = data.get('seed', 0)
  if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2 ** 31):
    errors.append(ConfigError(file, 'seed', 'must be an integer in [0, 2**31)', seed))
  dur = duration_s if duration_s is not None else data.get('duration_s')
  if not (_num(dur) and dur > 0):
    errors.append(ConfigError(file, 'duration_s', 'must be a number > 0 (seconds)', dur))

  scenario = _check_scenario(file, data.get('scenario'), errors)
  vary = []
  raw_vary = data.get('vary', {})
  if not isinstance(raw_vary, dict):
    errors.append(ConfigError(file, 'vary', 'must be a mapping field path → distribution',
                              raw_vary))
  else:
    for fp, entry in raw_vary.items():
      d = _check_dist(file, str(fp), entry, errors)
      if d is not None:
        vary.append(d)

  names, user = None, []
  raw_m = data.get('metrics')
  if raw_m is not None:
    if not isinstance(raw_m, list):
      errors.append(ConfigError(file, 'metrics', 'must be a list of metric names or '
                                '{name: ..., expr: ...}', raw_m))
    else:
      names = []
      for i, m in enumerate(raw_m):
        if isinstance(m, str):
          names.append(m)
        elif isinstance(m, dict) and set(m) == {'name', 'expr'} and isinstance(
            m['name'], str) and isinstance(m['expr'], str):
          _check_metric_expr(file, f'metrics[{i}].expr', m['expr'], errors)
          user.append(Metric(m['name'], m['expr']))
        else:
          errors.append(ConfigError(file, f'metrics[{i}]', 'must be a metric name or '
                                    '{name: NAME, expr: EXPRESSION}', m))
  criteria = []
  raw_c = data.get('criteria', {})
  if not isinstance(raw_c, dict):
    errors.append(ConfigError(file, 'criteria', 'must be a mapping name → {metric, max|min}',
                              raw_c))
  else:
    for name, c in raw_c.items():
      p = f'criteria.{name}'
      if not isinstance(c, dict) or 'metric' not in c:
        errors.append(ConfigError(file, p, 'must be {metric: NAME, max: X} and/or min: X', c))
        continue
      bad = [k for k in c if k not in ('metric', 'min', 'max')]
      for k in bad:
        errors.append(ConfigError(file, f'{p}.{k}', 'unknown key (metric, min, max)'
                                  + did_you_mean(k, ('metric', 'min', 'max')), c[k]))
      for k in ('min', 'max'):
        if k in c and not _num(c[k]):
          errors.append(ConfigError(file, f'{p}.{k}', 'must be a finite number', c[k]))
      if 'min' not in c and 'max' not in c:
        errors.append(ConfigError(file, p, 'needs max: and/or min:', c))
      if not bad and all(_num(c.get(k, 0)) for k in ('min', 'max')) and (
          'min' in c or 'max' in c):
        criteria.append(Criterion(str(name), str(c['metric']),
                                  float(c['min']) if 'min' in c else None,
                                  float(c['max']) if 'max' in c else None))
  if errors:
    raise ConfigErrors(errors)
  return Campaign(path, hashlib.sha256(path.read_bytes()).hexdigest(), manifest, n_worlds,
                  int(seed), float(dur), chunk, tuple(vary),
                  tuple(names) if names is not None else None, scenario, tuple(user),
                  tuple(criteria))
