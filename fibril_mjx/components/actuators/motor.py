"""`fibril_sim/motor` — production motor commands onto a MuJoCo actuator (SPEC §6.2).

The bound actuator is a `<position>`, `<velocity>`, `<motor>` or a `<dcmotor>` with a `pos` or
`vel` input; its gains, limits and motor constants stay in the MJCF. The component adds only
the virtual driver: command transport, held value, timeout / safe command, application timing,
logical encoder coordinates and feedback.

Coordinates. With `s = logical_units_per_joint_unit` and the encoder zero `z` (joint position
of logical 0, moved by encoder resets):

  logical position = (q − z)·s,  logical velocity = q̇·s,  joint effort = logical effort·s

(power-conjugate: logical effort × logical velocity = joint effort × q̇). Joint-space setpoints
become `ctrl` through the resolved gear `g` (actuator length = g·q): a position setpoint
`ctrl = g·q*`, a velocity setpoint `ctrl = g·q̇*`, an effort `ctrl = τ / (g·gain)`.

Command kinds (`MotorCommand.kind`), and what each actuator input accepts:

  position setpoint input (<position>, dcmotor pos): position (slew-limited by
      command_velocity_limit when set), velocity (integrates the setpoint), duty (×
      duty_velocity_scale, integrated; zero_duty_hold makes duty 0 hold the current position),
      trajectory (needs command_velocity_limit; trapezoidal with trajectory_acceleration_limit)
  velocity input (<velocity>, dcmotor vel): velocity (clipped to command_velocity_limit),
      duty (× duty_velocity_scale)
  torque input (<motor>): effort, duty (× duty_effort_scale)

Fields that would ask for another conversion are construction errors; a released command of
a kind the binding does not accept (or with a non-finite value) is rejected and counted in
`status()['command_rejected']`, never applied. The setpoint generator advances one nominal
application period per application instant (SPEC §4: the nominal period is the Δ), and the
new setpoint is applied at that instant.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext
from fibril_mjx.components.actuators import actuation, binding, faulted, motor_feedback
from fibril_mjx.components import base
from fibril_mjx.mechanisms.trajectory import Plan, trapezoid_plan, trapezoid_sample  # noqa: F401
from fibril_mjx.components.actuators.motor_config import (  # noqa: F401
    DUTY, EFFORT, HOLD, KINDS, NONE, POSITION, TRAJECTORY, VELOCITY, MotorConfigModel,
    accepted_for, check_compatible, logical_scale_source)

TYPE = 'fibril_sim/motor'
SAMPLE_TYPE = 'fibril_sim/motor_feedback/v1'


class MotorCommand(NamedTuple):
  """A production motor command (one world; add a leading `(nworld,)` axis for a batch).

  Attributes:
    kind: int32, index in `KINDS` (0: nothing issued).
    value: logical position / velocity / effort, duty in [-1, 1], or trajectory target.
    encoder_reset: move the logical zero so that the current position reads
      `encoder_position` (applied on release, before `kind`/`value`).
    encoder_position: see `encoder_reset`.
  """
  kind: jax.Array
  value: jax.Array
  encoder_reset: jax.Array
  encoder_position: jax.Array


def command(kind: str, value=0.0, *, encoder_reset=False, encoder_position=0.0
            ) -> MotorCommand:
  """Builds a command, e.g. `command('velocity', 2.0)`; `kind='none'` with `encoder_reset`
  only resets the encoder. `value` may be an array (then every field gets its shape)."""
  if kind not in KINDS:
    raise ValueError(f'unknown motor command kind {kind!r}; kinds: {", ".join(KINDS)}')
  v = jnp.asarray(value, jnp.float32)
  return MotorCommand(jnp.full(v.shape, KINDS.index(kind), jnp.int32), v,
                      jnp.full(v.shape, encoder_reset, bool),
                      jnp.broadcast_to(jnp.asarray(encoder_position, jnp.float32), v.shape))


class Params(NamedTuple):
  """Per-world, differentiable parameters (scalars). Unset optional fields hold 0 and are
  absent from the traced graph."""
  logical_units_per_joint_unit: jax.Array
  command_velocity_limit: jax.Array
  trajectory_acceleration_limit: jax.Array
  duty_velocity_scale: jax.Array
  duty_effort_scale: jax.Array
  safe_command: jax.Array
  feedback_current_per_force: jax.Array
  command_latency_s: Any = None   # s; a leaf with `command_latency_mode: continuous` only
  faults: tuple = ()   # the `FaultParams` of the `faults:` entries
  feedback_faults: tuple = ()   # the `FaultParams` of the `feedback_faults:` entries


class Feedback(NamedTuple):
  """`fibril_sim/motor_feedback/v1`, logical units.

  Attributes:
    position: logical position (encoder zero applied).
    velocity: logical velocity.
    applied_effort: `actuator_force × gear / s` (the force MuJoCo produced, not ctrl).
    current: estimated current per motor, `feedback_current_per_force × actuator_force /
      actuator_count` (motor-side force, before the assembly gear).
    normalized_output: the actuator force as a fraction of the MJCF actuator `forcerange`
      (derived from the binding, never repeated in the manifest; SPEC §1, §6.2): `force / hi` for
      force ≥ 0, `force / |lo|` below, so ±1 at the limits; signed like `applied_effort`
      (× sign(gear·s)). NaN when the actuator is not force-limited (nothing to normalize by).
  """
  position: jax.Array
  velocity: jax.Array
  applied_effort: jax.Array
  current: jax.Array
  normalized_output: jax.Array


class Held(NamedTuple):
  """The endpoint's held command, in joint space (duty stays a duty).

  Attributes:
    kind: int32 kind of the held motion command (NONE before the first).
    value: joint position / velocity / effort, or the duty.
    zero: encoder zero, the joint position of logical 0.
    new: a motion command was accepted since the last application instant.
  """
  kind: jax.Array
  value: jax.Array
  zero: jax.Array
  new: jax.Array


class Generator(NamedTuple):
  """Setpoint generator of a position-setpoint actuator (joint units).

  Attributes:
    pos, vel: the setpoint applied at the latest instant and its rate.
    valid: pos has been initialised (from the joint position at the first instant).
    mode: mode applied at the latest instant (index in KINDS, or HOLD).
    hold: captured hold position.
    plan: the active trapezoid.
  """
  pos: jax.Array
  vel: jax.Array
  valid: jax.Array
  mode: jax.Array
  hold: jax.Array
  plan: Plan


class State(NamedTuple):
  """Per-world state.

  Attributes:
    streams, link, fb_queue, fb_held, feedback_faults: the fields every motor type has
      (`motor_feedback.MotorFields.motor_state` makes them); faults: the actuator's
      `ActuatorFaultState` (None without `faults:`).
    held: held command.
    gen: setpoint generator.
    applied: the setpoint or effort applied at the latest instant, joint units.
    stale: the latest instant applied the safe command on timeout.
    timeout_count: application instants that did so (cumulative).
    scale: the world's logical scale (for truth, which sees no params).
  """
  streams: dict
  link: actuation.LinkState
  held: Held
  gen: Generator
  applied: jax.Array
  stale: jax.Array
  timeout_count: jax.Array
  fb_queue: tp.QueueState
  fb_held: tp.Delivered
  scale: jax.Array
  faults: Any = None
  feedback_faults: Any = None


@dataclasses.dataclass(frozen=True)
class Motor(faulted.FaultedActuator, motor_feedback.MotorFields):
  """A built `fibril_sim/motor` component (static, hashable; `cfg` a `MotorConfigModel`,
  the common fields of `motor_feedback.MotorFields`)."""
  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type = Params

  binding: binding.ActuatorBinding
  accepted: tuple[int, ...]
  scale_source: str

  # in a group (`core/groups.py`): binding and fault limit per member; id, names only label
  per_member = ('binding', 'fault_range')
  labels = ('id', 'fields')
  member_config = ('actuator',)

  # ------------------------------------------------------------------ protocol basics

  @property
  def semantic(self) -> str:
    return self.binding.semantic

  @property
  def accepted_kinds(self) -> tuple[str, ...]:
    return tuple(KINDS[k] for k in self.accepted)

  def default_params(self) -> Params:
    c = self.cfg
    f = lambda v: host.array(0.0 if v is None else v)  # noqa: E731
    return Params(f(c.logical_units_per_joint_unit), f(c.command_velocity_limit),
                  f(c.trajectory_acceleration_limit), f(c.duty_velocity_scale),
                  f(c.duty_effort_scale), f(c.safe_command), f(c.feedback_current_per_force),
                  None if self.link.continuous is None else f(c.command_latency_s),
                  self.fault_params(), self.feedback_fault_params())

  def null_command(self) -> MotorCommand:
    return MotorCommand(jnp.int32(NONE), jnp.float32(0.0), jnp.bool_(False), jnp.float32(0.0))

  def script_command(self, kind: str, value, velocity, extra: dict) -> MotorCommand:
    del velocity, extra
    return MotorCommand(jnp.int32(KINDS.index(kind)), jnp.asarray(value, jnp.float32),
                        jnp.bool_(False), jnp.float32(0.0))

  def init(self, params: Params, world_key) -> State:
    z, zi = jnp.float32(0.0), jnp.int32(0)
    plan = Plan(z, z, jnp.float32(1.0), z, z, z, z, z, zi)
    gen = Generator(z, z, jnp.bool_(False), jnp.int32(NONE), z, plan)
    return State(**self.motor_state(world_key, Feedback(z, z, z, z, z)),
                 held=Held(jnp.int32(NONE), z, z, jnp.bool_(False)), gen=gen, applied=z,
                 stale=jnp.bool_(False), timeout_count=zi,
                 scale=params.logical_units_per_joint_unit, faults=self.init_faults())

  # ------------------------------------------------------------------ commands

  def _release(self, p: Params, held: Held, cmd: MotorCommand, q):
    """Applies one released command to the held value (joint space)."""
    s = p.logical_units_per_joint_unit
    kind = jnp.asarray(cmd.kind, jnp.int32)
    reset_ok = cmd.encoder_reset & jnp.isfinite(cmd.encoder_position)
    zero = jnp.where(reset_ok, q - cmd.encoder_position / s, held.zero)
    accepted = jnp.zeros((), bool)
    for k in self.accepted:
      accepted = accepted | (kind == k)
    motion = kind != NONE
    ok = motion & accepted & jnp.isfinite(cmd.value)
    v = cmd.value
    joint = jnp.where((kind == POSITION) | (kind == TRAJECTORY), v / s + zero,
                      jnp.where(kind == VELOCITY, v / s, jnp.where(kind == EFFORT, v * s, v)))
    new = Held(jnp.where(ok, kind, held.kind), jnp.where(ok, joint, held.value), zero,
               held.new | ok)
    bad = (motion & ~ok) | (cmd.encoder_reset & ~reset_ok)
    status = jnp.where(bad, actuation.REJECTED, jnp.where(ok, actuation.ACCEPTED, actuation.IGNORED))
    return new, status

  def _effective(self, p: Params, held: Held, received, stale):
    """The mode and joint-space value to apply: the held command, or the safe command /
    hold when uncommanded, or the safe command on timeout; duty converted."""
    s = p.logical_units_per_joint_unit
    sem = self.semantic
    native = {'position': POSITION, 'velocity': VELOCITY, 'effort': EFFORT}[sem]
    safe = {'position': p.safe_command / s + held.zero, 'velocity': p.safe_command / s,
            'effort': p.safe_command * s}[sem]
    mode = jnp.where(received, held.kind, native)
    value = jnp.where(received, held.value, safe)
    if self.cfg.hold_when_uncommanded:
      mode = jnp.where(received, mode, HOLD)
    mode = jnp.where(stale, native, mode)
    value = jnp.where(stale, safe, value)
    if DUTY in self.accepted:
      d = jnp.clip(value, -1.0, 1.0)
      is_duty = mode == DUTY
      if sem == 'effort':
        conv_mode, conv = EFFORT, d * p.duty_effort_scale * s
      else:
        conv_mode, conv = VELOCITY, d * p.duty_velocity_scale / s
      new_mode = jnp.full_like(mode, conv_mode)
      if self.cfg.zero_duty_hold:
        new_mode = jnp.where(d == 0, HOLD, new_mode)
      mode = jnp.where(is_duty, new_mode, mode)
      value = jnp.where(is_duty, conv, value)
    return mode, value

  def _position_setpoint(self, p: Params, gen: Generator, mode, value, new, q, n):
    """Advances the position setpoint generator one application period."""
    cfg = self.cfg
    dt_app = cfg.application_period_s
    s_abs = jnp.abs(p.logical_units_per_joint_unit)
    has_v = cfg.command_velocity_limit is not None
    vmax = p.command_velocity_limit / s_abs if has_v else None
    pos0 = jnp.where(gen.valid, gen.pos, q)
    vel0 = jnp.where(gen.valid, gen.vel, 0.0)

    def slew(target):
      if not has_v:
        return target, jnp.zeros_like(target)
      step = jnp.clip(target - pos0, -vmax * dt_app, vmax * dt_app)
      return pos0 + step, step / dt_app

    pos, vel = slew(value)                                     # POSITION
    if VELOCITY in self.accepted:
      v = jnp.clip(value, -vmax, vmax) if has_v else value
      pos = jnp.where(mode == VELOCITY, pos0 + v * dt_app, pos)
      vel = jnp.where(mode == VELOCITY, v, vel)
    plan = gen.plan
    if TRAJECTORY in self.accepted:
      if cfg.trajectory_acceleration_limit is not None:
        amax = p.trajectory_acceleration_limit / s_abs
        replan = (mode == TRAJECTORY) & (new | (gen.mode != TRAJECTORY))
        fresh = trapezoid_plan(pos0, jnp.clip(vel0, -vmax, vmax), value, vmax, amax, n - 1)
        plan = jax.tree.map(lambda a, b: jnp.where(replan, a, b), fresh, plan)
        t = (n - plan.n0).astype(jnp.float32) * dt_app
        tp_pos, tp_vel = trapezoid_sample(plan, t, amax)
      else:
        tp_pos, tp_vel = slew(value)
      pos = jnp.where(mode == TRAJECTORY, tp_pos, pos)
      vel = jnp.where(mode == TRAJECTORY, tp_vel, vel)
    hold = jnp.where((mode == HOLD) & (gen.mode != HOLD), q, gen.hold)
    pos = jnp.where(mode == HOLD, hold, pos)
    vel = jnp.where(mode == HOLD, 0.0, vel)
    return Generator(pos, vel, jnp.bool_(True), mode, hold, plan)

  def _apply(self, p: Params, s: State, data, ctrl, n, stale):
    """One application instant: returns `(state, ctrl)`."""
    b = self.binding
    q, qd = binding.joint_state(b, data)
    mode, value = self._effective(p, s.held, s.link.received, stale)
    sem = self.semantic
    gen = s.gen
    if sem == 'position':
      gen = self._position_setpoint(p, gen, mode, value, s.held.new, q, n)
      applied = gen.pos
      c = b.gear * applied
    elif sem == 'velocity':
      v = value
      if self.cfg.command_velocity_limit is not None:
        vmax = p.command_velocity_limit / jnp.abs(p.logical_units_per_joint_unit)
        v = jnp.clip(v, -vmax, vmax)
      applied = v
      c = b.gear * v
      gen = gen._replace(mode=mode)
    else:
      applied = value
      c = value / (b.gear * b.gain)
      gen = gen._replace(mode=mode)
    s = s._replace(gen=gen, applied=applied, held=s.held._replace(new=jnp.bool_(False)),
                   stale=stale, timeout_count=s.timeout_count + stale.astype(jnp.int32))
    return s, binding.set_ctrl(ctrl, b, c)

  def closes_loop(self) -> str:
    if self.semantic == 'position':
      return ('position input: it starts by holding the measured joint position and holds it '
              'again on a timeout or a hold command')
    return self.fault_closes_loop()

  def _reset_ctrl(self, p: Params, s: State, data, ctrl):
    """Before the first application instant: hold the current position (position input) or
    apply the safe command (velocity / torque input)."""
    b = self.binding
    q, _ = binding.joint_state(b, data)
    sc = p.logical_units_per_joint_unit
    if self.semantic == 'position':
      s = s._replace(gen=s.gen._replace(pos=q, valid=jnp.bool_(True)))
      applied, c = q, b.gear * q
    elif self.semantic == 'velocity':
      applied = p.safe_command / sc
      c = b.gear * applied
    else:
      applied = p.safe_command * sc
      c = applied / (b.gear * b.gain)
    ctrl = binding.set_ctrl(ctrl, b, c)
    link = actuation.settle(self.link, s.link, ctrl, self._adr)
    return s._replace(applied=applied, link=link), ctrl

  def issued(self, command: MotorCommand) -> jax.Array:
    return (jnp.asarray(command.kind) != NONE) | jnp.asarray(command.encoder_reset, bool)

  def _drive(self, p: Params, s: State, data, ctrl, command: MotorCommand, tick, dues):
    """Tick `tick`, before physics: transport, release, and (at instants) write `ctrl`."""
    command = MotorCommand(jnp.asarray(command.kind, jnp.int32),
                           jnp.asarray(command.value, jnp.float32),
                           jnp.asarray(command.encoder_reset, bool),
                           jnp.asarray(command.encoder_position, jnp.float32))
    issued = self.issued(command)
    link, frac = actuation.continuous_delay(self.link, s.link, p.command_latency_s)
    link = actuation.issue(self.link, link, command, issued, tick, s.streams['command_jitter'],
                     s.streams['command_loss'])
    q, _ = binding.joint_state(self.binding, data)
    link, held = actuation.deliver(self.link, link, s.held, tick,
                             lambda h, c: self._release(p, h, c, q))
    s = s._replace(link=link, held=held)
    due, n = dues['application']
    stale = actuation.timed_out(self.link, link, tick)
    s, ctrl = actuation.at_instants(self.application, due,
                                    lambda st, c: self._apply(p, st, data, c, n, stale), s, ctrl)
    link, ctrl = actuation.mix_ctrl(self.link, s.link, frac, ctrl, self._adr)
    if frac is not None:   # continuous latency: `applied` is the mixed ctrl, joint units
      b, c = self.binding, ctrl[self.binding.ctrladr]
      s = s._replace(applied=c * b.gain * b.gear if self.semantic == 'effort' else c / b.gear)
    return s._replace(link=link), ctrl

  # ------------------------------------------------------------------ feedback

  def feedback_sample(self, p: Params, s: State, data) -> Feedback:
    """The feedback read from the tick's `mjx.Data` (the `Feedback` equations)."""
    b = self.binding
    q, qd = binding.sensed_joint_state(b, data)
    sc = p.logical_units_per_joint_unit
    force = binding.sensed_force(b, data)
    return Feedback((q - s.held.zero) * sc, qd * sc, force * b.gear / sc,
                    p.feedback_current_per_force * force / self.actuator_count,
                    actuation.normalized_output(b, force, sc))

  def truth(self, s: State, data) -> dict:
    """Logical position / velocity, the joint effort MuJoCo applied (qfrc_actuator, after the
    joint's actuatorfrcrange) in logical units, the applied setpoint (or effort) and its
    tracking error, for `truth/<id>/...`."""
    b = self.binding
    sc = s.scale
    q, qd = binding.sensed_joint_state(b, data)
    pos, vel = (q - s.held.zero) * sc, qd * sc
    eff = binding.sensed_effort(b, data) / sc
    if self.semantic == 'position':
      setpoint, tracked = (s.applied - s.held.zero) * sc, pos
    elif self.semantic == 'velocity':
      setpoint, tracked = s.applied * sc, vel
    else:
      setpoint, tracked = s.applied / sc, eff
    return {'position': pos, 'velocity': vel, 'applied_effort': eff, 'setpoint': setpoint,
            'tracking_error': setpoint - tracked, 'timed_out': s.stale, 'joint_position': q,
            **self.fault_truth(s), **self.feedback_truth(s)}

  def describe(self) -> list[str]:
    c = self.cfg
    lines = ['bound actuator:', *('  ' + line for line in self.binding.describe()),
             f'  logical scale {c.logical_units_per_joint_unit:g} logical units per joint unit '
             f'({self.scale_source}); actuator count {self.actuator_count}',
             f'  command semantic: {self.semantic} input; accepted commands: '
             + ', '.join(self.accepted_kinds),
             f'application: {self.application.describe()}',
             self.link.describe(),
             f'feedback: {self.feedback.describe()}; {self.fb_transport.describe()}',
             f'feedback: position, velocity, applied_effort = actuator_force x gear '
             f'{self.binding.gear:g} / s, current = {c.feedback_current_per_force:g} x '
             f'actuator_force / {self.actuator_count}',
             '  normalized_output = ' + (
                 f'actuator_force / forcerange [{self.binding.forcerange[0]:g}, '
                 f'{self.binding.forcerange[1]:g}] (MJCF), signed like applied_effort'
                 if self.binding.forcerange is not None else
                 'NaN: the actuator has no forcerange to normalize by')]
    return lines + self.describe_faults() + self.describe_feedback_faults()


