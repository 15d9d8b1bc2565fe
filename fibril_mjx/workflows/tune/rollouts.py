"""`gradients: fd` — a tune problem on MuJoCo C: threaded rollouts for the physics, exact JAX
derivatives for the device model on top of them (`RolloutProblem`).

The residual of one recording is `r(F(θ_phys), θ)`: the frames `F` (states and `sensordata` of
every tick) that MuJoCo C computes for the physical parameters, read by the device pipeline
(`pipeline.init` / `step` with frames (`WorldStart.frame`, `frame=`), the pass 3 of `physics='c'`) under every parameter.

- **Residuals**: one `mujoco.rollout` of every start × recording (a thread per core), then the
  device pipeline over the recorded frames in one vmapped JAX program.
- **Jacobian**, one column per fitted parameter, all in one program: a column is the
  forward-mode derivative (`jax.jvp`) of the device pipeline along `(e_i, ∂F/∂θ_i)`. For a
  device parameter `∂F/∂θ_i = 0` (it does not change the physics) and the column is exact.
  For an MJCF or dcmotor parameter `∂F/∂θ_i` is a forward difference of two float64 MuJoCo C
  rollouts (step `FD_STEP` in the fitted coordinate), pushed through the device model
  exactly — so quantization, schedules, filters and latency are differentiated the same way
  for both kinds, and only the physics is finite-differenced. A parameter of an actuator
  component also changes the controls: its column gets both the difference of the rollouts
  under its perturbed controls and its direct effect on the devices.
- **Windows**: none — single shooting with its exact Jacobian (`windows.free_starts` is
  multiple shooting, `shooting.ShootingProblem`); why: docs/internals/tuning.md, "Single
  shooting on MuJoCo C".
"""

from __future__ import annotations

import collections
import copy
import dataclasses

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx.batch import physics_c
from fibril_mjx.core import groups, latencies, pipeline
from fibril_mjx.core.pipeline import Frame
from fibril_mjx.mechanisms import signal as sig
from fibril_mjx.physics import mjcf, mjcf_fields
from fibril_mjx.workflows.tune import timing
from fibril_mjx.workflows.tune.problem import DataSet, Problem

FD_STEP = 1e-6   # forward-difference step of a physical parameter, in its fitted coordinate
KEPT_FRAME_BYTES = 64 * 2**20   # MuJoCo C frames of unperturbed worlds kept for a later call


def _stack(trees):
  return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def pad(tree, k: int, dtype=None):
  """Host arrays `(n, ...)` padded to `(k, ...)` by repeating the last world (NumPy: an
  eager `jnp` op on a new shape would compile a program of its own), cast to `dtype`."""
  def one(x):
    x = np.asarray(x) if dtype is None or not np.issubdtype(np.asarray(x).dtype, np.floating) \
        else np.asarray(x, dtype)
    if x.shape[0] == k:
      return x
    return np.concatenate([x, np.repeat(x[-1:], k - x.shape[0], axis=0)])
  return None if tree is None else jax.tree.map(one, tree)


