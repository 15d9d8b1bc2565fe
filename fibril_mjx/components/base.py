"""What every component shares: config validation with profile layers, the base of a sensor
(`SensorBase`: its common fields and the one sensing cycle), the fields of a sensor at a site
(`SiteFields`) and its build prologue (`SensorBuild`). The contract itself is written in
`protocol.py`."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal, NamedTuple

import jax
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.error_models.core import is_set
from fibril_mjx.error_models.terms import NonNeg, NonNeg3, Positive, Vec3
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults, fifo, sensing
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core import protocol
from fibril_mjx.core.context import SitePose
from fibril_mjx.errors import ConfigError, ConfigErrors, moved_attribute
from fibril_mjx.config.manifest import Catalog, FieldValue, layer_config, overlay_fields
from fibril_mjx.mechanisms.schedule import Schedule
from fibril_mjx.config.validation import Strict, validate

Corr = Annotated[float, pydantic.Field(gt=-1, lt=1)]
Positive3 = tuple[Positive, Positive, Positive]
Corr3 = tuple[Corr, Corr, Corr]


class SensorState(NamedTuple):
  """Per-world state of a sensor whose error model keeps none: the RNG stream keys, the
  delivery queue, the held output, the faults (None without a fault plan)."""
  streams: dict
  queue: tp.QueueState
  held: tp.Delivered
  faults: faults.FaultState | None


class SamplingConfig(Strict):
  """Schedule and transport fields every sensing component has (SPEC §4); a sensor's config
  model derives from it."""
  period_s: float = pydantic.Field(gt=0)
  phase_s: NonNeg = 0.0
  latency_s: NonNeg = 0.0
  jitter_s: NonNeg = 0.0
  loss_probability: float = pydantic.Field(0.0, ge=0, lt=1)
  quantization: Literal['next_boundary', 'strict'] = 'next_boundary'


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


def check(cond: bool, file: str, path: str, rule: str, value: Any) -> None:
  if not cond:
    raise ConfigErrors([ConfigError(file, path, rule, value)])


def get_param(params, path: tuple[str | int, ...]):
  """The leaf of `params` at `path` (from `component.param_path(field)`): a name is a
  NamedTuple field, an int an element of a tuple (`('faults', 0, 'start_s')`)."""
  for key in path:
    params = params[key] if isinstance(key, int) else getattr(params, key)
  return params


def set_param(params, path: tuple[str | int, ...], value):
  """`params` with the leaf at `path` replaced by `value` (NamedTuples and tuples)."""
  key, rest = path[0], path[1:]
  new = set_param(get_param(params, (key,)), rest, value) if rest else value
  if isinstance(key, int):
    return params[:key] + (new,) + params[key + 1:]
  return params._replace(**{key: new})


class ComponentBase:
  """Defaults every built component shares (see `protocol.Component`).

  `param_path` maps a manifest field to its place in Params (flat Params: the field name);
  `uses(field)` says whether a Params field reaches the traced graph — a term left at its
  default is compiled out unless the field is named for per-world variation (`vary`), and
  `compiled_out()` lists such fields so that a per-world value given for one is an error, not
  silently ignored.

  Fault paths are the same for every component, sensor or actuator: `faults[i].start_s`,
  `faults[i].end_s` and `faults[i].value` (where entry `i` has a value) are Params leaves
  `('faults', i, name)` of a component with a `fault_plan`, `faults` itself is not one, and a
  bad fault path raises with the rule (`faults.param_path`). `param_path` and `uses` answer
  those here and ask `field_path` / `field_uses` for every other field: a component (or a
  mixin) overrides those two for its own fields.

  `stochastic_fields()` lists the fields that scale a random draw (what `tune` holds at zero):
  read off the component's error model (`errors`, an `fibril_mjx.error_models.Chain`) where it
  has one, else its explicit `stochastic` declaration.
  """
  roles: frozenset = frozenset()
  errors: em.Chain | None = None   # the error model, where the component is written as one
  stochastic: tuple = ()           # explicit declaration of a component without `errors`
  # True where the component reads physics only through MuJoCo sensors (`sensordata`: its
  # bound sensors and the probes of `core/context.py`), so that an open-loop backend (MuJoCo
  # C, a recorded trajectory) serves it; False where it still reads `mjx.Data` fields.
  reads_sensors_only: bool = False
  params_type = None               # its Params NamedTuple, where Params are flat
  fault_plan = None                # its static fault plan (a dataclass field where it has one)
  # grouping (`core/groups.py`): the fields whose numbers are per-member bindings (none: the
  # component is a group of one), the fields that only name it (every component's id and plan
  # fields), its config fields naming bindings
  per_member: tuple = ()
  labels: tuple = ('id', 'fields')
  member_config: tuple = ()

  def closes_loop(self) -> str:
    """Why this component's controls depend on the physics state it acts on (a hold at the
    measured position, a PD law), or '' when they do not: an open-loop backend refuses it."""
    return ''

  def stochastic_fields(self) -> tuple[str, ...]:
    """Manifest fields that scale a random draw (noise, drift, per-episode biases)."""
    if self.errors is not None:
      return self.errors.stochastic_fields()
    return tuple(self.stochastic)

  def param_path(self, field: str):
    """Where manifest field `field` lives in Params, or None: a fault path from the
    `fault_plan` (`faults.param_path`), any other field from `field_path`."""
    if faults.is_path(field):
      return faults.param_path(self.fault_plan, field, f'{self.type} {self.id!r}')
    return self.field_path(field)

  def field_path(self, field: str):
    """Where a field of the component's own lives in Params (flat Params: `(field,)`)."""
    fields = self.params_type._fields if self.params_type is not None else ()
    return (field,) if field in fields else None

  def uses(self, field: str) -> bool:
    """Whether manifest field `field` reaches the traced graph (a fault path wherever it is
    a per-world parameter; any other field: `field_uses`)."""
    if field != 'faults' and faults.is_path(field):
      return self.param_path(field) is not None
    return self.field_uses(field)

  def field_uses(self, field: str) -> bool:
    return self.param_path(field) is not None

  def compiled_out(self) -> tuple[str, ...]:
    return tuple(name for name, _ in self.fields
                 if self.param_path(name) is not None and not self.uses(name))

  def get_param(self, params, field: str):
    """The Params leaf of manifest field `field`."""
    return get_param(params, self._path(field))

  def set_param(self, params, field: str, value):
    """Params with manifest field `field` replaced by `value`."""
    return set_param(params, self._path(field), value)

  def _path(self, field):
    path = self.param_path(field)
    if path is None:
      raise KeyError(f'{self.type} component {self.id!r}: {field!r} is not a per-world '
                     'parameter (static config or unknown field)')
    return path


