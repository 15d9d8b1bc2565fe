"""An MJCF actuator bound by name (SPEC §6): its transmission, input kind, gear, gains, limits
and addresses, resolved on the host; the joint state and forces it reads in the traced step
(directly, or through its probe sensors) and the control it writes."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx.core.context import JointProbe, Probe
from fibril_mjx.errors import ConfigError, did_you_mean

_TRN_NAMES = {int(mujoco.mjtTrn.mjTRN_JOINT): 'joint',
              int(mujoco.mjtTrn.mjTRN_JOINTINPARENT): 'jointinparent',
              int(mujoco.mjtTrn.mjTRN_TENDON): 'tendon', int(mujoco.mjtTrn.mjTRN_SITE): 'site',
              int(mujoco.mjtTrn.mjTRN_SLIDERCRANK): 'slidercrank',
              int(mujoco.mjtTrn.mjTRN_BODY): 'body'}
_INPUT_BITS = ((1, 'pos'), (2, 'vel'), (4, 'ff'), (8, 'voltage'))


@dataclasses.dataclass(frozen=True)
class ActuatorBinding:
  """A MuJoCo actuator bound to a component field (resolved on the host, static).

  Attributes:
    field: the config field that named it (`actuator`, `position_actuator`, ...).
    name, id: actuator name and index.
    ctrladr: index of its (single) control in `ctrl` — never assumed equal to `id`.
    kind: `position`, `velocity`, `motor` or `dcmotor`.
    dc_input: `pos` or `vel` for a dcmotor, else ''.
    gain: `gainprm[0]` (kp of position, kv of velocity, gain of motor; 0 for dcmotor).
    bias: `biasprm[0:3]` (force = gain·ctrl + b0 + b1·length + b2·velocity).
    joint, joint_type, qposadr, dofadr: the driven 1-DoF joint.
    gear: compiled `gear[0]` (after assemblies and overlays).
    forcerange: actuator force clamp, or None when not force-limited.
    joint_frcrange: the joint's `actuatorfrcrange` (clamps qfrc_actuator), or None.
    ctrlrange: control clamp, or None when not ctrl-limited.
    joint_probe, force_probe, effort_probe: the hidden sensors feedback and truth read after
      the tick's forward (`jointpos` / `jointvel`, `actuatorfrc`, `jointactfrc`).

  In a group of components (`core/groups.py`) the numbers are traced per-member scalars.
  """
  field: str
  name: str
  id: int
  ctrladr: int
  kind: str
  dc_input: str
  gain: float
  bias: tuple[float, float, float]
  joint: str
  joint_type: str
  qposadr: int
  dofadr: int
  gear: float
  forcerange: tuple[float, float] | None
  joint_frcrange: tuple[float, float] | None
  ctrlrange: tuple[float, float] | None
  joint_probe: JointProbe | None = None
  force_probe: Probe | None = None
  effort_probe: Probe | None = None

  # the fields that shape the trace; every other number (addresses, gear, gain, ranges) is a
  # per-member array in a group of components (`core/groups.py`), every other string a name
  shaping = ('field', 'kind', 'dc_input', 'joint_type')

  @property
  def semantic(self) -> str:
    """What `ctrl` means: a `position` setpoint, a `velocity` setpoint or an `effort`."""
    if self.kind == 'dcmotor':
      return 'position' if self.dc_input == 'pos' else 'velocity'
    return {'position': 'position', 'velocity': 'velocity', 'motor': 'effort'}[self.kind]

  @property
  def transmission_input(self) -> str:
    """The MJCF actuator kind and input the transmission is driven through."""
    if self.kind == 'dcmotor':
      return f'dcmotor input="{self.dc_input}"'
    return f'<{self.kind}>'

  def joint_effort_range(self) -> tuple[float, float] | None:
    """Range of the generalized force on the joint: forcerange × gear ∩ actuatorfrcrange."""
    lo, hi = -math.inf, math.inf
    if self.forcerange is not None:
      a, b = self.forcerange[0] * self.gear, self.forcerange[1] * self.gear
      lo, hi = min(a, b), max(a, b)
    if self.joint_frcrange is not None:
      lo, hi = max(lo, self.joint_frcrange[0]), min(hi, self.joint_frcrange[1])
    return None if (lo, hi) == (-math.inf, math.inf) else (lo, hi)

  def describe(self) -> list[str]:
    rng = lambda r, unit='': 'unlimited' if r is None else f'[{r[0]:g}, {r[1]:g}]{unit}'  # noqa
    return [f'{self.field}: {self.name} (actuator {self.id}, ctrl[{self.ctrladr}]), '
            f'transmission input {self.transmission_input}, joint {self.joint} '
            f'({self.joint_type}, qpos[{self.qposadr}], dof {self.dofadr}), resolved gear '
            f'{self.gear:g}',
            f'  ctrl semantic: {self.semantic}; force range {rng(self.forcerange)} (actuator); '
            f'joint-effort range {rng(self.joint_effort_range())} (forcerange x gear'
            f'{" ∩ joint actuatorfrcrange " + rng(self.joint_frcrange) if self.joint_frcrange else ""})'
            + (f'; ctrlrange {rng(self.ctrlrange)}' if self.ctrlrange else '')]


def _kind(m: mujoco.MjModel, i: int) -> tuple[str, str]:
  """(kind, why-not) of actuator `i`: kind '' with a reason when unsupported."""
  g, b = m.actuator_gainprm[i], m.actuator_biasprm[i]
  gt, bt, dt = (int(m.actuator_gaintype[i]), int(m.actuator_biastype[i]),
                int(m.actuator_dyntype[i]))
  if mujoco.mjtGain.mjGAIN_DCMOTOR in (gt,) or bt == mujoco.mjtBias.mjBIAS_DCMOTOR:
    return 'dcmotor', ''
  if dt not in (int(mujoco.mjtDyn.mjDYN_NONE), int(mujoco.mjtDyn.mjDYN_FILTER),
                int(mujoco.mjtDyn.mjDYN_FILTEREXACT)):
    return '', (f'actuator dynamics {mujoco.mjtDyn(dt).name} (e.g. intvelocity, muscle) are not '
                'a position, velocity or torque input')
  if gt != mujoco.mjtGain.mjGAIN_FIXED or g[0] == 0:
    return '', 'only fixed-gain actuators (position, velocity, motor) and dcmotor are supported'
  if bt == mujoco.mjtBias.mjBIAS_NONE:
    return 'motor', ''
  if bt == mujoco.mjtBias.mjBIAS_AFFINE and b[0] == 0:
    if np.isclose(b[1], -g[0], rtol=1e-12, atol=0):
      return 'position', ''
    if b[1] == 0 and np.isclose(b[2], -g[0], rtol=1e-12, atol=0):
      return 'velocity', ''
  return '', ('a general actuator that is neither <position> (bias = -kp·length), <velocity> '
              '(bias = -kv·velocity) nor <motor> (no bias)')


def bind_actuator(ctx, field: str, name: str) -> ActuatorBinding:
  """Binds a MuJoCo actuator by its compiled name; the rules of SPEC §6 are checked here.

  Raises:
    ConfigError: at `<config path>.<field>` — missing actuator, a transmission that is not a
      1-DoF joint, a dcmotor input other than `pos` / `vel`, an unsupported actuator kind.
  """
  m = ctx.model
  where = f'{ctx.path}.{field}'
  aid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, name)
  if aid < 0:
    names = [m.actuator(j).name for j in range(m.nactuator)]
    raise ConfigError(ctx.file, where, 'no MuJoCo actuator of that name in the compiled model'
                      + did_you_mean(name, names), name)
  trn = int(m.actuator_trntype[aid])
  if trn != mujoco.mjtTrn.mjTRN_JOINT:
    raise ConfigError(ctx.file, where, f'must drive a joint; {name!r} has a '
                      f'{_TRN_NAMES.get(trn, str(trn))} transmission', name)
  jid = int(m.actuator_trnid[aid, 0])
  jtype = int(m.jnt_type[jid])
  jname = m.joint(jid).name
  if jtype not in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE):
    raise ConfigError(ctx.file, where, f'must drive a 1-DoF hinge or slide joint; {name!r} '
                      f'drives the {mujoco.mjtJoint(jtype).name[6:].lower()} joint {jname!r}',
                      name)
  kind, why = _kind(m, aid)
  dc_input = ''
  if kind == 'dcmotor':
    spec = int(m.actuator_ctrlspec[aid])
    bits = [n for b, n in _INPUT_BITS if spec & b]
    text = ' '.join(bits) if bits else 'none'
    if 'voltage' in bits:
      raise ConfigError(ctx.file, where, f'dcmotor {name!r} has input="{text}": a production '
                        'motor command is not a terminal voltage, so fibril_sim/motor does not '
                        'bind voltage input; use input="pos" or input="vel" with the dcmotor '
                        'controller in the MJCF', name)
    if bits not in (['pos'], ['vel']):
      raise ConfigError(ctx.file, where, f'dcmotor {name!r} has input="{text}"; '
                        'fibril_sim/motor binds a dcmotor with one input, "pos" or "vel"', name)
    dc_input = bits[0]
  elif not kind:
    raise ConfigError(ctx.file, where, f'unsupported actuator {name!r}: {why}', name)
  if m.actuator_ctrlnum[aid] != 1:
    raise ConfigError(ctx.file, where, f'actuator {name!r} owns {m.actuator_ctrlnum[aid]} '
                      'controls; one is required', name)
  adr = int(m.actuator_ctrladr[aid])
  fr = (tuple(float(x) for x in m.actuator_forcerange[aid])
        if m.actuator_forcelimited[aid] else None)
  jr = tuple(float(x) for x in m.jnt_actfrcrange[jid]) if m.jnt_actfrclimited[jid] else None
  cr = tuple(float(x) for x in m.actuator_ctrlrange[adr]) if m.actuator_ctrllimited[adr] else None
  return ActuatorBinding(field, name, int(aid), adr, kind, dc_input,
                         float(m.actuator_gainprm[aid, 0]) if kind != 'dcmotor' else 0.0,
                         tuple(float(x) for x in m.actuator_biasprm[aid, :3]), jname,
                         mujoco.mjtJoint(jtype).name[6:].lower(), int(m.jnt_qposadr[jid]),
                         int(m.jnt_dofadr[jid]), float(m.actuator_gear[aid, 0]), fr, jr, cr,
                         ctx.joint_probe(jid), ctx.actuator_force(aid),
                         ctx.joint_actuator_force(jid))


def joint_state(b: ActuatorBinding, data) -> tuple[jax.Array, jax.Array]:
  """Joint position and velocity `()` of the bound joint in `data` before the tick's forward
  (an application reading the state it acts on: this closes a loop on physics)."""
  return data.qpos[b.qposadr], data.qvel[b.dofadr]


def sensed_joint_state(b: ActuatorBinding, data) -> tuple[jax.Array, jax.Array]:
  """Joint position and velocity `()` after the tick's forward, through the probe sensors."""
  return b.joint_probe.state(data)


