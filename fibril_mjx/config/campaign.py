"""The campaign file (`fibril_campaign: 1`) as pydantic models: its keys, types and
distribution parameters (`CampaignModel`, whose JSON Schema `fibril-mjx schema --kind
campaign` prints).

Each rule words its own message (a validator raising it before the type is checked), so one
bad value is one line naming its path, e.g. `vary.ahrs.angular_velocity_bias.std = -1: std must
be >= 0`. What needs the built manifest (field paths, metric names, scenario actuators) is
checked later, by the campaign workflow.

A paired campaign names two or more `designs:` (each `{manifest: PATH, set: {field path:
value}}`, `{}` for the campaign's manifest as is) run on the same worlds; `unpaired:` (default
true) also reruns the designs after the first on independent keys to measure the variance
reduction (`fibril_mjx.workflows.campaign.paired`).
"""

from __future__ import annotations

import ast
from typing import Annotated, Any, ClassVar, Literal, Optional, Union

import pydantic
from pydantic import Discriminator, Field, Tag

from fibril_mjx.config.manifest import CommandScriptEntry, ScriptEntry
from fibril_mjx.config.validation import Strict, check, is_number
from fibril_mjx.errors import did_you_mean

DISTRIBUTIONS = {
    'uniform': ('low', 'high'),
    'normal': ('mean', 'std'),
    'truncated_normal': ('mean', 'std', 'low', 'high'),
    'lognormal': ('mu', 'sigma'),
    'choice': ('values',),
}
OPTIONAL = ('relative', 'weights')
TOP_KEYS = ('fibril_campaign', 'manifest', 'worlds', 'seed', 'duration_s', 'chunk_worlds',
            'physics', 'scenario', 'controller', 'vary', 'metrics', 'criteria', 'designs',
            'unpaired')
# a `designs:` entry's keys: another manifest and/or fixed field values (paired campaigns)
DESIGN_KEYS = ('manifest', 'set')
# `controller:` keys: a trained policy closing the loop on delivered samples
CONTROLLER_KEYS = ('policy', 'task', 'observe', 'actions', 'control_period_s', 'goal')
# the tasks a `controller:` may name (`fibril_mjx.workflows.campaign.policy.TASKS`)
TASKS = ('leg_hold',)
# `scenario:` keys: the manifest's open-loop drives, replaced entry list by entry list
SCENARIO_KEYS = ('actuator_script', 'command_script')


def numbers(v) -> list[float] | None:
  """A number or a flat non-empty list of numbers → list of floats, else None."""
  if is_number(v):
    return [float(v)]
  if isinstance(v, list) and v and all(is_number(x) for x in v):
    return [float(x) for x in v]
  return None


def _positive_int(v) -> bool:
  return isinstance(v, int) and not isinstance(v, bool) and v > 0


# a number or a per-axis list of numbers
Numbers = Annotated[Union[float, list[float]], check(
    lambda v: numbers(v) is not None,
    'must be a finite number or a per-axis list of finite numbers')]
PositiveInt = Annotated[int, check(_positive_int, 'must be a positive integer')]
Flag = Annotated[bool, check(lambda v: isinstance(v, bool), 'must be true or false')]


def _per_axis(values: dict) -> tuple[int, dict] | None:
  """`(n, {key: n floats})` with scalars broadcast, or None when the lists' lengths differ."""
  lists = {k: numbers(v) for k, v in values.items()}
  sizes = {len(v) for v in lists.values()} - {1}
  if len(sizes) > 1:
    return None
  n = max(len(v) for v in lists.values())
  return n, {k: v * n if len(v) == 1 else v for k, v in lists.items()}


# ------------------------------------------------------------------------------- vary


class _Dist(Strict):
  """Base of one `vary:` entry: `dist:` and its parameters (numbers or per-axis lists)."""
  NAME: ClassVar[str] = ''
  STRICT: ClassVar[bool] = False   # the parameters' bounds are strict (`<`, `>`)
  relative: Flag = False
  dist: str                        # each distribution's own `Literal` (the union's tag)

  @classmethod
  def unknown_key_rule(cls, key: str) -> str:
    need = DISTRIBUTIONS[cls.NAME]
    if key == 'weights':
      return 'only for dist choice'
    return (f'unknown key for dist {cls.NAME}; expected ' + ', '.join(need)
            + did_you_mean(key, list(need) + list(OPTIONAL)))

  @classmethod
  def missing_rule(cls, key: str) -> str:
    return f'required by dist {cls.NAME}'

  @pydantic.model_validator(mode='after')
  def _one_length(self):
    keys = [k for k in DISTRIBUTIONS[self.NAME] if k != 'values']
    if keys and _per_axis({k: getattr(self, k) for k in keys}) is None:
      raise ValueError('per-axis lists must have one length')
    return self


