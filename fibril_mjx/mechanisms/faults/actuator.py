"""Actuator faults: the config entries, static plan, per-world Params and State, and the
traced stages that act on what an actuator component writes (SPEC §6.5, where every type is
defined).

An actuator component's `faults:` list holds time windows `[start_s, end_s)` with the sensor
faults' semantics (`apply.window`); `start_s`, `end_s` and `value` are per-world `FaultParams`
(`ID.faults[i].start_s` in a `vary:`). Per bound MuJoCo actuator ("channel"), every tick:
`loss_of_authority` (`λ·F`), `derating` (joint effort clipped to `value` × its limit),
`stuck` (control held), `command_dropout` (commands lost before the transport). `F` is
MuJoCo's affine actuator force at the tick's state and the control that produces the faulted
force is written back (`binding.ctrl_for_force`), so loss of authority and derating need
fixed-gain channels (`<motor>`, `<position>`, `<velocity>`; not `dcmotor`). The fault state is
in the truth trace (`fault_*`, `fault_ctrl`), never in the delivered output.
"""
from __future__ import annotations

import dataclasses
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from fibril_mjx.errors import Strict
from fibril_mjx.mechanisms.faults.apply import window

ACTUATOR_TYPES = ('loss_of_authority', 'stuck', 'command_dropout', 'derating')
FORCE_TYPES = ('loss_of_authority', 'derating')     # act on the channel force
_SCALE_TYPES = FORCE_TYPES                          # value: a scale in [0, 1]


class ActuatorFaultSpec(Strict):
  """One actuator `faults:` entry.

  Attributes:
    type: one of `ACTUATOR_TYPES`.
    start_s: window start (s of episode time); end_s: window end (exclusive), absent = open.
    value: the gain (`loss_of_authority`) or limit scale (`derating`) in [0, 1]; the held
      control of `stuck` (ctrl units, a scalar or one per channel; absent: the control in
      force before the window).
    ramp_s: `loss_of_authority` only: the gain goes linearly from 1 to `value` over it.
  """
  type: Literal[ACTUATOR_TYPES]
  start_s: float = pydantic.Field(ge=0)
  end_s: float | None = pydantic.Field(None, gt=0)
  value: float | tuple[float, ...] | None = None
  ramp_s: float = pydantic.Field(0.0, ge=0)

  @pydantic.model_validator(mode='after')
  def _consistent(self):
    if self.end_s is not None and self.end_s <= self.start_s:
      raise ValueError(f'end_s must be > start_s = {self.start_s:g}')
    if self.type in _SCALE_TYPES:
      if not isinstance(self.value, float):
        raise ValueError(f'a {self.type} fault needs a value: one number in [0, 1] (the '
                         + ('gain' if self.type == 'loss_of_authority' else
                            'scale of the force limit') + ')')
      if not 0.0 <= self.value <= 1.0:
        raise ValueError(f'a {self.type} value must be in [0, 1], got {self.value:g}')
    if self.type == 'command_dropout' and self.value is not None:
      raise ValueError('a command_dropout fault takes no value')
    if self.type != 'loss_of_authority' and self.ramp_s != 0:
      raise ValueError('ramp_s is a loss_of_authority field')
    return self


class ActuatorFaultConfig(Strict):
  """The `faults` config field; an actuator config model inherits it."""
  faults: tuple[ActuatorFaultSpec, ...] = ()


@dataclasses.dataclass(frozen=True)
class ActuatorFaultPlan:
  """Static fault plan of one actuator component.

  Attributes:
    types: fault type per entry; ramp_s: per entry (0: a step).
    has_value: per entry, a `value` was given; value_shapes: shape of each `value` param.
    channels: number of bound MuJoCo actuators the faults act on.
    dt: physics timestep (s).
  """
  types: tuple[str, ...]
  ramp_s: tuple[float, ...]
  has_value: tuple[bool, ...]
  value_shapes: tuple[tuple[int, ...], ...]
  channels: int
  dt: float

  def has(self, *types) -> bool:
    return any(t in types for t in self.types)

  def index(self, *types) -> tuple[int, ...]:
    return tuple(i for i, t in enumerate(self.types) if t in types)

  def describe(self) -> str:
    return 'faults: ' + ', '.join(
        t + (f' (ramp {r:g} s)' if r else '') for t, r in zip(self.types, self.ramp_s))


