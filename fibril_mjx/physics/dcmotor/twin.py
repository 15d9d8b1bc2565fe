"""Host side: the MJX-steppable twin of a compiled model with dcmotor actuators.

`mjx.put_model` refuses the dcmotor gain / bias / dynamics types of MuJoCo 3.17. `prepare`
builds a twin `MjModel` in which every dcmotor is a unit-gain force actuator (its
`damping`/`armature` folded into the joint), keeping bodies, joints, other actuators and options
untouched, and resolves the static `DcMotorSet`. `default_params` reads the compiled dcmotor
parameters into `DcMotorParams`; `describe` lists them for a plan printout. Runs once per model,
never traced.
"""

from __future__ import annotations

import copy
from typing import Any, Optional, Sequence

import mujoco
import numpy as np

from fibril_mjx.physics.dcmotor.model import (INPUT_NAMES, INPUT_NONE, SLOTS, DcMotorParams, DcMotorSet)
from fibril_mjx.errors import FibrilError
from fibril_mjx.mechanisms import host


class UnsupportedDcMotor(FibrilError, ValueError):
  """A dcmotor (or a model feature around it) that this package cannot evaluate faithfully."""


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
  """Raise UnsupportedDcMotor for dcmotor features this package does not evaluate."""
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
  nbits = sum(1 for b, _ in INPUT_NAMES if spec & b)
  if spec & INPUT_NONE:
    if ctrlnum != 0:
      raise bad('input', f'input="none" with {ctrlnum} controls')
  elif nbits != ctrlnum:
    raise bad('input', f'input signature {spec} does not match {ctrlnum} controls')
  slots = _slot_offsets(m.actuator_dynprm[i], m.actuator_gainprm[i])
  if int(m.actuator_actnum[i]) != sum(s >= 0 for s in slots):
    raise bad('actdim', f'{m.actuator_actnum[i]} activations, expected '
              f'{sum(s >= 0 for s in slots)} from the enabled features')


def _input_text(spec: int) -> str:
  if spec & INPUT_NONE:
    return 'none'
  return ' '.join(n for b, n in INPUT_NAMES if spec & b)


def prepare(mj_model: mujoco.MjModel,
            spec: Optional[mujoco.MjSpec] = None
            ) -> tuple[mujoco.MjModel, Optional[DcMotorSet]]:
  """Host side: a twin model MJX can step, and the static dcmotor structure.

  Each dcmotor becomes a unit-gain force actuator whose input `step` computes each tick;
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
  """The static structure of the dcmotors `dc_ids` of `m` and of their slots in `twin`."""
  if twin.nu != twin.nactuator or np.any(twin.actuator_ctrlnum != 1):
    raise UnsupportedDcMotor(f'twin has nu={twin.nu}, nactuator={twin.nactuator}: some '
                             'non-dcmotor actuator has other than one control, which MJX cannot '
                             'step')
  dc = set(dc_ids)
  inputs, limited, pidx, slots, act_index = [], [], [], [], []
  nctrl_param = 0
  for i in dc_ids:
    spec = int(m.actuator_ctrlspec[i])
    bits = tuple(b for b, _ in INPUT_NAMES if spec & b) if not spec & INPUT_NONE else ()
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
      twin_ctrl_src=tuple(twin_ctrl_src),
      twin_ctrl_dc=tuple(twin_ctrl_dc),
      twin_act_src=tuple(twin_act_src),
      twin_act_dc=tuple(twin_act_dc),
      integrator=int(m.opt.integrator),
      clampctrl=not bool(m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CLAMPCTRL),
  )


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
  arr = lambda x: host.array(np.asarray(x, dtype=np.float64), dtype)  # noqa: E731
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
