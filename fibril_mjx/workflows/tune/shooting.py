"""True multiple shooting on MuJoCo C (`windows: {length_s: ..., free_starts: true}`,
`ShootingProblem`).

Each training recording is cut into windows of `length_s`. Window 0 starts from the recorded
initial state; every later window's start state (positions, velocities, activations) is a free
variable of the fit, and continuity is a residual: the *defect* `x_end(w − 1) − z_w` between the
state window w − 1 reaches and the start of window w, weighted by `DEFECT_WEIGHT` per state
unit (rad, m, rad/s, m/s), so that at the solution the trajectory is continuous to ~1e-6 of a
unit while each window's derivative is the exact derivative of a short rollout: nothing
accumulates over the whole recording, and a start far from the truth does not make a long
rollout diverge. The device pipeline still runs once over the whole recording (its state —
filters, queues, schedules — is continuous by construction): only the physics is cut.

The window starts are nuisance coordinates: they are appended to the fitted parameters'
coordinates (`n_nuisance` of them, unbounded, initialised from single shooting at the start
guess), fitted with them by the same least squares (`lsq`), and left out of the report; the
parameters' ± is their block of the full covariance (the window starts' freedom included).
Held-out recordings and the report's before/after residuals are single shooting.

Every window of every start, and each column's perturbed copies, is one world of the same
`mujoco.rollout` call; a column of a window start perturbs that window alone.

Limits: hinge and slide joints only (a window start is perturbed in `qpos` coordinates, which
for a ball or free joint would leave the unit quaternion), controls from the manifest's
`actuator_script` alone (an actuator component's controls would need its state at each
window start).
"""

from __future__ import annotations

import math

import jax
import mujoco
import numpy as np

from fibril_mjx.batch import physics_c
from fibril_mjx.core import pipeline
from fibril_mjx.core.pipeline import Frame
from fibril_mjx.errors import ConfigError
from fibril_mjx.mechanisms import signal as sig
from fibril_mjx.workflows.tune.rollouts import FD_STEP, RolloutProblem, pad

DEFECT_WEIGHT = 1e4   # continuity residual per unit of a state coordinate


class _Windows:
  """The window rollouts of one `ShootingProblem.evaluate`: world k ran the job `jobs[k]` =
  `(kind, start, recording, window, column, state component)` (kind `base`, `phys`: a physical
  column perturbed by `steps[k]`, or `z`: a window-start component perturbed by `steps[k]`),
  giving `frames` `(n, Lw, ...)` and end states `ends` `(n, ns)`."""

  def __init__(self, jobs, steps, frames: Frame, ends: np.ndarray, W: int, L: int):
    self.at = {job: k for k, job in enumerate(jobs)}
    self.steps, self.frames, self.ends, self.W, self.L = steps, frames, ends, W, L

  def step(self, kind, s, r, w, c=-1, j=-1) -> float:
    """The finite-difference step of a job (0 for `base`)."""
    return self.steps[self.at[(kind, s, r, w, c, j)]]

  def end(self, kind, s, r, w, c=-1, j=-1) -> np.ndarray:
    """The end state `(ns,)` of a job."""
    return self.ends[self.at[(kind, s, r, w, c, j)]]

  def trajectory(self, kind, s, r, c=-1, wz=-1, j=-1) -> Frame:
    """Frames `(L + 1, ...)` of start s on recording r, window `wz` (or all) perturbed."""
    parts = []
    for w in range(self.W):
      key = (kind, s, r, w, c, j) if kind == 'phys' or (kind == 'z' and w == wz) else \
          ('base', s, r, w, -1, -1)
      parts.append(jax.tree.map(lambda a, k=self.at[key]: a[k], self.frames))
    return jax.tree.map(lambda *a: np.concatenate(a)[:self.L + 1], *parts)


