"""MuJoCo `dcmotor` actuators evaluated in JAX next to MJX (whose JAX backend rejects them).

MuJoCo 3.17 compiles `<dcmotor>` into an actuator with `dyntype/gaintype/biastype = dcmotor`;
`mjx.put_model` refuses those types. This module

1. builds, on the host, a *twin* `MjModel` in which every dcmotor is replaced by a unit-gain
   force actuator that MJX can step (`prepare`), keeping bodies, joints, other actuators and
   options untouched;
2. evaluates the dcmotor electrical / controller / thermal / friction model in JAX from the
   compiled parameters (`DcMotorParams`, differentiable, per world), writes the resulting force
   into the twin's control and advances the dcmotor activations exactly as MuJoCo C does
   (`step`).

Compiled parameter layout (MuJoCo 3.17, checked by compiling MJCF and against `mj_step`):

  gainprm  [0] R resistance (ohm)        [1] K motor constant, sqrt(Kt*Ke) (N*m/A = V*s/rad)
           [2] alpha, resistance temperature coefficient (1/K)   [3] T0 reference temperature
           [4] kp  [5] ki  [6] kd  [7] Vmax controller voltage limit (0: none)
  dynprm   [0] te = L/R electrical time constant (s; 0: no current state)
           [1] current rate limit (A/s; 0: none)   [2] RT thermal resistance (K/W; 0: no thermal)
           [3] C thermal capacitance (J/K)  [4] Ta ambient temperature
           [5] LuGre sigma0 (0: no LuGre)  [6] LuGre sigma1  [7] slew limit (ctrl units/s; 0: none)
           [8] integral limit Imax (0: none)
  biasprm  [0..2] cogging amplitude, pole count, phase   [3..5] LuGre F_C, F_S, v_S
  forcerange: `saturation` torque (or K * current limit).

Activation slots (in this order, present when the parameter is > 0): slew (last applied first
control), integral of the position error, temperature rise above ambient, LuGre bristle
deflection, winding current. MuJoCo steps the last slot *early* (`actearly`), so with
`inductance` the force is K times the next-step current.

Everything is single-world; batch with `jax.vmap` at the edge.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx._mjx import mjx  # noqa: F401  (imports mujoco.mjx quietly, before _src)
from fibril_mjx.errors import FibrilError
from mujoco.mjx._src import derivative as _mjx_derivative
from mujoco.mjx._src import forward as _mjx_forward
from mujoco.mjx._src import sensor as _mjx_sensor
from mujoco.mjx._src import solver as _mjx_solver
from mujoco.mjx._src import support as _mjx_support

_MINVAL = mujoco.mjMINVAL

# activation slot kinds, in MuJoCo's slot order
SLOTS = ('slew', 'integral', 'temperature', 'bristle', 'current')

# input signature bits (mjtCtrlInput)
_POS, _VEL, _FF, _VOLTAGE, _NONE = 1, 2, 4, 8, 16
_INPUT_NAMES = ((_POS, 'pos'), (_VEL, 'vel'), (_FF, 'ff'), (_VOLTAGE, 'voltage'))


class UnsupportedDcMotor(FibrilError, ValueError):
  """A dcmotor (or a model feature around it) that this module cannot evaluate faithfully."""


# ------------------------------------------------------------------------------------------------
# static structure


@dataclasses.dataclass(frozen=True)
class DcMotorSet:
  """Static structure of the dcmotor actuators of one model (hashable, shared by all worlds).

  Attributes:
    names: actuator names (`actuator<i>` when unnamed), one per dcmotor.
    actuator_id: actuator index of each dcmotor in the original and the twin model.
    ctrladr: address of each dcmotor's first control in the ORIGINAL ctrl vector.
    inputs: per dcmotor, the input bits present in ctrl order (e.g. `(1, 2, 4)` for
      `input="pos vel ff"`; empty for `input="none"`).
    ctrllimited: per dcmotor, per control, whether MuJoCo clamps it to `ctrlrange`.
    ctrl_param_index: per dcmotor, per control, row in `DcMotorParams.ctrlrange`.
    slots: per dcmotor, offset of each slot kind in `SLOTS` within its activations (-1: absent).
    act_index: per dcmotor, per slot kind, index in the ORIGINAL `act` vector (-1: absent).
    has_vmax, has_imax, has_current_rate, has_cogging, force_limited: per dcmotor flags for
      optional clamps / terms, from the compiled values (a zero parameter removes the term).
    orig_nu, orig_na: sizes of the original model's ctrl / act vectors.
    twin_ctrl_src: per twin control, the original ctrl index it copies (-1: dcmotor slot).
    twin_ctrl_dc: per dcmotor, the twin control that carries its force (-1: carried by act).
    twin_act_src: per twin activation, the original act index it mirrors.
    twin_act_dc: per dcmotor, the twin activation that carries its force (-1: by ctrl).
    integrator: `mjtIntegrator` value (Euler or implicitfast).
    clampctrl: whether controls are clamped (the `clampctrl` flag is not disabled).
  """

  names: tuple[str, ...]
  actuator_id: tuple[int, ...]
  ctrladr: tuple[int, ...]
  inputs: tuple[tuple[int, ...], ...]
  ctrllimited: tuple[tuple[bool, ...], ...]
  ctrl_param_index: tuple[tuple[int, ...], ...]
  slots: tuple[tuple[int, ...], ...]
  act_index: tuple[tuple[int, ...], ...]
  has_vmax: tuple[bool, ...]
  has_imax: tuple[bool, ...]
  has_current_rate: tuple[bool, ...]
  has_cogging: tuple[bool, ...]
  force_limited: tuple[bool, ...]
  orig_nu: int
  orig_na: int
  twin_ctrl_src: tuple[int, ...]
  twin_ctrl_dc: tuple[int, ...]
  twin_act_src: tuple[int, ...]
  twin_act_dc: tuple[int, ...]
  integrator: int
  clampctrl: bool

  @property
  def n(self) -> int:
    """Number of dcmotor actuators."""
    return len(self.actuator_id)

  def has(self, i: int, slot: str) -> bool:
    """Whether dcmotor `i` has the activation slot `slot` (one of `SLOTS`)."""
    return self.slots[i][SLOTS.index(slot)] >= 0


def _name(m: mujoco.MjModel, i: int) -> str:
  name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, i)
  return name if name else f'actuator{i}'


def _slot_offsets(dynprm: np.ndarray, gainprm: np.ndarray) -> tuple[int, ...]:
  """MuJoCo's dcmotor slot layout: offsets of (slew, integral, temperature, bristle, current)."""
  present = (dynprm[7] > 0, gainprm[5] > 0, dynprm[2] > 0, dynprm[5] > 0, dynprm[0] > 0)
  out, k = [], 0
  for p in present:
    out.append(k if p else -1)
    k += int(p)
  return tuple(out)