def _ordered(lo: str, hi: str, strict: bool):
  """An after-validator of `hi`: `lo <= hi` (or `<`) for every axis."""
  def ordered(v, info: pydantic.ValidationInfo):
    if lo not in info.data:
      return v
    pa = _per_axis({lo: info.data[lo], hi: v})
    if pa is not None:
      n, full = pa
      ok = (lambda a, b: a < b) if strict else (lambda a, b: a <= b)
      if not all(ok(full[lo][i], full[hi][i]) for i in range(n)):
        raise ValueError(f'{lo} must be {"<" if strict else "<="} {hi}')
    return v
  return ordered


def _at_least(name: str, bound: float, strict: bool):
  """An after-validator: `name` >= bound (or >) on every axis."""
  def bounded(v):
    vals = numbers(v) or []
    if not all(x > bound if strict else x >= bound for x in vals):
      raise ValueError(f'{name} must be {">" if strict else ">="} {bound:g}')
    return v
  return bounded


class _Spread(_Dist):
  """`mean`, `std` (>= 0, or > 0 where `STRICT`): a normal's parameters."""
  mean: Numbers
  std: Numbers

  @pydantic.field_validator('std')
  @classmethod
  def _std_bound(cls, v):
    return _at_least('std', 0, cls.STRICT)(v)


class _Range(_Dist):
  """`low`, `high` (low <= high, or low < high where `STRICT`)."""
  low: Numbers
  high: Numbers

  @pydantic.field_validator('high')
  @classmethod
  def _high_ordered(cls, v, info: pydantic.ValidationInfo):
    return _ordered('low', 'high', cls.STRICT)(v, info)


class UniformDist(_Range):
  """`dist: uniform`: `low`, `high` (low <= high)."""
  NAME: ClassVar[str] = 'uniform'
  dist: Literal['uniform']


class NormalDist(_Spread):
  """`dist: normal`: `mean`, `std` (>= 0)."""
  NAME: ClassVar[str] = 'normal'
  dist: Literal['normal']


class TruncatedNormalDist(_Range, _Spread):
  """`dist: truncated_normal`: `mean`, `std` (> 0), `low`, `high` (low < high)."""
  NAME: ClassVar[str] = 'truncated_normal'
  STRICT: ClassVar[bool] = True
  dist: Literal['truncated_normal']


class LognormalDist(_Dist):
  """`dist: lognormal`: `mu`, `sigma` (>= 0) of the logarithm."""
  NAME: ClassVar[str] = 'lognormal'
  dist: Literal['lognormal']
  mu: Numbers
  sigma: Numbers
  sigma_bound = pydantic.field_validator('sigma')(_at_least('sigma', 0, False))


class ChoiceDist(_Dist):
  """`dist: choice`: `values` (numbers, lists, profile ids, mappings), optional `weights`."""
  NAME: ClassVar[str] = 'choice'
  dist: Literal['choice']
  values: Annotated[list[Any], check(lambda v: isinstance(v, list) and bool(v),
                                      'must be a non-empty list')]
  weights: Optional[list[float]] = None

  @pydantic.field_validator('weights', mode='before')
  @classmethod
  def _weights(cls, v, info: pydantic.ValidationInfo):
    if 'values' not in info.data:
      return v                    # the values are wrong already: that is the error
    n = len(info.data['values'])
    w = numbers(v)
    if w is None or len(w) != n or min(w) < 0 or sum(w) <= 0:
      raise ValueError(f'must be {n} numbers >= 0 with a positive sum')
    return v


Distribution = Annotated[
    Union[UniformDist, NormalDist, TruncatedNormalDist, LognormalDist, ChoiceDist],
    Field(discriminator='dist'),
    check(lambda v: isinstance(v, dict), 'must be a mapping with dist: and its parameters')]


# ------------------------------------------------------------------------------- the rest


class ScenarioModel(Strict):
  """`scenario:` — `actuator_script:` and/or `command_script:` entry lists in the manifest's
  own vocabulary, each replacing the manifest's list (an empty list: no such drive)."""
  actuator_script: Optional[Annotated[list[ScriptEntry], check(
      lambda v: isinstance(v, list),
      "must be a list of entries as in the manifest's actuator_script")]] = None
  command_script: Optional[Annotated[list[CommandScriptEntry], check(
      lambda v: isinstance(v, list),
      "must be a list of entries as in the manifest's command_script")]] = None

  @classmethod
  def unknown_key_rule(cls, key: str) -> str:
    return ('unknown key; expected ' + ' or '.join(SCENARIO_KEYS)
            + did_you_mean(key, SCENARIO_KEYS))


