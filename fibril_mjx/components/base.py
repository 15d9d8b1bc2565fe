"""What every component shares: config validation with profile layers, the sensing cycle."""

from __future__ import annotations

from typing import Annotated, Any, Callable

import jax
import jax.numpy as jnp
import pydantic

from fibril_mjx import transport as tp
from fibril_mjx.errors import ConfigError, ConfigErrors
from fibril_mjx.manifest import Catalog, FieldValue, layer_config, overlay_fields
from fibril_mjx.validation import Strict, validate

NonNeg = Annotated[float, pydantic.Field(ge=0)]
Positive = Annotated[float, pydantic.Field(gt=0)]
Corr = Annotated[float, pydantic.Field(gt=-1, lt=1)]
Vec3 = tuple[float, float, float]
NonNeg3 = tuple[NonNeg, NonNeg, NonNeg]
Positive3 = tuple[Positive, Positive, Positive]
Corr3 = tuple[Corr, Corr, Corr]


def resolve_config(model: type[Strict], component_type: str, raw: Any, *, catalog: Catalog,
                   file: str, path: str, forbidden: dict[str, str] | None = None
                   ) -> tuple[Any, dict[str, FieldValue]]:
  """Layers profiles under the instance config and validates the result.

  Args:
    model: the component's pydantic config model.
    component_type: e.g. `fibril_sim/ahrs`.
    raw: the instance `config` mapping.
    file, path: where it sits (`manifest.yaml`, `components[0].config`).
    forbidden: fields rejected with a message saying where the value belongs.

  Returns:
    `(validated config, field → FieldValue including defaults)`.
  """
  if raw is None:
    raw = {}
  if not isinstance(raw, dict):
    raise ConfigError(file, path, 'must be a mapping', raw)
  for key, where in (forbidden or {}).items():
    if key in raw:
      raise ConfigError(file, f'{path}.{key}', f'not a {component_type} field: {where}',
                        raw[key])
    for name, fv in overlay_fields(raw):
      if name == key:
        raise ConfigError(fv.file, fv.path.rsplit('.', 1)[0] + '.field',
                          f'not a {component_type} field: {where}', name)
  known = set(model.model_fields) - {'profiles'}
  layered = layer_config(component_type, raw, catalog=catalog, file=file, path=path,
                         known_fields=known)
  data = {k: v.value for k, v in layered.items()}

  def origin(loc):
    fv = layered.get(loc[0]) if loc else None
    rest = ''.join(f'[{p}]' if isinstance(p, int) else f'.{p}' for p in loc[1:])
    if fv is None:
      return file, f'{path}.{loc[0]}{rest}' if loc else path
    return fv.file, fv.path + rest

  cfg = validate(model, data, file=file, prefix=path, origin=origin)
  fields = {}
  for name, info in model.model_fields.items():
    if name in layered:
      fields[name] = layered[name]
    else:
      fields[name] = FieldValue(getattr(cfg, name), 'default', '', '', '')
  return cfg, fields


def field_origin(fields: dict[str, FieldValue], ctx):
  """`field -> (file, path)` of a resolved field: its profile file or the manifest."""
  def origin(name):
    fv = fields.get(name)
    if fv is not None and fv.file:
      return fv.file, fv.path
    return ctx.file, f'{ctx.path}.{name}'
  return origin


def is_set(cfg: Strict, name: str) -> bool:
  """Static switch of a term: on when the resolved value differs from the model's default.

  Component code branches on it in Python, so a term left at its default is absent from the
  traced graph (SPEC §1.2), not multiplied by zero.
  """
  v = getattr(cfg, name)
  default = type(cfg).model_fields[name].default
  return tuple(v) != tuple(default) if isinstance(v, tuple) else v != default


def check(cond: bool, file: str, path: str, rule: str, value: Any) -> None:
  if not cond:
    raise ConfigErrors([ConfigError(file, path, rule, value)])


def sense(transport: tp.Transport, acquire: Callable, state, queue_of, held_of, replace,
          tick, due, n):
  """One tick of a sensing component: acquire (at instants) and deliver.

  `due` and `n` are shared by all worlds (the schedule is static), so under `vmap` the
  `lax.cond` stays a branch and off-instant ticks skip the acquisition work.

  Args:
    acquire: `state -> state` that computes a sample and enqueues it.
    queue_of, held_of: accessors of the queue state and the held delivered output.
    replace: `(state, queue, held) -> state`.
  """
  state = jax.lax.cond(due, acquire, lambda s: s, state)
  queue, held = tp.receive(transport, queue_of(state), held_of(state), tick)
  return replace(state, queue, held)


class Sensing:
  """Mixin of a sensing component with one acquisition schedule and a delivery queue.

  The component provides `cfg`, `params_type` (its Params NamedTuple, whose fields are config
  fields), `schedule`, `transport`, `acquire(p, s, sensordata, tick, n) -> (state, sample)`,
  and a state with `streams` (incl. `delivery_jitter`, `delivery_loss`), `queue` and `held`.
  """

  def _on(self, name) -> bool:
    """Static switch: a term is in the graph when its manifest value is not the default."""
    return is_set(self.cfg, name)

  def default_params(self):
    """Params from the resolved config, float32."""
    return self.params_type(*(jnp.asarray(getattr(self.cfg, f), jnp.float32)
                              for f in self.params_type._fields))

  @property
  def schedules(self) -> dict:
    return {'acquisition': self.schedule}

  def sense(self, p, s, data, tick, dues, env):
    """One tick after physics: acquire and enqueue at an instant, then deliver.

    Args:
      data: `mjx.Data` of `tick`.
      dues: `{'acquisition': (due, n)}`, shared by all worlds.
      env: outputs of the components sensed before this one (unused).
    """
    due, n = dues['acquisition']

    def acquire(st):
      st, sample = self.acquire(p, st, data.sensordata, tick, n)
      q = tp.send(self.transport, st.queue, sample, n, tick, st.streams['delivery_jitter'],
                  st.streams['delivery_loss'])
      return st._replace(queue=q)
    return sense(self.transport, acquire, s, lambda st: st.queue, lambda st: st.held,
                 lambda st, q, h: st._replace(queue=q, held=h), tick, due, n)

  def output(self, s) -> tp.Delivered:
    return s.held
