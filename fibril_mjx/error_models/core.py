"""An error term and `chain`: what a term declares, and everything derived from a chain of them.

A `Term` is static data plus pure functions. It declares its manifest fields (with their
pydantic annotation and default, so "left at its default → absent from the graph" needs no
second list), the Params fields it reads, its State fields (with their zero value), its RNG
stream names, its kind and, where defined, its per-sample variance. `chain(*terms)` composes
terms (or chains) in application order; a sensor's config fields, stream names, plan lines, the
fields that `tune` holds at zero and those a static `validate` rig removes are then read off its
chain, and the Params and State it declares are checked against the chain's when it is built
(`components/base.py` `check_declared`). A sensor with several signal paths, each with its own State (an inertial
sensor's channels), composes one chain per path and declares them together with `partition`.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import pydantic

from fibril_mjx.errors import ConfigError, ConfigErrors
from fibril_mjx.mechanisms import faults

DETERMINISTIC = 'deterministic'   # a function of the input and Params only
STOCHASTIC = 'stochastic'         # a fresh random draw per sample
SLOW = 'slow'                     # random but correlated across samples (per episode, drift)
KINDS = (DETERMINISTIC, STOCHASTIC, SLOW)


class ConfigField(NamedTuple):
  """A manifest field a term owns: name, pydantic annotation, default."""
  name: str
  annotation: Any
  default: Any


class Ctx(NamedTuple):
  """What a term's traced functions see besides Params and its own state.

  Attributes:
    on: `field -> bool`, the static switch of the sensor (`SensorBase._on`).
    streams: `{source: key}` of the sensor.
    n: acquisition index (traced int), 0 at the first sample.
    period_s: static update period of this chain (acquisition period, or the physics tick).
    inputs: sensor quantities a term's scale depends on (e.g. the true range).
  """
  on: Callable[[str], bool]
  streams: dict
  n: Any
  period_s: float
  inputs: dict

  @property
  def first(self):
    return self.n == 0


def is_set(cfg, name: str) -> bool:
  """Static switch of a term by value: the resolved field differs from the model's default.

  Component code branches on it in Python, so a term left at its default is absent from the
  traced graph (SPEC §1.2), not multiplied by zero.
  """
  v = getattr(cfg, name)
  default = type(cfg).model_fields[name].default
  return tuple(v) != tuple(default) if isinstance(v, tuple) else v != default


@dataclasses.dataclass(frozen=True, eq=False)
class Term:
  """One error term (static; its functions are pure).

  Attributes:
    name: what the plan calls it, e.g. `turn-on bias`.
    kind: one of `KINDS`.
    config: `ConfigField`s it owns (the sensor's config model gets them).
    params: Params fields read in the graph (manifest names).
    switches: the term is in the graph when any of these fields is on.
    random: fields that scale a random draw (held at zero by `tune`).
    state: `((name, zero_fn), ...)`: its State fields and their initial zero value.
    streams: RNG stream names it draws from.
    shared: config field naming a shared stream for its (single) stream, or None.
    init: `init(p, st, ctx) -> st` per-episode draws (`st` its state, a dict), or None.
    apply: `apply(p, st, x, ctx) -> (st, x, flags | None)`, or None (state only).
    redraw: `redraw(p, st, ctx, index) -> st` at a device reset, or None.
    variance: `variance(p, ctx) -> σ²` of its contribution per sample, or None.
    check: `check(build) -> None` build-time rules (raises `ConfigError`), or None.
    counters: state fields a user should see in the sensor's status (e.g. clip counts).
    episode: its draw is made once per episode (and at a device reset) and is constant within
      it (a turn-on bias), not a process that moves from sample to sample.
    reads: `reads(on) -> fields`: the Params it reads in the graph when it is on, where that is
      not the default (its switches that are on, and its other params).
  """
  name: str
  kind: str
  config: tuple = ()
  params: tuple = ()
  switches: tuple = ()
  random: tuple = ()
  state: tuple = ()
  streams: tuple = ()
  shared: str | None = None
  init: Callable | None = None
  apply: Callable | None = None
  redraw: Callable | None = None
  variance: Callable | None = None
  check: Callable | None = None
  counters: tuple = ()
  episode: bool = False
  reads: Callable | None = None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f'term {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}')

  def is_on(self, on: Callable[[str], bool]) -> bool:
    return any(on(f) for f in self.switches)

  def read(self, on: Callable[[str], bool]) -> tuple[str, ...]:
    """Params this term reads in the graph when it is on (`reads`)."""
    if self.reads is not None:
      return tuple(self.reads(on))
    return tuple(f for f in self.params if f not in self.switches or on(f))


def _unique(items, what, key=lambda v: v):
  """`{name: value}` in first-seen order; a name declared twice must agree (by `key`)."""
  out = {}
  for name, value in items:
    if name in out and key(out[name]) != key(value):
      raise ValueError(f'chain: {what} {name!r} declared twice, differently')
    out.setdefault(name, value)
  return out


def _shape(zero_fn):
  # abstractly: chains are built at import, and a concrete array would start JAX's backend
  # before `fibril_mjx.batch.worlds.cpu_flags` asks for one CPU device per core
  z = jax.eval_shape(zero_fn)
  return z.shape, z.dtype


class _Declared:
  """What a sensor declares through its error model, read off `terms` (a chain or a partition):
  config fields, Params, stream names, the fields `tune` and `validate` zero, the Params in the
  graph, the build-time rules."""
  terms: tuple[Term, ...] = ()

  def _declare(self, terms, streams):
    self.terms = tuple(terms)
    self._config = _unique(((c.name, c) for t in self.terms for c in t.config), 'config field')
    if len(set(streams)) != len(streams):
      raise ValueError(f'chain: a stream is drawn by two terms: {streams}')
    self.streams = tuple(streams)

  @property
  def config(self) -> tuple[ConfigField, ...]:
    return tuple(self._config.values())

  @property
  def params(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for t in self.terms for f in t.params))

  def stochastic_fields(self) -> tuple[str, ...]:
    """Fields scaling a random draw (stochastic and slow terms): what `tune` holds at zero."""
    return tuple(dict.fromkeys(f for t in self.terms for f in t.random))

  def drift_fields(self) -> tuple[str, ...]:
    """Fields scaling a random process that moves within an episode (the slow terms but the
    per-episode draws: Gauss–Markov drift, random walk, common mode): what a static rig sets to
    zero so that the residual about each world's mean is the white noise alone."""
    return tuple(dict.fromkeys(f for t in self.terms if t.kind == SLOW and not t.episode
                               for f in t.random))

  def on_terms(self, on) -> list[Term]:
    return [t for t in self.terms if t.is_on(on)]

  def reads(self, on) -> tuple[str, ...]:
    """Params the switched-on terms read in the graph (`Term.read`)."""
    return tuple(dict.fromkeys(f for t in self.on_terms(on) for f in t.read(on)))

  def check(self, build) -> None:
    """Build-time rules of every term (`build`: `cfg`, `origin`, `is_on`, `vary`, `ctx`,
    `cid`), every violation reported at once."""
    errors = []
    for t in self.terms:
      if t.check is None:
        continue
      try:
        t.check(build)
      except ConfigErrors as e:
        errors += e.errors
      except ConfigError as e:
        errors.append(e)
    if errors:
      raise ConfigErrors(errors)


class Chain(_Declared):
  """Terms composed in application order (`chain(*terms)`); a chain is static."""

  def __init__(self, terms: tuple[Term, ...]):
    self._declare(terms, [s for t in terms for s in t.streams])
    self._state = _unique(((n, z) for t in terms for n, z in t.state), 'state field', _shape)

  @property
  def state(self) -> tuple[str, ...]:
    return tuple(self._state)

  @property
  def counters(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for t in self.terms for f in t.counters))

  def shared_streams(self, cfg) -> dict:
    """`{source: shared stream name}` for the terms whose shared-stream field is set."""
    out = {}
    for t in self.terms:
      if t.shared is not None and getattr(cfg, t.shared) is not None:
        out[t.streams[0]] = getattr(cfg, t.shared)
    return out

  def zero_state(self) -> dict:
    return {n: z() for n, z in self._state.items()}

  def state_of(self, s) -> dict:
    """This chain's fields of a sensor State (a NamedTuple holding them by name)."""
    return {n: getattr(s, n) for n in self._state}

  def init(self, p, ctx: Ctx) -> dict:
    """Initial state: zeros, then each switched-on term's per-episode draws."""
    st = self.zero_state()
    for t in self.on_terms(ctx.on):
      if t.init is not None:
        st = t.init(p, st, ctx)
    return st

  def redraw(self, p, st: dict, ctx: Ctx, index) -> dict:
    for t in self.on_terms(ctx.on):
      if t.redraw is not None:
        st = t.redraw(p, st, ctx, index)
    return st

  def apply(self, p, st: dict, x, ctx: Ctx):
    """Runs the switched-on terms in order on `x`.

    Returns:
      `(state, x, flags)`: flags `x`-shaped bool, True where a term limited the value.
    """
    flags = jnp.zeros(jnp.shape(x), bool)
    for t in self.on_terms(ctx.on):
      if t.apply is None:
        continue
      st, x, f = t.apply(p, st, x, ctx)
      if f is not None:
        flags = flags | f
    return st, x, flags

  def variance(self, p, ctx: Ctx, shape=()):
    """Sum of the switched-on terms' per-sample variances (zeros of `shape` if none)."""
    v = jnp.zeros(shape, jnp.float32)
    for t in self.on_terms(ctx.on):
      if t.variance is not None:
        v = v + t.variance(p, ctx)
    return v

  def plan(self, on) -> list[str]:
    """Plan lines: each term with its kind and whether it is compiled in."""
    lines = []
    for t in self.terms:
      fields = ', '.join(t.switches)
      state = 'on' if t.is_on(on) else 'off (compiled out)'
      lines.append(f'  {t.name} [{t.kind}] ({fields}): {state}')
    return lines


