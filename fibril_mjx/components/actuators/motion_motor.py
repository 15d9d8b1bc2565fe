"""`fibril_sim/motion_motor` — impedance-style command onto three MuJoCo channels (SPEC §6.3).

One command `(position, velocity, kp, kd, effort_ff)` (RobStride "operation" / MIT-like
packet; joint-side units) drives three actuators on one 1-DoF joint: a unit-P position
channel, a unit-D velocity channel and a feedforward motor channel (MJCF classes
`fibril_sim_hw_robstride_operation_{position,velocity,feedforward}`).

Two cadences. Packets: a command goes through the command transport (latency, jitter, loss)
into the held value, and at each application instant (the packet cadence, e.g. the 5 ms CAN
period) the held command is latched — or, uncommanded / timed out / disabled, the axis is
latched inactive. The law: the device runs its impedance loop far faster than the physics
step, so at EVERY physics tick the component computes, from the current joint state and the
latched command, the equivalent setpoints for which MuJoCo produces

  qfrc_actuator = kp·(p* − q) + kd·(v* − q̇) + effort_ff      (clamped by the joint's
                                                              actuatorfrcrange)

P term through the P channel, D term through the D channel, feedforward through the motor
channel (each channel's force is its term divided by the channel gear). The unit channels'
own stiffness and damping therefore never show between packets. `kp`, `kd` must be finite and
≥ 0 (any non-finite field also rejects the command); a rejected command is counted and never
applied. Inactive (uncommanded, timed out or disabled, `enable = False`): the references are
the current position and velocity at every tick and the feedforward is zero, so no force is
added.

The force is exact at every tick. With MuJoCo's implicit integrators (`implicit`,
`implicitfast`) the unit D channel, a velocity actuator at constant ctrl within the step, also
enters the implicit velocity update with `kv·gear²`: the integrated damping then differs from
`kd` by a dt-order amount; `integrator="Euler"` integrates the law as given.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mujoco

from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext
from fibril_mjx.components.actuators import actuation, binding, faulted, motor_feedback
from fibril_mjx.components import base
from fibril_mjx.errors import ConfigError, did_you_mean

TYPE = 'fibril_sim/motion_motor'
SAMPLE_TYPE = 'fibril_sim/motion_motor_feedback/v1'
CHANNELS = (('position_actuator', 'position'), ('velocity_actuator', 'velocity'),
            ('feedforward_actuator', 'motor'))

FORBIDDEN = {
    **actuation.FORBIDDEN_MOTOR_FIELDS,
    'kp': 'kp is a field of each motion command (MotionCommand.kp, per packet); the unit P '
          'channel is an MJCF actuator (class fibril_sim_hw_robstride_operation_position)',
    'kd': 'kd is a field of each motion command (MotionCommand.kd, per packet); the unit D '
          'channel is an MJCF actuator (class fibril_sim_hw_robstride_operation_velocity)',
}


class MotionMotorConfigModel(actuation.MotorTimingConfig):
  """Validated manifest config of `fibril_sim/motion_motor` (SPEC §6.3)."""
  joint: str
  position_actuator: str
  velocity_actuator: str
  feedforward_actuator: str


class MotionCommand(NamedTuple):
  """`MotorMotionCommand` (joint-side units; one world).

  Attributes:
    issued: a command was issued this tick.
    enable: False disables the axis (no added force) until an enabled command arrives.
    position, velocity: references p*, v* (joint units).
    kp, kd: gains (joint effort per joint unit / per joint unit/s), finite, ≥ 0.
    effort_ff: joint-side feedforward effort.
  """
  issued: jax.Array
  enable: jax.Array
  position: jax.Array
  velocity: jax.Array
  kp: jax.Array
  kd: jax.Array
  effort_ff: jax.Array


def command(position, velocity=0.0, kp=0.0, kd=0.0, effort_ff=0.0, enable=True
            ) -> MotionCommand:
  """An issued motion command; array arguments broadcast together (e.g. `(nworld,)`)."""
  arrs = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float32)
                                for x in (position, velocity, kp, kd, effort_ff)))
  shape = arrs[0].shape
  return MotionCommand(jnp.ones(shape, bool), jnp.full(shape, enable, bool), *arrs)


class Params(NamedTuple):
  feedback_current_per_force: jax.Array
  faults: tuple = ()   # the `FaultParams` of the `faults:` entries
  feedback_faults: tuple = ()   # the `FaultParams` of the `feedback_faults:` entries


Feedback = motor_feedback.JointFeedback   # `fibril_sim/motion_motor_feedback/v1`


class State(NamedTuple):
  """Per-world state.

  Attributes:
    streams, link, fb_queue, fb_held, feedback_faults: the fields every motor type has
      (`motor_feedback.MotorFields.motor_state` makes them); faults: the actuator's
      `ActuatorFaultState` (None without `faults:`).
    held: the latest accepted command.
    latched: the command latched at the latest application instant (the law's command).
    active: the latest instant latched the held command (received, fresh, enabled).
    stale: the latest instant found it timed out; timeout_count counts such instants.
    law: `kp(p*−q) + kd(v*−q̇) + ff` of this tick (before actuatorfrcrange), joint.
    reference: p* of this tick (the joint position when inactive).
  """
  streams: dict
  link: actuation.LinkState
  held: MotionCommand
  latched: MotionCommand
  active: jax.Array
  stale: jax.Array
  timeout_count: jax.Array
  law: jax.Array
  reference: jax.Array
  fb_queue: tp.QueueState
  fb_held: tp.Delivered
  faults: Any = None
  feedback_faults: Any = None


@dataclasses.dataclass(frozen=True)
class MotionMotor(faulted.FaultedActuator, motor_feedback.MotorFields):
  """A built `fibril_sim/motion_motor` (static; `cfg` a `MotionMotorConfigModel`, the common
  fields of `motor_feedback.MotorFields`)."""
  channels: tuple  # (P, D, FF) ActuatorBindings
  gear: float

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type = Params

  # in a group (`core/groups.py`): channels, gear and fault limit per member; id, names label
  per_member = ('channels', 'gear', 'fault_range')
  labels = ('id', 'fields')
  member_config = ('joint', 'position_actuator', 'velocity_actuator', 'feedforward_actuator')

  @property
  def bindings(self) -> tuple:
    return self.channels

  accepted_kinds = ('motion',)

  def default_params(self) -> Params:
    return Params(host.array(self.cfg.feedback_current_per_force), self.fault_params(),
                  self.feedback_fault_params())

  def null_command(self) -> MotionCommand:
    z = jnp.float32(0.0)
    return MotionCommand(jnp.bool_(False), jnp.bool_(False), z, z, z, z, z)

  def script_command(self, kind: str, value, velocity, extra: dict) -> MotionCommand:
    del kind
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    return MotionCommand(jnp.bool_(True), jnp.bool_(True), f(value), f(velocity),
                         f(extra.get('kp', 0.0)), f(extra.get('kd', 0.0)),
                         f(extra.get('effort_ff', 0.0)))

  def init(self, params: Params, world_key) -> State:
    z, zi, f = jnp.float32(0.0), jnp.int32(0), jnp.bool_(False)
    return State(**self.motor_state(world_key, Feedback(z, z, z, z)), held=self.null_command(),
                 latched=self.null_command(), active=f, stale=f, timeout_count=zi, law=z,
                 reference=z, faults=self.init_faults())

  def _ctrl(self, ctrl, q, qd, f_p, f_d, ff):
    """Writes the three channels so that they produce the joint efforts f_p, f_d, ff now."""
    for b, f in zip(self.channels, (f_p, f_d, ff)):
      ctrl = binding.set_ctrl(ctrl, b, binding.ctrl_for_force(b, f / b.gear, b.gear * q, b.gear * qd))
    return ctrl

  def closes_loop(self) -> str:
    return 'its PD law reads the measured joint position and velocity every application'

  def _reset_ctrl(self, p: Params, s: State, data, ctrl):
    """Before the first instant: references at the current state, no added force."""
    q, qd = binding.joint_state(self.channels[0], data)
    z = jnp.zeros_like(q)
    return s._replace(reference=q), self._ctrl(ctrl, q, qd, z, z, z)

  def _drive(self, p: Params, s: State, data, ctrl, command: MotionCommand, tick, dues):
    """Tick `tick`, before physics: transport, release, and (at instants) write the channels."""
    s = actuation.latch_gain_commands(self.link, self.application, s, command, tick,
                                      dues['application'][0])
    # The law, every physics tick, from the current joint state and the latched command.
    q, qd = binding.joint_state(self.channels[0], data)
    c, active = s.latched, s.active
    f_p = jnp.where(active, c.kp * (c.position - q), 0.0)
    f_d = jnp.where(active, c.kd * (c.velocity - qd), 0.0)
    ff = jnp.where(active, c.effort_ff, 0.0)
    s = s._replace(law=f_p + f_d + ff, reference=jnp.where(active, c.position, q))
    return s, self._ctrl(ctrl, q, qd, f_p, f_d, ff)

  def feedback_sample(self, p: Params, s: State, data) -> Feedback:
    del s
    return motor_feedback.joint_feedback(self.channels[0], p.feedback_current_per_force,
                                    self.actuator_count, data)

  def truth(self, s: State, data) -> dict:
    """Joint position / velocity, applied joint effort, the reference and commanded law of the
    latest tick, and the position tracking error while active."""
    b = self.channels[0]
    q, qd = binding.sensed_joint_state(b, data)
    return {'position': q, 'velocity': qd, 'applied_effort': binding.sensed_effort(b, data),
            'reference': s.reference, 'commanded_effort': s.law, 'active': s.active,
            'tracking_error': jnp.where(s.active, s.reference - q, 0.0),
            **self.fault_truth(s), **self.feedback_truth(s)}

  def describe(self) -> list[str]:
    c = self.cfg
    lines = [f'joint {c.joint}; resolved gear {self.gear:g} in all three channels; actuator '
             f'count {self.actuator_count}',
             'command semantic: motion (position, velocity, kp, kd, effort_ff; joint-side) -> '
             'qfrc = kp(p*-q) + kd(v*-qd) + ff via equivalent setpoints',
             f'cadence: packets latched at application instants '
             f'({self.application.describe()}); law kp(p*-q) + kd(v*-qd) + ff evaluated every '
             f'physics tick (dt {self.application.dt:g} s) from the latched packet and the '
             'current joint state',
             'bound actuators:']
    for b in self.channels:
      lines += ['  ' + line for line in b.describe()]
    lines += [f'application: {self.application.describe()}', self.link.describe(),
              f'feedback: {self.feedback.describe()}; {self.fb_transport.describe()}',
              f'feedback: position, velocity, applied_effort = qfrc_actuator, current = '
              f'{c.feedback_current_per_force:g} x qfrc_actuator / {self.gear:g} / '
              f'{self.actuator_count}']
    return lines + self.describe_faults() + self.describe_feedback_faults()


def build(cid: str, raw, ctx: BuildContext, catalog) -> MotionMotor:
  """Validates the config and binds the three channels and the joint."""
  cfg, fields = base.resolve_config(MotionMotorConfigModel, TYPE, raw, catalog=catalog,
                                    file=ctx.file, path=ctx.path, forbidden=FORBIDDEN)
  origin = base.field_origin(fields, ctx)
  m = ctx.model
  asm = ctx.assembly
  if asm is not None and asm.logical_scale is not None:
    base.check(False, asm.file, f'{asm.path}.transmission.type',
               f'{TYPE} commands are joint-side and have no logical scale; bind it with a '
               'gear_rotary transmission', asm.type)
  jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, cfg.joint)
  if jid < 0:
    names = [m.joint(j).name for j in range(m.njnt)]
    raise ConfigError(*origin('joint'), 'no MuJoCo joint of that name in the compiled model'
                      + did_you_mean(cfg.joint, names), cfg.joint)
  channels = []
  for field, kind in CHANNELS:
    b = binding.bind_actuator(ctx, field, getattr(cfg, field))
    where = origin(field)
    if b.kind != kind:
      raise ConfigError(*where, f'must name a <{kind}> actuator (class '
                        f'fibril_sim_hw_robstride_operation_'
                        f'{"feedforward" if kind == "motor" else kind}); {b.name!r} is '
                        f'{b.transmission_input}', b.name)
    if b.joint != cfg.joint:
      raise ConfigError(*where, f'{b.name!r} drives joint {b.joint!r}; all three channels must '
                        f'drive joint {cfg.joint!r}', b.name)
    if b.ctrlrange is not None or b.forcerange is not None:
      raise ConfigError(*where, f'{b.name!r} is ctrl- or force-limited; the equivalent '
                        'setpoints need unlimited channels: limit the summed torque with the '
                        f"joint's actuatorfrcrange", b.name)
    if any(b.name == c.name for c in channels):
      raise ConfigError(*where, 'the three channels must be three different actuators', b.name)
    channels.append(b)
  gears = {b.gear for b in channels}
  if len(gears) != 1:
    raise ConfigError(*origin('feedforward_actuator'),
                      'the three channels have different gears '
                      f'({", ".join(f"{b.name}: {b.gear:g}" for b in channels)}); declare the '
                      'transmission once in an assemblies entry', cfg.feedforward_actuator)
  return MotionMotor(tuple(channels), gears.pop(),
                     **motor_feedback.motor_fields(
                         cid, cfg, fields, ctx, origin, asm.actuator_count if asm else 1,
                         neutral_feedback=motor_feedback.neutral_joint_feedback()),
                     **faulted.build(cfg, tuple(channels), ctx, origin))


CONFIG_MODEL = MotionMotorConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL,
                  assembly_channels=tuple(field for field, _ in CHANNELS))