@dataclasses.dataclass(frozen=True, kw_only=True)
class SensorBase(ComponentBase):
  """Base of a sensing component: one acquisition schedule, a delivery queue, an optional fault
  plan, and `sense`, the one sensing cycle (`fibril_mjx.mechanisms.sensing`) (SPEC §4).

  A sensor is a frozen dataclass deriving from it (`@dataclasses.dataclass(frozen=True)`),
  which declares only its own fields (positional); the common ones below are keyword-only
  (`SensorBuild.make` fills them). Hash and equality come from every field but `fields`.

  Attributes:
    id: the manifest component id.
    cfg: the validated config model.
    schedule: the acquisition `Schedule`; transport: its `transport.Transport` (or
      `fifo.Fifo`).
    dt: physics timestep (s).
    fields: `((name, FieldValue), ...)` for the plan (metadata, not compiled behaviour).
    vary: manifest fields compiled in even at their default (per-world variation).
    fault_plan: the static `faults.FaultPlan` (then `faults` is in Params and State), or None
      (no fault code in the graph).

  A sensor provides `params_type` (its Params NamedTuple: flat fields named as in the config,
  plus `faults` with a fault plan, unless it overrides `default_params` / `param_path`),
  `acquire(p, s, data, tick, n) -> (state, sample)` (sample `n`, a NamedTuple, from the
  `mjx.Data` of `tick`), a State NamedTuple with `streams` (incl. `delivery_jitter`,
  `delivery_loss`), `queue`, `held` (and `faults`), and may define the optional stages of the
  cycle, declared here as None: `observe`, `track`, `on_reset`, `condition` (their signatures:
  `sensing.Cycle`). The cycle is checked once, when the sensor is built.

  Its `build` can use `SensorBuild` (config → provenance → timing → fault plan → instance) and
  `describe_terms` (the plan lines every sensor ends with). Params fields that reach the graph
  whatever their value (environment constants, range limits) are listed in `always_used`; the
  sample fields a fault entry without `fields` acts on in `fault_fields` (default: the
  sample's first field).
  """
  id: str
  cfg: Any
  schedule: Schedule
  transport: tp.Transport
  dt: float
  fields: tuple = dataclasses.field(default=(), compare=False)
  vary: frozenset = frozenset()
  fault_plan: faults.FaultPlan | None = None

  roles = frozenset({protocol.SENSOR})
  always_used = ()                # Params fields in the graph whatever their value
  fault_fields = ()               # sample fields of a fault entry without `fields`
  # the optional stages of the sensing cycle (`sensing.Cycle`), None where absent
  observe = None                  # `observe(p, s, env, tick) -> state`, every tick
  track = None                    # `track(p, s, data, tick) -> state`, every tick
  on_reset = None                 # `on_reset(p, s, index) -> state`, at a reset fault
  condition = None                # `condition(p, sample) -> OK | WEAK`, a weak fault plan
  state_type = None               # its State NamedTuple, where written as a declaration

  def __post_init__(self):
    sensing.check(self.cycle, f'{type(self).__name__} {self.id!r}')
    if isinstance(self.cfg, pydantic.BaseModel):
      check_declared(self)

  @property
  def cycle(self) -> sensing.Cycle:
    """This sensor's sensing cycle: timing, fault plan, stages."""
    return sensing.Cycle(self.transport, self.dt, self.acquire, self.fault_plan, self.observe,
                         self.track, self.on_reset, self.condition)

  def sense(self, p, s, data, tick, dues, env):
    """One tick after physics: `sensing.sense` of this sensor's cycle.

    Args:
      data: `mjx.Data` of `tick`.
      dues: `{'acquisition': (due, n)}`, shared by all worlds.
      env: outputs of the components sensed before this one (read by `observe`).
    """
    return sensing.sense(self.cycle, p, s, data, tick, dues, env)

  def _on(self, name) -> bool:
    """Static switch: a term is in the graph when its value is not the default, or when the
    field is named for per-world variation (`vary`)."""
    return name in self.vary or is_set(self.cfg, name)

  def default_params(self):
    """Params from the resolved config, float32 (`faults`: those of the fault entries)."""
    return self.params_type(**{f: faults.default_params(self.cfg) if f == 'faults'
                               else host.array(getattr(self.cfg, f))
                               for f in self.params_type._fields})

  def field_uses(self, field: str) -> bool:
    if field == 'faults':
      return self.fault_plan is not None
    return field in self.always_used or (self.param_path(field) is not None
                                         and self._on(field))

  @property
  def schedules(self) -> dict:
    """The acquisition schedule, and the reader's (`fifo_read`) with periodic FIFO reads."""
    read = self.transport.read_schedule if isinstance(self.transport, fifo.Fifo) else None
    return {'acquisition': self.schedule, **({fifo.READ: read} if read is not None else {})}

  def init_transport(self, neutral):
    """`(queue, held, fault state)` before the first acquisition, of the `neutral` sample
    (a sensor with a fault plan)."""
    queue, held = tp.init(self.transport, neutral)
    return queue, held, faults.init_state(self.fault_plan, neutral)

  def init_state(self, state_type, p, world_key, neutral, *before, streams=(), **after):
    """The usual `init`: the keys of the error model's streams, of `streams` and of the
    delivery streams; the queue, held output (and fault state) of the `neutral` sample;
    `state_type(keys, *before, <the error model's state>, queue, held, [faults,] **after)`."""
    keys = em.stream_keys(world_key, self.id, self.errors, self.cfg,
                          tuple(streams) + ('delivery_jitter', 'delivery_loss'))
    queue, held = tp.init(self.transport, neutral)
    if self.fault_plan is not None:
      after = {'faults': faults.init_state(self.fault_plan, neutral), **after}
    return state_type(keys, *before, **self.errors.init(p, self.error_ctx(keys)), queue=queue,
                      held=held, **after)

  def output(self, s) -> tp.Delivered:
    return s.held

  def status(self, s) -> dict:
    """Delivery counters, the error model's (e.g. `clip_count`), then the fault counters."""
    counters = self.errors.counters if self.errors is not None else ()
    out = {'lost': s.queue.lost, 'overflow': s.queue.overflow,
           **{n: getattr(s, n) for n in counters}}
    if self.fault_plan is not None:
      out.update(fault_dropped=s.faults.dropped, resets=s.faults.resets)
    return out

  def describe_sensors(self) -> list[str]:
    """Plan lines of the bound MuJoCo sensors (attribute `sensors`: `SensorBinding`s)."""
    return ['bound sensors:'] + [
        f'  {b.field}: {b.name} ({b.type}, adr {b.adr}, dim {b.dim}'
        + (f', site {b.site})' if b.site else ')') for b in self.sensors]

  def describe_timing(self) -> list[str]:
    return [f'sample type {self.sample_type}',
            f'schedule: {self.schedule.describe()}',
            f'transport: {self.transport.describe()}']

  def error_ctx(self, streams, n=0, period_s=None, **inputs) -> em.Ctx:
    """What the error model's terms see: this sensor's switches and streams, sample `n`."""
    return em.Ctx(self._on, streams, n, self.cfg.period_s if period_s is None else period_s,
                  inputs)

  def describe(self) -> list[str]:
    """The plan lines of a sensor that adds none of its own: timing, the error model and its
    terms switched on, the fault plan (`describe_errors`; `describe_terms` without `errors`)."""
    return self.describe_errors([]) if self.errors is not None else self.describe_terms([], ())

  def describe_errors(self, lines, own_terms=()) -> list[str]:
    """`describe_terms` with the error model's plan lines (and the stream of each term that
    can share one: `common-mode stream: <name | none>`) and switch fields."""
    switches = tuple(f for t in self.errors.terms for f in t.switches)
    shared = [f'common-mode stream: {getattr(self.cfg, t.shared) or "none"}'
              for t in self.errors.terms if t.shared is not None]
    return self.describe_terms(list(lines) + shared + ['error model:']
                               + self.errors.plan(self._on), tuple(own_terms) + switches)

  def describe_terms(self, lines, terms) -> list[str]:
    """The usual `describe`: timing, the sensor's own `lines`, the fields of `terms` that are
    switched on (`_on`), then the fault plan (when there is one)."""
    on = [f for f in terms if self._on(f)]
    out = self.describe_timing() + list(lines) + [f'terms on: {", ".join(on) or "none"}']
    plan = self.fault_plan
    return out + ([plan.describe()] if plan is not None else [])