class Partition(_Declared):
  """Chains on separate signal paths of one sensor, by label (`partition(**chains)`, after
  optax's `partition`): the sensor applies each chain to its own signal and keeps its state in
  its own State field (an inertial sensor's channels, its delivered temperature); its config
  fields, Params, stream names, plan lines and stochastic and drift fields are read off all of
  them. It has no state, apply or variance of its own, and no counters at the top of the
  sensor's State (a path's counters sit in its own State field: the sensor reports them).

  Attributes:
    chains: `{label: Chain}`, in order.
  """
  counters = ()

  def __init__(self, chains: dict[str, Chain]):
    self.chains = dict(chains)
    self._declare([t for c in self.chains.values() for t in c.terms],
                  [s for c in self.chains.values() for s in c.streams])

  def plan(self, on) -> list[str]:
    """Plan lines of each chain under its label."""
    return [line for label, c in self.chains.items()
            for line in [f'  {label}:'] + ['  ' + l for l in c.plan(on)]]


def chain(*parts) -> Chain:
  """Composes terms and chains, in application order, into one `Chain`."""
  terms = []
  for part in parts:
    terms.extend(part.terms if isinstance(part, Chain) else (part,))
  for t in terms:
    if not isinstance(t, Term):
      raise TypeError(f'chain: not an error term: {t!r}')
  return Chain(tuple(terms))