def _is_dcmotor(m: mujoco.MjModel, i: int) -> bool:
  return (m.actuator_gaintype[i] == mujoco.mjtGain.mjGAIN_DCMOTOR
          or m.actuator_biastype[i] == mujoco.mjtBias.mjBIAS_DCMOTOR
          or m.actuator_dyntype[i] == mujoco.mjtDyn.mjDYN_DCMOTOR)


def _check_supported(m: mujoco.MjModel, i: int) -> None:
  """Raise UnsupportedDcMotor for dcmotor features this module does not evaluate."""
  name = _name(m, i)

  def bad(attribute: str, why: str) -> UnsupportedDcMotor:
    return UnsupportedDcMotor(f"dcmotor actuator '{name}' (id {i}): {attribute}: {why}")

  kinds = (m.actuator_gaintype[i] == mujoco.mjtGain.mjGAIN_DCMOTOR,
           m.actuator_biastype[i] == mujoco.mjtBias.mjBIAS_DCMOTOR,
           m.actuator_dyntype[i] == mujoco.mjtDyn.mjDYN_DCMOTOR)
  if not all(kinds):
    raise bad('gaintype/biastype/dyntype',
              'a partial dcmotor (gain, bias and dynamics must all be dcmotor) is not supported')
  if m.actuator_plugin[i] >= 0:
    raise bad('plugin', 'actuator plugins are not supported')
  if m.actuator_delay[i] > 0 or m.actuator_history[i, 0] > 0:
    raise bad('delay/nsample', 'actuator delay buffers are not supported (MJX ignores them)')
  if m.actuator_actlimited[i]:
    raise bad('actlimited', 'activation limits on dcmotor states are not supported')
  if not m.actuator_actearly[i]:
    raise bad('actearly', 'MuJoCo requires actearly for dcmotor')
  if np.any(m.actuator_dampingpoly[i] != 0):
    raise bad('damping', 'polynomial actuator damping (more than one coefficient) is not supported')
  if m.actuator_damping[i] != 0 or m.actuator_armature[i] != 0:
    trn = int(m.actuator_trntype[i])
    jnt = int(m.actuator_trnid[i, 0])
    ok = (trn in (int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT))
          and int(m.jnt_type[jnt]) in (int(mujoco.mjtJoint.mjJNT_HINGE),
                                       int(mujoco.mjtJoint.mjJNT_SLIDE)))
    if not ok:
      raise bad('damping/armature',
                'actuator damping or armature is supported on hinge/slide joint transmissions only')
  spec = int(m.actuator_ctrlspec[i])
  ctrlnum = int(m.actuator_ctrlnum[i])
  nbits = sum(1 for b, _ in _INPUT_NAMES if spec & b)
  if spec & _NONE:
    if ctrlnum != 0:
      raise bad('input', f'input="none" with {ctrlnum} controls')
  elif nbits != ctrlnum:
    raise bad('input', f'input signature {spec} does not match {ctrlnum} controls')
  slots = _slot_offsets(m.actuator_dynprm[i], m.actuator_gainprm[i])
  if int(m.actuator_actnum[i]) != sum(s >= 0 for s in slots):
    raise bad('actdim', f'{m.actuator_actnum[i]} activations, expected '
              f'{sum(s >= 0 for s in slots)} from the enabled features')


def _input_text(spec: int) -> str:
  if spec & _NONE:
    return 'none'
  return ' '.join(n for b, n in _INPUT_NAMES if spec & b)