def _metric_expr(expr: str) -> str:
  try:
    tree = ast.parse(expr, mode='eval')
  except SyntaxError:
    raise ValueError('not a valid expression') from None
  allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Name, ast.Constant,
             ast.Load, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd,
             ast.Attribute)
  if not all(isinstance(node, allowed) for node in ast.walk(tree)):
    raise ValueError('only numbers, metric names, + - * / ** and abs/min/max/sqrt are allowed')
  return expr


class UserMetric(Strict):
  """A user-named metric: `name = expr` over other metrics (`+ - * / **`, abs, min, max, sqrt)."""
  name: str
  expr: Annotated[str, pydantic.AfterValidator(_metric_expr)]


def _is_user_metric(v) -> bool:
  return (isinstance(v, dict) and set(v) == {'name', 'expr'} and isinstance(v['name'], str)
          and isinstance(v['expr'], str))


MetricItem = Annotated[
    Union[Annotated[str, Tag('name')], Annotated[UserMetric, Tag('expr')]],
    Discriminator(lambda v: 'name' if isinstance(v, str) else 'expr'),
    check(lambda v: isinstance(v, str) or _is_user_metric(v),
           'must be a metric name or {name: NAME, expr: EXPRESSION}')]

Finite = Annotated[float, check(is_number, 'must be a finite number')]


class CriterionModel(Strict):
  """Pass when `min <= metric <= max` (either bound optional); NaN fails."""
  metric: str
  min: Optional[Finite] = None
  max: Optional[Finite] = None

  @classmethod
  def unknown_key_rule(cls, key: str) -> str:
    return 'unknown key (metric, min, max)' + did_you_mean(key, ('metric', 'min', 'max'))

  @pydantic.model_validator(mode='after')
  def _a_bound(self):
    if self.min is None and self.max is None:
      raise ValueError('needs max: and/or min:')
    return self


Criterion = Annotated[CriterionModel, check(
    lambda v: isinstance(v, dict) and 'metric' in v,
    'must be {metric: NAME, max: X} and/or min: X')]


class ActionModel(Strict):
  """One action entry: `action[i]` (clipped to [-1, 1]) × `scale` commands `component` in
  `mode` (the component's `command(mode, value)`)."""
  component: Annotated[str, check(lambda v: isinstance(v, str), 'must be a component id')]
  mode: Annotated[str, check(lambda v: isinstance(v, str), 'must be a command mode (e.g. effort)')]
  scale: Annotated[float, check(lambda v: is_number(v) and v > 0,
                                'must be a number > 0 (command units per unit action)')]

  @classmethod
  def unknown_key_rule(cls, key: str) -> str:
    return ('unknown key (component, mode, scale)'
            + did_you_mean(key, ('component', 'mode', 'scale')))


def _observe_layout(v) -> bool:
  return (isinstance(v, dict) and bool(v) and all(
      isinstance(k, str) and (f is None or (isinstance(f, list) and f
                                            and all(isinstance(x, str) for x in f)))
      for k, f in v.items()))


class _KeyRules:
  """`unknown key` with a did-you-mean over the model's `_KEYS`, and the message of a
  missing required key from its `_MISSING` (a generic one otherwise)."""
  _KEYS: ClassVar[tuple] = ()
  _MISSING: ClassVar[dict] = {}

  @classmethod
  def unknown_key_rule(cls, key: str) -> str:
    return 'unknown key' + did_you_mean(key, cls._KEYS)

  @classmethod
  def missing_rule(cls, key: str) -> str:
    return cls._MISSING.get(key, 'required field is missing')


class ControllerModel(_KeyRules, Strict):
  """`controller:` — a trained policy run closed loop on each world's delivered samples: its
  checkpoint (`policy.msgpack` + `policy.json` as `examples/train_ppo.py` writes them) and the
  env config it was trained with (task, observation layout, action scaling, control period,
  the per-world goal)."""
  policy: Annotated[str, check(lambda v: isinstance(v, str),
                               'must be the policy checkpoint path (policy.msgpack), relative '
                               'to the campaign file')]
  task: Annotated[str, check(lambda v: isinstance(v, str) and v in TASKS,
                             'unknown task; expected ' + ', '.join(TASKS))]
  observe: Annotated[dict[str, Optional[list[str]]], check(
      _observe_layout, 'must be a mapping component id → list of sample fields (or null: '
      'every field), in observation order')]
  actions: Annotated[list[ActionModel], check(
      lambda v: isinstance(v, list) and bool(v),
      'must be a non-empty list of {component, mode, scale}, in action order')]
  control_period_s: Annotated[float, check(lambda v: is_number(v) and v > 0,
                                           'must be a number > 0 (seconds per policy step)')]
  goal: Optional[Distribution] = None

  _MISSING: ClassVar[dict] = {
      'policy': 'required: the policy checkpoint path (policy.msgpack)',
      'task': 'required: the task the policy was trained on (' + ', '.join(TASKS) + ')',
      'observe': 'required: the observation layout the policy was trained with',
      'actions': 'required: the action scaling the policy was trained with',
      'control_period_s': 'required: the policy period the policy was trained with'}
  _KEYS: ClassVar[tuple] = CONTROLLER_KEYS


