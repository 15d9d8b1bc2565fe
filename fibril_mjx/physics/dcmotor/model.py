"""The dcmotor model in JAX: static structure, parameters, activations and the force law.

`DcMotorSet` is the static structure `prepare` resolves on the host (hashable, shared by all
worlds); `DcMotorParams` the compiled physical parameters (traced, per world, differentiable);
`DcMotorState` MuJoCo's dcmotor activations; `evaluate` MuJoCo's dcmotor force and activation
update at one state. Nothing here touches MJX; all code is single-world.

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
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import mujoco

_MINVAL = mujoco.mjMINVAL

# activation slot kinds, in MuJoCo's slot order
SLOTS = ('slew', 'integral', 'temperature', 'bristle', 'current')

# input signature bits (mjtCtrlInput)
INPUT_POS, INPUT_VEL, INPUT_FF, INPUT_VOLTAGE, INPUT_NONE = 1, 2, 4, 8, 16
INPUT_NAMES = ((INPUT_POS, 'pos'), (INPUT_VEL, 'vel'), (INPUT_FF, 'ff'),
               (INPUT_VOLTAGE, 'voltage'))


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


class _At(NamedTuple):
  """Dcmotor `i` at one state: what its equations below read (scalars unless noted)."""

  dset: DcMotorSet
  p: DcMotorParams
  i: int
  h: jax.Array           # timestep, s
  length: jax.Array      # actuator length
  vel: jax.Array         # actuator velocity
  s: DcMotorState        # activations before the step, `(n,)` fields
  R0: jax.Array          # resistance at the reference temperature, ohm
  K: jax.Array           # motor constant
  zero: jax.Array        # 0 in the state's dtype


def _command(m: _At, u: Sequence[jax.Array]):
  """The slew-limited first control and the position-error integral of dcmotor `m.i`.

  Returns:
    `(u_first, integral, slew_dot, integral_dot)`: the first control after the slew limit
    (zero without inputs), the integral activation and the two activation derivatives (zero
    for absent slots).
  """
  dset, p, i, s, zero = m.dset, m.p, m.i, m.s, m.zero
  u_first = u[0] if dset.inputs[i] else zero
  slew_dot = zero
  if dset.has(i, 'slew'):
    u_prev = s.slew[i]
    step = p.slew_limit[i] * m.h
    u_eff = jnp.clip(u_first, u_prev - step, u_prev + step)
    slew_dot = (u_eff - u_prev) / m.h
    u_first = u_eff
  x_i, integral_dot = zero, zero
  if dset.has(i, 'integral'):
    x_i = s.integral[i]
    rate = u_first - m.length
    if dset.has_imax[i]:
      imax = p.integral_limit[i]
      rate = jnp.where((imax > 0) & (x_i >= imax), jnp.minimum(rate, 0.0), rate)
      rate = jnp.where((imax > 0) & (x_i <= -imax), jnp.maximum(rate, 0.0), rate)
    integral_dot = rate
  return u_first, x_i, slew_dot, integral_dot


def _voltage(m: _At, u: Sequence[jax.Array], x_i: jax.Array) -> jax.Array:
  """Terminal voltage of dcmotor `m.i`: the controller's output when any of pos / vel / ff is
  an input (`u` the controls, the first slew-limited; `x_i` the error integral), else the
  voltage input itself (zero for `input="none"`)."""
  dset, p, i, K = m.dset, m.p, m.i, m.K
  inputs = dset.inputs[i]
  if not inputs:
    return m.zero
  if not any(b in (INPUT_POS, INPUT_VEL, INPUT_FF) for b in inputs):
    return u[0]
  sig = dict.fromkeys((INPUT_POS, INPUT_VEL, INPUT_FF, INPUT_VOLTAGE), m.zero)
  for k, b in enumerate(inputs):
    sig[b] = u[k]
  torque = (p.kp[i] * (sig[INPUT_POS] - m.length) + p.kd[i] * (sig[INPUT_VEL] - m.vel)
            + p.ki[i] * x_i + sig[INPUT_FF])
  voltage = (m.R0 / K) * torque + K * m.vel
  if dset.has_vmax[i]:
    vmax = p.voltage_limit[i]
    voltage = jnp.where(vmax > 0, jnp.clip(voltage, -vmax, vmax), voltage)
  return voltage + sig[INPUT_VOLTAGE]


def _thermal(m: _At, voltage: jax.Array):
  """Winding resistance at the current temperature and the temperature-rise derivative.

  Returns:
    `(R, temperature_dot)`: `R0` and zero without the thermal slot.
  """
  dset, p, i, s = m.dset, m.p, m.i, m.s
  if not dset.has(i, 'temperature'):
    return m.R0, m.zero
  T = s.temperature[i]
  R_eff = m.R0 * (1.0 + p.resistance_tempco[i] * (T + p.ambient_temperature[i]
                                                   - p.reference_temperature[i]))
  current = s.current[i] if dset.has(i, 'current') else (voltage - m.K * m.vel) / R_eff
  temperature_dot = ((R_eff * current * current - T / p.thermal_resistance[i])
                     / p.thermal_capacitance[i])
  return R_eff, temperature_dot


def _current_rate(m: _At, R: jax.Array, te: jax.Array, voltage: jax.Array):
  """Winding-current derivative (rate-limited) and the step's decay `1 - exp(-h / te)`.

  Returns:
    `(current_dot, decay)`: zeros without the current slot.
  """
  dset, p, i, K = m.dset, m.p, m.i, m.K
  if not dset.has(i, 'current'):
    return m.zero, m.zero
  rate = (voltage / R - K / R * m.vel - m.s.current[i]) / te
  if dset.has_current_rate[i]:
    dimax = p.current_rate_limit[i]
    rate = jnp.where(dimax > 0, jnp.clip(rate, -dimax, dimax), rate)
  return rate, 1.0 - jnp.exp(-m.h / te)


def _advance(m: _At, now: dict, dot: dict, a_lugre: jax.Array, te: jax.Array,
             decay: jax.Array) -> dict:
  """Next activations `{slot: scalar}` as MuJoCo's `mj_advance` makes them from the current
  ones `now` and the derivatives `dot` (used early for the last slot: actearly)."""
  dset, p, i, s, h = m.dset, m.p, m.i, m.s, m.h
  nxt = dict(now)
  if dset.has(i, 'current'):
    nxt['current'] = s.current[i] + dot['current'] * te * decay
  if dset.has(i, 'bristle'):
    nxt['bristle'] = _lugre_next(a_lugre, s.bristle[i], m.vel, h)
  if dset.has(i, 'integral'):
    x_next = s.integral[i] + dot['integral'] * h
    if dset.has_imax[i]:
      imax = p.integral_limit[i]
      x_next = jnp.where(imax > 0, jnp.clip(x_next, -imax, imax), x_next)
    nxt['integral'] = x_next
  for slot in ('temperature', 'slew'):
    if dset.has(i, slot):
      nxt[slot] = getattr(s, slot)[i] + dot[slot] * h
  return nxt


def _force(m: _At, R_gain: jax.Array, voltage: jax.Array, current_next: jax.Array,
           bristle_dot: jax.Array) -> jax.Array:
  """Actuator force of dcmotor `m.i`: K times the next current (or the steady-state current at
  resistance `R_gain`), saturated, plus cogging, minus LuGre friction."""
  dset, p, i, K = m.dset, m.p, m.i, m.K
  if dset.has(i, 'current'):
    force = K * current_next
  else:
    force = K / R_gain * voltage - (K / R_gain) * K * m.vel
  if dset.force_limited[i]:
    force = jnp.clip(force, p.forcerange[i, 0], p.forcerange[i, 1])
  if dset.has_cogging[i]:
    force = force + p.cogging_amplitude[i] * jnp.sin(p.cogging_poles[i] * m.length
                                                     + p.cogging_phase[i])
  if dset.has(i, 'bristle'):
    force = force - (p.lugre_sigma0[i] * m.s.bristle[i] + p.lugre_sigma1[i] * bristle_dot)
  return force


def _dforce_dvel(m: _At, R_gain: jax.Array, decay: jax.Array, force: jax.Array) -> jax.Array:
  """d force / d velocity of dcmotor `m.i` as MuJoCo's implicitfast integrator uses it (zero
  for the other integrators)."""
  dset, p, i, K = m.dset, m.p, m.i, m.K
  if dset.integrator != int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST):
    return m.zero
  dvdw = m.zero
  if any(b in (INPUT_POS, INPUT_VEL, INPUT_FF) for b in dset.inputs[i]):
    dvdw = -p.kd[i] * jnp.maximum(_MINVAL, m.R0) / K + K
  if dset.has(i, 'current'):
    dfdv = K * (dvdw - K) * decay / R_gain
  else:
    dfdv = K * dvdw / R_gain - K * K / R_gain
  if dset.has(i, 'bristle'):
    dfdv = jnp.where(p.lugre_sigma1[i] > 0, dfdv - p.lugre_sigma1[i], dfdv)
  if dset.force_limited[i]:
    clamped = (force <= p.forcerange[i, 0]) | (force >= p.forcerange[i, 1])
    dfdv = jnp.where(clamped, 0.0, dfdv)
  return dfdv


def _motor(dset: DcMotorSet, p: DcMotorParams, i: int, h: jax.Array, length: jax.Array,
           vel: jax.Array, u: Sequence[jax.Array], s: DcMotorState) -> _Motor:
  """MuJoCo's dcmotor: activation derivatives, next activations and force of dcmotor `i`."""
  zero = jnp.zeros_like(vel)
  m = _At(dset, p, i, h, length, vel, s, p.resistance_ohm[i], p.motorconst[i], zero)
  dot = dict.fromkeys(SLOTS, zero)
  now = {k: getattr(s, k)[i] for k in SLOTS}
  u_first, x_i, dot['slew'], dot['integral'] = _command(m, u)
  voltage = _voltage(m, [u_first, *u[1:]], x_i)
  te = jnp.maximum(_MINVAL, p.electrical_time_constant_s[i])
  R, dot['temperature'] = _thermal(m, voltage)
  a_lugre = zero
  if dset.has(i, 'bristle'):
    a_lugre = _lugre_rate(p, i, vel)
    dot['bristle'] = a_lugre * s.bristle[i] + vel
  dot['current'], decay = _current_rate(m, R, te, voltage)
  nxt = _advance(m, now, dot, a_lugre, te, decay)
  R_gain = jnp.maximum(_MINVAL, R)   # resistance at the current temperature
  force = _force(m, R_gain, voltage, nxt['current'], dot['bristle'])
  dfdv = _dforce_dvel(m, R_gain, decay, force)
  as_state = lambda dct: DcMotorState(*(dct[k] for k in SLOTS))
  return _Motor(force, as_state(dot), as_state(nxt), dfdv)


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