def prepare(mj_model: mujoco.MjModel,
            spec: Optional[mujoco.MjSpec] = None
            ) -> tuple[mujoco.MjModel, Optional[DcMotorSet]]:
  """Host side: a twin model MJX can step, and the static dcmotor structure.

  Each dcmotor becomes a unit-gain force actuator whose input this module computes each tick;
  its `damping`/`armature` are folded into the joint (exactly as MuJoCo applies them).

  Without `spec`, the twin is a copy of `mj_model` with the dcmotor rows rewritten; that keeps
  every array size, so it works when each dcmotor has exactly one control and at most one
  activation (e.g. `input="vel"` with kp/kd, `inductance` or `thermal` alone). Other dcmotors
  (`input="pos vel ff"`, `input="none"`, several states) change `nu`/`na`, which needs a
  recompile: pass the `MjSpec` that `mj_model` was compiled from (values edited on `mj_model`
  after compile are carried over to the twin).

  Args:
    mj_model: the compiled model.
    spec: optional, the spec `mj_model` was compiled from.

  Returns:
    `(mj_model, None)` when there is no dcmotor; otherwise `(twin, DcMotorSet)`.

  Raises:
    UnsupportedDcMotor: naming the actuator and the attribute that cannot be matched.
  """
  m = mj_model
  dc_ids = [i for i in range(m.nactuator) if _is_dcmotor(m, i)]
  if not dc_ids:
    return mj_model, None
  for i in dc_ids:
    _check_supported(m, i)
  integrator = int(m.opt.integrator)
  if integrator not in (int(mujoco.mjtIntegrator.mjINT_EULER),
                        int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST)):
    raise UnsupportedDcMotor(
        f"dcmotor actuator '{_name(m, dc_ids[0])}': option integrator="
        f'{mujoco.mjtIntegrator(integrator).name}: only Euler and implicitfast are supported')
  if m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_ACTUATION:
    raise UnsupportedDcMotor(
        f"dcmotor actuator '{_name(m, dc_ids[0])}': option flag actuation=disable is not "
        'supported')
  if m.opt.disableactuator:
    raise UnsupportedDcMotor(
        f"dcmotor actuator '{_name(m, dc_ids[0])}': option actuatorgroupdisable is not supported")

  simple = all(m.actuator_ctrlnum[i] == 1 and m.actuator_actnum[i] <= 1 for i in dc_ids)
  if spec is None and not simple:
    for i in dc_ids:
      if m.actuator_ctrlnum[i] != 1:
        text = _input_text(m.actuator_ctrlspec[i])
        raise UnsupportedDcMotor(
            f"dcmotor actuator '{_name(m, i)}' (id {i}): input=\"{text}\""
            f' has {m.actuator_ctrlnum[i]} controls; the MJX twin needs one control per actuator,'
            ' which needs a recompile: call prepare(mj_model, spec=<the MjSpec it was compiled'
            ' from>)')
      if m.actuator_actnum[i] > 1:
        kinds = [k for k, s in zip(SLOTS, _slot_offsets(m.actuator_dynprm[i],
                                                         m.actuator_gainprm[i])) if s >= 0]
        raise UnsupportedDcMotor(
            f"dcmotor actuator '{_name(m, i)}' (id {i}): {m.actuator_actnum[i]} activation"
            f' states ({", ".join(kinds)}); MJX allows one per actuator, so the twin needs a'
            ' recompile: call prepare(mj_model, spec=<the MjSpec it was compiled from>)')

  if spec is None:
    twin = _twin_by_copy(m, dc_ids)
  else:
    twin = _twin_by_spec(m, spec, dc_ids)
  _fold_damping_armature(m, twin, dc_ids)
  dset = _build_set(m, twin, dc_ids, by_copy=spec is None)
  return twin, dset


def _neutralize_row(t: mujoco.MjModel, i: int, dyntype: int) -> None:
  t.actuator_gaintype[i] = mujoco.mjtGain.mjGAIN_FIXED
  t.actuator_biastype[i] = mujoco.mjtBias.mjBIAS_NONE
  t.actuator_dyntype[i] = dyntype
  t.actuator_gainprm[i] = 0.0
  t.actuator_gainprm[i, 0] = 1.0
  t.actuator_biasprm[i] = 0.0
  t.actuator_dynprm[i] = 0.0
  t.actuator_ctrlspec[i] = 0
  t.actuator_actearly[i] = False
  t.actuator_forcelimited[i] = False
  t.actuator_actlimited[i] = False
  t.actuator_damping[i] = 0.0
  t.actuator_armature[i] = 0.0
  for c in range(t.actuator_ctrladr[i], t.actuator_ctrladr[i] + t.actuator_ctrlnum[i]):
    t.actuator_ctrllimited[c] = False


def _twin_by_copy(m: mujoco.MjModel, dc_ids: Sequence[int]) -> mujoco.MjModel:
  twin = copy.copy(m)
  for i in dc_ids:
    # a dcmotor with one activation keeps that slot as an integrator with zero input: MJX
    # then applies force = act[slot], which step() sets to the dcmotor force.
    dyn = (mujoco.mjtDyn.mjDYN_INTEGRATOR if m.actuator_actnum[i] == 1
           else mujoco.mjtDyn.mjDYN_NONE)
    _neutralize_row(twin, i, dyn)
  return twin


# arrays whose layout depends on nu / na, or that are addresses recomputed by the compiler
_ADDRESS_FIELDS = {'actuator_ctrladr', 'actuator_ctrlnum', 'actuator_actadr', 'actuator_actnum',
                   'actuator_historyadr', 'actuator_history', 'actuator_outadr', 'actuator_outnum',
                   'actuator_ctrllimited', 'actuator_ctrlrange', 'key_ctrl', 'key_act',
                   'actuator_gaintype', 'actuator_biastype', 'actuator_dyntype',
                   'actuator_ctrlspec'}


def _twin_by_spec(m: mujoco.MjModel, spec: mujoco.MjSpec,
                  dc_ids: Sequence[int]) -> mujoco.MjModel:
  s = spec.copy()
  acts = list(s.actuators)
  if len(acts) != m.nactuator:
    raise UnsupportedDcMotor(f'spec has {len(acts)} actuators, model has {m.nactuator}: '
                             'the spec passed to prepare() is not the one the model came from')
  for i in dc_ids:
    a = acts[i]
    if a.gaintype != mujoco.mjtGain.mjGAIN_DCMOTOR:
      raise UnsupportedDcMotor(f"dcmotor actuator '{_name(m, i)}': spec actuator {i} is not a "
                               'dcmotor: the spec does not match the model')
    a.set_to_motor()
    a.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE
    a.forcelimited = mujoco.mjtLimited.mjLIMITED_FALSE
    a.actlimited = mujoco.mjtLimited.mjLIMITED_FALSE
    a.actearly = False
    a.damping = np.zeros_like(a.damping)
    a.armature = 0.0
  twin = s.compile()
  dc = set(dc_ids)
  # carry values (possibly edited on mj_model after compile) over to the twin
  for field in dir(m):
    if field.startswith('_') or field in _ADDRESS_FIELDS:
      continue
    src = getattr(m, field)
    if not isinstance(src, np.ndarray) or not hasattr(twin, field):
      continue
    dst = getattr(twin, field)
    if field.startswith('actuator_') and src.shape[:1] == (m.nactuator,):
      rows = [i for i in range(m.nactuator) if i not in dc]
      if dst.shape[1:] != src.shape[1:]:
        raise UnsupportedDcMotor(f'twin field {field} has shape {dst.shape}, model {src.shape}')
      dst[rows] = src[rows]
      continue
    if dst.shape != src.shape:
      raise UnsupportedDcMotor(
          f'spec does not match the model: field {field} has shape {dst.shape} after recompile, '
          f'{src.shape} in the model')
    dst[...] = src
  for i in range(m.nactuator):
    if i in dc:
      continue
    for k in range(m.actuator_ctrlnum[i]):
      src_c, dst_c = m.actuator_ctrladr[i] + k, twin.actuator_ctrladr[i] + k
      twin.actuator_ctrllimited[dst_c] = m.actuator_ctrllimited[src_c]
      twin.actuator_ctrlrange[dst_c] = m.actuator_ctrlrange[src_c]
  for name in dir(m.opt):
    if name.startswith('_'):
      continue
    value = getattr(m.opt, name)
    if isinstance(value, np.ndarray):
      getattr(twin.opt, name)[...] = value
    elif isinstance(value, (int, float)):
      setattr(twin.opt, name, value)
  for i in dc_ids:
    _neutralize_row(twin, i, mujoco.mjtDyn.mjDYN_NONE)
  return twin


