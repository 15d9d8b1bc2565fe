"""The feedback and the fields every motor-type component shares (`fibril_sim/motor`,
`fibril_sim/motion_motor`, `fibril_sim/position_servo`; SPEC §6.2, §6.3): its joint read after
the tick's forward (`joint_feedback`), delivered through the one sensing cycle
(`fibril_mjx.mechanisms.sensing`, SPEC §4) with the names of `sensing.FEEDBACK`
(`FeedbackOutput`), and the timing fields `actuation.build_timing` makes (`MotorFields`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax

from fibril_mjx.components import base
from fibril_mjx.components.actuators import binding
from fibril_mjx.components.actuators import actuation
from fibril_mjx.components.actuators.actuation import (MOTOR_SOURCES, CommandLink,
                                                        ContinuousLatencyParam, build_timing,
                                                        set_fields)
from fibril_mjx.core import protocol
from fibril_mjx.mechanisms import rng
from fibril_mjx.mechanisms import sensing
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.mechanisms.schedule import Schedule


class JointFeedback(NamedTuple):
  """The feedback of a joint-side motor type (`fibril_sim/motion_motor_feedback/v1`,
  `fibril_sim/position_servo_feedback/v1`; joint units).

  Attributes:
    position, velocity: joint position / velocity.
    applied_effort: the actuator force on the joint (`qfrc_actuator`, after the joint's
      actuatorfrcrange; the sum of every actuator on the joint).
    current: `feedback_current_per_force × qfrc_actuator / gear / actuator_count` (per motor,
      from the motor-side force).
  """
  position: jax.Array
  velocity: jax.Array
  applied_effort: jax.Array
  current: jax.Array


def joint_feedback(b, current_per_force, actuator_count, data) -> JointFeedback:
  """`JointFeedback` of the joint that binding `b` drives, after the tick's forward.

  Args:
    b: an `ActuatorBinding` on the joint (its `gear` is the motor-to-joint ratio).
    current_per_force: `feedback_current_per_force` (per world); actuator_count: motors on
      the joint.
  """
  q, qd = binding.sensed_joint_state(b, data)
  eff = binding.sensed_effort(b, data)
  return JointFeedback(q, qd, eff, current_per_force * eff / b.gear / actuator_count)


class FeedbackOutput(base.ComponentBase):
  """Mixin of motor-type components: feedback through the sensing cycle, the delivered
  feedback as the output, and the status counting command loss / overflow / rejections,
  timeout instants and feedback loss / overflow (state fields `fb_held`, `fb_queue`, `link`,
  `timeout_count`, streams `feedback_jitter`, `feedback_loss`).

  A type gives `feedback_sample(p, s, data) -> sample` (a NamedTuple): its feedback read from
  the `mjx.Data` of the tick.
  """
  roles = frozenset({protocol.ACTUATOR, protocol.SENSOR})

  @property
  def feedback_cycle(self) -> sensing.Cycle:
    """The feedback's sensing cycle: acquire `feedback_sample` at the feedback instants, send
    it through `fb_transport`."""
    return sensing.Cycle(self.fb_transport, self.feedback.dt, self._acquire_feedback,
                         slots=sensing.FEEDBACK, every_tick=self.feedback.every_tick)

  def _acquire_feedback(self, p, s, data, tick, n):
    del tick, n
    return s, self.feedback_sample(p, s, data)

  def sense(self, p, s, data, tick, dues, env):
    """Tick `tick`, after physics: `sensing.sense` of the feedback cycle."""
    return sensing.sense(self.feedback_cycle, p, s, data, tick, dues, env)

  @property
  def schedules(self) -> dict:
    """Commands applied before physics (`application`), feedback acquired after it."""
    return {'application': self.application, 'feedback': self.feedback}

  def output(self, s) -> tp.Delivered:
    return s.fb_held

  def status(self, s) -> dict:
    return {'command_lost': s.link.queue.lost, 'command_overflow': s.link.queue.overflow,
            'command_rejected': s.link.rejected, 'timeout_instants': s.timeout_count,
            'feedback_lost': s.fb_queue.lost, 'feedback_overflow': s.fb_queue.overflow}


@dataclasses.dataclass(frozen=True, kw_only=True)
class MotorFields(ContinuousLatencyParam, FeedbackOutput):
  """`FeedbackOutput` with the static fields of a motor-type component declared once,
  keyword-only (`motor_fields` builds them): `id`, `cfg`, the `application` and `feedback`
  schedules, the command `link`, the `fb_transport`, `actuator_count`, and `fields` (plan
  metadata, not compared). A subclass declares only its own fields, which stay positional."""
  reads_sensors_only = True
  id: str
  cfg: Any
  application: Schedule
  feedback: Schedule
  link: CommandLink
  fb_transport: tp.Transport
  actuator_count: int
  fields: tuple = dataclasses.field(compare=False)

  def motor_state(self, world_key, neutral_feedback) -> dict:
    """The State fields every motor type starts with, by name: `streams` (the keys of
    `MOTOR_SOURCES`), the command `link`, the feedback queue `fb_queue` and the delivered
    `fb_held` (holding `neutral_feedback` before the first delivery)."""
    fb_queue, fb_held = tp.init(self.fb_transport, neutral_feedback)
    return dict(streams={n: rng.stream_key(world_key, self.id, n) for n in MOTOR_SOURCES},
                link=actuation.init(self.link, self.null_command()), fb_queue=fb_queue, fb_held=fb_held)


def motor_fields(cid: str, cfg, fields: dict, ctx, origin, actuator_count: int, **timing
                 ) -> dict:
  """The `MotorFields` of a validated config (`build_timing`, `timing` its keywords), by
  keyword."""
  application, feedback, fb_transport, link = build_timing(cfg, ctx, origin,
                                                           set_fields(fields), **timing)
  return dict(id=cid, cfg=cfg, application=application, feedback=feedback, link=link,
              fb_transport=fb_transport, actuator_count=actuator_count,
              fields=tuple(fields.items()))