def sensed_force(b: ActuatorBinding, data) -> jax.Array:
  """The actuator's force (`actuator_force`) after the tick's forward, through its probe."""
  return b.force_probe.read(data)


def sensed_effort(b: ActuatorBinding, data) -> jax.Array:
  """The actuator force on the joint (`qfrc_actuator` at its dof, after the joint's
  `actuatorfrcrange`) after the tick's forward, through its probe."""
  return b.effort_probe.read(data)


def set_ctrl(ctrl, b: ActuatorBinding, value) -> jax.Array:
  """Writes one actuator's control (its own `ctrladr`)."""
  return ctrl.at[b.ctrladr].set(jnp.asarray(value, ctrl.dtype))


def ctrl_for_force(b: ActuatorBinding, force, length, velocity):
  """Control that makes an affine actuator produce actuator force `force` at this state.

  force = gain·ctrl + b0 + b1·length + b2·velocity (position, velocity and motor kinds).
  """
  b0, b1, b2 = b.bias
  return (force - b0 - b1 * length - b2 * velocity) / b.gain


def force_for_ctrl(b: ActuatorBinding, ctrl, length, velocity):
  """Actuator force an affine actuator produces with control `ctrl` at this state, as MuJoCo
  computes it: ctrl clamped to `ctrlrange`, force = gain·ctrl + b0 + b1·length + b2·velocity
  clamped to `forcerange` (position, velocity and motor kinds; the inverse of
  `ctrl_for_force` within the ranges)."""
  if b.ctrlrange is not None:
    ctrl = jnp.clip(ctrl, *b.ctrlrange)
  b0, b1, b2 = b.bias
  force = b.gain * ctrl + b0 + b1 * length + b2 * velocity
  if b.forcerange is not None:
    force = jnp.clip(force, *b.forcerange)
  return force