def _fold_damping_armature(m: mujoco.MjModel, twin: mujoco.MjModel,
                           dc_ids: Sequence[int]) -> None:
  """Move dcmotor damping/armature onto the joint (MuJoCo adds damping*gear^2, armature*gear^2)."""
  for i in dc_ids:
    damping, armature = m.actuator_damping[i], m.actuator_armature[i]
    if damping == 0 and armature == 0:
      continue
    dof = m.jnt_dofadr[m.actuator_trnid[i, 0]]
    g2 = m.actuator_gear[i, 0] ** 2
    twin.dof_damping[dof] += damping * g2
    twin.dof_armature[dof] += armature * g2


def _build_set(m: mujoco.MjModel, twin: mujoco.MjModel, dc_ids: Sequence[int],
               by_copy: bool) -> DcMotorSet:
  if twin.nu != twin.nactuator or np.any(twin.actuator_ctrlnum != 1):
    raise UnsupportedDcMotor(f'twin has nu={twin.nu}, nactuator={twin.nactuator}: some '
                             'non-dcmotor actuator has other than one control, which MJX cannot '
                             'step')
  dc = set(dc_ids)
  inputs, limited, pidx, slots, act_index = [], [], [], [], []
  nctrl_param = 0
  for i in dc_ids:
    spec = int(m.actuator_ctrlspec[i])
    bits = tuple(b for b, _ in _INPUT_NAMES if spec & b) if not spec & _NONE else ()
    inputs.append(bits)
    adr = int(m.actuator_ctrladr[i])
    limited.append(tuple(bool(m.actuator_ctrllimited[adr + k]) for k in range(len(bits))))
    pidx.append(tuple(range(nctrl_param, nctrl_param + len(bits))))
    nctrl_param += len(bits)
    sl = _slot_offsets(m.actuator_dynprm[i], m.actuator_gainprm[i])
    slots.append(sl)
    act_index.append(tuple(int(m.actuator_actadr[i]) + s if s >= 0 else -1 for s in sl))

  # twin ctrl: non-dcmotor controls copy the original, dcmotor ones carry the force
  twin_ctrl_src, twin_ctrl_dc, twin_act_dc = [], [], []
  for i in range(twin.nactuator):
    if i in dc:
      twin_ctrl_src.append(-1)
    else:
      twin_ctrl_src.append(int(m.actuator_ctrladr[i]))
  twin_act_src = [-1] * twin.na
  for i in range(twin.nactuator):
    if i in dc or twin.actuator_actadr[i] < 0:
      continue
    for k in range(twin.actuator_actnum[i]):
      twin_act_src[twin.actuator_actadr[i] + k] = int(m.actuator_actadr[i]) + k
  for i in dc_ids:
    if by_copy and m.actuator_actnum[i] == 1:
      twin_ctrl_dc.append(-1)
      twin_act_dc.append(int(twin.actuator_actadr[i]))
      twin_act_src[twin.actuator_actadr[i]] = int(m.actuator_actadr[i])
    else:
      twin_ctrl_dc.append(i)
      twin_act_dc.append(-1)

  g, d, b = m.actuator_gainprm, m.actuator_dynprm, m.actuator_biasprm
  return DcMotorSet(
      names=tuple(_name(m, i) for i in dc_ids),
      actuator_id=tuple(int(i) for i in dc_ids),
      ctrladr=tuple(int(m.actuator_ctrladr[i]) for i in dc_ids),
      inputs=tuple(inputs),
      ctrllimited=tuple(limited),
      ctrl_param_index=tuple(pidx),
      slots=tuple(slots),
      act_index=tuple(act_index),
      has_vmax=tuple(bool(g[i, 7] > 0) for i in dc_ids),
      has_imax=tuple(bool(d[i, 8] > 0) for i in dc_ids),
      has_current_rate=tuple(bool(d[i, 1] > 0) for i in dc_ids),
      has_cogging=tuple(bool(b[i, 0] != 0) for i in dc_ids),
      force_limited=tuple(bool(m.actuator_forcelimited[i]) for i in dc_ids),
      orig_nu=int(m.nu),
      orig_na=int(m.na),
      twin_ctrl_src=tuple(twin_ctrl_src),
      twin_ctrl_dc=tuple(twin_ctrl_dc),
      twin_act_src=tuple(twin_act_src),
      twin_act_dc=tuple(twin_act_dc),
      integrator=int(m.opt.integrator),
      clampctrl=not bool(m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CLAMPCTRL),
  )


# ------------------------------------------------------------------------------------------------
# parameters and state


