"""Fault injection and health states shared by every sensing component (the sensor-modelling guide, SPEC §5,
"Dropout, stale value i status").

A sensing component opts in with four small pieces (the guide's sensors — magnetometer,
barometer, airspeed, GNSS, rangefinder — all do; `fibril_sim/imu` and `fibril_sim/ahrs` can in
the same way):

1. its config model inherits `FaultConfig` (fields `faults`, `health_invalid_after_missed`,
   `health_recovery_samples`);
2. `build` sets a static `fault_plan = build_plan(cfg, neutral_sample, fault_fields, ...)`;
3. its Params have a `faults` leaf, `default_params(cfg)` (`FaultParams` per entry: start, end
   and value are per-world arrays, so campaigns can sample them);
4. its State has a `faults` field, `init_state(plan, neutral_sample)`.

`fibril_mjx.components.base.SensorBase.sense` then runs `sense` below instead of the plain
cycle. With no entries (and no degraded condition of the component's own) the fault code is
absent from the graph: `sense` is then the plain cycle, plus the optional `observe` hook.

Fault types (each entry is a time window `[start_s, end_s)`, `end_s` absent = to the end of the
episode; a window is active at an acquisition whose tick falls inside it, its bounds rounded up
to ticks like a schedule's `next_boundary`):

| type | what a consumer sees |
| --- | --- |
| `dropout` | no packet: the acquisition is not sent (sequence gap), nothing counted as lost |
| `stale_new_timestamp` | the last sent packet again, with this acquisition's sequence and tick |
| `stale_old_timestamp` | the last sent packet again, with its own (old) sequence and tick |
| `nan` | the data fields are NaN; the status is untouched (a driver must check) |
| `sentinel` | the data fields hold `value` (e.g. 0, −1, 65535); status untouched |
| `invalid_status` | numeric data as usual, the health says `INVALID` |
| `bias_step` | `value` added to the data fields |
| `bias_ramp` | `value·(t − start_s)` added to the data fields (`value` per second) |
| `stuck` | the data fields hold `value`, or (no `value`) stay frozen at the last sent value |
| `reset` | the device is off the bus during the window (no packets); at its start the component re-initializes its random per-episode terms (`on_reset`); for `warmup_s` after the window the data come with status `INVALID` (warming up), then the health recovers |

Data fields are the component's `fault_fields` (class attribute) unless an entry names
`fields`. Bias, stuck and sentinel values are a scalar or one value per element of the field.

**Health** (`HEALTHY` → `DEGRADED` → `INVALID` → `RECOVERING` → `HEALTHY`): a driver-side state
machine advanced once per acquisition instant by the instant's condition — `MISSED` (no
packet: dropout, reset), `BAD` (status invalid, warm-up), `WEAK` (the component's own degraded
condition, e.g. a GNSS receiver without a fix) or `OK`:

| from \\ condition | OK | WEAK | MISSED | BAD |
| --- | --- | --- | --- | --- |
| HEALTHY | HEALTHY | DEGRADED | DEGRADED (misses = 1) | INVALID |
| DEGRADED | HEALTHY | DEGRADED | DEGRADED, INVALID at `health_invalid_after_missed` misses in a row | INVALID |
| INVALID | RECOVERING (1 good), HEALTHY if `health_recovery_samples` ≤ 1 | INVALID | INVALID | INVALID |
| RECOVERING | RECOVERING, HEALTHY after `health_recovery_samples` good ones in a row | INVALID | INVALID | INVALID |

With `health_recovery_samples: 0`, INVALID returns to HEALTHY on the first good sample. The
health of an instant is written into the sample's `health` field when the sample type has one;
the state of every tick is in `truth/<id>/health`. Silent faults (stale, stuck, bias, NaN,
sentinel) leave the health as the device reports it: detecting them is the consumer's job.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from fibril_mjx.mechanisms import rng
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.errors import ConfigError, ConfigErrors
from fibril_mjx.config.validation import Strict

HEALTHY, DEGRADED, INVALID, RECOVERING = 0, 1, 2, 3
HEALTH_NAMES = ('healthy', 'degraded', 'invalid', 'recovering')
OK, WEAK, MISSED, BAD = 0, 1, 2, 3

TYPES = ('dropout', 'stale_new_timestamp', 'stale_old_timestamp', 'nan', 'sentinel',
         'invalid_status', 'bias_step', 'bias_ramp', 'stuck', 'reset')
_NEEDS_VALUE = ('sentinel', 'bias_step', 'bias_ramp')
_MAY_HAVE_VALUE = _NEEDS_VALUE + ('stuck',)
_DATA = ('nan', 'sentinel', 'bias_step', 'bias_ramp', 'stuck')
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
    if self.type not in _DATA and self.fields is not None:
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
  """Config fields shared by the guide's sensors: schedule, transport (SPEC §4), faults, health
  thresholds."""
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
        t + (f' on {"/".join(f)}' if t in _DATA else '') for t, f in zip(self.types, self.fields))


def build_plan(cfg: FaultConfig, neutral_sample, default_fields: tuple[str, ...], *,
               origin, weak: bool = False) -> FaultPlan:
  """Validates the `faults` entries against the sample type and returns the static plan.

  Args:
    neutral_sample: a sample of the component (field names, shapes, dtypes).
    default_fields: the component's `fault_fields`.
    origin: `field -> (file, path)` of the config.
  """
  errors = []
  types, fields, shapes, warm, has = [], [], [], [], []
  names = getattr(type(neutral_sample), '_fields', ())
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
    fields.append(flds if f.type in _DATA else ())
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
    out.append(FaultParams(jnp.float32(f.start_s), jnp.float32(end),
                           jnp.asarray(value, jnp.float32)))
  return tuple(out)


def init_state(plan: FaultPlan, neutral_sample) -> FaultState:
  z = jnp.int32(0)
  return FaultState(jnp.int32(HEALTHY), z, neutral_sample, jnp.int32(-1), jnp.int32(-1),
                    jnp.zeros((len(plan.resets),), bool), z, z)


# ----------------------------------------------------------------------- health machine

def transition(health, streak, condition, invalid_after_missed: int, recovery_samples: int):
  """One step of the health state machine (module docstring table).

  Args:
    health, streak: int32 current state and its counter.
    condition: int32 `OK`, `WEAK`, `MISSED` or `BAD` of this acquisition instant.

  Returns:
    `(health, streak)`.
  """
  h, c = health, condition
  ok = c == OK
  # HEALTHY / DEGRADED
  misses = jnp.where(h == DEGRADED, streak, 0) + 1
  hd_missed = jnp.where(misses >= invalid_after_missed, INVALID, DEGRADED)
  hd = jnp.select([ok, c == WEAK, c == MISSED], [HEALTHY, DEGRADED, hd_missed], INVALID)
  hd_streak = jnp.where(c == MISSED, misses, 0)
  # INVALID / RECOVERING
  good = jnp.where(h == RECOVERING, streak, 0) + 1
  rec = jnp.where(good >= recovery_samples, HEALTHY, RECOVERING)
  ir = jnp.where(ok, rec, INVALID)
  ir_streak = jnp.where(ok & (rec == RECOVERING), good, 0)
  calm = (h == HEALTHY) | (h == DEGRADED)
  return (jnp.where(calm, hd, ir).astype(jnp.int32),
          jnp.where(calm, hd_streak, ir_streak).astype(jnp.int32))


# ----------------------------------------------------------------------- fault application

def _first_tick(seconds, dt):
  """First tick at or after `seconds` (float32; a bound within ~1e-4 tick after a tick counts
  as on it)."""
  x = seconds / dt
  finite = jnp.isfinite(x)
  safe = jnp.where(finite, x, 0.0)
  return jnp.where(finite, jnp.ceil(safe - (1e-4 + 2.4e-7 * jnp.abs(safe))), x)


def window(fp: FaultParams, tick, dt: float):
  """Whether the window `[start_s, end_s)` is active at `tick` (bounds rounded up to ticks)."""
  k = jnp.asarray(tick, jnp.float32)
  return (k >= _first_tick(fp.start_s, dt)) & (k < _first_tick(fp.end_s, dt))


def _replace_fields(sample, names, fn):
  return sample._replace(**{n: fn(n, getattr(sample, n)) for n in names})


def _cast(value, like):
  like = jnp.asarray(like)
  value = jnp.broadcast_to(value, like.shape)
  if jnp.issubdtype(like.dtype, jnp.floating):
    return value.astype(like.dtype)
  if like.dtype == jnp.bool_:
    return value != 0
  return jnp.round(value).astype(like.dtype)


def apply_data(plan: FaultPlan, fps, sample, last, has_last, tick, dt: float):
  """Applies the data faults active at `t` to `sample` (bias, stuck, NaN, sentinel).

  Args:
    fps: tuple of `FaultParams` (one per entry).
    last: the last packet sent (stuck without value freezes its fields); `has_last` whether
      there is one.
    tick: acquisition tick; dt: physics timestep (s).
  """
  t = jnp.asarray(tick, jnp.float32) * dt
  for kind, names, fp, has_value in zip(plan.types, plan.fields, fps, plan.has_value):
    if kind not in _DATA:
      continue
    on = window(fp, tick, dt)
    if kind == 'bias_step':
      fn = lambda n, x, fp=fp: x + _cast(fp.value, x)                            # noqa: E731
    elif kind == 'bias_ramp':
      fn = lambda n, x, fp=fp: x + _cast(fp.value * (t - fp.start_s), x)         # noqa: E731
    elif kind == 'nan':
      fn = lambda n, x: jnp.full_like(x, jnp.nan)                                # noqa: E731
    elif kind == 'sentinel':
      fn = lambda n, x, fp=fp: _cast(fp.value, x)                                # noqa: E731
    elif has_value:   # stuck at a given value
      fn = lambda n, x, fp=fp: _cast(fp.value, x)                                # noqa: E731
    else:   # stuck, frozen at the last value sent (the current one before any was sent)
      fn = lambda n, x: jnp.where(has_last, getattr(last, n), x)                 # noqa: E731
    sample = _replace_fields(sample, names,
                             lambda n, x, fn=fn, on=on: jnp.where(on, fn(n, x), x))
  return sample


def sense(comp, p, s, data, tick, dues, env):
  """The sensing cycle of SPEC §4 with faults and health (see the module docstring).

  Per tick: `observe` (optional, every tick, with `env`) → `track` (optional) → at an
  acquisition instant: reset edges (`on_reset`) → `acquire` → data faults → stale packet →
  condition → health → send (unless missed) → deliver.
  """
  plan: FaultPlan = comp.fault_plan
  due, n = dues['acquisition']
  observe = getattr(comp, 'observe', None)
  if observe is not None:
    s = observe(p, s, env, tick)
  track = getattr(comp, 'track', None)
  if track is not None:
    s = track(p, s, data, tick)
  fps = p.faults

  def acquire(st):
    fs = st.faults
    # reset edges: the first acquisition inside a reset window re-initializes the device
    on_reset = getattr(comp, 'on_reset', None)
    for j, i in enumerate(plan.resets):
      edge = window(fps[i], tick, comp.dt) & ~fs.reset_done[j]
      if on_reset is not None:
        st = jax.tree.map(lambda a, b, e=edge: jnp.where(e, a, b), on_reset(p, st, fs.resets + 1),
                          st)
      fs = fs._replace(reset_done=fs.reset_done.at[j].set(fs.reset_done[j] | edge),
                       resets=fs.resets + edge.astype(jnp.int32))
    st, sample = comp.acquire(p, st, data, tick, n)
    cond = jnp.int32(OK)
    if plan.weak:
      cond = comp.condition(p, sample)
    missed = jnp.bool_(False)
    bad = jnp.bool_(False)
    if plan.types:
      sample = apply_data(plan, fps, sample, fs.last, fs.last_sequence >= 0, tick, comp.dt)
      for kind, fp, warm in zip(plan.types, fps, plan.warmup_s):
        on = window(fp, tick, comp.dt)
        if kind == 'dropout':
          missed = missed | on
        elif kind == 'reset':
          missed = missed | on
          if warm > 0:
            warming = FaultParams(fp.end_s, fp.end_s + warm, fp.value)
            bad = bad | window(warming, tick, comp.dt)
        elif kind == 'invalid_status':
          bad = bad | on
    health, streak = fs.health, fs.streak
    if plan.active:
      cond = jnp.where(missed, MISSED, jnp.where(bad, BAD, cond)).astype(jnp.int32)
      health, streak = transition(fs.health, fs.streak, cond, plan.invalid_after_missed,
                                  plan.recovery_samples)
    if 'health' in getattr(type(sample), '_fields', ()):
      sample = sample._replace(health=health)
    seq, stamp = jnp.asarray(n, jnp.int32), jnp.asarray(tick, jnp.int32)
    stale = jnp.bool_(False)
    has_last = fs.last_sequence >= 0
    for kind, fp in zip(plan.types, fps):
      if kind in ('stale_new_timestamp', 'stale_old_timestamp'):
        on = window(fp, tick, comp.dt) & has_last
        stale = stale | on
        sample = jax.tree.map(lambda a, b, on=on: jnp.where(on, a, b), fs.last, sample)
        if kind == 'stale_old_timestamp':
          seq = jnp.where(on, fs.last_sequence, seq)
          stamp = jnp.where(on, fs.last_tick, stamp)
    send = ~missed
    q = tp.send(comp.transport, st.queue, sample, seq, stamp, st.streams['delivery_jitter'],
                st.streams['delivery_loss'], active=send if plan.types else None)
    if not plan.active:
      return st._replace(queue=q)
    fs = fs._replace(health=health, streak=streak)
    if plan.types:
      keep = send & ~stale
      fs = fs._replace(
          last=jax.tree.map(lambda a, b: jnp.where(keep, a, b), sample, fs.last),
          last_sequence=jnp.where(keep, seq, fs.last_sequence),
          last_tick=jnp.where(keep, stamp, fs.last_tick),
          dropped=fs.dropped + missed.astype(jnp.int32))
    return st._replace(queue=q, faults=fs)

  s = jax.lax.cond(due, acquire, lambda st: st, s)
  queue, held = tp.receive(comp.transport, s.queue, s.held, tick)
  return s._replace(queue=queue, held=held)


# ----------------------------------------------------------------------- scaffolding

class FaultySensor:
  """Mixin of the guide's sensors (put before `base.SensorBase`, whose `sense` runs the faulted
  cycle for a component with a `fault_plan`): reset hook, queue + fault state init, status. A
  subclass sets `fault_plan`, `fault_fields` and has `faults` in Params and State."""
  fault_fields: tuple = ()

  def default_params(self):
    """Params from the resolved config, float32, for a flat `params_type` whose last field is
    `faults` (a sensor with nested or derived Params overrides this)."""
    names = self.params_type._fields[:-1]
    return self.params_type(*(jnp.asarray(getattr(self.cfg, f), jnp.float32) for f in names),
                            default_params(self.cfg))

  def on_reset(self, p, s, index):
    """Re-initialized state after a device reset (default: unchanged)."""
    del p, index
    return s

  def init_transport(self, neutral):
    queue, held = tp.init(self.transport, neutral)
    return queue, held, init_state(self.fault_plan, neutral)

  def status(self, s) -> dict:
    return {**super().status(s), 'fault_dropped': s.faults.dropped,
            'resets': s.faults.resets}


def stream_keys(world_key, cid: str, sources, shared: dict | None = None) -> dict:
  """`{source: key}` for a component's sources; `shared` maps a source to a shared stream name
  (common-mode errors): its key is `stream_key(world_key, 'shared:' + name, source)`, the same
  for every component naming that stream."""
  out = {s: rng.stream_key(world_key, cid, s) for s in sources}
  for source, name in (shared or {}).items():
    out[source] = rng.stream_key(world_key, 'shared:' + name, source)
  return out


def build_timing(cfg: DeviceConfig, ctx, origin):
  """`(Schedule, Transport)` of a `DeviceConfig` (SPEC §4)."""
  from fibril_mjx.mechanisms.schedule import Schedule
  schedule = Schedule.build(cfg.period_s, cfg.phase_s, ctx.dt, cfg.quantization, origin=origin)
  transport = tp.Transport.build(cfg.latency_s, cfg.jitter_s, cfg.loss_probability,
                                 cfg.period_s, ctx.dt, cfg.quantization, origin=origin)
  return schedule, transport


def bind_site(ctx, name: str, origin, field: str = 'site') -> int:
  """Id of MuJoCo site `name` in the compiled model (error with a suggestion otherwise)."""
  import mujoco

  from fibril_mjx.errors import did_you_mean
  m = ctx.model
  sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, name)
  if sid < 0:
    names = [m.site(i).name for i in range(m.nsite)]
    raise ConfigError(*origin(field), 'no MuJoCo site of that name in the compiled model'
                      + did_you_mean(name, names), name)
  return int(sid)


def check_shared_stream(ctx, cid: str, cfg, stream_field: str, same: tuple[str, ...], origin):
  """Components sharing a common-mode stream must draw it at the same instants with the same
  correlation: every earlier component of the same type naming the stream has equal `same`
  fields (e.g. period, phase, correlation time)."""
  name = getattr(cfg, stream_field)
  if name is None:
    return
  for other_id, other in ctx.built.items():
    ocfg = getattr(other, 'cfg', None)
    if ocfg is None or type(ocfg) is not type(cfg) or getattr(ocfg, stream_field) != name:
      continue
    for f in same:
      if getattr(ocfg, f) != getattr(cfg, f):
        raise ConfigError(*origin(f), f'must equal {getattr(ocfg, f)!r} of component '
                          f'{other_id!r}, which shares {stream_field} {name!r} (a shared '
                          'error process is drawn at the same instants)', getattr(cfg, f))
