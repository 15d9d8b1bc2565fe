"""Fault entries and health codes: the config models, the static `FaultPlan`, per-world
`FaultParams` and the `FaultState` (see the package docstring)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from fibril_mjx.errors import ConfigError, ConfigErrors, FibrilError, Strict, did_you_mean
from fibril_mjx.mechanisms import host


HEALTHY, DEGRADED, INVALID, RECOVERING = 0, 1, 2, 3
HEALTH_NAMES = ('healthy', 'degraded', 'invalid', 'recovering')
OK, WEAK, MISSED, BAD = 0, 1, 2, 3

TYPES = ('dropout', 'stale_new_timestamp', 'stale_old_timestamp', 'nan', 'sentinel',
         'invalid_status', 'bias_step', 'bias_ramp', 'stuck', 'reset')
_NEEDS_VALUE = ('sentinel', 'bias_step', 'bias_ramp')
_MAY_HAVE_VALUE = _NEEDS_VALUE + ('stuck',)
DATA_TYPES = ('nan', 'sentinel', 'bias_step', 'bias_ramp', 'stuck')   # act on data fields
_FLOAT_ONLY = ('nan', 'bias_step', 'bias_ramp')


class FaultSpec(Strict):
  """One manifest `faults:` entry.

  Attributes:
    type: one of `TYPES`.
    start_s: window start (s of episode time).
    end_s: window end (exclusive); absent = to the end of the episode.
    value: sentinel / stuck value, bias step, or bias ramp rate (per s); a scalar or one value
      per element of the data field.
    fields: the sample fields it acts on (default: the component's `fault_fields`).
    warmup_s: `reset` only: time after the window during which samples are flagged invalid.
  """
  type: Literal[TYPES]
  start_s: float = pydantic.Field(ge=0)
  end_s: float | None = pydantic.Field(None, gt=0)
  value: float | tuple[float, ...] | None = None
  fields: tuple[str, ...] | None = None
  warmup_s: float = pydantic.Field(0.0, ge=0)

  @pydantic.model_validator(mode='after')
  def _consistent(self):
    if self.end_s is not None and self.end_s <= self.start_s:
      raise ValueError(f'end_s must be > start_s = {self.start_s:g}')
    if self.type in _NEEDS_VALUE and self.value is None:
      raise ValueError(f'a {self.type} fault needs a value')
    if self.type not in _MAY_HAVE_VALUE and self.value is not None:
      raise ValueError(f'a {self.type} fault takes no value')
    if self.type not in DATA_TYPES and self.fields is not None:
      raise ValueError(f'a {self.type} fault acts on the whole packet; fields are not used')
    if self.type != 'reset' and self.warmup_s != 0:
      raise ValueError('warmup_s is a reset field')
    if self.type == 'reset' and self.end_s is None:
      raise ValueError('a reset fault needs end_s (when the device is back on the bus)')
    return self


class FaultConfig(Strict):
  """The config fields of faults and health; a sensor's config model inherits them."""
  faults: tuple[FaultSpec, ...] = ()
  health_invalid_after_missed: int = pydantic.Field(3, ge=1)
  health_recovery_samples: int = pydantic.Field(5, ge=0)


class DeviceConfig(FaultConfig):
  """Config fields shared by the sensors built on `faults` (navigation, exteroceptive, encoder):
  schedule, transport (SPEC §4), faults, health thresholds."""
  period_s: float = pydantic.Field(gt=0)
  phase_s: float = pydantic.Field(0.0, ge=0)
  latency_s: float = pydantic.Field(0.0, ge=0)
  jitter_s: float = pydantic.Field(0.0, ge=0)
  loss_probability: float = pydantic.Field(0.0, ge=0, lt=1)
  quantization: Literal['next_boundary', 'strict'] = 'next_boundary'


class FaultParams(NamedTuple):
  """Per-world parameters of one fault entry: `start_s`, `end_s` (inf when open), `value`
  (scalar or per element; 0 when unused)."""
  start_s: jax.Array
  end_s: jax.Array
  value: jax.Array


class FaultState(NamedTuple):
  """Per-world fault and health state.

  Attributes:
    health: int32 health after the latest acquisition instant.
    streak: int32 misses in a row (DEGRADED) or good samples in a row (RECOVERING).
    last: the last packet sent (for stale and stuck faults).
    last_sequence, last_tick: its sequence number and sample tick (−1 before the first).
    reset_done: `(n_reset,)` bool, resets already applied.
    resets: int32 resets applied so far.
    dropped: int32 acquisitions not sent because of a dropout or reset window.
  """
  health: jax.Array
  streak: jax.Array
  last: Any
  last_sequence: jax.Array
  last_tick: jax.Array
  reset_done: jax.Array
  resets: jax.Array
  dropped: jax.Array


@dataclasses.dataclass(frozen=True)
class FaultPlan:
  """Static fault plan of one component.

  Attributes:
    types: fault type per entry.
    fields: data fields per entry.
    value_shapes: shape of each entry's `value` param.
    invalid_after_missed, recovery_samples: health thresholds.
    warmup_s: per entry (reset only).
    has_value: per entry, a `value` was given.
    weak: the component reports its own degraded condition (`condition` method).
  """
  types: tuple[str, ...] = ()
  fields: tuple[tuple[str, ...], ...] = ()
  value_shapes: tuple[tuple[int, ...], ...] = ()
  invalid_after_missed: int = 3
  recovery_samples: int = 5
  warmup_s: tuple[float, ...] = ()
  has_value: tuple[bool, ...] = ()
  weak: bool = False

  @property
  def active(self) -> bool:
    """Anything to do beyond the plain sensing cycle."""
    return bool(self.types) or self.weak

  @property
  def resets(self) -> tuple[int, ...]:
    return tuple(i for i, t in enumerate(self.types) if t == 'reset')

  def has(self, *types) -> bool:
    return any(t in types for t in self.types)

  def describe(self) -> str:
    if not self.types:
      return 'faults: none'
    return 'faults: ' + ', '.join(
        t + (f' on {"/".join(f)}' if t in DATA_TYPES else '') for t, f in zip(self.types, self.fields))


def build_plan(cfg: FaultConfig, neutral_sample, default_fields: tuple[str, ...], *,
               origin, weak: bool = False) -> FaultPlan:
  """Validates the `faults` entries against the sample type and returns the static plan.

  Args:
    neutral_sample: a sample of the component, a NamedTuple (field names, shapes, dtypes).
    default_fields: the component's `fault_fields`; empty: the sample's first field (the
      measurement of a sensor with one, e.g. `pressure_pa`).
    origin: `field -> (file, path)` of the config.
  """
  errors = []
  types, fields, shapes, warm, has = [], [], [], [], []
  names = type(neutral_sample)._fields
  default_fields = tuple(default_fields) or names[:1]
  file, path = origin('faults')
  for i, f in enumerate(cfg.faults):
    where = f'{path}[{i}]'
    flds = tuple(f.fields) if f.fields is not None else tuple(default_fields)
    for j, name in enumerate(flds):
      if name not in names or name == 'health':
        errors.append(ConfigError(file, f'{where}.fields[{j}]', 'not a data field of the '
                                  f'sample; fields: {", ".join(n for n in names if n != "health")}',
                                  name))
        continue
      dtype = jnp.asarray(getattr(neutral_sample, name)).dtype
      if f.type in _FLOAT_ONLY and not jnp.issubdtype(dtype, jnp.floating):
        errors.append(ConfigError(file, f'{where}.fields[{j}]', f'a {f.type} fault needs a '
                                  f'floating-point field; {name!r} is {dtype} (use sentinel '
                                  'or stuck)', name))
    shape = ()
    if f.value is not None and not isinstance(f.value, float):
      shape = (len(f.value),)
      for name in flds:
        if name in names:
          size = int(np.size(getattr(neutral_sample, name)))
          if size != len(f.value):
            errors.append(ConfigError(file, f'{where}.value', f'must be a scalar or have '
                                      f'{size} values (field {name!r})', list(f.value)))
    types.append(f.type)
    fields.append(flds if f.type in DATA_TYPES else ())
    shapes.append(shape)
    warm.append(float(f.warmup_s))
    has.append(f.value is not None)
  if errors:
    raise ConfigErrors(errors)
  return FaultPlan(tuple(types), tuple(fields), tuple(shapes), cfg.health_invalid_after_missed,
                   cfg.health_recovery_samples, tuple(warm), tuple(has), weak)


def default_params(cfg: FaultConfig) -> tuple[FaultParams, ...]:
  """Params of the `faults` entries of one world (float32)."""
  out = []
  for f in cfg.faults:
    end = np.inf if f.end_s is None else f.end_s
    value = 0.0 if f.value is None else f.value
    out.append(FaultParams(host.array(f.start_s), host.array(end), host.array(value)))
  return tuple(out)


PATH_FORMS = 'faults[i].start_s, faults[i].end_s, faults[i].value'


def is_path(field: str, name: str = 'faults') -> bool:
  """Whether manifest field path `field` is `faults` or names inside it (`faults[0].end_s`);
  `name`: the list's field (`feedback_faults` for a motor's feedback)."""
  return field == name or field.startswith((name + '[', name + '.'))


def param_path(plan, field: str, owner: str, name: str = 'faults'):
  """Where `faults[i].start_s`, `.end_s` or `.value` of a component lives in its Params.

  The one rule for sensors and actuators (`components/base.py` applies it to every
  component): an entry's window bounds are per-world parameters, its `value` only where the
  entry has one (`plan.has_value[i]`); `faults` itself (the whole list) is not.

  Args:
    plan: the component's static fault plan (`FaultPlan` or `actuator.ActuatorFaultPlan`,
      anything with `types` and `has_value`), or None (no `faults:`, none in Params).
    field: a path with `is_path(field, name)`.
    owner: the component in messages, e.g. `fibril_sim/imu 'imu'`.
    name: the list's field, in the config and in Params (`faults`; `feedback_faults` for a
      motor's feedback).

  Returns:
    `(name, i, field name)`, or None for `name` itself and for any path without a plan.

  Raises:
    FibrilError: a path with a plan that names no per-world parameter (malformed, entry out
      of range, a field a fault entry lacks, a `value` the entry does not have).
  """
  if field == name or plan is None:
    return None
  n = len(plan.types)
  head = f'{field!r} is not a field of {owner}'
  m = re.match(rf'^{re.escape(name)}\[(\d+)\]\.(\w+)$', field)
  what = name[:-1].replace('_', ' ')   # 'fault', 'feedback fault'
  empty = f'{head}: it has no {what} entries ({name}: is empty)'
  if m is None:
    forms = PATH_FORMS.replace('faults', name)
    raise FibrilError(f'{head}: expected {forms} (i: a {what} entry, 0..{n - 1})'
                      if n else empty)
  i, key = int(m[1]), m[2]
  if i >= n:
    raise FibrilError(empty if n == 0 else
                      f'{head}: {what} entry {i} out of range ({name}: has {n} '
                      f'entr{"y" if n == 1 else "ies"}, {name}[0]..{name}[{n - 1}])')
  fields = FaultParams._fields if plan.has_value[i] else ('start_s', 'end_s')
  if key == 'value' and not plan.has_value[i]:
    raise FibrilError(f'{head}: {name}[{i}] is a {plan.types[i]} entry without a value; '
                      f'its per-world fields: {", ".join(fields)}')
  if key not in FaultParams._fields:
    raise FibrilError(f'{head}: {key!r} is not a per-world field of a fault entry'
                      + did_you_mean(key, fields) + f'; fields of {name}[{i}] '
                      f'({plan.types[i]}): {", ".join(fields)}')
  return (name, i, key)


def init_state(plan: FaultPlan, neutral_sample) -> FaultState:
  z = jnp.int32(0)
  return FaultState(jnp.int32(HEALTHY), z, neutral_sample, jnp.int32(-1), jnp.int32(-1),
                    jnp.zeros((len(plan.resets),), bool), z, z)