class DcMotorParams(NamedTuple):
  """Physical dcmotor parameters (traced, differentiable, may vary per world).

  Each field has shape `(n,)` (one entry per dcmotor, in `DcMotorSet` order) unless noted.
  Features absent from the compiled model (`DcMotorSet`) ignore their fields.

  Attributes:
    resistance_ohm: winding resistance R at the reference temperature (gainprm[0]).
    motorconst: K = sqrt(Kt*Ke), N*m/A = V*s/rad (gainprm[1]).
    electrical_time_constant_s: te = L/R (dynprm[0]); fixed at compile, not re-derived from R.
    current_rate_limit: max |di/dt|, A/s (dynprm[1]).
    thermal_resistance: RT, K/W (dynprm[2]).
    thermal_capacitance: C, J/K (dynprm[3]).
    ambient_temperature: Ta (dynprm[4]).
    resistance_tempco: alpha, 1/K (gainprm[2]).
    reference_temperature: T0 (gainprm[3]).
    kp, ki, kd: controller gains (gainprm[4:7]), in actuator force units per input unit.
    voltage_limit: controller output voltage limit Vmax, V (gainprm[7]).
    slew_limit: max rate of the first control, ctrl units/s (dynprm[7]).
    integral_limit: |integral state| limit Imax (dynprm[8]).
    cogging_amplitude, cogging_poles, cogging_phase: A*sin(Np*length + phase) (biasprm[0:3]).
    lugre_sigma0, lugre_sigma1: bristle stiffness / damping (dynprm[5:7]).
    lugre_coulomb, lugre_static, lugre_stribeck_velocity: F_C, F_S, v_S (biasprm[3:6]).
    forcerange: `(n, 2)` force clamp (saturation), used where `force_limited`.
    ctrlrange: `(n_ctrl, 2)` ranges of the dcmotor controls (rows by `ctrl_param_index`).
  """

  resistance_ohm: jax.Array
  motorconst: jax.Array
  electrical_time_constant_s: jax.Array
  current_rate_limit: jax.Array
  thermal_resistance: jax.Array
  thermal_capacitance: jax.Array
  ambient_temperature: jax.Array
  resistance_tempco: jax.Array
  reference_temperature: jax.Array
  kp: jax.Array
  ki: jax.Array
  kd: jax.Array
  voltage_limit: jax.Array
  slew_limit: jax.Array
  integral_limit: jax.Array
  cogging_amplitude: jax.Array
  cogging_poles: jax.Array
  cogging_phase: jax.Array
  lugre_sigma0: jax.Array
  lugre_sigma1: jax.Array
  lugre_coulomb: jax.Array
  lugre_static: jax.Array
  lugre_stribeck_velocity: jax.Array
  forcerange: jax.Array
  ctrlrange: jax.Array


def default_params(dset: DcMotorSet, mj_model: mujoco.MjModel,
                   dtype: Any = None) -> DcMotorParams:
  """Parameters read from the compiled model.

  Args:
    dset: from `prepare`.
    mj_model: the ORIGINAL compiled model (not the twin).
    dtype: array dtype; default: JAX's default float (float32 unless x64 is on).

  Returns:
    DcMotorParams with `(n,)` fields, `forcerange (n, 2)`, `ctrlrange (n_ctrl, 2)`.
  """
  ids = np.asarray(dset.actuator_id, dtype=int)
  g = mj_model.actuator_gainprm[ids]
  d = mj_model.actuator_dynprm[ids]
  b = mj_model.actuator_biasprm[ids]
  rows = [dset.ctrladr[i] + k for i in range(dset.n) for k in range(len(dset.inputs[i]))]
  ctrlrange = mj_model.actuator_ctrlrange[rows] if rows else np.zeros((0, 2))
  arr = lambda x: jnp.asarray(np.asarray(x, dtype=np.float64), dtype=dtype)
  return DcMotorParams(
      resistance_ohm=arr(g[:, 0]), motorconst=arr(g[:, 1]),
      electrical_time_constant_s=arr(d[:, 0]), current_rate_limit=arr(d[:, 1]),
      thermal_resistance=arr(d[:, 2]), thermal_capacitance=arr(d[:, 3]),
      ambient_temperature=arr(d[:, 4]), resistance_tempco=arr(g[:, 2]),
      reference_temperature=arr(g[:, 3]), kp=arr(g[:, 4]), ki=arr(g[:, 5]), kd=arr(g[:, 6]),
      voltage_limit=arr(g[:, 7]), slew_limit=arr(d[:, 7]), integral_limit=arr(d[:, 8]),
      cogging_amplitude=arr(b[:, 0]), cogging_poles=arr(b[:, 1]), cogging_phase=arr(b[:, 2]),
      lugre_sigma0=arr(d[:, 5]), lugre_sigma1=arr(d[:, 6]), lugre_coulomb=arr(b[:, 3]),
      lugre_static=arr(b[:, 4]), lugre_stribeck_velocity=arr(b[:, 5]),
      forcerange=arr(mj_model.actuator_forcerange[ids].reshape(-1, 2)),
      ctrlrange=arr(np.asarray(ctrlrange).reshape(-1, 2)))


class DcMotorState(NamedTuple):
  """dcmotor activations (MuJoCo's `act` entries), each `(n,)`; 0 where a motor lacks the slot.

  Attributes:
    slew: last applied (slew-limited) first control.
    integral: integral of (position setpoint - length), actuator length units * s.
    temperature: winding temperature rise above ambient, K.
    bristle: LuGre bristle deflection z.
    current: winding current, A.
  """

  slew: jax.Array
  integral: jax.Array
  temperature: jax.Array
  bristle: jax.Array
  current: jax.Array


def init(dset: DcMotorSet, params: DcMotorParams, mx: Any = None, dx: Any = None
         ) -> DcMotorState:
  """Initial activations, as `mj_resetData` leaves them (all zero).

  Args:
    dset, params: from `prepare` / `default_params`.
    mx, dx: twin mjx Model / Data (unused; kept for a uniform component signature).

  Returns:
    DcMotorState with `(n,)` zero fields, in the params' dtype.
  """
  del mx, dx
  z = jnp.zeros((dset.n,), dtype=params.resistance_ohm.dtype)
  return DcMotorState(z, z, z, z, z)


def state_from_act(dset: DcMotorSet, act: jax.Array) -> DcMotorState:
  """DcMotorState from a MuJoCo C `act` vector of the ORIGINAL model (e.g. `MjData.act`, key_act).

  Args:
    act: `(orig_na,)`.

  Returns:
    DcMotorState `(n,)` fields.
  """
  act = jnp.asarray(act)
  fields = []
  for k in range(len(SLOTS)):
    vals = [act[dset.act_index[i][k]] if dset.act_index[i][k] >= 0 else jnp.zeros((), act.dtype)
            for i in range(dset.n)]
    fields.append(jnp.stack(vals))
  return DcMotorState(*fields)


