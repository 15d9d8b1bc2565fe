"""What every actuator component shares (SPEC §6) besides its MuJoCo actuator binding
(`binding.py`): the command link (transport → held value → timeout), the application
instants, the feedback timing and the config rules common to the actuator types.

Feedback runs the one sensing cycle (`fibril_mjx.mechanisms.sensing`, SPEC §4) with the
names of `sensing.FEEDBACK` (`motor_feedback.py`): at the feedback instants the type's
`feedback_sample` is acquired and sent through the feedback transport (`feedback_latency_s`,
`feedback_jitter_s`, `feedback_loss_probability`: release and loss as for a sensor's sample),
delivered every tick.

A command issued at tick `k` enters the component's delivery queue (`fibril_mjx.mechanisms.transport`,
the same queue that carries sensor samples: latency, seeded jitter without reordering, loss,
static capacity); every tick, the commands whose release tick has come are applied in order
to the held value (an endpoint keeps the latest accepted command); at application instants the
component turns the held value (or the safe value on timeout) into `ctrl`. The watchdog counts
ticks since the latest accepted release, in integers.

Continuous latency (SPEC §6.1.1; `fibril_sim/scalar_actuator` `latency_mode`, `fibril_sim/motor`
`command_latency_mode`): `continuous_latency` validates it once for every type and gives the
link its `ContinuousLatency`; each tick `continuous_delay` sends with the whole ticks of the
world's latency and `mix_ctrl` mixes the component's processed ctrl with the one in force
before (`transport.arrival_mix`). In tick mode both are the identity and add no state.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Literal, NamedTuple, Optional

import jax
import jax.numpy as jnp
import pydantic

from fibril_mjx.mechanisms import ring
from fibril_mjx.mechanisms.faults.actuator import ActuatorFaultConfig
from fibril_mjx.mechanisms.faults.spec import FaultConfig, FaultSpec
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg, Positive
from fibril_mjx.mechanisms.schedule import Schedule, ticks_fraction

# the named RNG streams of a motor-type component (command and feedback transports)
MOTOR_SOURCES = ('command_jitter', 'command_loss', 'feedback_jitter', 'feedback_loss')

# Fields that would duplicate a physical value of the MJCF (or the assembly) in a motor config,
# with where the value belongs (SPEC §1 principle 1 and §6.2: `kp`, `ki`, `kd`, `effort_limit`,
# `motor`, `transmission`, `driver` are not accepted).
FORBIDDEN_MOTOR_FIELDS = {
    'kp': 'servo gains belong to the MJCF actuator (<position kp>, <velocity kv>, '
          '<dcmotor controller>); fibril never re-implements a force controller',
    'ki': 'servo gains belong to the MJCF actuator (<dcmotor controller="kp ki kd ...">); '
          'fibril never re-implements a force controller',
    'kd': 'servo gains belong to the MJCF actuator (<position kv>, <velocity kv>, '
          '<dcmotor controller>); fibril never re-implements a force controller',
    'effort_limit': 'force limits belong to the MJCF: the actuator forcerange (or dcmotor '
                    'saturation) and the joint actuatorfrcrange',
    'motor': 'motor constants belong to the MJCF <dcmotor> (resistance, motorconst, '
             'inductance), e.g. class fibril_sim_hw_robomaster_m3508_p19_nominal',
    'transmission': 'transmission geometry belongs to a top-level assemblies entry '
                    '(assemblies: [{id: ..., component: <this id>, transmission: {...}}])',
    'driver': 'driver/servo behaviour belongs to the MJCF actuator (gains, controller, '
              'saturation); this component only adds command transport, timing, logical '
              'coordinates and feedback',
}

# ------------------------------------------------------------------------------ config rules


def set_fields(fields: dict) -> set[str]:
  """Names of the resolved fields that some layer set (profile, config or overlay)."""
  return {n for n, fv in fields.items() if fv.layer != 'default'}


def timeout_ticks(timeout_s: float, dt: float) -> int | None:
  """Watchdog threshold: timed out when `tick - last release > threshold` (None: disabled).

  `(tick - r)·dt > timeout_s` ⇔ `tick - r > floor(timeout_s / dt)` for integer ticks; the
  quotient is the exact rational of `schedule.ticks_fraction`.
  """
  if timeout_s <= 0:
    return None
  return int(math.floor(ticks_fraction(timeout_s, dt)))


# ------------------------------------------------------------------------------ command link


@dataclasses.dataclass(frozen=True)
class ContinuousLatency:
  """Static config of a continuous command latency (SPEC §6.1.1).

  Attributes:
    field: the latency's manifest and Params field (`latency_s`, `command_latency_s`).
    max_field: the field that sizes the queue (`latency_max_s`, `command_latency_max_s`).
    dt: physics step (s).
    max_ticks: the largest latency (ticks) the command queue holds; a world's is clamped to it.
    channels: number of ctrl channels the component writes.
  """
  field: str
  max_field: str
  dt: float
  max_ticks: float
  channels: int

  def describe(self) -> str:
    return (f'continuous latency: {self.field} per world (whole ticks through the queue, the '
            f'fraction mixed into the tick of arrival), clamped to {self.max_ticks:g} ticks '
            f'({self.max_field}: it sizes the queue above)')


def latency_top(cfg, prefix: str = '') -> float:
  """The latency (s) that sizes the command queue: `<prefix>latency_max_s` when set (continuous
  mode), else `<prefix>latency_s`."""
  top = getattr(cfg, f'{prefix}latency_max_s', None)
  return float(getattr(cfg, f'{prefix}latency_s') if top is None else top)


def continuous_latency(cfg, given: set, *, prefix: str, every_tick: bool, dt: float,
                       channels: int, origin, supported: str = '',
                       contradicts: tuple = ()) -> 'ContinuousLatency | None':
  """The rules of `<prefix>latency_mode: continuous` (SPEC §6.1.1), shared by the actuator
  types; None in tick mode.

  Args:
    given: the fields some layer set (`set_fields`).
    prefix: `''` (`latency_s`, `latency_mode`, `latency_max_s`) or `'command_'`.
    every_tick: the application schedule has an instant every tick.
    supported: '' when the type supports continuous mode, else why not (the error's rule).
    contradicts: `(field, bad, rule)` of type-specific fields that cannot be exact with it.

  Raises:
    ConfigError: at the offending field (file, path, value, rule).
  """
  mode, lat, top = f'{prefix}latency_mode', f'{prefix}latency_s', f'{prefix}latency_max_s'
  if getattr(cfg, mode) != 'continuous':
    if top in given:
      base.check(False, *origin(top), f'applies to {mode}: continuous only (a whole-tick '
                 'latency sizes its own queue)', getattr(cfg, top))
    return None
  base.check(not supported, *origin(mode), supported, 'continuous')
  base.check(every_tick, *origin('application_period_s'),
             f'{mode} continuous needs the command applied every tick (application_period_s '
             f'= dt = {dt:g} s, phase 0): a driver sampling at its own instants sees whole '
             'ticks', cfg.application_period_s)
  for field, bad, rule in contradicts:
    base.check(not bad, *origin(field), rule, getattr(cfg, field))
  if getattr(cfg, top) is not None:
    base.check(getattr(cfg, top) >= getattr(cfg, lat), *origin(top),
               f'must be >= {lat} ({getattr(cfg, lat):g} s): it sizes the command queue',
               getattr(cfg, top))
  return ContinuousLatency(lat, top, float(dt), latency_top(cfg, prefix) / float(dt),
                           int(channels))


@dataclasses.dataclass(frozen=True)
class CommandLink:
  """Static config of a command path: the delivery queue and the watchdog.

  Attributes:
    transport: the command transport (commands may be issued every tick).
    timeout_ticks: None (no watchdog) or the tick count after which the held command is stale.
    timeout_s: the configured value (for display).
    continuous: the `ContinuousLatency` (None: tick mode, nothing added to the graph).
  """
  transport: tp.Transport
  timeout_ticks: int | None
  timeout_s: float
  continuous: ContinuousLatency | None = None

  @staticmethod
  def build(latency_s, jitter_s, loss_probability, timeout_s, dt, quantization, *, origin,
            latency_field, continuous: ContinuousLatency | None = None) -> 'CommandLink':
    """`latency_s` sizes the queue (continuous mode: the largest latency)."""
    tr = tp.Transport.build(latency_s, jitter_s, loss_probability, dt, dt, quantization,
                            origin=origin, latency_field=latency_field)
    return CommandLink(tr, timeout_ticks(timeout_s, dt), float(timeout_s), continuous)

  def describe(self) -> str:
    wd = ('off' if self.timeout_ticks is None else
          f'{self.timeout_s:g} s (stale when more than {self.timeout_ticks} ticks old)')
    more = '' if self.continuous is None else f'; {self.continuous.describe()}'
    return f'command transport: {self.transport.describe()}; timeout {wd}{more}'


class LinkState(NamedTuple):
  """Per-world state of a command path.

  Attributes:
    queue: commands in flight.
    issued: commands issued so far (the sequence number / RNG index of the next one).
    received: an accepted command has been released.
    release_tick: tick of the latest accepted release (-1 before the first).
    sequence: sequence number of the held command (-1 before the first).
    rejected: released commands that the endpoint refused (cumulative).
    settled: continuous latency only (None in tick mode): the component's processed ctrl
      `(channels,)` in force at the end of the latest tick; it acts for the fraction of the
      next tick before the next arrival.
  """
  queue: tp.QueueState
  issued: jax.Array
  received: jax.Array
  release_tick: jax.Array
  sequence: jax.Array
  rejected: jax.Array
  settled: Any = None


def init(link: CommandLink, neutral_command) -> LinkState:
  q, _ = tp.init(link.transport, neutral_command)
  m1 = jnp.int32(-1)
  c = link.continuous
  settled = None if c is None else jnp.zeros((c.channels,), jnp.float32)
  return LinkState(q, jnp.int32(0), jnp.bool_(False), m1, m1, jnp.int32(0), settled)


def continuous_delay(link: CommandLink, ls: LinkState, latency_s
                     ) -> tuple[LinkState, jax.Array | None]:
  """Before `issue`: the queue sends with the whole ticks `n` of the world's latency
  `latency_s` (s, traced) and returns the fraction `f` of the tick of arrival
  (`transport.fractional_delay`); `(ls, None)` in tick mode."""
  c = link.continuous
  if c is None:
    return ls, None
  n, frac = tp.fractional_delay(latency_s, c.dt, c.max_ticks)
  return ls._replace(queue=tp.with_delay(ls.queue, n)), frac


def mix_ctrl(link: CommandLink, ls: LinkState, frac, ctrl, adr) -> tuple[LinkState, jax.Array]:
  """After the component wrote its ctrl this tick: the ctrl in force before the arrival acts
  for the fraction `frac` of the tick (`transport.arrival_mix`); identity in tick mode.

  Args:
    frac: from `continuous_delay`; adr: the component's ctrl addresses `(channels,)` int.

  Returns:
    `(ls with the new settled ctrl, ctrl with the mixed values at adr)`.
  """
  if link.continuous is None:
    return ls, ctrl
  now = ctrl[adr]
  return ls._replace(settled=now), ctrl.at[adr].set(tp.arrival_mix(ls.settled, now, frac))


def settle(link: CommandLink, ls: LinkState, ctrl, adr) -> LinkState:
  """The component's ctrl before its first application as the settled one (continuous mode;
  identity in tick mode)."""
  return ls if link.continuous is None else ls._replace(settled=ctrl[adr])


class ContinuousLatencyParam:
  """Mixin of a component with a command `link`: its latency field is a per-world Params
  field only with continuous latency (else static: whole ticks fixed at build)."""

  def field_path(self, field: str):
    c = self.link.continuous
    if field in ('latency_s', 'command_latency_s') and (c is None or c.field != field):
      return None
    return super().field_path(field)


def issue(link: CommandLink, ls: LinkState, command, issued, tick, jitter_stream, loss_stream
          ) -> LinkState:
  """Enqueues `command` when `issued` (bool, per world); its sequence number is `ls.issued`."""
  q = tp.send(link.transport, ls.queue, command, ls.issued, tick, jitter_stream, loss_stream,
              active=issued)
  return ls._replace(queue=q, issued=ls.issued + issued.astype(jnp.int32))


# status of a released command returned by the endpoint's apply function
IGNORED, ACCEPTED, REJECTED = 0, 1, 2


def deliver(link: CommandLink, ls: LinkState, held, tick,
            apply: Callable[[Any, Any], tuple[Any, jax.Array]]) -> tuple[LinkState, Any]:
  """Applies the commands released at `tick`, oldest first, to the endpoint's held value.

  Args:
    held: the endpoint's held value (any pytree).
    apply: `(held, command) -> (held, status)`, status `ACCEPTED` (refreshes the watchdog),
      `REJECTED` (counted; apply must leave the held command unchanged) or `IGNORED` (e.g. an
      encoder reset alone).

  Returns:
    `(link state, held)`.
  """
  q, ready, _ = tp.release(link.transport, ls.queue, tick)
  for j in range(link.transport.capacity):
    slot = (ls.queue.head + j) % link.transport.capacity
    cmd = jax.tree.map(lambda b: ring.get(b, slot), q.buf)
    new_held, status = apply(held, cmd)
    r = ready[j]
    ok = r & (status == ACCEPTED)
    held = jax.tree.map(lambda a, b: jnp.where(r, a, b), new_held, held)
    ls = ls._replace(
        received=ls.received | ok,
        release_tick=jnp.where(ok, jnp.asarray(tick, jnp.int32), ls.release_tick),
        sequence=jnp.where(ok, ring.get(q.sequence, slot), ls.sequence),
        rejected=ls.rejected + (r & (status == REJECTED)).astype(jnp.int32))
  return ls._replace(queue=q), held


def timed_out(link: CommandLink, ls: LinkState, tick) -> jax.Array:
  """Whether the held command is stale at `tick` (always False without a watchdog)."""
  if link.timeout_ticks is None:
    return jnp.bool_(False)
  return ls.received & (tick - ls.release_tick > link.timeout_ticks)


def at_instants(schedule, due, fn, *operands):
  """`fn(*operands)` at the schedule's instants, else the operands unchanged.

  `due` is shared by all worlds, so under `vmap` this is a real branch; a schedule with an
  instant every tick skips the branch statically (no conditional in the graph).
  """
  if schedule.every_tick:
    return fn(*operands)
  return jax.lax.cond(due, fn, lambda *x: x if len(x) > 1 else x[0], *operands)


def latch_gain_commands(link: CommandLink, application, s, command, tick, due):
  """The command path of an adapter whose commands carry firmware gains: issue `command`,
  apply the released ones to the held command, and at the application instants latch it.

  Args:
    s: the adapter's state, with `streams`, `link`, `held`, `latched`, `active`, `stale`,
      `timeout_count`.
    command: a NamedTuple `(issued, enable, *values)` whose values include `kp`, `kd`; a
      released command with a non-finite value or a negative gain is rejected (counted).

  Returns:
    The state: `active` (the latched command drives the law) is received, not timed out and
    enabled.
  """
  command = type(command)(jnp.asarray(command.issued, bool), jnp.asarray(command.enable, bool),
                          *(jnp.asarray(x, jnp.float32) for x in command[2:]))
  ls = issue(link, s.link, command, command.issued, tick, s.streams['command_jitter'],
             s.streams['command_loss'])

  def apply(held, cmd):
    ok = jnp.all(jnp.isfinite(jnp.stack(cmd[2:]))) & (cmd.kp >= 0) & (cmd.kd >= 0)
    held = jax.tree.map(lambda a, b: jnp.where(ok, a, b), cmd, held)
    return held, jnp.where(ok, ACCEPTED, REJECTED)
  ls, held = deliver(link, ls, s.held, tick, apply)
  stale = timed_out(link, ls, tick)

  def instant(st):
    active = st.link.received & ~stale & st.held.enable
    return st._replace(latched=st.held, active=active, stale=stale,
                       timeout_count=st.timeout_count + stale.astype(jnp.int32))
  return at_instants(application, due, instant, s._replace(link=ls, held=held))


def normalized_output(b, force, scale):
  """The actuator force as a fraction of the MJCF `forcerange` of binding `b` (`force / hi` at
  or above 0, `force / |lo|` below), signed by `sign(gear·scale)`; NaN without a forcerange.

  Args:
    force: actuator force (MJCF units); scale: the logical scale (logical per joint unit).
  """
  fr = b.forcerange
  if fr is None:
    return jnp.full_like(force, jnp.nan)
  lo, hi = fr
  limit = jnp.where(force >= 0, hi, -lo)
  frac = jnp.where(limit > 0, force / jnp.where(limit > 0, limit, 1.0), 0.0)
  return frac * jnp.sign(b.gear * scale)


class MotorTimingConfig(ActuatorFaultConfig):
  """Command transport, application and feedback fields of the motor-type components
  (`fibril_sim/motor`, `fibril_sim/motion_motor`, `fibril_sim/position_servo`; SPEC §6.2,
  §6.3), used by `build_timing`, their `faults:` (SPEC §6.5), and the faults of their
  feedback: `feedback_faults:` entries are a sensor's `faults:` entries
  (`fibril_mjx.mechanisms.faults`) acting on the feedback sample at the feedback instants,
  with the health thresholds `feedback_invalid_after_missed`, `feedback_recovery_samples`
  (`feedback_fault_config`)."""
  command_latency_s: NonNeg = 0.0
  command_latency_mode: Literal['tick', 'continuous'] = 'tick'
  command_latency_max_s: Optional[NonNeg] = None
  command_jitter_s: NonNeg = 0.0
  command_loss_probability: float = pydantic.Field(0.0, ge=0, lt=1)
  timeout_s: float = 0.0
  application_period_s: Positive
  application_phase_s: NonNeg = 0.0
  feedback_period_s: Optional[Positive] = None
  feedback_phase_s: NonNeg = 0.0
  feedback_latency_s: NonNeg = 0.0
  feedback_jitter_s: NonNeg = 0.0
  feedback_loss_probability: float = pydantic.Field(0.0, ge=0, lt=1)
  feedback_current_per_force: NonNeg = 0.0
  feedback_faults: tuple[FaultSpec, ...] = ()
  feedback_invalid_after_missed: int = pydantic.Field(3, ge=1)
  feedback_recovery_samples: int = pydantic.Field(5, ge=0)

  def feedback_fault_config(self) -> FaultConfig:
    """The `feedback_*` fault fields as the `FaultConfig` a sensor has (`faults`,
    `health_invalid_after_missed`, `health_recovery_samples`)."""
    return FaultConfig(faults=self.feedback_faults,
                       health_invalid_after_missed=self.feedback_invalid_after_missed,
                       health_recovery_samples=self.feedback_recovery_samples)


def build_timing(cfg, ctx, origin, given: set = frozenset(), *, channels: int = 1,
                 continuous: str = ('supported by fibril_sim/motor and '
                                    'fibril_sim/scalar_actuator only: this type evaluates its '
                                    'law from the joint state every tick, so a mid-tick arrival '
                                    'is not a mix of two ctrl values')):
  """Application and feedback schedules, feedback transport and command link of a motor-type
  component (`application_*`, `feedback_*`, `command_*`, `timeout_s` fields).

  The feedback period defaults to the application period (errors then point to the latter).
  `continuous`: '' when the type supports `command_latency_mode: continuous`, else why not.

  Returns:
    `(application, feedback, feedback_transport, command_link)`.
  """
  application = Schedule.build(cfg.application_period_s, cfg.application_phase_s, ctx.dt,
                               'next_boundary', origin=origin,
                               period_field='application_period_s',
                               phase_field='application_phase_s')
  fb_period = cfg.feedback_period_s or cfg.application_period_s
  fb_origin = origin if cfg.feedback_period_s else (
      lambda f: origin('application_period_s' if f == 'feedback_period_s' else f))
  feedback = Schedule.build(fb_period, cfg.feedback_phase_s, ctx.dt, 'next_boundary',
                            origin=fb_origin, period_field='feedback_period_s',
                            phase_field='feedback_phase_s')
  fb_transport = tp.Transport.build(cfg.feedback_latency_s, cfg.feedback_jitter_s,
                                    cfg.feedback_loss_probability, fb_period, ctx.dt,
                                    'next_boundary', origin=origin,
                                    latency_field='feedback_latency_s')
  cont = continuous_latency(
      cfg, given, prefix='command_', every_tick=application.every_tick, dt=ctx.dt,
      channels=channels, origin=origin, supported=continuous,
      contradicts=(('command_jitter_s', cfg.command_jitter_s > 0,
                    'command jitter contradicts command_latency_mode: continuous (each '
                    'command would need its own fraction of a tick): set it to 0'),))
  link = CommandLink.build(latency_top(cfg, 'command_'), cfg.command_jitter_s,
                           cfg.command_loss_probability, cfg.timeout_s, ctx.dt,
                           'next_boundary', origin=origin, latency_field='command_latency_s',
                           continuous=cont)
  return application, feedback, fb_transport, link
