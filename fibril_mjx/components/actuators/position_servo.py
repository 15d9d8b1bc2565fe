"""`fibril_sim/position_servo` — a hobby / smart position servo (Dynamixel, Feetech class):
its firmware P/PD law, PWM on a supply voltage, a DC motor with back-EMF, a torque limit and
gearbox friction, written as the torque of ONE MuJoCo `<motor>` channel.

A command `(position, kp, kd)` carries the firmware gains in the servo's own units (e.g. the
Dynamixel "Position P Gain" register), so one manifest serves every gain of a bench campaign.
Every physics tick, from the latched command and the joint state `(q, q̇)` of the tick:

  duty   = clip(error_gain · (kp·(p* − q) − kd·q̇), −max_duty, max_duty)
  τ_m    = clip(kt · (duty·supply_voltage_v − kt·q̇) / resistance_ohm, ±torque_limit)
  F      = friction_coulomb + load_friction·|τ_e − τ_m|
           + s(q̇) · (friction_stribeck + load_friction_stribeck·|τ_e − τ_m|)
           + friction_viscous·|q̇|
  s(q̇)   = exp(−|q̇ / stribeck_velocity|^stribeck_exponent)
  τ_stop = M·q̇/dt + τ_m + τ_e
  τ_f    = −sign(τ_stop) · min(|τ_stop|, F)
  ctrl   = (τ_m + τ_f) / gear

(joint side; `τ_e = −qfrc_bias` is the external torque on the joint — gravity, Coriolis —
and `M` the joint's diagonal of the mass matrix, both from the forward of the previous tick,
i.e. one tick old; `dt` the physics timestep). `τ_f` is the friction a stiff gearbox can
supply: the torque that stops the joint within the step when that is within the budget `F`
(sticking), else `F` against the motion — the "friction budget" of the Coulomb/Stribeck/
load-dependent models of actuator-identification work (Coulomb–viscous with a Stribeck
breakaway whose level grows with the torque the gearbox transmits). It is computed here, in
the adapter, so MuJoCo C and MJX integrate the same torque; the MJCF joint should carry no
`frictionloss` / `damping` of its own (they would add to it). With `integrator="Euler"` a
sticking joint stops within one step.

Uncommanded, timed out or disabled (`enable = False`): no motor torque (`τ_m = 0`), the
friction still acts (a back-driven servo). Every numeric field is a per-world parameter, so
`tune` fits any of them (`error_gain`, `supply_voltage_v`, `max_duty`, `torque_constant`,
`resistance_ohm`, `torque_limit`, the friction terms); the joint's zero is the MJCF joint
`ref` (`mjcf: joint:NAME.ref`, the angle the body frame is at when the measured angle reads
0) and the rotor inertia the joint `armature`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import pydantic

from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext
from fibril_mjx.components.actuators import actuation, binding, faulted, motor_feedback
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg, Positive
from fibril_mjx.errors import ConfigError

TYPE = 'fibril_sim/position_servo'
SAMPLE_TYPE = 'fibril_sim/position_servo_feedback/v1'

FORBIDDEN = {
    'kp': 'kp is a field of each servo command (ServoCommand.kp, firmware units, per command)',
    'kd': 'kd is a field of each servo command (ServoCommand.kd, firmware units, per command)',
    'transmission': actuation.FORBIDDEN_MOTOR_FIELDS['transmission'],
}

# the Params fields, in the order of the law (all per world, differentiable)
LAW_FIELDS = ('error_gain', 'supply_voltage_v', 'max_duty', 'torque_constant',
              'resistance_ohm', 'torque_limit', 'friction_coulomb', 'friction_stribeck',
              'stribeck_velocity', 'stribeck_exponent', 'friction_viscous', 'load_friction',
              'load_friction_stribeck')


class PositionServoConfigModel(actuation.MotorTimingConfig):
  """Validated manifest config of `fibril_sim/position_servo` (units: V, A, Ω, N·m, rad)."""
  actuator: str
  error_gain: Positive = 1.0               # duty per (gain unit · rad of error)
  supply_voltage_v: Positive = 12.0
  max_duty: float = pydantic.Field(1.0, gt=0, le=1)
  torque_constant: Positive = 0.1          # N·m/A = V·s/rad (joint side, gear included)
  resistance_ohm: Positive = 1.0
  torque_limit: Positive = math.inf        # N·m at the joint (inf: none)
  friction_coulomb: NonNeg = 0.0           # N·m
  friction_stribeck: NonNeg = 0.0          # N·m added at rest, fading with speed
  stribeck_velocity: Positive = 0.2        # rad/s
  stribeck_exponent: Positive = 2.0
  friction_viscous: NonNeg = 0.0           # N·m·s/rad
  load_friction: NonNeg = 0.0              # N·m of friction per N·m through the gearbox
  load_friction_stribeck: NonNeg = 0.0     # idem, fading with speed like the Stribeck term


class ServoCommand(NamedTuple):
  """A position-servo command (joint side; one world).

  Attributes:
    issued: a command was issued this tick.
    enable: False: torque off (no motor torque) until an enabled command arrives.
    position: goal position p* (rad).
    kp, kd: firmware P and D gains (the servo's register units), finite, ≥ 0.
  """
  issued: jax.Array
  enable: jax.Array
  position: jax.Array
  kp: jax.Array
  kd: jax.Array


def command(position, kp, kd=0.0, enable=True) -> ServoCommand:
  """An issued servo command; array arguments broadcast together (e.g. `(nworld,)`)."""
  arrs = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float32) for x in (position, kp, kd)))
  shape = arrs[0].shape
  return ServoCommand(jnp.ones(shape, bool), jnp.full(shape, enable, bool), *arrs)


class Params(NamedTuple):
  """Per-world parameters (`LAW_FIELDS`, then the feedback current scale), each `()`, then
  the fault entries' `FaultParams`."""
  error_gain: jax.Array
  supply_voltage_v: jax.Array
  max_duty: jax.Array
  torque_constant: jax.Array
  resistance_ohm: jax.Array
  torque_limit: jax.Array
  friction_coulomb: jax.Array
  friction_stribeck: jax.Array
  stribeck_velocity: jax.Array
  stribeck_exponent: jax.Array
  friction_viscous: jax.Array
  load_friction: jax.Array
  load_friction_stribeck: jax.Array
  feedback_current_per_force: jax.Array
  faults: tuple = ()   # the `FaultParams` of the `faults:` entries
  feedback_faults: tuple = ()   # the `FaultParams` of the `feedback_faults:` entries


class Torques(NamedTuple):
  """One tick of the law (joint side, N·m; `duty` in [−1, 1])."""
  duty: jax.Array
  motor: jax.Array
  friction: jax.Array


def motor_torque(p: Params, active, target, kp, kd, q, qd):
  """The firmware law and the motor: `(duty, τ_m)`, each `()`.

  Args:
    p: Params; active: bool, torque on; target: p* (rad); kp, kd: firmware gains;
    q, qd: joint position (rad) and velocity (rad/s).
  """
  duty = jnp.clip(p.error_gain * (kp * (target - q) - kd * qd), -p.max_duty, p.max_duty)
  duty = jnp.where(active, duty, 0.0)
  volts = duty * p.supply_voltage_v
  tau = p.torque_constant * (volts - p.torque_constant * qd) / p.resistance_ohm
  tau = jnp.clip(tau, -p.torque_limit, p.torque_limit)
  return duty, jnp.where(active, tau, 0.0)


def friction_torque(p: Params, tau_m, tau_e, qd, inertia, dt: float):
  """Gearbox friction `τ_f` `()` (N·m): the stopping torque clipped to the friction budget.

  Args:
    tau_m: motor torque; tau_e: external torque on the joint (N·m); qd: joint velocity
      (rad/s); inertia: the joint's mass-matrix diagonal (kg·m²); dt: the step (s).
  """
  x = jnp.abs(qd) / p.stribeck_velocity
  safe = jnp.where(x > 0, x, 1.0)
  # exp(−x^a) with x^a written so that it and its derivatives stay finite at x = 0
  s = jnp.exp(-jnp.where(x > 0, jnp.exp(p.stribeck_exponent * jnp.log(safe)), 0.0))
  gearbox = jnp.abs(tau_e - tau_m)
  budget = (p.friction_coulomb + p.load_friction * gearbox
            + s * (p.friction_stribeck + p.load_friction_stribeck * gearbox)
            + p.friction_viscous * jnp.abs(qd))
  stop = inertia * qd / dt + tau_m + tau_e
  return -jnp.sign(stop) * jnp.minimum(jnp.abs(stop), budget)


class Joint(NamedTuple):
  """The joint as the law reads it at one tick (joint side, each `()`).

  Attributes:
    q, qd: position (rad) and velocity (rad/s).
    tau_e: external torque on the joint, `−qfrc_bias` (N·m).
    inertia: the joint's mass-matrix diagonal (kg·m²).
  """
  q: jax.Array
  qd: jax.Array
  tau_e: jax.Array
  inertia: jax.Array


def servo_torques(p: Params, active, command: ServoCommand, joint: Joint, dt: float
                  ) -> Torques:
  """The whole joint torque of one tick (see the module docstring): `Torques`.

  Args:
    active: bool, torque on; command: the latched command (its `position`, `kp`, `kd`);
    joint: the joint's state; dt: the physics step (s).
  """
  duty, tau_m = motor_torque(p, active, command.position, command.kp, command.kd, joint.q,
                             joint.qd)
  return Torques(duty, tau_m, friction_torque(p, tau_m, joint.tau_e, joint.qd, joint.inertia,
                                              dt))


Feedback = motor_feedback.JointFeedback   # `fibril_sim/position_servo_feedback/v1`


class State(NamedTuple):
  """Per-world state.

  Attributes:
    streams, link, fb_queue, fb_held, feedback_faults: the fields every motor type has
      (`motor_feedback.MotorFields.motor_state` makes them); faults: the actuator's
      `ActuatorFaultState` (None without `faults:`).
    held: the latest accepted command; latched: the command of the latest application instant.
    active: the latest instant latched an enabled, fresh command; stale / timeout_count: the
      watchdog.
    torques: the law's `Torques` of this tick.
  """
  streams: dict
  link: actuation.LinkState
  held: ServoCommand
  latched: ServoCommand
  active: jax.Array
  stale: jax.Array
  timeout_count: jax.Array
  torques: Torques
  fb_queue: tp.QueueState
  fb_held: tp.Delivered
  faults: Any = None
  feedback_faults: Any = None


def joint_inertia(dof: int, madr: int, data) -> jax.Array:
  """The diagonal entry of the mass matrix at dof `dof` `()` (a dense MJX `qM`, or MuJoCo's
  sparse layout at `madr = dof_Madr[dof]`) of an `mjx.Data` (the mass matrix is `M` of its
  backend part)."""
  qm = data._impl.M
  return qm[dof, dof] if qm.ndim == 2 else qm[madr]


@dataclasses.dataclass(frozen=True)
class PositionServo(faulted.FaultedActuator, motor_feedback.MotorFields):
  """A built `fibril_sim/position_servo` (static; `cfg` a `PositionServoConfigModel`)."""
  binding: binding.ActuatorBinding
  madr: int          # the joint's dof_Madr (sparse mass matrix)

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type = Params
  reads_sensors_only = False   # the law reads qfrc_bias and qM of the previous forward
  reads_forward = True         # ... before tick 0 too: the initial state is forwarded for it

  # in a group (`core/groups.py`): binding, mass-matrix address, fault limit per member
  per_member = ('binding', 'madr', 'fault_range')
  labels = ('id', 'fields')
  member_config = ('actuator',)

  accepted_kinds = ('position',)

  def default_params(self) -> Params:
    own = Params._fields[:Params._fields.index('faults')]
    return Params(*(host.array(getattr(self.cfg, f)) for f in own), self.fault_params(),
                  self.feedback_fault_params())

  def fault_effort_range(self, p: Params):
    """`derating` scales the servo's own torque limit (per world)."""
    return -p.torque_limit, p.torque_limit

  def null_command(self) -> ServoCommand:
    z = jnp.float32(0.0)
    return ServoCommand(jnp.bool_(False), jnp.bool_(False), z, z, z)

  def script_command(self, kind: str, value, velocity, extra: dict) -> ServoCommand:
    del kind, velocity
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    return ServoCommand(jnp.bool_(True), jnp.bool_(True), f(value), f(extra.get('kp', 0.0)),
                        f(extra.get('kd', 0.0)))

  def closes_loop(self) -> str:
    return 'its firmware law reads the measured joint position and velocity every tick'

  def init(self, params: Params, world_key) -> State:
    z, zi, f = jnp.float32(0.0), jnp.int32(0), jnp.bool_(False)
    return State(**self.motor_state(world_key, Feedback(z, z, z, z)), held=self.null_command(),
                 latched=self.null_command(), active=f, stale=f, timeout_count=zi,
                 torques=Torques(z, z, z), faults=self.init_faults())

  def _law(self, p: Params, s: State, data, ctrl):
    """`(state, ctrl)` with this tick's torques written to the motor channel."""
    b = self.binding
    q, qd = binding.joint_state(b, data)
    joint = Joint(q, qd, -data.qfrc_bias[b.dofadr], joint_inertia(b.dofadr, self.madr, data))
    t = servo_torques(p, s.active, s.latched, joint, self.application.dt)
    force = (t.motor + t.friction) / b.gear
    ctrl = binding.set_ctrl(ctrl, b, binding.ctrl_for_force(b, force, b.gear * q,
                                                                 b.gear * qd))
    return s._replace(torques=t), ctrl

  def _reset_ctrl(self, p: Params, s: State, data, ctrl):
    """Before the first instant: torque off, friction on."""
    return self._law(p, s, data, ctrl)

  def _drive(self, p: Params, s: State, data, ctrl, command: ServoCommand, tick, dues):
    """Tick `tick`, before physics: transport, release, latch at instants, then the law."""
    s = actuation.latch_gain_commands(self.link, self.application, s, command, tick,
                                      dues['application'][0])
    return self._law(p, s, data, ctrl)

  def feedback_sample(self, p: Params, s: State, data) -> Feedback:
    del s
    return motor_feedback.joint_feedback(self.binding, p.feedback_current_per_force,
                                    self.actuator_count, data)

  def truth(self, s: State, data) -> dict:
    """Joint position / velocity, applied effort, and this tick's duty, motor torque and
    friction torque (joint side)."""
    q, qd = binding.sensed_joint_state(self.binding, data)
    return {'position': q, 'velocity': qd,
            'applied_effort': binding.sensed_effort(self.binding, data),
            'duty': s.torques.duty, 'motor_torque': s.torques.motor,
            'friction_torque': s.torques.friction, 'active': s.active,
            **self.fault_truth(s), **self.feedback_truth(s)}

  def describe(self) -> list[str]:
    c, b = self.cfg, self.binding
    lim = 'none' if math.isinf(c.torque_limit) else f'{c.torque_limit:g} N·m'
    return [f'joint {b.joint}; motor channel {b.name} (ctrl[{b.ctrladr}], gear {b.gear:g})',
            'command semantic: (position, kp, kd) in firmware units, latched at application '
            f'instants ({self.application.describe()}); law every physics tick',
            f'law: duty = clip({c.error_gain:g}·(kp·(p*-q) - kd·qd), ±{c.max_duty:g}); '
            f'τ_m = {c.torque_constant:g}·(duty·{c.supply_voltage_v:g} V - '
            f'{c.torque_constant:g}·qd)/{c.resistance_ohm:g} Ω, limit {lim}',
            f'friction (in the adapter): coulomb {c.friction_coulomb:g}, stribeck '
            f'{c.friction_stribeck:g} (v_s {c.stribeck_velocity:g} rad/s, exponent '
            f'{c.stribeck_exponent:g}), viscous {c.friction_viscous:g}, load '
            f'{c.load_friction:g} / {c.load_friction_stribeck:g} (stribeck)',
            self.link.describe(),
            f'feedback: {self.feedback.describe()}; {self.fb_transport.describe()}',
            *self.describe_faults(), *self.describe_feedback_faults()]


def build(cid: str, raw, ctx: BuildContext, catalog) -> PositionServo:
  """Validates the config and binds the motor channel."""
  cfg, fields = base.resolve_config(PositionServoConfigModel, TYPE, raw, catalog=catalog,
                                    file=ctx.file, path=ctx.path, forbidden=FORBIDDEN)
  origin = base.field_origin(fields, ctx)
  asm = ctx.assembly
  if asm is not None and asm.logical_scale is not None:
    base.check(False, asm.file, f'{asm.path}.transmission.type',
               f'{TYPE} commands are joint-side and have no logical scale; bind it with a '
               'gear_rotary transmission', asm.type)
  b = binding.bind_actuator(ctx, 'actuator', cfg.actuator)
  if b.kind != 'motor':
    raise ConfigError(*origin('actuator'), f'must name a <motor> actuator (the servo writes '
                      f'its torque); {b.name!r} is {b.transmission_input}', b.name)
  if b.ctrlrange is not None or b.forcerange is not None or b.joint_frcrange is not None:
    raise ConfigError(*origin('actuator'), f'{b.name!r} (or its joint) is ctrl-, force- or '
                      'actuatorfrc-limited; the servo limits its torque itself: use '
                      'torque_limit', b.name)
  madr = int(ctx.model.dof_Madr[b.dofadr])
  limit = None if math.isinf(cfg.torque_limit) else (-cfg.torque_limit, cfg.torque_limit)
  return PositionServo(b, madr, **motor_feedback.motor_fields(
                           cid, cfg, fields, ctx, origin, asm.actuator_count if asm else 1,
                           neutral_feedback=motor_feedback.neutral_joint_feedback()),
                       **faulted.build(cfg, (b,), ctx, origin, limit=limit, limit_rule=(
                           'the servo limits its torque itself and torque_limit is unset')))


CONFIG_MODEL = PositionServoConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