def _declaration(field: em.ConfigField) -> str:
  """`name: type [bounds] = default`: how a config field of an error model is declared."""
  info = pydantic.fields.FieldInfo.from_annotated_attribute(field.annotation, field.default)
  kind = info.annotation.__name__ if isinstance(info.annotation, type) else info.annotation
  bounds = ' ' + ', '.join(map(repr, info.metadata)) if info.metadata else ''
  return f'{field.name}: {kind}{bounds} = {field.default!r}'


def check_declared(sensor) -> None:
  """Checks a built sensor's written declarations against its error model (`errors`): its
  config model has every config field of the chain, its Params a place (`param_path`) for
  every Params field the chain reads, and its `state_type` (where declared) `streams`, the
  chain's state, `queue` and `held`.

  Raises:
    TypeError: one line naming the class, the missing field and its declaration.
  """
  errors, cls = sensor.errors, type(sensor)
  if errors is None:
    return
  where, config_model = f'{cls.__module__}.{cls.__name__}', type(sensor.cfg)
  for c in errors.config:
    if c.name not in config_model.model_fields:
      raise TypeError(f'{where}: config model {config_model.__name__} lacks `{_declaration(c)}`'
                      ' (a field of its error model)')
  chain_state = errors.state if isinstance(errors, em.Chain) else ()
  declared = (('params_type', sensor.params_type,
               [n for n in errors.params if sensor.param_path(n) is None]),
              ('state_type', sensor.state_type,
               [n for n in ('streams', *chain_state, 'queue', 'held')
                if sensor.state_type is not None and n not in sensor.state_type._fields]))
  for what, nt, missing in declared:
    if missing:
      fields = ', '.join(nt._fields) if nt is not None else 'none'
      raise TypeError(f'{where}: {what} {nt.__name__ if nt is not None else None} lacks field(s) '
                      f'{", ".join(missing)} (its error model\'s; fields: {fields})')


