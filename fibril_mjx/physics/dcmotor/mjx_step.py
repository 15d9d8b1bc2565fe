"""`step` (= `forward` then `integrate`): one physics step of the twin model, with the dcmotor
forces evaluated in JAX. The simulator acquires samples between the two halves (SPEC §4).

This module reaches into MJX internals: the private stages of `mujoco.mjx._src` (`forward`:
`fwd_position`, `fwd_velocity`, `fwd_actuation`, `fwd_acceleration`, `euler`, `_advance`;
`sensor`: `sensor_pos`, `sensor_vel`, `sensor_acc`; `solver.solve`;
`derivative.deriv_smooth_vel`; `support.full_m`, `support.is_sparse`) and private `Data._impl`
fields (`actuator_velocity`, `actuator_moment`, `efc_J`, `M`), so that the dcmotor force enters
between MJX's velocity and actuation stages and its velocity derivative enters implicitfast's
qDeriv. Every MJX-internal import of `fibril_mjx.physics.dcmotor` is in this one module, written
against mujoco-mjx 3.17.0; re-check on a mujoco-mjx upgrade.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx.physics.mjx import mjx  # noqa: F401  (imports mujoco.mjx quietly, before _src)
from fibril_mjx.physics.dcmotor.model import (SLOTS, DcMotorParams, DcMotorSet, DcMotorState, evaluate)
from mujoco.mjx._src import derivative as _mjx_derivative
from mujoco.mjx._src import forward as _mjx_forward
from mujoco.mjx._src import sensor as _mjx_sensor
from mujoco.mjx._src import solver as _mjx_solver
from mujoco.mjx._src import support as _mjx_support


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


def _twin_ctrl(dset: DcMotorSet, ctrl: jax.Array, force: jax.Array) -> jax.Array:
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


class Pending(NamedTuple):
  """What the integration half of a tick needs from its forward half.

  Attributes:
    state: dcmotor activations after this tick's integration (`DcMotorState`).
    act_dot: their time derivatives (`DcMotorState` layout), mirrored into the twin's act_dot.
    dfdv: `(n,)` d(force)/d(actuator velocity) of each dcmotor (implicitfast's qDeriv).
    current: the activations this tick's forward started from (to recompute it).
  """
  state: Any
  act_dot: Any
  dfdv: jax.Array
  current: Any


@functools.partial(jax.jit, static_argnums=0)   # traced once per model (`fibril_mjx.physics.mjx`)
def forward(dset: DcMotorSet, params: DcMotorParams, mx: Any, dx: Any, ctrl: jax.Array,
            state: DcMotorState) -> tuple[Any, Pending]:
  """The forward half of a physics step replacing `mjx.forward(mx, dx)`.

  Args:
    dset, params: from `prepare` / `default_params`.
    mx: `mjx.put_model(twin)`.
    dx: twin mjx Data at tick k (its `ctrl` is ignored and overwritten).
    ctrl: `(orig_nu,)` controls in the ORIGINAL model's layout.
    state: dcmotor activations at tick k.

  Returns:
    `(dx, pending)`: `dx` with every stage (and `sensordata`) of the state at tick k;
    `dx.actuator_force[actuator_id]` is the dcmotor force as MuJoCo C reports it. `pending`
    goes to `integrate`.
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

  d = d.replace(ctrl=_twin_ctrl(dset, ctrl, force))
  slots = _slots(dset)
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
  # (see fibril_mjx/physics/mjx.py).
  d = _mjx_sensor.sensor_acc(mx, d)
  return d, Pending(nxt, act_dot, dfdv, state)


@functools.partial(jax.jit, static_argnums=0)
def integrate(dset: DcMotorSet, mx: Any, d: Any, pending: Pending) -> tuple[Any, DcMotorState]:
  """The integration half: `d` from `forward`; returns `(dx_next, state_next)` (twin `act`
  entries that mirror a dcmotor hold its activation)."""
  ids = np.asarray(dset.actuator_id, dtype=int)
  if dset.integrator == int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST):
    moment_dc = d._impl.actuator_moment[ids]
    d = _implicit(mx, d, moment_dc, pending.dfdv)
  else:
    d = _mjx_forward.euler(mx, d)

  nxt, act_dot = pending.state, pending.act_dot
  slots = _slots(dset)
  if slots:
    # mirror the dcmotor activation (the motor's only state) in the twin act / act_dot
    dc_i = np.array([i for i, _ in slots])
    adr = np.array([a for _, a in slots])
    kinds = [SLOTS[max(range(len(SLOTS)), key=lambda k: dset.slots[i][k])] for i in dc_i]
    vals = jnp.stack([getattr(nxt, k)[i] for k, i in zip(kinds, dc_i)])
    dots = jnp.stack([getattr(act_dot, k)[i] for k, i in zip(kinds, dc_i)])
    d = d.replace(act=d.act.at[adr].set(vals.astype(d.act.dtype)),
                  act_dot=d.act_dot.at[adr].set(dots.astype(d.act_dot.dtype)))
  return d, nxt


def _slots(dset: DcMotorSet) -> list[tuple[int, int]]:
  """`(dcmotor index, twin act address)` of the dcmotors whose activation the twin mirrors."""
  return [(i, a) for i, a in enumerate(dset.twin_act_dc) if a >= 0]


def step(dset: DcMotorSet, params: DcMotorParams, mx: Any, dx: Any, ctrl: jax.Array,
         state: DcMotorState) -> tuple[Any, DcMotorState]:
  """One physics step replacing `mjx.step(mx, dx)`: `forward` then `integrate` (arguments as
  in `forward`); returns `(dx_next, state_next)`."""
  d, pending = forward(dset, params, mx, dx, ctrl, state)
  return integrate(dset, mx, d, pending)
