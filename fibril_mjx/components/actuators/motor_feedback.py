"""The feedback and the fields every motor-type component shares (`fibril_sim/motor`,
`fibril_sim/motion_motor`, `fibril_sim/position_servo`; SPEC §6.2, §6.3): its joint read after
the tick's forward (`joint_feedback`), delivered through the one sensing cycle
(`fibril_mjx.mechanisms.sensing`, SPEC §4) with the names of `sensing.FEEDBACK`
(`FeedbackOutput`), and the timing fields `actuation.build_timing` makes (`MotorFields`).

The feedback's faults are a sensor's (`fibril_mjx.mechanisms.faults`), declared as
`feedback_faults:` entries (with `feedback_invalid_after_missed`,
`feedback_recovery_samples`) and run by the same cycle at the feedback instants: data
faults on the feedback sample's fields (default: `position`, the first), dropout, stale packets,
resets (the feedback stops; the component's own state is kept), invalid status. They are
Params and State field `feedback_faults` (`FaultParams` per entry: `ID.feedback_faults[i].start_s`,
`.end_s`, `.value` in a `vary:`), beside the actuator faults of `faults:`; without entries
(`feedback_fault_plan` None) neither is there and no fault code is in the graph. The health of
the feedback is `truth/<id>/feedback_health` (the feedback sample has no health field).
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
from fibril_mjx.mechanisms import faults, host, rng
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


def neutral_joint_feedback() -> JointFeedback:
  """The `JointFeedback` held before the first delivery (zeros)."""
  z = host.zeros()
  return JointFeedback(z, z, z, z)


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
  `timeout_count`, streams `feedback_jitter`, `feedback_loss`), and the feedback's faults
  (`feedback_fault_plan`; Params and State field `feedback_faults` where it is not None).

  A type gives `feedback_sample(p, s, data) -> sample` (a NamedTuple): its feedback read from
  the `mjx.Data` of the tick.
  """
  roles = frozenset({protocol.ACTUATOR, protocol.SENSOR})
  feedback_fault_plan = None   # the static `faults.FaultPlan` of `feedback_faults:`, or None

  @property
  def feedback_cycle(self) -> sensing.Cycle:
    """The feedback's sensing cycle: acquire `feedback_sample` at the feedback instants, apply
    the feedback faults, send it through `fb_transport`."""
    return sensing.Cycle(self.fb_transport, self.feedback.dt, self._acquire_feedback,
                         self.feedback_fault_plan, slots=sensing.FEEDBACK,
                         every_tick=self.feedback.every_tick)

  def feedback_fault_params(self) -> tuple:
    """The `feedback_faults:` entries' per-world `FaultParams` (float32), `()` without."""
    if self.feedback_fault_plan is None:
      return ()
    return faults.default_params(self.cfg.feedback_fault_config())

  def field_path(self, field: str):
    """`feedback_faults[i].start_s`, `.end_s`, `.value`: the Params leaf
    `('feedback_faults', i, name)` (`faults.param_path`); other fields: the type's."""
    if faults.is_path(field, sensing.FEEDBACK.faults):
      return faults.param_path(self.feedback_fault_plan, field, f'{self.type} {self.id!r}',
                               sensing.FEEDBACK.faults)
    return super().field_path(field)

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
    """Command and feedback counters; with feedback faults, the feedback acquisitions a
    dropout or reset window held back (`feedback_fault_dropped`) and the resets applied."""
    out = {'command_lost': s.link.queue.lost, 'command_overflow': s.link.queue.overflow,
           'command_rejected': s.link.rejected, 'timeout_instants': s.timeout_count,
           'feedback_lost': s.fb_queue.lost, 'feedback_overflow': s.fb_queue.overflow}
    if self.feedback_fault_plan is not None:
      out.update(feedback_fault_dropped=s.feedback_faults.dropped,
                 feedback_resets=s.feedback_faults.resets)
    return out

  def feedback_truth(self, s) -> dict:
    """`feedback_health` (int32, `faults.HEALTHY` ...) with feedback faults, else nothing."""
    if self.feedback_fault_plan is None:
      return {}
    return {'feedback_health': s.feedback_faults.health}

  def describe_feedback_faults(self) -> list[str]:
    plan = self.feedback_fault_plan
    return [] if plan is None else ['feedback ' + plan.describe()]


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
  feedback_fault_plan: faults.FaultPlan | None = None

  def motor_state(self, world_key, neutral_feedback) -> dict:
    """The State fields every motor type starts with, by name: `streams` (the keys of
    `MOTOR_SOURCES`), the command `link`, the feedback queue `fb_queue` and the delivered
    `fb_held` (holding `neutral_feedback` before the first delivery), and the feedback's
    `feedback_faults` state (None without a plan)."""
    fb_queue, fb_held = tp.init(self.fb_transport, neutral_feedback)
    plan = self.feedback_fault_plan
    return dict(streams={n: rng.stream_key(world_key, self.id, n) for n in MOTOR_SOURCES},
                link=actuation.init(self.link, self.null_command()), fb_queue=fb_queue,
                fb_held=fb_held,
                feedback_faults=None if plan is None else faults.init_state(plan,
                                                                            neutral_feedback))


def motor_fields(cid: str, cfg, fields: dict, ctx, origin, actuator_count: int, *,
                 neutral_feedback, **timing) -> dict:
  """The `MotorFields` of a validated config (`build_timing`, `timing` its keywords), by
  keyword; the feedback fault plan of its `feedback_faults:` (None without entries),
  validated against `neutral_feedback` (a feedback sample: field names, shapes, dtypes).

  Raises:
    ConfigErrors: at `feedback_faults[i]...` (file, path, value, rule) for each bad entry.
  """
  application, feedback, fb_transport, link = build_timing(cfg, ctx, origin,
                                                           set_fields(fields), **timing)
  plan = None
  if cfg.feedback_faults:
    name = sensing.FEEDBACK.faults
    plan = faults.build_plan(cfg.feedback_fault_config(), neutral_feedback, (),
                             origin=lambda f: origin(name if f == 'faults' else f))
  return dict(id=cid, cfg=cfg, application=application, feedback=feedback, link=link,
              fb_transport=fb_transport, actuator_count=actuator_count,
              fields=tuple(fields.items()), feedback_fault_plan=plan)