@dataclasses.dataclass(frozen=True, kw_only=True)
class SiteFields:
  """The fields of a sensor that measures at one MuJoCo site, keyword-only (from `at_site`):
  `site_id` and the probes of the `site`'s pose. A mixin listed before `SensorBase`
  (`class Barometer(base.SiteFields, base.SensorBase)`); such a sensor reads the physics only
  through MuJoCo sensors."""
  reads_sensors_only = True
  site_id: int
  site: SitePose


def at_site(ctx, site_id: int) -> dict:
  """The `SiteFields` of site `site_id` (its pose probes are requested now)."""
  return dict(site_id=int(site_id), site=ctx.site_pose(site_id))


class SensorBuild:
  """The build prologue every sensor shares, then its construction.

  `SensorBuild(model, type, cid, raw, ctx, catalog)` layers and validates the config
  (`resolve_config`) and gives `cfg`, `fields` (field → FieldValue), `origin` (field →
  (file, path), `field_origin`), `vary` and `is_on`; after the sensor's own checks and
  bindings, `make(cls, neutral, **own)` builds the timing (`schedule`, `transport`, also
  available earlier through `timing()`), the fault plan from a neutral sample (none when
  `neutral` is None) and the instance, its common fields by keyword.
  """

  def __init__(self, model: type[Strict], component_type: str, cid: str, raw, ctx, catalog,
               *, forbidden: dict[str, str] | None = None):
    self.cid, self.ctx = cid, ctx
    self.cfg, self.fields = resolve_config(model, component_type, raw, catalog=catalog,
                                           file=ctx.file, path=ctx.path, forbidden=forbidden)
    self.origin = field_origin(self.fields, ctx)
    self.vary = frozenset(ctx.vary)
    self._timing = None

  def is_on(self, name: str) -> bool:
    """Build-time `SensorBase._on`: the field is named in `vary` or set off its default."""
    return name in self.vary or is_set(self.cfg, name)

  def timing(self):
    """`(Schedule, Transport)` of the config (built once)."""
    if self._timing is None:
      self._timing = faults.build_timing(self.cfg, self.ctx, self.origin)
    return self._timing

  def make(self, cls, neutral=None, *, weak: bool = False, **own):
    """`cls(**own, <common fields>)`; with `neutral`, also `fault_plan` from
    `faults.build_plan(cfg, neutral, cls.fault_fields, weak=weak)`."""
    schedule, transport = self.timing()
    if neutral is not None:
      own['fault_plan'] = faults.build_plan(self.cfg, neutral, cls.fault_fields,
                                            origin=self.origin, weak=weak)
    return cls(id=self.cid, cfg=self.cfg, schedule=schedule, transport=transport,
               dt=self.ctx.dt, fields=tuple(self.fields.items()), vary=self.vary, **own)


def __getattr__(name):   # PEP 562: names moved away, with a warning (fibril_mjx.errors.MOVED)
  return moved_attribute(__name__, name)