def act_from_state(dset: DcMotorSet, state: DcMotorState, act: jax.Array) -> jax.Array:
  """Write the dcmotor activations into a MuJoCo C (original-layout) `act` vector.

  Args:
    state: DcMotorState.
    act: `(orig_na,)` vector to update (other actuators' entries are kept).

  Returns:
    `(orig_na,)` act as `MjData.act` would hold it.
  """
  act = jnp.asarray(act)
  for i in range(dset.n):
    for k, slot in enumerate(SLOTS):
      if dset.act_index[i][k] >= 0:
        act = act.at[dset.act_index[i][k]].set(getattr(state, slot)[i])
  return act


# ------------------------------------------------------------------------------------------------
# dcmotor equations (one motor, scalars)


class _Motor(NamedTuple):
  force: jax.Array
  act_dot: DcMotorState      # scalar fields (0 where absent)
  act_next: DcMotorState
  dforce_dvel: jax.Array     # implicit-integrator derivative (MuJoCo's qDeriv contribution)


def _lugre_rate(p: DcMotorParams, i: int, vel: jax.Array) -> jax.Array:
  """a(v) = -sigma0 |v| / g(v), the bristle decay rate."""
  ratio = vel / jnp.maximum(_MINVAL, p.lugre_stribeck_velocity[i])
  g = p.lugre_coulomb[i] + (p.lugre_static[i] - p.lugre_coulomb[i]) * jnp.exp(-ratio * ratio)
  return -p.lugre_sigma0[i] * jnp.abs(vel) / jnp.maximum(_MINVAL, g)


def _lugre_next(a: jax.Array, z: jax.Array, vel: jax.Array, h: jax.Array) -> jax.Array:
  """Exact step of dz/dt = a z + v over h (a constant over the step)."""
  exp_ah = jnp.exp(a * h)
  small = jnp.abs(a) <= _MINVAL
  int_h = jnp.where(small, h, (exp_ah - 1.0) / jnp.where(small, 1.0, a))
  return exp_ah * z + int_h * vel


def _motor(dset: DcMotorSet, p: DcMotorParams, i: int, h: jax.Array, length: jax.Array,
           vel: jax.Array, u: Sequence[jax.Array], s: DcMotorState) -> _Motor:
  """MuJoCo's dcmotor: activation derivatives, next activations and force of dcmotor `i`."""
  has = lambda slot: dset.has(i, slot)
  zero = jnp.zeros_like(vel)
  inputs = dset.inputs[i]
  R0, K = p.resistance_ohm[i], p.motorconst[i]
  ad = dict.fromkeys(SLOTS, zero)
  nxt = {k: getattr(s, k)[i] for k in SLOTS}

  u_first = u[0] if inputs else zero
  if has('slew'):
    u_prev = s.slew[i]
    step = p.slew_limit[i] * h
    u_eff = jnp.clip(u_first, u_prev - step, u_prev + step)
    ad['slew'] = (u_eff - u_prev) / h
    u_first = u_eff

  x_i = zero
  if has('integral'):
    x_i = s.integral[i]
    rate = u_first - length
    if dset.has_imax[i]:
      imax = p.integral_limit[i]
      rate = jnp.where((imax > 0) & (x_i >= imax), jnp.minimum(rate, 0.0), rate)
      rate = jnp.where((imax > 0) & (x_i <= -imax), jnp.maximum(rate, 0.0), rate)
    ad['integral'] = rate

  # terminal voltage (controller, when any of pos/vel/ff is an input)
  voltage = zero
  if inputs:
    if any(b in (_POS, _VEL, _FF) for b in inputs):
      sig = dict.fromkeys((_POS, _VEL, _FF, _VOLTAGE), zero)
      for k, b in enumerate(inputs):
        sig[b] = u_first if k == 0 else u[k]
      torque = (p.kp[i] * (sig[_POS] - length) + p.kd[i] * (sig[_VEL] - vel)
                + p.ki[i] * x_i + sig[_FF])
      voltage = (R0 / K) * torque + K * vel
      if dset.has_vmax[i]:
        vmax = p.voltage_limit[i]
        voltage = jnp.where(vmax > 0, jnp.clip(voltage, -vmax, vmax), voltage)
      voltage = voltage + sig[_VOLTAGE]
    else:
      voltage = u_first

  R = R0
  te = jnp.maximum(_MINVAL, p.electrical_time_constant_s[i])
  if has('temperature'):
    T = s.temperature[i]
    R_eff = R0 * (1.0 + p.resistance_tempco[i] * (T + p.ambient_temperature[i]
                                                   - p.reference_temperature[i]))
    current = s.current[i] if has('current') else (voltage - K * vel) / R_eff
    ad['temperature'] = ((R_eff * current * current - T / p.thermal_resistance[i])
                         / p.thermal_capacitance[i])
    R = R_eff

  a_lugre = zero
  if has('bristle'):
    a_lugre = _lugre_rate(p, i, vel)
    ad['bristle'] = a_lugre * s.bristle[i] + vel

  decay = zero
  if has('current'):
    rate = (voltage / R - K / R * vel - s.current[i]) / te
    if dset.has_current_rate[i]:
      dimax = p.current_rate_limit[i]
      rate = jnp.where(dimax > 0, jnp.clip(rate, -dimax, dimax), rate)
    ad['current'] = rate
    decay = 1.0 - jnp.exp(-h / te)

  # next activations (MuJoCo's mj_advance), used early for the last slot (actearly)
  if has('current'):
    nxt['current'] = s.current[i] + ad['current'] * te * decay
  if has('bristle'):
    nxt['bristle'] = _lugre_next(a_lugre, s.bristle[i], vel, h)
  if has('integral'):
    x_next = s.integral[i] + ad['integral'] * h
    if dset.has_imax[i]:
      imax = p.integral_limit[i]
      x_next = jnp.where(imax > 0, jnp.clip(x_next, -imax, imax), x_next)
    nxt['integral'] = x_next
  for slot in ('temperature', 'slew'):
    if has(slot):
      nxt[slot] = getattr(s, slot)[i] + ad[slot] * h

  # force
  R_gain = jnp.maximum(_MINVAL, R)   # resistance at the current temperature
  if has('current'):
    force = K * nxt['current']
  else:
    force = K / R_gain * voltage - (K / R_gain) * K * vel
  if dset.force_limited[i]:
    force = jnp.clip(force, p.forcerange[i, 0], p.forcerange[i, 1])
  if dset.has_cogging[i]:
    force = force + p.cogging_amplitude[i] * jnp.sin(p.cogging_poles[i] * length
                                                     + p.cogging_phase[i])
  if has('bristle'):
    force = force - (p.lugre_sigma0[i] * s.bristle[i] + p.lugre_sigma1[i] * ad['bristle'])

  # d force / d velocity as MuJoCo's implicit integrators use it
  dfdv = zero
  if dset.integrator == int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST):
    dvdw = zero
    if any(b in (_POS, _VEL, _FF) for b in inputs):
      dvdw = -p.kd[i] * jnp.maximum(_MINVAL, R0) / K + K
    if has('current'):
      dfdv = K * (dvdw - K) * decay / R_gain
    else:
      dfdv = K * dvdw / R_gain - K * K / R_gain
    if has('bristle'):
      dfdv = jnp.where(p.lugre_sigma1[i] > 0, dfdv - p.lugre_sigma1[i], dfdv)
    if dset.force_limited[i]:
      clamped = (force <= p.forcerange[i, 0]) | (force >= p.forcerange[i, 1])
      dfdv = jnp.where(clamped, 0.0, dfdv)

  as_state = lambda dct: DcMotorState(*(dct[k] for k in SLOTS))
  return _Motor(force, as_state(ad), as_state(nxt), dfdv)


