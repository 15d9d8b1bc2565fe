"""`fibril_sim/scalar_actuator` — the minimal virtual driver (SPEC §6.1).

A scalar command goes through the command transport (latency), becomes the held value when
released, and at application instants is written to the actuator's control after
timeout → deadband → resolution → saturation. The saturation is the virtual driver's limit,
a layer separate from MuJoCo's `ctrlrange`. With `latency_mode: continuous` (SPEC §6.1.1)
the latency is a per-world Params field and the tick's ctrl mixes the values before and after
an arrival by the fraction of the tick each covers (the command link's shared
`actuation.continuous_delay` / `actuation.mix_ctrl`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple, Optional

import jax
import jax.numpy as jnp

from fibril_mjx.mechanisms import rng
from fibril_mjx.mechanisms import signal
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext
from fibril_mjx.components.actuators import actuation, binding, faulted
from fibril_mjx.components import base
from fibril_mjx.core import protocol
from fibril_mjx.components.base import NonNeg, Positive
from fibril_mjx.mechanisms.schedule import Schedule
from fibril_mjx.mechanisms.faults.actuator import ActuatorFaultConfig

TYPE = 'fibril_sim/scalar_actuator'
SAMPLE_TYPE = 'none (no feedback)'
SOURCES = ('command_jitter', 'command_loss')


class ScalarActuatorConfigModel(ActuatorFaultConfig):
  """Validated manifest config of `fibril_sim/scalar_actuator` (SPEC §6.1 field list)."""
  actuator: str
  latency_s: NonNeg = 0.0
  latency_mode: Literal['tick', 'continuous'] = 'tick'
  latency_max_s: Optional[NonNeg] = None
  delivery_quantization: Literal['next_boundary', 'strict'] = 'next_boundary'
  application_period_s: Optional[Positive] = None
  application_phase_s: NonNeg = 0.0
  timeout_s: float = 0.0
  safe_value: float = 0.0
  deadband: NonNeg = 0.0
  resolution: NonNeg = 0.0
  saturation_min: Optional[float] = None
  saturation_max: Optional[float] = None


class ScalarCommand(NamedTuple):
  """A command: `value` (ctrl units) and whether it was issued this tick."""
  value: jax.Array
  issued: jax.Array


def command(value) -> ScalarCommand:
  """An issued scalar command (broadcast it to `(nworld,)` for a batch)."""
  v = jnp.asarray(value, jnp.float32)
  return ScalarCommand(v, jnp.ones(jnp.shape(v), bool))


class Params(NamedTuple):
  """Per-world parameters (scalars); the saturation bounds are used only when configured,
  `latency_s` only with `latency_mode: continuous` (a per-world, differentiable latency; None,
  no leaf, in tick mode)."""
  safe_value: jax.Array
  deadband: jax.Array
  resolution: jax.Array
  saturation_min: jax.Array
  saturation_max: jax.Array
  latency_s: Any = None
  faults: tuple = ()   # the `FaultParams` of the `faults:` entries


class NoFeedback(NamedTuple):
  """A scalar actuator reports nothing back."""


class State(NamedTuple):
  """Per-world state.

  Attributes:
    streams: named stream keys.
    link: the command path.
    held: the held command value (the latest accepted release).
    applied: the value written at the latest application instant.
    last_issued: the latest value the controller issued (for truth).
    stale: the latest application instant found the held command timed out.
    timeout_count, saturation_count: application instants that applied the safe value on
      timeout / that clipped (cumulative).
    faults: the `ActuatorFaultState` (None without `faults:`).
  """
  streams: dict
  link: actuation.LinkState
  held: jax.Array
  applied: jax.Array
  last_issued: jax.Array
  stale: jax.Array
  timeout_count: jax.Array
  saturation_count: jax.Array
  faults: Any = None


@dataclasses.dataclass(frozen=True)
class ScalarActuator(faulted.FaultedActuator, actuation.ContinuousLatencyParam,
                     base.ComponentBase):
  """A built `fibril_sim/scalar_actuator` (static)."""
  reads_sensors_only = True
  id: str
  cfg: ScalarActuatorConfigModel
  binding: binding.ActuatorBinding
  schedule: Schedule
  link: actuation.CommandLink
  fields: tuple = dataclasses.field(compare=False)

  type = TYPE
  sample_type = SAMPLE_TYPE
  roles = frozenset({protocol.ACTUATOR})
  params_type = Params

  # in a group (`core/groups.py`): binding and fault limit per member; id, names only label
  per_member = ('binding', 'fault_range')
  labels = ('id', 'fields')
  member_config = ('actuator',)

  @property
  def schedules(self) -> dict:
    return {'application': self.schedule}

  accepted_kinds = ('value',)

  def default_params(self) -> Params:
    c = self.cfg
    f = lambda v: jnp.float32(0.0 if v is None else v)  # noqa: E731
    return Params(f(c.safe_value), f(c.deadband), f(c.resolution), f(c.saturation_min),
                  f(c.saturation_max),
                  None if self.link.continuous is None else f(c.latency_s), self.fault_params())

  def null_command(self) -> ScalarCommand:
    return ScalarCommand(jnp.float32(0.0), jnp.bool_(False))

  def script_command(self, kind: str, value, velocity, extra: dict) -> ScalarCommand:
    del kind, velocity, extra
    return ScalarCommand(jnp.asarray(value, jnp.float32), jnp.bool_(True))

  def init(self, params: Params, world_key) -> State:
    streams = {s: rng.stream_key(world_key, self.id, s) for s in SOURCES}
    z, zi = jnp.float32(0.0), jnp.int32(0)
    safe = self._process(params, params.safe_value)[0]
    return State(streams, actuation.init(self.link, self.null_command()), z,
                 safe, z, jnp.bool_(False), zi, zi, self.init_faults())

  def _process(self, p: Params, v):
    """deadband → resolution → saturation; returns `(value, clipped)`."""
    c = self.cfg
    if c.deadband > 0:
      v = jnp.where(jnp.abs(v) < p.deadband, 0.0, v)
    if c.resolution > 0:
      v = signal.quantize(v, p.resolution)
    clipped = jnp.bool_(False)
    if c.saturation_min is not None:
      clipped = clipped | (v < p.saturation_min)
      v = jnp.maximum(v, p.saturation_min)
    if c.saturation_max is not None:
      clipped = clipped | (v > p.saturation_max)
      v = jnp.minimum(v, p.saturation_max)
    return v, clipped

  def _reset_ctrl(self, params: Params, state: State, data, ctrl):
    """Before the first application instant the actuator holds the processed safe value."""
    ctrl = binding.set_ctrl(ctrl, self.binding, state.applied)
    return state._replace(link=actuation.settle(self.link, state.link, ctrl, self._adr)), ctrl

  def _drive(self, p: Params, s: State, data, ctrl, command: ScalarCommand, tick, dues):
    """Tick `tick`, before physics: transport, release, and (at instants) write `ctrl`."""
    del data
    issued = jnp.asarray(command.issued, bool)
    value = jnp.asarray(command.value, jnp.float32)
    link, frac = actuation.continuous_delay(self.link, s.link, p.latency_s)
    link = actuation.issue(self.link, link, ScalarCommand(value, issued), issued, tick,
                     s.streams['command_jitter'], s.streams['command_loss'])

    def apply(held, cmd):
      ok = jnp.isfinite(cmd.value)
      return jnp.where(ok, cmd.value, held), jnp.where(ok, actuation.ACCEPTED, actuation.REJECTED)
    link, held = actuation.deliver(self.link, link, s.held, tick, apply)

    due, _ = dues['application']
    stale = actuation.timed_out(self.link, link, tick)
    v = jnp.where(link.received & ~stale, held, p.safe_value)
    v, clipped = self._process(p, v)
    ctrl = jnp.where(due, binding.set_ctrl(ctrl, self.binding, v), ctrl)
    if frac is not None:   # the value before the arrival acts for the fraction f of the tick
      link, ctrl = actuation.mix_ctrl(self.link, link, frac, ctrl, self._adr)
      v = ctrl[self.binding.ctrladr]
    s = s._replace(
        link=link, held=held,
        last_issued=jnp.where(issued, value, s.last_issued),
        applied=jnp.where(due, v, s.applied),
        stale=jnp.where(due, stale, s.stale),
        timeout_count=s.timeout_count + (due & stale).astype(jnp.int32),
        saturation_count=s.saturation_count + (due & clipped).astype(jnp.int32))
    return s, ctrl

  def output(self, s: State) -> tp.Delivered:
    f, m1 = jnp.bool_(False), jnp.int32(-1)
    return tp.Delivered(NoFeedback(), f, m1, m1, m1, f)

  def status(self, s: State) -> dict:
    return {'command_lost': s.link.queue.lost, 'command_overflow': s.link.queue.overflow,
            'command_rejected': s.link.rejected, 'timeout_instants': s.timeout_count,
            'saturated_instants': s.saturation_count, **self.fault_status(s)}

  def truth(self, s: State, data) -> dict:
    """The value on the actuator's control and the controller's latest command."""
    return {'applied': s.applied, 'command': s.last_issued, 'timed_out': s.stale,
            **self.fault_truth(s)}

  def describe(self) -> list[str]:
    c = self.cfg
    sat = (f'[{"-inf" if c.saturation_min is None else f"{c.saturation_min:g}"}, '
           f'{"inf" if c.saturation_max is None else f"{c.saturation_max:g}"}]')
    return ['bound actuator:', *('  ' + line for line in self.binding.describe()),
            f'application: {self.schedule.describe()}',
            self.link.describe(),
            f'at application instants: timeout -> safe {c.safe_value:g}, deadband '
            f'{c.deadband:g}, resolution {c.resolution:g}, saturation {sat} -> '
            f'ctrl[{self.binding.ctrladr}] (MuJoCo ctrlrange is a separate layer)',
            *self.describe_faults()]


def build(cid: str, raw, ctx: BuildContext, catalog) -> ScalarActuator:
  """Validates the config and binds the MuJoCo actuator."""
  cfg, fields = base.resolve_config(ScalarActuatorConfigModel, TYPE, raw, catalog=catalog,
                                    file=ctx.file, path=ctx.path)
  origin = base.field_origin(fields, ctx)
  given = actuation.set_fields(fields)
  if 'application_phase_s' in given and cfg.application_period_s is None:
    base.check(False, *origin('application_phase_s'),
               'requires application_period_s (a phase needs a period)',
               cfg.application_phase_s)
  if cfg.saturation_min is not None and cfg.saturation_max is not None:
    base.check(cfg.saturation_min <= cfg.saturation_max, *origin('saturation_max'),
               f'must be >= saturation_min ({cfg.saturation_min:g})', cfg.saturation_max)
  if ctx.assembly is not None:
    base.check(False, ctx.assembly.file, ctx.assembly.path + '.component',
               f'assemblies bind fibril_sim/motor or fibril_sim/motion_motor components; '
               f'{cid!r} is a {TYPE}', cid)
  bound = binding.bind_actuator(ctx, 'actuator', cfg.actuator)
  period = ctx.dt if cfg.application_period_s is None else cfg.application_period_s
  schedule = Schedule.build(period, cfg.application_phase_s, ctx.dt, 'strict', origin=origin,
                            period_field='application_period_s',
                            phase_field='application_phase_s')
  cont = actuation.continuous_latency(
      cfg, given, prefix='', every_tick=schedule.every_tick, dt=ctx.dt, channels=1,
      origin=origin, contradicts=(('delivery_quantization', cfg.delivery_quantization == 'strict',
                                   'strict (whole ticks only) contradicts latency_mode: '
                                   'continuous'),))
  link = actuation.CommandLink.build(actuation.latency_top(cfg), 0.0, 0.0, cfg.timeout_s, ctx.dt,
                               cfg.delivery_quantization, origin=origin,
                               latency_field='latency_s', continuous=cont)
  return ScalarActuator(cid, cfg, bound, schedule, link, tuple(fields.items()),
                        **faulted.build(cfg, (bound,), ctx, origin))


CONFIG_MODEL = ScalarActuatorConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