def build(cid: str, raw, ctx: BuildContext, catalog) -> Motor:
  """Validates the config (profiles layered), binds the actuator and the assembly."""
  cfg, fields = base.resolve_config(MotorConfigModel, TYPE, raw, catalog=catalog,
                                    file=ctx.file, path=ctx.path,
                                    forbidden=actuation.FORBIDDEN_MOTOR_FIELDS)
  origin = base.field_origin(fields, ctx)
  given = actuation.set_fields(fields)
  source = logical_scale_source(fields, ctx)
  asm = ctx.assembly
  count = 1
  if asm is not None:
    count = asm.actuator_count
    if asm.logical_scale is not None:
      cfg = cfg.model_copy(update={'logical_units_per_joint_unit': asm.logical_scale})
      fields['logical_units_per_joint_unit'] = dataclasses.replace(
          fields['logical_units_per_joint_unit'], value=asm.logical_scale, layer='assembly',
          source=asm.id, file=asm.file, path=asm.path)
  b = binding.bind_actuator(ctx, 'actuator', cfg.actuator)
  check_compatible(cfg, given, b, origin)
  return Motor(b, accepted_for(cfg, b.semantic), source,
               **motor_feedback.motor_fields(cid, cfg, fields, ctx, origin, count, continuous='',
                                             neutral_feedback=_neutral_feedback()),
               **faulted.build(cfg, (b,), ctx, origin))


def _neutral_feedback() -> Feedback:
  z = host.zeros()
  return Feedback(z, z, z, z, z)


CONFIG_MODEL = MotorConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL, assembly_channels=('actuator',))
