"""Actuator faults on every actuator component (SPEC §6.5): the mixin that runs the fault
stages of `fibril_mjx.mechanisms.faults.actuator` around a component's own command path.

A component opts in by deriving from `FaultedActuator` (first, so its methods wrap the
component's), naming its command path `_drive` and its pre-application control `_reset_ctrl`,
adding `faults: tuple = ()` to its Params and `faults: Any = None` to its State, and merging
`fault_truth` / `fault_status` into its truth and status. Without `faults:` entries
(`fault_plan` None) `actuate` is `_drive` itself: nothing enters the traced graph, and Params
and State carry no fault leaves.

Per tick with a plan: a command issued inside a `command_dropout` window becomes the
component's null command (before the transport); the channels' controls are reset to the
component's own (`nominal`, held between its application instants), the component drives
them, and its new controls are kept as `nominal`; inside a loss-of-authority or derating
window the controls are rewritten for the faulted forces; a `stuck` window holds them.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.components.actuators import binding
from fibril_mjx.errors import ConfigError, ConfigErrors
from fibril_mjx.mechanisms import faults
from fibril_mjx.mechanisms.faults import actuator as fa

AFFINE = ('motor', 'position', 'velocity')


@dataclasses.dataclass(frozen=True, kw_only=True)
class FaultedActuator:
  """Mixin of an actuator component with `faults:` (see the module docstring).

  Attributes:
    fault_plan: the static `ActuatorFaultPlan`, or None (no fault code in the graph).
    fault_range: `(lo, hi)` joint-effort limit that `derating` scales (None: none in the plan,
      or the component's own per-world limit, `fault_effort_range`).
  """
  fault_plan: fa.ActuatorFaultPlan | None = None
  fault_range: tuple[float, float] | None = None
  # `reset_ctrl` / `actuate` read the joint state `qpos` / `qvel` only (`binding.joint_state`):
  # the initial state needs no forward before tick 0 for them (`Built.forward_before_tick0`)
  reads_forward = False

  @property
  def bindings(self) -> tuple:
    """The bound MuJoCo actuators (`binding.ActuatorBinding`s) in channel order: the
    component's one `binding` (a type with several channels overrides it)."""
    return (self.binding,)

  # ------------------------------------------------------------------ params
  # The paths `faults[i].start_s`, `.end_s`, `.value` are resolved for every component, sensor
  # or actuator, by `fibril_mjx.components.base` (`faults.param_path` of `fault_plan`).

  def fault_params(self) -> tuple:
    """The entries' per-world `FaultParams` (float32), `()` without a plan."""
    return faults.default_params(self.cfg) if self.fault_plan is not None else ()

  def init_faults(self):
    return fa.init_state(self.fault_plan) if self.fault_plan is not None else None

  # ------------------------------------------------------------------ the traced stages

  def issued(self, command) -> jax.Array:
    """Whether `command` was issued (the command NamedTuple's `issued` flag)."""
    return jnp.asarray(command.issued, bool)

  def fault_effort_range(self, p):
    """The joint-effort limit `(lo, hi)` that `derating` scales (the MJCF's, static)."""
    del p
    return self.fault_range

  def closes_loop(self) -> str:
    return super().closes_loop() or self.fault_closes_loop()

  def fault_closes_loop(self) -> str:
    """Why the faults make the controls depend on the physics state ('' when they do not):
    a faulted force of a channel whose force depends on the joint state."""
    plan = self.fault_plan
    if plan is None or not plan.has(*fa.FORCE_TYPES) or not any(
        b.bias[1] or b.bias[2] for b in self.bindings):
      return ''
    return ('its loss-of-authority / derating faults write the control that gives the faulted '
            'force at the joint state (a <position> or <velocity> channel)')

  def reset_ctrl(self, p, s, data, ctrl):
    """The component's control before its first application, kept as the nominal one."""
    s, ctrl = self._reset_ctrl(p, s, data, ctrl)
    if self.fault_plan is None:
      return s, ctrl
    c = ctrl[self._adr]
    return s._replace(faults=s.faults._replace(nominal=c, ctrl=c)), ctrl

  def actuate(self, p, s, data, ctrl, command, tick, dues):
    """Tick `tick`, before physics: the component's `_drive` with the faults around it."""
    plan = self.fault_plan
    if plan is None:
      return self._drive(p, s, data, ctrl, command, tick, dues)
    fs, fps, adr = s.faults, p.faults, self._adr
    on = fa.windows(plan, fps, tick)
    dropped = fs.dropped
    if plan.has('command_dropout'):
      drop = fa.dropout(plan, on)
      dropped = dropped + (drop & self.issued(command)).astype(jnp.int32)
      command = jax.tree.map(lambda n, c: jnp.where(drop, jnp.asarray(n, jnp.result_type(c)), c),
                             self.null_command(), command)
    incoming = ctrl[adr]
    s, ctrl = self._drive(p, s, data, ctrl.at[adr].set(fs.nominal), command, tick, dues)
    nominal = ctrl[adr]
    authority, derating = fa.gains(plan, fps, on, tick)
    out, held = nominal, fs.held
    force_idx = plan.index(*fa.FORCE_TYPES)
    if force_idx:
      faulted = self._force_faults(p, nominal, data, authority, derating)
      out = jnp.where(jnp.any(on[np.asarray(force_idx)]), faulted, nominal)
    if plan.has('stuck'):
      out, held = fa.stuck(plan, fps, fs, on, incoming, out)
    fs = fs._replace(nominal=nominal, held=held, active=on, authority=authority,
                     derating=derating, dropped=dropped, ctrl=out)
    return s._replace(faults=fs), ctrl.at[adr].set(out)

  @property
  def _adr(self):
    """The channels' `ctrl` indices `(channels,)`: host ints, or traced ones in a group
    (`core/groups.py`)."""
    return _channels([b.ctrladr for b in self.bindings], np.int32)

  def _force_faults(self, p, ctrl, data, authority, derating):
    """The controls `(channels,)` that produce the faulted forces at this tick's state."""
    bs = self.bindings
    states = [binding.joint_state(b, data) for b in bs]
    lv = [(b.gear * q, b.gear * qd) for b, (q, qd) in zip(bs, states)]
    force = jnp.stack([binding.force_for_ctrl(b, ctrl[j], *lv[j]) for j, b in enumerate(bs)])
    limit = self.fault_effort_range(p) if self.fault_plan.has('derating') else None
    gear = _channels([b.gear for b in bs], np.float32)
    f = fa.faulted_forces(force, gear, authority, derating, limit)
    return jnp.stack([binding.ctrl_for_force(b, f[j], *lv[j]) for j, b in enumerate(bs)])

  # ------------------------------------------------------------------ truth, status, plan

  def fault_truth(self, s) -> dict:
    """The fault state of the latest tick for `truth/<id>/...` (empty without a plan)."""
    plan = self.fault_plan
    if plan is None:
      return {}
    fs = s.faults
    out = {'fault_active': jnp.any(fs.active),
           'fault_ctrl': fs.ctrl[0] if plan.channels == 1 else fs.ctrl}
    if plan.has('loss_of_authority'):
      out['fault_authority'] = fs.authority
    if plan.has('derating'):
      out['fault_derating'] = fs.derating
    for kind in ('stuck', 'command_dropout'):
      if plan.has(kind):
        out[f'fault_{kind}'] = jnp.any(fs.active[np.asarray(plan.index(kind))])
    return out

  def status(self, s) -> dict:
    """The component's status counters, then `fault_dropped_commands` (a component that
    defines its own `status` merges `fault_status` itself)."""
    return {**super().status(s), **self.fault_status(s)}

  def fault_status(self, s) -> dict:
    if self.fault_plan is None or not self.fault_plan.has('command_dropout'):
      return {}
    return {'fault_dropped_commands': s.faults.dropped}

  def describe_faults(self) -> list[str]:
    return [] if self.fault_plan is None else [self.fault_plan.describe()]


def _channels(values, dtype):
  """`(channels,)` of per-channel binding numbers: a NumPy array of host numbers, or a stack
  of the traced ones of a group's member (`core/groups.py`)."""
  if all(isinstance(v, (int, float)) for v in values):
    return np.asarray(values, dtype)
  return jnp.stack([jnp.asarray(v, dtype) for v in values])


def _mjcf_range(bs) -> tuple[float, float] | None:
  """The joint-effort limit of the channels: one channel's forcerange × gear ∩ its joint's
  actuatorfrcrange; several channels on one joint: the joint's actuatorfrcrange."""
  if len(bs) == 1:
    return bs[0].joint_effort_range()
  return bs[0].joint_frcrange


def build(cfg, bindings, ctx, origin, *, limit='mjcf', limit_rule: str = '') -> dict:
  """The `FaultedActuator` fields of a validated config (`{}` without `faults:`).

  Args:
    bindings: the component's `ActuatorBinding`s (the channels).
    limit: `'mjcf'` (the MJCF's joint-effort limit, `_mjcf_range`), or the component's own
      limit `(lo, hi)` / None (none set), with `limit_rule` the fix to suggest.

  Raises:
    ConfigErrors: at `faults[i]...` (file, path, value, rule) for each bad entry.
  """
  if not cfg.faults:
    return {}
  file, path = origin('faults')
  rng = _mjcf_range(bindings) if limit == 'mjcf' else limit
  names = ', '.join(b.name for b in bindings)
  errors = []
  for i, f in enumerate(cfg.faults):
    where = f'{path}[{i}]'
    if f.type in fa.FORCE_TYPES:
      for b in bindings:
        dyn = int(ctx.model.actuator_dyntype[b.id]) != 0
        if b.kind not in AFFINE or dyn:
          what = b.transmission_input + (' with activation dynamics' if b.kind in AFFINE
                                         else '')
          errors.append(ConfigError(file, f'{where}.type', f'a {f.type} fault rewrites the force '
                                    'of a fixed-gain MJCF actuator without activation dynamics '
                                    f'(<motor>, <position>, <velocity>); {b.name!r} is {what}',
                                    f.type))
    if f.type == 'derating' and rng is None:
      rule = limit_rule or (f'{names} has no limit: give the MJCF actuator a forcerange or '
                            'its joint an actuatorfrcrange')
      errors.append(ConfigError(file, f'{where}.type', f'a derating fault scales a force limit; '
                                + rule, f.type))
    if isinstance(f.value, tuple) and len(f.value) != len(bindings):
      errors.append(ConfigError(file, f'{where}.value', f'must be a scalar or a list of '
                                f'{len(bindings)} (one value per channel: {names})',
                                list(f.value)))
  if errors:
    raise ConfigErrors(errors)
  plan = fa.ActuatorFaultPlan(
      tuple(f.type for f in cfg.faults), tuple(float(f.ramp_s) for f in cfg.faults),
      tuple(f.value is not None for f in cfg.faults),
      tuple((len(f.value),) if isinstance(f.value, tuple) else () for f in cfg.faults),
      len(bindings), float(ctx.dt))
  has_derating = plan.has('derating')
  return {'fault_plan': plan,
          'fault_range': (tuple(float(x) for x in rng) if has_derating and limit == 'mjcf'
                          else None)}