def _design_name(name) -> bool:
  return isinstance(name, str) and bool(name) and all(ch.isalnum() or ch in '_-' for ch in name)


class DesignModel(_KeyRules, Strict):
  """One `designs:` entry of a paired campaign: the manifest it runs (default: the campaign's)
  and field values it fixes (`set: {field path: value}`, paths as in `vary:`)."""
  manifest: Optional[Annotated[str, check(lambda v: isinstance(v, str),
                                          'must be a manifest path, relative to the campaign '
                                          'file')]] = None
  set: Annotated[dict[str, Any], check(
      lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
      'must be a mapping field path → value (paths as in vary:)')] = {}

  _KEYS: ClassVar[tuple] = DESIGN_KEYS


def _designs(v) -> bool:
  return isinstance(v, dict) and len(v) >= 2 and all(_design_name(k) for k in v)


class CampaignModel(_KeyRules, Strict):
  """A campaign file: the manifest, the worlds, what varies per world, metrics and criteria."""
  fibril_campaign: Annotated[Literal[1], check(lambda v: v == 1 and not isinstance(v, bool),
                                                'must be 1 (the schema version)')]
  manifest: Annotated[str, check(lambda v: isinstance(v, str), 'required: the manifest path, '
                                  'relative to the campaign file')]
  worlds: PositiveInt
  seed: Annotated[int, check(lambda v: isinstance(v, int) and not isinstance(v, bool)
                              and 0 <= v < 2 ** 31, 'must be an integer in [0, 2**31)')] = 0
  duration_s: Annotated[float, check(lambda v: is_number(v) and v > 0,
                                      'must be a number > 0 (seconds)')]
  chunk_worlds: PositiveInt = 1024
  physics: Annotated[str, check(lambda v: v in ('auto', 'mjx', 'c'),
                                'must be auto, mjx or c (the physics backend)')] = 'auto'
  scenario: Optional[Annotated[ScenarioModel, check(
      lambda v: isinstance(v, dict) and bool(v),
      'must be a mapping with actuator_script: and/or command_script: (entry lists as in the '
      'manifest)')]] = None
  controller: Optional[Annotated[ControllerModel, check(
      lambda v: isinstance(v, dict), 'must be a mapping policy, task, observe, actions, '
      'control_period_s[, goal]')]] = None
  vary: Annotated[dict[str, Distribution], check(
      lambda v: isinstance(v, dict), 'must be a mapping field path → distribution')] = {}
  metrics: Optional[Annotated[list[MetricItem], check(
      lambda v: isinstance(v, list),
      'must be a list of metric names or {name: ..., expr: ...}')]] = None
  criteria: Annotated[dict[str, Criterion], check(
      lambda v: isinstance(v, dict), 'must be a mapping name → {metric, max|min}')] = {}
  designs: Annotated[dict[str, Annotated[DesignModel, check(
      lambda v: isinstance(v, dict), 'must be a mapping with manifest: and/or set: (or {} for '
      "the campaign's manifest as is)")]], check(
      _designs, 'must be a mapping of two or more design names (letters, digits, _ and -) → '
      '{manifest: PATH, set: {field path: value}}')] = {}
  unpaired: Flag = True

  _MISSING: ClassVar[dict] = {
      'fibril_campaign': 'must be 1 (the schema version)',
      'manifest': 'required: the manifest path, relative to the campaign file',
      'worlds': 'must be a positive integer',
      'duration_s': 'must be a number > 0 (seconds)'}
  _KEYS: ClassVar[tuple] = TOP_KEYS


assert tuple(CampaignModel.model_fields) == TOP_KEYS
assert tuple(DesignModel.model_fields) == DESIGN_KEYS
assert tuple(ScenarioModel.model_fields) == SCENARIO_KEYS
assert tuple(ControllerModel.model_fields) == CONTROLLER_KEYS
