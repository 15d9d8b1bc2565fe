"""`fibril_sim/motor` config: the validated manifest fields, the command kinds each bound
actuator input accepts, and the construction errors for conversions it cannot honour (the
module docstring of `motor.py` explains the coordinates and kinds)."""

from __future__ import annotations

from typing import Optional

import pydantic

from fibril_mjx.components import base
from fibril_mjx.components.actuators import actuation, binding
from fibril_mjx.components.base import Positive

KINDS = ('none', 'position', 'velocity', 'effort', 'duty', 'trajectory')
NONE, POSITION, VELOCITY, EFFORT, DUTY, TRAJECTORY = range(6)
HOLD = 6   # internal mode: hold a captured position


class MotorConfigModel(actuation.MotorTimingConfig):
  """Validated manifest config of `fibril_sim/motor` (SPEC §6.2 field list)."""
  actuator: str
  logical_units_per_joint_unit: float = 1.0
  command_velocity_limit: Optional[Positive] = None
  trajectory_acceleration_limit: Optional[Positive] = None
  duty_velocity_scale: Optional[Positive] = None
  duty_effort_scale: Optional[Positive] = None
  zero_duty_hold: bool = False
  hold_when_uncommanded: bool = False
  safe_command: float = 0.0

  @pydantic.field_validator('logical_units_per_joint_unit')
  @classmethod
  def _scale(cls, v):
    if v == 0:
      raise ValueError('must be finite and non-zero')
    return v


def check_compatible(cfg: MotorConfigModel, given: set, b: binding.ActuatorBinding, origin):
  """Construction errors for conversions the bound actuator cannot honour."""
  sem = b.semantic
  what = f'the bound actuator {b.name!r} ({b.transmission_input}) takes ' + (
      f'a {sem} setpoint' if sem != 'effort' else 'an effort command')

  def bad(field, why):
    base.check(False, *origin(field), f'{what}: {why}', getattr(cfg, field))

  if sem in ('position', 'velocity') and 'duty_effort_scale' in given:
    bad('duty_effort_scale', 'a duty command can become a velocity setpoint '
        '(duty_velocity_scale), not an effort')
  if sem == 'effort':
    if 'duty_velocity_scale' in given:
      bad('duty_velocity_scale', 'a duty command can become an effort (duty_effort_scale), '
          'not a velocity setpoint')
    if 'command_velocity_limit' in given:
      bad('command_velocity_limit', 'there is no position or velocity setpoint to limit')
  if sem != 'position':
    if 'trajectory_acceleration_limit' in given:
      bad('trajectory_acceleration_limit', 'trajectory commands generate a position setpoint '
          'and need a position input (<position> or dcmotor input="pos")')
    for f in ('zero_duty_hold', 'hold_when_uncommanded'):
      if getattr(cfg, f):
        bad(f, 'holding the current position needs a position input (<position> or dcmotor '
            'input="pos")')
  if cfg.trajectory_acceleration_limit is not None and cfg.command_velocity_limit is None:
    base.check(False, *origin('trajectory_acceleration_limit'),
               'requires command_velocity_limit (a trapezoidal trajectory needs both limits)',
               cfg.trajectory_acceleration_limit)
  if cfg.zero_duty_hold and cfg.duty_velocity_scale is None:
    base.check(False, *origin('zero_duty_hold'), 'requires duty_velocity_scale (it changes how '
               'duty commands are converted)', cfg.zero_duty_hold)


def accepted_for(cfg: MotorConfigModel, semantic: str) -> tuple[int, ...]:
  if semantic == 'position':
    k = [POSITION, VELOCITY]
    if cfg.command_velocity_limit is not None:
      k.append(TRAJECTORY)
    if cfg.duty_velocity_scale is not None:
      k.append(DUTY)
  elif semantic == 'velocity':
    k = [VELOCITY] + ([DUTY] if cfg.duty_velocity_scale is not None else [])
  else:
    k = [EFFORT] + ([DUTY] if cfg.duty_effort_scale is not None else [])
  return tuple(sorted(k))


def logical_scale_source(fields, ctx) -> str:
  """Where the logical scale comes from: a wheel/pulley assembly (radius) or the config layers;
  never both (construction error)."""
  asm = ctx.assembly
  fv = fields.get('logical_units_per_joint_unit')
  if asm is None or asm.logical_scale is None:
    src = 'default' if fv is None or fv.layer == 'default' else (
        f'{fv.layer} {fv.source}' if fv.layer != 'config' else 'config')
    return src
  if fv is not None and fv.layer != 'default':
    base.check(False, fv.file, fv.path,
               f'already derived from {asm.path} ({asm.type} radius {asm.radius:g} -> '
               f'{asm.logical_scale:g} logical units per joint unit); a scale is defined in '
               'one place: remove it here', fv.value)
  return f'from {asm.path}: {asm.type} radius {asm.radius:g}'