def partition(**chains: Chain) -> Partition:
  """The chains of a sensor's signal paths, by label, declared together (`Partition`)."""
  for label, c in chains.items():
    if not isinstance(c, Chain):
      raise TypeError(f'partition: {label!r} is not a chain: {c!r}')
  return Partition(chains)


def with_errors(base: type, errors: Chain) -> type:
  """`base` (a sensor's own fields) extended with the config fields of `errors`, in that order:
  the base a sensor's declared config model inherits,

      class CameraConfigModel(em.with_errors(_OwnConfig, ERRORS)):
        \"\"\"Validated manifest config of `fibril_sim/camera` ...\"\"\"
  """
  return extended(base, {c.name: (c.annotation, c.default) for c in errors.config},
                  'WithErrors', 'its error model')


def extended(base: type, fields: dict, suffix: str, source: str) -> type:
  """`base` (a pydantic model: a sensor's own fields) with `fields` (`{name: (annotation,
  default)}`) after its own: the model `<base name><suffix>` a declared config model inherits
  (`with_errors`; an inertial sensor's channels). A name in both is refused, naming `source`
  (where `fields` come from)."""
  clash = set(fields) & set(base.model_fields)
  if clash:
    raise ValueError(f'{base.__module__}: fields both in the sensor and {source}: '
                     f'{sorted(clash)}')
  return pydantic.create_model(f'{base.__name__}{suffix}', __base__=base,
                               __module__=base.__module__, **fields)


# The fields a sensor's Sample ends with, and their docs (in the docstring's Attributes).
SAMPLE_TAIL = ('variance', 'saturated', 'health')
_SAMPLE_TAIL_DOC = """
    variance: σ² + q²/12 of the measurement (the first field; one per element), the per-sample
      noise variance its error model implies (`Chain.variance`), in its unit squared.
    saturated: bool, the measurement (per element) clipped to its range this sample.
    health: int32 (`fibril_mjx.mechanisms.faults`).
  """


def sample_type(name: str, measured: tuple[str, ...], doc: str):
  """A sensor's Sample NamedTuple: the `measured` fields, then `SAMPLE_TAIL` (all `jax.Array`);
  `doc` (a docstring whose Attributes name the measured fields) gets the tail's docs."""
  cls = typing.NamedTuple(name, [(f, jax.Array) for f in tuple(measured) + SAMPLE_TAIL])
  cls.__doc__ = doc.rstrip() + _SAMPLE_TAIL_DOC
  return cls


def stream_keys(world_key, cid: str, errors: Chain, cfg, extra: tuple[str, ...] = ()) -> dict:
  """`{source: key}` of every stream of `errors` (shared ones on `shared:<name>`) and `extra`
  (e.g. the delivery streams)."""
  return faults.stream_keys(world_key, cid, errors.streams + tuple(extra),
                            errors.shared_streams(cfg) or None)


def check(cond: bool, file: str, path: str, rule: str, value: Any) -> None:
  if not cond:
    raise ConfigErrors([ConfigError(file, path, rule, value)])