def evaluate(dset: DcMotorSet, params: DcMotorParams, timestep: jax.Array,
             length: jax.Array, velocity: jax.Array, ctrl: jax.Array,
             state: DcMotorState) -> tuple[jax.Array, DcMotorState, DcMotorState, jax.Array]:
  """dcmotor forces and activation update at one state (no MJX involved).

  Args:
    dset, params: from `prepare` / `default_params`.
    timestep: scalar, s.
    length, velocity: `(n,)` actuator lengths and velocities of the dcmotors.
    ctrl: `(orig_nu,)` controls in the ORIGINAL model's layout (clamped here like MuJoCo).
    state: current activations.

  Returns:
    `(force (n,), act_dot, next_state, dforce_dvelocity (n,))`; force is what MuJoCo reports as
    `actuator_force`; dforce_dvelocity is nonzero only for the implicitfast integrator.
  """
  forces, dots, nexts, dfdv = [], [], [], []
  for i in range(dset.n):
    u = []
    for k in range(len(dset.inputs[i])):
      c = ctrl[dset.ctrladr[i] + k]
      if dset.clampctrl and dset.ctrllimited[i][k]:
        r = params.ctrlrange[dset.ctrl_param_index[i][k]]
        c = jnp.clip(c, r[0], r[1])
      u.append(c)
    out = _motor(dset, params, i, timestep, length[i], velocity[i], u, state)
    forces.append(out.force)
    dots.append(out.act_dot)
    nexts.append(out.act_next)
    dfdv.append(out.dforce_dvel)
  stack = lambda rows: DcMotorState(*(jnp.stack([getattr(r, k) for r in rows]) for k in SLOTS))
  return jnp.stack(forces), stack(dots), stack(nexts), jnp.stack(dfdv)


# ------------------------------------------------------------------------------------------------
# the physics step


def _implicit(m: Any, d: Any, moment_dc: jax.Array, dfdv: jax.Array) -> Any:
  """MJX's implicitfast step with the dcmotor velocity derivatives added to qDeriv."""
  qderiv = _mjx_derivative.deriv_smooth_vel(m, d)
  extra = moment_dc.T @ (dfdv[:, None] * moment_dc)
  qderiv = extra if qderiv is None else qderiv + extra
  qm = _mjx_support.full_m(m, d) if _mjx_support.is_sparse(m) else d._impl.M
  qm = qm - m.opt.timestep * qderiv
  qh, _ = jax.scipy.linalg.cho_factor(qm)
  qfrc = d.qfrc_smooth + d.qfrc_constraint
  qacc = jax.scipy.linalg.cho_solve((qh, False), qfrc)
  return _mjx_forward._advance(m, d, d.act_dot, qacc)


def twin_ctrl(dset: DcMotorSet, ctrl: jax.Array, force: jax.Array) -> jax.Array:
  """The twin's ctrl: original controls of the other actuators, dcmotor forces in their slots.

  Args:
    ctrl: `(orig_nu,)` original-layout controls.
    force: `(n,)` dcmotor forces.

  Returns:
    `(twin nu,)` controls.
  """
  src = np.asarray(dset.twin_ctrl_src, dtype=int)
  out = jnp.zeros((src.size,), force.dtype)
  other = np.nonzero(src >= 0)[0]
  if other.size:
    out = out.at[other].set(ctrl[src[other]].astype(force.dtype))
  dc = [(i, c) for i, c in enumerate(dset.twin_ctrl_dc) if c >= 0]
  if dc:
    out = out.at[np.array([c for _, c in dc])].set(force[np.array([i for i, _ in dc])])
  return out