class ShootingProblem(RolloutProblem):
  """A `RolloutProblem` with free window starts on its training recordings (see the module
  docstring). `evaluate` on the training set takes coordinates `(S, P + n_nuisance)`; with
  `(S, P)`, or on another data set, it is single shooting."""

  def __init__(self, spec, *, progress=None, nominal=None):
    super().__init__(spec, progress=progress, nominal=nominal)
    m, built = self.sim.mj_model, self.sim.built
    where = (spec.path, 'windows.free_starts')
    if m.nq != m.nv:
      raise ConfigError(*where, 'free window starts need hinge and slide joints only (a ball or '
                        'free joint has a quaternion in qpos)', True)
    if pipeline.actuators(built) or self.train.commands0[0] is not None:
      raise ConfigError(*where, "free window starts need controls from the manifest's "
                        'actuator_script alone (an actuator component carries state across '
                        'windows)', True)
    if mujoco.mj_stateSize(m, physics_c._STATE) != 1 + m.nq + m.nv + m.na:
      raise ConfigError(*where, 'free window starts need a model without plugin state', True)
    self.Lw = max(1, int(round(spec.window_s / self.dt)))
    self.W = int(math.ceil((self.L + 1) / self.Lw))
    if self.W < 2:
      raise ConfigError(spec.path, 'windows.length_s', 'one window covers the recording: free '
                        'starts need at least two windows', spec.window_s)
    self.ns = m.nq + m.nv + m.na
    self.R = len(self.train.recordings)
    self.n_nuisance = self.R * (self.W - 1) * self.ns
    self.n_defects = self.n_nuisance
    self.windows_s = self.Lw * self.dt
    ctrl = physics_c.script_ctrl(self.sim.built, self.L)
    rows = self.W * self.Lw
    self._ctrl = np.concatenate([ctrl, np.repeat(ctrl[-1:], rows - ctrl.shape[0], 0)])[:rows]

  # ----------------------------------------------------------------- windows on MuJoCo C

  def _windows(self, us, starts, wins):
    """One `mujoco.rollout` of `Lw` steps per entry: world j runs window `wins[j]` from state
    `starts[j] (ns,)` under coordinates `us[j]`. Returns `(frames (n, Lw, ...), end states
    (n, ns))` (float64)."""
    m = self.sim.mj_model
    n = len(wins)
    s0 = np.zeros((n, 1 + self.ns))
    s0[:, 0] = np.asarray(wins) * self.Lw * self.dt
    s0[:, 1:] = starts
    ctrl = np.stack([self._ctrl[w * self.Lw:(w + 1) * self.Lw] for w in wins])
    st, sd = self.runner(self.models_at(us), s0, ctrl)
    states = np.concatenate([s0[:, None], st[:, :-1]], axis=1)
    nq, nv = m.nq, m.nv
    fr = Frame(states[..., 1:1 + nq], states[..., 1 + nq:1 + nq + nv],
               states[..., 1 + nq + nv:], sd, ctrl)
    return fr, st[:, -1, 1:]

  def nuisance0(self, U) -> np.ndarray:
    """`(S, n_nuisance)`: each start's window starts on its single-shooting trajectory."""
    U = np.asarray(U, np.float64)
    sr = [(s, r) for s in range(U.shape[0]) for r in range(self.R)]
    fr, _ = self._frames(U, self.train, [(s, -1) for s, _ in sr], [r for _, r in sr])
    x = np.concatenate([fr.qpos, fr.qvel, fr.act], axis=-1)          # (S·R, L + 1, ns)
    z = x[:, [w * self.Lw for w in range(1, self.W)]]                 # (S·R, W − 1, ns)
    return z.reshape(U.shape[0], -1)

  def _start_states(self, s0, Z, s, r):
    """The `W` start states of start `s` on recording `r`."""
    z = Z[s].reshape(self.R, self.W - 1, self.ns)[r]
    return np.concatenate([s0[None], z])

  # ----------------------------------------------------------------- Problem interface

  def speculate(self, rows: int) -> bool:
    """Never: a Jacobian here rolls out every window per column and per window-start
    coordinate, far more than a trial step's idle threads (`RolloutProblem.speculate`)."""
    return False

  def evaluate(self, U, ds, *, jacobian=False, latency=None, units=None):
    U = np.asarray(U, np.float64)
    P = len(self.params)
    if ds is not self.train or U.shape[1] == P:
      return super().evaluate(U[:, :P], ds, jacobian=jacobian, latency=latency, units=units)
    S, Lw, W, ns = U.shape[0], self.Lw, self.W, self.ns
    Up, Z = U[:, :P], U[:, P:]
    phys = self.physical
    sr = [(s, r) for s in range(S) for r in range(self.R)]
    s0 = [self._state0(ds, r)[1:] for r in range(self.R)]
    # worlds: (kind, start, recording, window, column, state component)
    jobs = [('base', s, r, w, -1, -1) for s, r in sr for w in range(W)]
    if jacobian:
      jobs += [('phys', s, r, w, c, -1) for s, r in sr for c in phys for w in range(W)]
      jobs += [('z', s, r, w, -1, j) for s, r in sr for w in range(1, W) for j in range(ns)]
    us, starts, wins, steps = [], [], [], []
    for kind, s, r, w, c, j in jobs:
      u = Up[s].copy()
      x0 = self._start_states(s0[r], Z, s, r)[w].copy()
      h = 0.0
      if kind == 'phys':
        h = self._step(u, c)
        u[c] += h
      elif kind == 'z':
        h = FD_STEP * max(1.0, abs(float(x0[j])))
        x0[j] += h
      us.append(u)
      starts.append(x0)
      wins.append(w)
      steps.append(h)
    win = _Windows(jobs, steps, *self._windows(np.stack(us), np.stack(starts), wins), W, self.L)
    base = [win.trajectory('base', s, r) for s, r in sr]
    base = Frame(*(np.stack(x) for x in zip(*base)))
    _, fields, timing = self.forward(Up, ds, latency, frames=(base, np.repeat(Up, self.R, 0)))
    if not ds.maps:
      self.build_maps(ds, timing)
    r_data, per = self.residuals(fields, ds)
    defects = np.zeros((S, self.n_defects))
    for s in range(S):
      for r in range(self.R):
        z = Z[s].reshape(self.R, W - 1, ns)[r]
        for w in range(1, W):
          k = ((r * (W - 1)) + w - 1) * ns
          defects[s, k:k + ns] = DEFECT_WEIGHT * (win.end('base', s, r, w - 1) - z[w - 1])
    r_all = np.concatenate([r_data, defects], axis=1)
    if not jacobian:
      return r_all, per, None
    return r_all, per, self._jacobian_shooting(U, ds, sr, win, base, latency)

  def _jacobian_shooting(self, U, ds, sr, win: _Windows, base: Frame, latency):
    """`(S, residuals, P + n_nuisance)`: the Jacobian of `evaluate`'s residuals from its window
    rollouts `win` (finite differences of the physics, tangents through the device pipeline)
    and the single-shooting-equivalent frames `base` `(S·R, L + 1, ...)`."""
    S, P, W, ns = U.shape[0], len(self.params), self.W, self.ns
    phys = self.physical
    dev = [i for i in range(P) if i not in phys]
    nz_r = (W - 1) * ns                      # window starts of one recording
    h = win.step
    end = win.end
    # per world: tangents of the physical columns, then of its recording's window starts
    dfr = []
    for k, (s, r) in enumerate(sr):
      rows = []
      for c in phys:
        t = win.trajectory('phys', s, r, c=c)
        rows.append(jax.tree.map(lambda a, b, hh=h('phys', s, r, 0, c): (a - b) / hh, t,
                                 jax.tree.map(lambda x: x[k], base)))
      for w in range(1, W):
        for j in range(ns):
          t = win.trajectory('z', s, r, wz=w, j=j)
          rows.append(jax.tree.map(lambda a, b, hh=h('z', s, r, w, -1, j): (a - b) / hh, t,
                                   jax.tree.map(lambda x: x[k], base)))
      dfr.append(jax.tree.map(lambda *xs: np.stack(xs).astype(np.float32), *rows))
    dfr = jax.tree.map(lambda *xs: np.stack(xs), *dfr)
    eye = np.eye(P, dtype=np.float32)
    du = np.concatenate([eye[phys], np.zeros((nz_r, P), np.float32)])
    n = len(sr)
    lanes = max(n, self.jlanes)
    maps = self._maps(ds, [r for _, r in sr])
    with sig.straight_through():
      _, Jw = self._jacobian(pad(np.repeat(U[:, :P], self.R, 0), lanes, np.float32),
                             pad(base, lanes, np.float32), None,
                             pad(self._lat([s for s, _ in sr], latency), lanes),
                             pad(maps, lanes), du, pad(dfr, lanes), eye[dev])
    Jw = np.asarray(Jw, np.float64)[:n]      # (n, R_w, Pp + nz_r + Pd)
    n_w = Jw.shape[1]
    J = np.zeros((S, self.R * n_w + self.n_defects, P + self.n_nuisance))
    for k, (s, r) in enumerate(sr):
      rows = slice(r * n_w, (r + 1) * n_w)
      Js = J[s]   # a view: one advanced index at a time keeps the rows first
      Js[rows, phys] = Jw[k, :, :len(phys)]
      Js[rows, P + r * nz_r:P + (r + 1) * nz_r] = Jw[k, :, len(phys):len(phys) + nz_r]
      Js[rows, dev] = Jw[k, :, len(phys) + nz_r:]
      # defects of this recording: d_w = W·(end_{w−1} − z_w), w = 1 .. W − 1
      d0 = self.R * n_w + r * nz_r
      for w in range(1, W):
        dr = slice(d0 + (w - 1) * ns, d0 + w * ns)
        for c in phys:
          J[s, dr, c] = DEFECT_WEIGHT * (end('phys', s, r, w - 1, c) - end('base', s, r, w - 1)
                                         ) / h('phys', s, r, 0, c)
        zc = P + r * nz_r + (w - 1) * ns
        J[s, dr, zc:zc + ns] -= DEFECT_WEIGHT * np.eye(ns)
        if w >= 2:   # the end of window w − 1 depends on its own start z_{w−1}
          zp = P + r * nz_r + (w - 2) * ns
          for j in range(ns):
            J[s, dr, zp + j] = DEFECT_WEIGHT * (end('z', s, r, w - 1, -1, j)
                                                - end('base', s, r, w - 1)) / \
                h('z', s, r, w - 1, -1, j)
    return J