class RolloutProblem(Problem):
  """A `Problem` whose physics is MuJoCo C (see the module docstring); same interface."""

  gradients = 'fd'

  def __init__(self, spec, *, progress=None, paired: bool = False, nominal=None):
    self.paired = paired
    super().__init__(dataclasses.replace(spec, window_s=None), progress=progress,
                     physics='c', nominal=nominal)
    m = self.sim.mj_model
    self.runner = physics_c.Rollout(m)
    # which parameters move the physics (a rollout per column) and how
    acts = {cid for cid, _ in pipeline.actuators(self.sim.built)}
    self.physical = [i for i, p in enumerate(self.params)
                     if p.kind != 'component' or p.target[0] in acts]
    self._pool, self._states0, self._kept = [], {}, collections.OrderedDict()
    self._script = None
    # the fitted latencies' current values (whole ticks), set by the search stage
    self.latency = {q.target: self._whole_tick(q.init) for q in self.timing}
    # one batch shape for every device pass (starts × recordings, the before/after pair on
    # train and held-out, the latency candidates): one program, traced and compiled once
    R = len(self.train.recordings)
    self.jlanes = R if paired else max(1, spec.starts) * R
    if paired:
      self.lanes = max(2, R)
    else:
      n_cand = max([len(timing.candidates(self, q)) for q in self.timing] or [1])
      self.lanes = max(2, max(1, spec.starts) * R, 2 * R, n_cand * R,
                       2 * len(self.heldout.recordings) if self.heldout else 0)

  def speculate(self, rows: int) -> bool:
    """Whether `rows` trial steps are best rolled out with their Jacobians' perturbed copies
    (`lsq.solve`): where the worlds and their copies fill fewer rounds of the
    rollout threads together than apart (e.g. 1 + 3 worlds on 2 threads: 2 rounds, against
    1 + 2). A step that is then rejected has cost its device Jacobian for nothing."""
    n = rows * (1 if self.paired else len(self.train.recordings))
    k, t = len(self.physical), self.runner.threads
    return k > 0 and -(-n * (1 + k) // t) < -(-n // t) - (-n * k // t)

  def _whole_tick(self, seconds: float) -> float:
    return round(float(seconds) / self.dt) * self.dt

  def _lat(self, starts, latency=None):
    """Latency inputs of worlds whose starts are `starts`: the current values, or per start
    `latency = {(component, field): (S,) seconds}` (the search stage's candidates)."""
    if not self.timing:
      return None
    n, out = len(starts), {}
    for q in self.timing:
      cid, field = q.target
      v = np.broadcast_to(self.latency[q.target], (n,)) if not latency or \
          q.target not in latency else np.asarray(latency[q.target], np.float64)[starts]
      out.setdefault(cid, {})[field] = np.array(v, np.float64)
    return latencies.latency_inputs(self.sim.built, out, n)

  # ----------------------------------------------------------------- traced programs

  def _compile(self):
    built, loss = self.sim.built, self.spec.loss

    def fields(u, fr, cs, lat):
      """Per term `(L, D)` delivered samples of ticks 1..L, and `(new_data, sample_tick)`:
      one scan over ticks 0..L (frames and commands `cs` of every tick, or None)."""
      _, params = self._apply(u)
      params = jax.tree.map(lambda x: x[0], params)
      st = pipeline.before_tick0(built, params, self._keys[0], pipeline.WorldStart(
          latency=lat, frame=jax.tree.map(lambda x: x[0], fr)))
      params = groups.pack(built, params)   # each group's Params stacked once, not per tick

      def body(s, xs):
        frame, c = xs
        s, out = pipeline.step(built, params, s, c, frame=frame)
        vals, tim = [], []
        for t in loss:
          d = out['sensor'][t.component]
          vals.append(getattr(d.sample, t.field).reshape(-1).astype(jnp.float32))
          tim.append((d.new_data, d.sample_tick))
        return s, (tuple(vals), tuple(tim))
      _, (vals, tim) = jax.lax.scan(body, st, (fr, cs))
      return jax.tree.map(lambda x: x[1:], (vals, tim))   # tick 0 is no sample of the loss

    fields = jax.jit(fields)   # traced once for both programs

    def resid(u, fr, cs, lat, maps):
      vals, _ = fields(u, fr, cs, lat)
      out = []
      for i in range(len(loss)):
        idx, y, w = maps[i]
        out.append(((vals[i][idx] - y) * w).reshape(-1))
      return jnp.concatenate(out)

    def jac(u, fr, cs, lat, maps, du_phys, dfr, du_dev):
      """`(residual (R,), J (R, P_phys + P_dev))`: a physical column is the jvp along
      `(e_i, ∂F/∂θ_i)`, a device column the jvp along `(e_j, 0)` (the frames held). Both
      kinds are one batch of tangents, so the pipeline is traced once
      (docs/internals/tuning.md)."""
      f = lambda uu, ff: resid(uu, ff, cs, lat, maps)   # noqa: E731
      held = jax.tree.map(lambda x: jnp.zeros((du_dev.shape[0],) + x.shape[1:], x.dtype), dfr)
      dfr = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), dfr, held)
      # the residual is the jvp's primal (unbatched: computed once), no second trace
      r, c = jax.vmap(lambda a, b: jax.jvp(f, (u, fr), (a, b)))(
          jnp.concatenate([du_phys, du_dev]), dfr)
      return r[0], c.T

    world = (0, 0, 0, 0)
    self._fields = jax.jit(jax.vmap(fields, in_axes=world))
    self._jacobian = jax.jit(jax.vmap(jac, in_axes=world + (0, None, 0, None)))

  # ----------------------------------------------------------------- MuJoCo C

  def _models(self, U, cols):
    """Per world the `MjModel` of start `s` with column `c` perturbed (`cols`: `(s, c)`, c=-1
    the unperturbed start), and the fitted coordinates of each world."""
    us = []
    for s, c in cols:
      u = np.array(U[s], np.float64)
      if c >= 0:
        u[c] += self._step(u, c)
      us.append(u)
    us = np.stack(us)
    return self.models_at(us), us

  def models_at(self, us) -> list:
    """The `MjModel` of each row of fitted coordinates `us (n, P)`: copies of the compiled
    model kept in a pool (one per world slot, rewritten every call)."""
    m = self.sim.mj_model
    while len(self._pool) < len(us):
      self._pool.append(copy.copy(m))
    for u, mw in zip(us, self._pool):
      for i, p in enumerate(self.params):
        if p.kind == 'component':
          continue
        x = np.exp(u[i]) if p.log else u[i]
        if p.kind == 'mjx':
          name, idx = p.target
          getattr(mw, name)[idx] = x
        else:   # dcmotor: MuJoCo C steps the compiled dcmotor from its gainprm
          field, di = p.target
          slot = {f: k for f, k in mjcf_fields.DCMOTOR_ATTRIBUTES.values()}[field]
          mw.actuator_gainprm[int(self.sim.dcmotor.actuator_id[di]), slot] = x
    return self._pool[:len(us)]

  def _step(self, u, i):
    lo, hi = self.bounds_u()
    h = FD_STEP * max(1.0, abs(float(u[i])))
    return -h if u[i] + h > hi[i] else h

  def _state0(self, ds: DataSet, r: int) -> np.ndarray:
    key = (id(ds), r)
    if key not in self._states0:
      self._states0[key] = self._initial_state(ds, r)
    return self._states0[key]

  def _initial_data(self, qpos, qvel):
    """A recording's initial `(qpos, qvel)` (None: the model's): MuJoCo C starts from it
    (`_initial_state`), no `mjx.Data` is made."""
    return qpos, qvel

  def _initial_state(self, ds: DataSet, r: int) -> np.ndarray:
    m = self.sim.mj_model
    qpos, qvel = ds.data0[r]
    d = mjcf.initial_data(m, self.sim.built.keyframe, qpos, qvel)
    s = np.zeros(mujoco.mj_stateSize(m, physics_c._STATE))
    mujoco.mj_getState(m, d, s, physics_c._STATE)
    return s

  def _commands(self, ds: DataSet, recs):
    """Per world the commands of ticks 0..L `(n, L + 1, ...)` (tick 0's, then the run's), or
    None."""
    if ds.commands0[0] is None:
      return None
    return _stack([jax.tree.map(lambda a, b: np.concatenate([np.asarray(a)[:1],
                                                             np.asarray(b)[:, 0]]),
                                ds.commands0[r], ds.commands[r]) for r in recs])

  def _frames(self, U, ds: DataSet, cols, recs, latency=None):
    """MuJoCo C frames `(n, L + 1, ...)` (float64 NumPy leaves) of worlds `(start, column)`
    on recordings `recs`, and the worlds' fitted coordinates. An unperturbed world rolled out
    before (same coordinates, same recording; the last `KEPT_FRAME_BYTES` of them are kept) is
    not rolled out again: a Jacobian follows the residuals of the step it accepts, and the
    report's before / after pair is the start and the optimum, both rolled out already."""
    _, us = self._models(U, cols)
    held = tuple(sorted(self.latency.items()))   # the latencies pass 1's controls were made with
    keys = [(id(ds), us[j].tobytes(), r, held) if c < 0 and latency is None else None
            for j, ((_, c), r) in enumerate(zip(cols, recs))]
    todo = [j for j, k in enumerate(keys) if k is None or k not in self._kept]
    new = {}
    if todo:
      fr_new = self._rollout(U, ds, [cols[j] for j in todo], [recs[j] for j in todo], latency)
      new = {j: jax.tree.map(lambda a, q=q: a[q], fr_new) for q, j in enumerate(todo)}
    # kept: copies (a view would hold the whole batch); those read back, as used again
    self._keep({k: jax.tree.map(np.array, new[j]) if j in new else self._kept[k]
                for j, k in enumerate(keys) if k is not None})
    if len(todo) == len(cols):   # all rolled out now, in order
      return fr_new, us
    rows = [new[j] if j in new else self._kept[keys[j]] for j in range(len(cols))]
    return Frame(*(np.stack(x) for x in zip(*rows))), us

  def _keep(self, rows: dict) -> None:
    """Keeps `rows` (this call's unperturbed worlds) and as many earlier ones, newest first,
    as fit in `KEPT_FRAME_BYTES`."""
    for k, row in rows.items():
      self._kept.pop(k, None)
      self._kept[k] = row
    size = lambda row: sum(a.nbytes for a in row)   # noqa: E731
    total = sum(size(r) for r in self._kept.values())
    while len(self._kept) > len(rows) and total > KEPT_FRAME_BYTES:
      total -= size(self._kept.popitem(last=False)[1])

  def _rollout(self, U, ds: DataSet, cols, recs, latency):
    m, L = self.sim.mj_model, self.L
    models, us = self._models(U, cols)
    s0 = np.stack([self._state0(ds, r) for r in recs])
    cmds = self._commands(ds, recs)
    built = self.sim.built
    if pipeline.actuators(built):   # pass 1: the controls, on placeholder frames
      held = physics_c.frames_from_states(m, np.repeat(s0[:, None], L + 1, axis=1),
                                          np.zeros((len(recs), L + 1, m.nsensordata)),
                                          np.zeros((len(recs), L + 1, m.nu)))
      n = len(recs)   # padded to one shape: the Jacobian's batch
      lanes = max(n, self.lanes * (1 + len(self.physical)))
      p = self._world_params(us)
      keys = np.repeat(np.asarray(self._keys), n, axis=0)
      lat = self._lat([s for s, _ in cols], latency)
      ctrl = np.asarray(physics_c.device_program(built, False,
          pad(p, lanes), pad(keys, lanes), pad(held, lanes), pad(cmds, lanes),
          pad(lat, lanes))[2], np.float64)[:n]
    else:
      if self._script is None:   # the actuator script's controls: the same every rollout
        self._script = physics_c.script_ctrl(built, L)
      ctrl = np.broadcast_to(self._script, (len(recs), L + 1, m.nu))
    st, sd = self.runner(models, s0, np.ascontiguousarray(ctrl))
    states = np.concatenate([s0[:, None], st[:, :-1]], axis=1)
    nq, nv, na = m.nq, m.nv, m.na
    return Frame(states[..., 1:1 + nq], states[..., 1 + nq:1 + nq + nv],
                 states[..., 1 + nq + nv:1 + nq + nv + na], sd, np.asarray(ctrl))

  def _world_params(self, us):
    ps = [jax.tree.map(lambda x: x[0], self._apply(jnp.asarray(u, jnp.float32))[1])
          for u in us]
    return _stack(ps)

  # ----------------------------------------------------------------- Problem interface

  def _worlds(self, S, ds, units=None):
    """The worlds `(start, recording)` of `S` starts: every start on every recording, or in
    a fleet (`paired`) start k on the recording of unit `units[k]` (default k) alone."""
    R = len(ds.recordings)
    if self.paired:
      units = list(range(S)) if units is None else [int(x) for x in units]
      if len(units) != S:
        raise ValueError(f'a fleet pairs each start with its unit: {S} starts, units {units}')
      return list(enumerate(units))
    return [(s, r) for s in range(S) for r in range(R)]

  def _device_fields(self, ds, us, fr, sr, latency):
    """The device pass over frames of worlds `sr` on the recordings of `ds`: per term
    `(n, L, D)` samples and `(new_data, sample_tick)` `(n, L)` (NumPy)."""
    n = len(sr)
    cmds = self._commands(ds, [r for _, r in sr])
    lanes = max(self.lanes, n)
    with sig.straight_through():
      vals, tim = self._fields(pad(us, lanes, np.float32), pad(fr, lanes, np.float32),
                               pad(cmds, lanes), pad(self._lat([s for s, _ in sr], latency), lanes))
    return ([np.asarray(v)[:n] for v in vals],
            [(np.asarray(a)[:n], np.asarray(b)[:n]) for a, b in tim])

  def forward(self, U, ds: DataSet, latency=None, frames=None, units=None):
    """As `Problem.forward` (one window per recording); `latency`: per start the fitted
    latencies `{(component, field): (S,) seconds}` (default: the current ones). In a fleet
    each window has the one row of its unit."""
    U = np.asarray(U, np.float64)
    S = U.shape[0]
    sr = self._worlds(S, ds, units)
    fr, us = frames or self._frames(U, ds, [(s, -1) for s, _ in sr], [r for _, r in sr],
                                    latency)
    vals, tim = self._device_fields(ds, us, fr, sr, latency)
    R = len(ds.recordings)
    fields = {t: [] for t in self.spec.loss}
    timing = {t: [] for t in self.spec.loss}
    for i, t in enumerate(self.spec.loss):
      if self.paired:   # one entry per recording: the row of its unit, or None
        v, (nd, sk) = vals[i].reshape(S, 1, self.L, -1), tim[i]
        nd, sk = nd.reshape(S, 1, self.L), sk.reshape(S, 1, self.L)
        row = {r: k for k, r in sr}
        fields[t] = [v[row[r]] if r in row else None for r in range(R)]
        timing[t] = [(nd[row[r]], sk[row[r]]) if r in row else None for r in range(R)]
        continue
      v = vals[i].reshape(S, R, self.L, -1)
      nd = tim[i][0].reshape(S, R, self.L)
      sk = tim[i][1].reshape(S, R, self.L)
      for r in range(R):
        fields[t].append(v[:, r])
        timing[t].append((nd[:, r], sk[:, r]))
    return None, fields, timing

  def residuals(self, fields, ds: DataSet):
    """As `Problem.residuals`; in a fleet row k holds the residuals of the k-th evaluated
    unit on its recording alone (and the details carry the recorded values per unit)."""
    if not self.paired:
      return super().residuals(fields, ds)
    rs, per = [], {}
    units = [r for r, f in enumerate(fields[self.spec.loss[0]]) if f is not None]
    for t in self.spec.loss:
      idx, y, wt, ts = (np.stack([ds.maps[r][t][k] for r in units]) for k in range(4))
      pred = np.stack([fields[t][r][0][idx[q]] for q, r in enumerate(units)])   # (S, M, D)
      rs.append(((pred - y) * wt).reshape(pred.shape[0], -1))
      per[t] = [(pred, y, wt, ts)]
    return np.concatenate(rs, axis=1).astype(np.float64), per

  def evaluate(self, U, ds: DataSet, *, jacobian=False, latency=None, units=None):
    """As `Problem.evaluate`: `r (S, N)`, per-term details, with `jacobian` `J (S, N, P)`;
    in a fleet `units`: the unit of each row of `U` (default: row k is unit k)."""
    U = np.asarray(U, np.float64)
    S, P = U.shape[0], len(self.params)
    sr = self._worlds(S, ds, units)
    n, phys = len(sr), self.physical
    cols = [(s, -1) for s, _ in sr]
    recs = [r_ for _, r_ in sr]
    if jacobian:   # one batch of rollouts: the starts, then each start's perturbed copies
      cols += [(s, c) for s, _ in sr for c in phys]
      recs += [r_ for _, r_ in sr for _ in phys]
    fr, us = self._frames(U, ds, cols, recs, latency)
    base = jax.tree.map(lambda x: x[:n], fr)
    _, fields, timing = self.forward(U, ds, latency, frames=(base, us[:n]),
                                     units=[r_ for _, r_ in sr] if self.paired else None)
    if not ds.maps:
      self.build_maps(ds, timing)
    r, per = self.residuals(fields, ds)
    if not jacobian:
      return r, per, None
    # tangents (worlds, P_phys, ...): the difference of each perturbed rollout
    dev = [i for i in range(P) if i not in phys]
    dfr = [jax.tree.map(lambda a, k=k: np.stack(
        [(a[n + k * len(phys) + j] - a[k]) / (us[n + k * len(phys) + j, c] - us[k, c])
         for j, c in enumerate(phys)]) if phys else np.zeros((0,) + a.shape[1:]), fr)
        for k in range(n)]
    dfr = jax.tree.map(lambda *xs: np.stack(xs).astype(np.float32), *dfr)
    eye = np.eye(P, dtype=np.float32)
    maps = self._maps(ds, recs[:n])
    cmds = self._commands(ds, recs[:n])
    lanes = max(n, self.jlanes)   # every subset of starts in the batch shape of all of them
    with sig.straight_through():
      _, J = self._jacobian(pad(us[:n], lanes, np.float32), pad(base, lanes, np.float32),
                            pad(cmds, lanes), pad(self._lat([s for s, _ in sr], latency), lanes),
                            pad(maps, lanes), eye[phys], pad(dfr, lanes), eye[dev])
    J = np.asarray(J, np.float64)[:n][..., np.argsort(phys + dev)]
    if not self.paired:
      J = J.reshape(S, len(ds.recordings), -1, P)
    return r, per, J.reshape(S, -1, P)

  def _maps(self, ds, recs):
    return {i: tuple(np.stack([ds.maps[r][t][k] for r in recs]) for k in range(3))
            for i, t in enumerate(self.spec.loss)}


__all__ = ['FD_STEP', 'RolloutProblem']