def step(dset: DcMotorSet, params: DcMotorParams, mx: Any, dx: Any, ctrl: jax.Array,
         state: DcMotorState) -> tuple[Any, DcMotorState]:
  """One physics step replacing `mjx.step(mx, dx)`.

  Args:
    dset, params: from `prepare` / `default_params`.
    mx: `mjx.put_model(twin)`.
    dx: twin mjx Data at tick k (its `ctrl` is ignored and overwritten).
    ctrl: `(orig_nu,)` controls in the ORIGINAL model's layout.
    state: dcmotor activations at tick k.

  Returns:
    `(dx_next, state_next)`. `dx_next.actuator_force[actuator_id]` is the dcmotor force as
    MuJoCo C reports it; twin `act` entries that mirror a dcmotor hold its activation.
  """
  d = _mjx_forward.fwd_position(mx, dx)
  d = _mjx_sensor.sensor_pos(mx, d)
  d = _mjx_forward.fwd_velocity(mx, d)
  d = _mjx_sensor.sensor_vel(mx, d)

  ids = np.asarray(dset.actuator_id, dtype=int)
  length = d.actuator_length[ids]
  velocity = d._impl.actuator_velocity[ids]
  ctrl = jnp.asarray(ctrl, dtype=length.dtype)
  force, act_dot, nxt, dfdv = evaluate(dset, params, mx.opt.timestep, length, velocity, ctrl,
                                       state)

  d = d.replace(ctrl=twin_ctrl(dset, ctrl, force))
  slots = [(i, a) for i, a in enumerate(dset.twin_act_dc) if a >= 0]
  if slots:
    dc_i = np.array([i for i, _ in slots])
    adr = np.array([a for _, a in slots])
    d = d.replace(act=d.act.at[adr].set(force[dc_i].astype(d.act.dtype)))

  # the rest of mjx.forward
  d = _mjx_forward.fwd_actuation(mx, d)
  d = _mjx_forward.fwd_acceleration(mx, d)
  if d._impl.efc_J.size == 0:
    d = d.replace(qacc=d.qacc_smooth)
  else:
    d = _mjx_solver.solve(mx, d)
  # MJX's forward skips sensor_acc without constraint rows; MuJoCo C always evaluates it
  # (see fibril_mjx/_mjx.py).
  d = _mjx_sensor.sensor_acc(mx, d)

  if dset.integrator == int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST):
    moment_dc = d._impl.actuator_moment[ids]
    d = _implicit(mx, d, moment_dc, dfdv)
  else:
    d = _mjx_forward.euler(mx, d)

  if slots:
    # mirror the dcmotor activation (the motor's only state) in the twin act / act_dot
    kinds = [SLOTS[max(range(len(SLOTS)), key=lambda k: dset.slots[i][k])] for i in dc_i]
    vals = jnp.stack([getattr(nxt, k)[i] for k, i in zip(kinds, dc_i)])
    dots = jnp.stack([getattr(act_dot, k)[i] for k, i in zip(kinds, dc_i)])
    d = d.replace(act=d.act.at[adr].set(vals.astype(d.act.dtype)),
                  act_dot=d.act_dot.at[adr].set(dots.astype(d.act_dot.dtype)))
  return d, nxt


def describe(dset: DcMotorSet, mj_model: mujoco.MjModel) -> list[dict]:
  """Per dcmotor actuator: name and native parameters (SI), for a plan printout.

  Args:
    dset: from `prepare`.
    mj_model: the ORIGINAL compiled model.

  Returns:
    One dict per dcmotor, in `DcMotorSet` order.
  """
  m = mj_model
  out = []
  for n, i in enumerate(dset.actuator_id):
    g, d, b = m.actuator_gainprm[i], m.actuator_dynprm[i], m.actuator_biasprm[i]
    trn = mujoco.mjtTrn(m.actuator_trntype[i]).name
    objtype = {mujoco.mjtTrn.mjTRN_JOINT: mujoco.mjtObj.mjOBJ_JOINT,
               mujoco.mjtTrn.mjTRN_JOINTINPARENT: mujoco.mjtObj.mjOBJ_JOINT,
               mujoco.mjtTrn.mjTRN_TENDON: mujoco.mjtObj.mjOBJ_TENDON,
               mujoco.mjtTrn.mjTRN_SITE: mujoco.mjtObj.mjOBJ_SITE,
               mujoco.mjtTrn.mjTRN_BODY: mujoco.mjtObj.mjOBJ_BODY}.get(
                   mujoco.mjtTrn(m.actuator_trntype[i]))
    target = (mujoco.mj_id2name(m, objtype, m.actuator_trnid[i, 0]) if objtype is not None
              else None)
    entry = {
        'name': dset.names[n],
        'actuator_id': int(i),
        'transmission': trn,
        'target': target,
        'gear': float(m.actuator_gear[i, 0]),
        'input': _input_text(int(m.actuator_ctrlspec[i])),
        'ctrladr': int(m.actuator_ctrladr[i]),
        'ctrlnum': int(m.actuator_ctrlnum[i]),
        'resistance_ohm': float(g[0]),
        'motorconst_nm_per_a': float(g[1]),
        'inductance_h': float(d[0] * g[0]),
        'electrical_time_constant_s': float(d[0]),
        'force_range': ([float(x) for x in m.actuator_forcerange[i]]
                        if m.actuator_forcelimited[i] else None),
        'current_rate_limit_a_per_s': float(d[1]) or None,
        'controller': ({'kp': float(g[4]), 'ki': float(g[5]), 'kd': float(g[6]),
                        'slewmax': float(d[7]), 'imax': float(d[8]), 'vmax': float(g[7])}
                       if any(v != 0 for v in (g[4], g[5], g[6], d[7], d[8], g[7])) else None),
        'thermal': ({'thermal_resistance_k_per_w': float(d[2]),
                     'thermal_capacitance_j_per_k': float(d[3]),
                     'resistance_tempco_per_k': float(g[2]), 'reference_temperature': float(g[3]),
                     'ambient_temperature': float(d[4])} if d[2] > 0 else None),
        'cogging': ({'amplitude': float(b[0]), 'poles': float(b[1]), 'phase_rad': float(b[2])}
                    if b[0] != 0 else None),
        'lugre': ({'sigma0': float(d[5]), 'sigma1': float(d[6]), 'coulomb': float(b[3]),
                   'static': float(b[4]), 'stribeck_velocity': float(b[5])}
                  if d[5] > 0 else None),
        'damping': float(m.actuator_damping[i]),
        'armature': float(m.actuator_armature[i]),
        'states': [k for k, s in zip(SLOTS, dset.slots[n]) if s >= 0],
    }
    out.append(entry)
  return out