class ActuatorFaultState(NamedTuple):
  """Per-world actuator fault state.

  Attributes:
    nominal: `(channels,)` the component's own control of each channel (before the faults),
      held between its application instants.
    held: `(n_stuck, channels)` the control each `stuck` entry holds.
    active: `(n_entries,)` bool, each window active at the latest tick.
    authority: `()` the loss-of-authority gain of the latest tick (1: none).
    derating: `()` the force-limit scale of the latest tick (1: none).
    dropped: int32 commands lost to `command_dropout` so far.
    ctrl: `(channels,)` the controls written at the latest tick (after the faults).
  """
  nominal: jax.Array
  held: jax.Array
  active: jax.Array
  authority: jax.Array
  derating: jax.Array
  dropped: jax.Array
  ctrl: jax.Array


def init_state(plan: ActuatorFaultPlan) -> ActuatorFaultState:
  n = len(plan.index('stuck'))
  return ActuatorFaultState(jnp.zeros((plan.channels,), jnp.float32),
                            jnp.zeros((n, plan.channels), jnp.float32),
                            jnp.zeros((len(plan.types),), bool), jnp.float32(1.0),
                            jnp.float32(1.0), jnp.int32(0),
                            jnp.zeros((plan.channels,), jnp.float32))


def windows(plan: ActuatorFaultPlan, fps, tick) -> jax.Array:
  """`(n_entries,)` bool: each entry's window active at `tick`."""
  return jnp.stack([window(fp, tick, plan.dt) for fp in fps])


def gains(plan: ActuatorFaultPlan, fps, on, tick) -> tuple[jax.Array, jax.Array]:
  """`(authority, derating)` of a tick: the products of the active entries' gains (1 when
  none); a ramped loss of authority is `1 + (value − 1)·min(1, (t − start_s)/ramp_s)`.

  Args:
    fps: tuple of `FaultParams`; on: `windows(...)` of the tick.
  """
  t = jnp.asarray(tick, jnp.float32) * plan.dt
  authority, derating = jnp.float32(1.0), jnp.float32(1.0)
  for i, (kind, fp, ramp) in enumerate(zip(plan.types, fps, plan.ramp_s)):
    if kind == 'loss_of_authority':
      g = fp.value
      if ramp > 0:
        g = 1.0 + (fp.value - 1.0) * jnp.clip((t - fp.start_s) / ramp, 0.0, 1.0)
      authority = authority * jnp.where(on[i], g, 1.0)
    elif kind == 'derating':
      derating = derating * jnp.where(on[i], fp.value, 1.0)
  return authority, derating


def dropout(plan: ActuatorFaultPlan, on) -> jax.Array:
  """Whether a `command_dropout` window is active (False without one)."""
  idx = plan.index('command_dropout')
  return jnp.any(on[np.asarray(idx)]) if idx else jnp.bool_(False)


def faulted_forces(force, gear, authority, derating, effort_range):
  """Channel forces `(channels,)` after loss of authority and derating.

  Args:
    force: `(channels,)` the forces the component's controls would produce.
    gear: `(channels,)` static gears (joint effort = Σ force·gear).
    authority, derating: `gains(...)`.
    effort_range: `(lo, hi)` of the joint effort, or None (no derating in the plan).
  """
  force = force * authority
  if effort_range is None:
    return force
  lo, hi = effort_range
  effort = jnp.sum(force * gear)
  limited = jnp.clip(effort, derating * lo, derating * hi)
  ratio = jnp.where(effort != 0, limited / jnp.where(effort != 0, effort, 1.0), 1.0)
  return force * ratio


def stuck(plan: ActuatorFaultPlan, fps, fs: ActuatorFaultState, on, incoming, ctrl):
  """The controls `(channels,)` with the `stuck` entries applied, and their held values.

  Args:
    on: `windows(...)` of this tick; `fs.active` those of the previous tick.
    incoming: `(channels,)` the controls in force before this tick (latched at a window's
      first tick, unless the entry has a value).
    ctrl: `(channels,)` the controls after the other faults.

  Returns:
    `(ctrl, held)`.
  """
  held = fs.held
  for j, i in enumerate(plan.index('stuck')):
    edge = on[i] & ~fs.active[i]
    start = (jnp.broadcast_to(fps[i].value, incoming.shape).astype(incoming.dtype)
             if plan.has_value[i] else incoming)
    held = held.at[j].set(jnp.where(edge, start, held[j]))
    ctrl = jnp.where(on[i], held[j], ctrl)
  return ctrl, held


def host_metrics(truth: dict) -> dict:
  """Per world: the fraction of ticks with a fault window active (`fault_active` in the
  truth trace; nothing without a fault plan)."""
  if 'fault_active' not in truth:
    return {}
  return {'fault_active_fraction': np.mean(np.asarray(truth['fault_active'], bool), axis=1)}
