"""A tune problem: recordings cut into windows, and the jitted window programs (forward
pass, residuals, forward-mode Jacobians)."""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.io import recording as rec_mod
from fibril_mjx.mechanisms import host
from fibril_mjx.physics import mjcf
from fibril_mjx.mechanisms import signal as sig
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean
from fibril_mjx.batch.simulation import Options, Start
from fibril_mjx.batch.simulation import load as load_simulation
from fibril_mjx.builder.build import DCMOTOR_PARAMS
from fibril_mjx.workflows.tune.params import (resolve_params, stochastic_overrides,
                                              latency_overrides)
from fibril_mjx.workflows.tune.spec import TuneSpec, load_recording, read_tune_file


@dataclasses.dataclass
class DataSet:
  """Recordings cut into windows, with the gather maps from model ticks to samples.

  Attributes:
    recordings: the `Recording`s.
    windows: per recording, the number of windows.
    data0: per recording, the initial `mjx.Data` (one world), or for MuJoCo C rollouts its
      `(qpos, qvel)` (`RolloutProblem._initial_data`).
    commands: per window `{cid: command pytree (L, 1, ...)}` (ticks `w·L + 1 … (w+1)·L`) or
      None.
    commands0: per recording the tick-0 commands `{cid: command pytree (1, ...)}` (issued at
      the reset) or None.
    starts: per window `(first window of its recording, that recording's initial data, its
      tick-0 commands)` — what `_window_resid` needs to make a first window exact.
    maps: per window, per loss term, `(local tick index (M,), recorded (M, D), weight (M, D),
      sample time (M,))` — filled after the first forward pass.
  """
  recordings: list
  windows: list
  data0: list
  commands: list
  commands0: list
  starts: list = dataclasses.field(default_factory=list)
  maps: list = dataclasses.field(default_factory=list)


class Problem:
  """A tune problem: the fitted simulation, its parameters, and the jitted window programs.

  Build with `Problem(spec)` (or `from_file`). Everything traced runs under
  `signal.straight_through()` and in forward mode.
  """

  gradients = 'exact'
  gradients_why = 'as asked'

  def __init__(self, spec: TuneSpec, *, progress: bool | None = None, physics: str = 'mjx',
               nominal=None):
    """`nominal`: the manifest's `Simulation` as it is, where the caller loaded it already."""
    self.spec = spec
    self.progress = (os.environ.get('FIBRIL_MJX_NO_PROGRESS') != '1') if progress is None \
        else progress
    nominal = load_simulation(spec.manifest, physics=physics) if nominal is None else nominal
    fitted = {(p['component'], p.get('field')) for p in spec.parameters if 'component' in p}
    vary = {}
    for cid, field in fitted:
      if cid in nominal.components and nominal.components[cid].param_path(field) is not None:
        vary.setdefault(cid, []).append(field)
    self.zeroed = stochastic_overrides(nominal, fitted)
    built_at = self.zeroed + latency_overrides(spec, nominal)
    if built_at or vary or nominal.physics != physics:
      self.sim = load_simulation(spec.manifest, overrides={'components': built_at} if
                                 built_at else None, vary=vary, physics=physics)
    else:   # nothing to zero, size or compile in: the manifest's own simulation
      self.sim = nominal
    params = resolve_params(spec, self.sim, nominal)
    self.params = [p for p in params if p.kind != 'latency']
    self.timing = [p for p in params if p.kind == 'latency']   # searched over whole ticks
    if self.timing and self.gradients != 'fd':
      raise ConfigError(spec.path, 'optimizer.gradients', 'a fitted latency needs gradients fd '
                        '(MuJoCo C rollouts; the exact path compiles one latency in)',
                        self.gradients)
    if not self.params:
      raise ConfigError(spec.path, 'parameters', 'needs at least one continuous parameter '
                        'beside the latencies')
    for t in spec.loss:
      if t.component not in self.sim.components:
        raise ConfigError(spec.path, 'loss', f'no component {t.component!r} in the manifest'
                          + did_you_mean(t.component, self.sim.components), t.component)
    self.dt = float(self.sim.dt)
    self.train = self._dataset(spec.train, 'train')
    self.heldout = self._dataset(spec.heldout, 'heldout') if spec.heldout else None
    self._base = self.sim.default_params(1)
    key = jax.eval_shape(lambda: jax.random.PRNGKey(0))   # PRNGKey(0): zeros, made on the host
    self._keys = host.zeros((1,) + key.shape, key.dtype)
    self._compile()

  @classmethod
  def from_file(cls, path, **kw) -> 'Problem':
    return cls(read_tune_file(path), **kw)

  # -------------------------------------------------------------- recordings → windows

  def _dataset(self, items, which) -> DataSet:
    types = {cid: c.type for cid, c in self.sim.components.items()}
    recs = [load_recording(it, self.spec.path, types) for it in items]
    for r in recs:
      for t in self.spec.loss:
        s = r.sensor(t.component)
        if t.field not in s:
          raise ConfigError(r.path, f'sensor/{t.component}/{t.field}', 'missing (the loss '
                            'needs it)')
    # window length: common to all recordings (one compiled program)
    ends = [max(float(r.sensor(t.component)[rec_mod.ARRIVAL_TIME][-1]) for t in self.spec.loss)
            for r in recs]
    if not hasattr(self, 'L'):
      longest = max(ends)
      w = self.spec.window_s if self.spec.window_s else longest + 2 * self.dt
      self.L = max(1, int(round(w / self.dt)))
    L = self.L
    data0s, windows, cmds, cmds0, starts = [], [], [], [], []
    m = self.sim.mj_model
    for r, end in zip(recs, ends):
      n = int(math.ceil((end / self.dt + 2) / L))
      windows.append(n)
      qpos, qvel = None, None   # the model's initial state
      if r.initial:   # a recording's initial state; what it leaves out is the model's
        start = mjcf.initial_data(m, self.sim.built.keyframe)   # its keyframe, else qpos0
        qpos = np.asarray(r.initial.get('qpos', start.qpos), np.float64)
        qvel = np.asarray(r.initial.get('qvel', start.qvel), np.float64)
        if qpos.shape != (m.nq,) or qvel.shape != (m.nv,):
          raise ConfigError(r.path, 'initial/qpos', f'shapes must be ({m.nq},), ({m.nv},)',
                            f'{qpos.shape}, {qvel.shape}')
      d0 = self._initial_data(qpos, qvel)
      data0s.append(d0)
      first, per_window = self._window_commands(r, n, L)
      cmds0.append(first)
      cmds.extend(per_window)
      starts.extend((w == 0, d0, first) for w in range(n))
    return DataSet(recs, windows, data0s, cmds, cmds0, starts)

  def _initial_data(self, qpos, qvel):
    """A recording's initial `mjx.Data`: the model's, or at `qpos`, `qvel` where given."""
    d0 = self.sim.data0
    if qpos is None:
      return d0
    return d0.replace(qpos=host.array(qpos, d0.qpos.dtype), qvel=host.array(qvel, d0.qvel.dtype))

  def _window_commands(self, r, n, L):
    """Per-tick commands of the recording's actuator components: `(the tick-0 commands
    (issued at the reset), per window those of its ticks w·L + 1 … (w+1)·L)`."""
    if not r.commands:
      return None, [None] * n
    nulls = self.sim.null_commands()
    T = n * L + 1
    full = {}
    for cid, fields in r.commands.items():
      if cid not in nulls:
        raise ConfigError(r.path, f'command/{cid}', 'no actuator component of that id'
                          + did_you_mean(cid, nulls))
      null = nulls[cid]
      # a flag left out (issued, enable) would keep its null value: the commands never apply
      flags = [f for f in null._fields if np.asarray(getattr(null, f)).dtype == bool]
      for name in flags:
        if name not in fields:
          raise ConfigError(r.path, f'command/{cid}/{name}', f'missing: every command entry '
                            f'needs the flags {", ".join(flags)} (e.g. all true); without '
                            'them no command would be applied')
      ticks = np.rint(np.asarray(fields[rec_mod.COMMAND_TIME]) / self.dt).astype(int)
      keep = ticks < T
      leaves = {}
      for name in null._fields:
        base = np.broadcast_to(np.asarray(getattr(null, name)), (T,)).copy()
        if name in fields:
          base[ticks[keep]] = np.asarray(fields[name])[keep]
        leaves[name] = base
      unknown = set(fields) - set(null._fields) - {rec_mod.COMMAND_TIME}
      if unknown:
        raise ConfigError(r.path, f'command/{cid}/{sorted(unknown)[0]}',
                          f'not a field of the command (fields: {", ".join(null._fields)})')
      full[cid] = (type(null), leaves)
    first = {cid: typ(**{k: jnp.asarray(v[0:1]) for k, v in leaves.items()})
             for cid, (typ, leaves) in full.items()}
    out = []
    for w in range(n):
      out.append({cid: typ(**{k: jnp.asarray(v[w * L + 1:(w + 1) * L + 1, None]) for k, v in
                              leaves.items()}) for cid, (typ, leaves) in full.items()})
    return first, out

  # -------------------------------------------------------------- traced programs

  def _apply(self, u):
    """`(mx, params)` of one start from the fitted coordinates `u (P,)`."""
    mx, params = self.sim.mx, dict(self._base)
    for i, p in enumerate(self.params):
      x = jnp.exp(u[i]) if p.log else u[i]
      if p.kind == 'component':
        cid, field = p.target
        c = self.sim.components[cid]
        leaf = jnp.asarray(c.get_param(params[cid], field))
        params[cid] = c.set_param(params[cid], field,
                                  leaf.at[(0,) + p.index].set(x.astype(leaf.dtype)))
      elif p.kind == 'mjx':
        name, idx = p.target
        arr = jnp.asarray(getattr(mx, name))
        arr = arr.at[idx].set(x.astype(arr.dtype))    # every dof of a joint: one value
        mx = mx.replace(**{name: arr})
      else:
        name, di = p.target
        dp = params[DCMOTOR_PARAMS]
        leaf = getattr(dp, name)
        params[DCMOTOR_PARAMS] = dp._replace(**{name: leaf.at[0, di].set(x.astype(leaf.dtype))})
    return mx, params

  def _reset1(self, u, data0, cmds0):
    mx, params = self._apply(u)
    return self.sim.reset(params, self._keys, model=mx, commands=cmds0, start=Start(data0=data0))

  def _advance1(self, u, state, cmds):
    """One window of one start: `(state at its end, {term: (L, D) samples}, {term: (new_data
    (L,), sample_tick (L,))})`."""
    mx, params = self._apply(u)
    state, outs, _ = self.sim.run(params, state, self.L, commands=cmds, model=mx,
                                  options=Options(record=True))
    fields, timing = {}, {}
    for i, t in enumerate(self.spec.loss):
      d = outs['sensor'][t.component]
      v = getattr(d.sample, t.field)[:, 0]
      fields[i] = v.reshape(v.shape[0], -1).astype(jnp.float32)
      timing[i] = (d.new_data[:, 0], d.sample_tick[:, 0])
    return state, fields, timing

  def _start_state(self, u, state, start):
    """A window's start state as a function of `u`: a recording's first window re-runs the
    reset under `u` (exact: its initial state is recorded); a later window keeps its simulated
    start state (held fixed: the truncated derivative the README describes) with the forward of
    its tick recomputed under `u` (`Simulation.refresh`)."""
    first, data0, cmds0 = start
    mx, params = self._apply(u)
    fresh = self._reset1(u, data0, cmds0)
    kept = self.sim.refresh(params, state, model=mx)
    return jax.tree.map(lambda a, b: jnp.where(first, a, b), fresh, kept)

  def _window_resid(self, u, state, cmds, maps, start):
    state = self._start_state(u, state, start)
    _, fields, _ = self._advance1(u, state, cmds)
    out = []
    for i in range(len(self.spec.loss)):
      idx, y, w = maps[i]
      out.append(((fields[i][idx] - y) * w).reshape(-1))
    return jnp.concatenate(out)

  def _compile(self):
    reset = jax.vmap(self._reset1, in_axes=(0, None, None))
    adv = jax.vmap(self._advance1, in_axes=(0, 0, None))
    jac1 = jax.jacfwd(self._window_resid)
    jac = jax.vmap(jax.vmap(jac1, in_axes=(None, 0, 0, 0, 0)), in_axes=(0, 0, None, None, None))
    res = jax.vmap(jax.vmap(self._window_resid, in_axes=(None, 0, 0, 0, 0)),
                   in_axes=(0, 0, None, None, None))
    self._reset = jax.jit(reset)
    self._adv = jax.jit(adv)
    self._jac = jax.jit(lambda u, st, c, mp, s0: (res(u, st, c, mp, s0), jac(u, st, c, mp, s0)))

  # -------------------------------------------------------------- forward pass

  def forward(self, U, ds: DataSet):
    """Runs every recording of `ds` for each start `U (S, P)`.

    Returns:
      `(window start states (leaves (S, W, ...)), {term: [(S, L, D) per window]},
      {term: [timing per window]})`.
    """
    U = jnp.asarray(U, jnp.float32)
    starts, fields, timing = [], {t: [] for t in self.spec.loss}, {t: [] for t in self.spec.loss}
    k = 0
    with sig.straight_through():
      for r, n, d0, c0 in zip(ds.recordings, ds.windows, ds.data0, ds.commands0):
        st = self._reset(U, d0, c0)
        for _ in range(n):
          starts.append(st)
          st, f, tm = self._adv(U, st, ds.commands[k])
          k += 1
          for i, t in enumerate(self.spec.loss):
            fields[t].append(np.asarray(f[i]))
            timing[t].append(tuple(np.asarray(a) for a in tm[i]))
    states = jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *starts)
    return states, fields, timing

  def build_maps(self, ds: DataSet, timing):
    """Maps each recorded sample to the model's acquisition at its sample tick."""
    L, dt = self.L, self.dt
    ds.maps = [dict() for _ in ds.commands]
    ds.sample_info = {}
    w0 = 0
    for r, n in zip(ds.recordings, ds.windows):
      for t in self.spec.loss:
        new, stick = [], []
        for w in range(n):
          nd, sk = timing[t][w0 + w]
          new.append(nd[0])
          stick.append(sk[0])
        new = np.concatenate(new).astype(bool)
        stick = np.concatenate(stick)
        j_all = np.nonzero(new)[0]
        s_all = stick[j_all]
        s = r.sensor(t.component)
        y = np.asarray(s[t.field], np.float64).reshape(len(s[rec_mod.SAMPLE_TIME]), -1)
        D = y.shape[1]
        wt = np.broadcast_to(np.asarray(t.weight, np.float64), (D,)) if len(t.weight) in (1, D) \
            else None
        if wt is None:
          raise ConfigError(self.spec.path, 'loss', f'{t.component}.{t.field}: weight needs 1 or '
                            f'{D} values', list(t.weight))
        k = np.rint(np.asarray(s[rec_mod.SAMPLE_TIME]) / dt).astype(int)
        per = [[] for _ in range(n)]
        if t.time == 'arrival':   # what the model's consumer holds at the recorded arrival
          ta = np.asarray(s[rec_mod.ARRIVAL_TIME], np.float64)
          ka = np.rint(ta / dt).astype(int)
          for i in np.nonzero((ka >= 1) & (ka <= n * L))[0]:
            j = int(ka[i]) - 1    # local index j of window j // L is tick j + 1
            per[j // L].append((j % L, y[i], float(ta[i])))
        elif len(s_all):
          order = np.argsort(s_all, kind='stable')
          ss, jj = s_all[order], j_all[order]
          pos = np.clip(np.searchsorted(ss, k), 0, len(ss) - 1)
          prev = np.clip(pos - 1, 0, len(ss) - 1)
          pick = np.where(np.abs(ss[prev] - k) < np.abs(ss[pos] - k), prev, pos)
          gap = np.abs(ss[pick] - k)
          tol = max(1, int(np.median(np.diff(ss))) // 2) if len(ss) > 1 else 1
          for i in np.nonzero(gap <= tol)[0]:
            j = int(jj[pick[i]])
            per[j // L].append((j % L, y[i], float(s[rec_mod.SAMPLE_TIME][i])))
        M = max(1, max(len(p) for p in per))
        for w in range(n):
          idx = np.zeros(M, np.int32)
          yy = np.zeros((M, D), np.float32)
          ww = np.zeros((M, D), np.float32)
          tt = np.full(M, np.nan)
          for q, (j, v, ts) in enumerate(per[w]):
            idx[q], yy[q], ww[q], tt[q] = j, v, wt, ts
          ds.maps[w0 + w][t] = (idx, yy, ww, tt)
      w0 += n
    # one shape for every window (M per term is the max over windows)
    for t in self.spec.loss:
      M = max(mp[t][0].shape[0] for mp in ds.maps)
      for mp in ds.maps:
        idx, yy, ww, tt = mp[t]
        pad = M - idx.shape[0]
        if pad:
          mp[t] = (np.pad(idx, (0, pad)), np.pad(yy, ((0, pad), (0, 0))),
                   np.pad(ww, ((0, pad), (0, 0))), np.pad(tt, (0, pad), constant_values=np.nan))
    used = sum(int(np.count_nonzero(mp[t][2])) for mp in ds.maps for t in self.spec.loss)
    if used == 0:
      raise FibrilError(f'{self.spec.path}: no recorded sample matches a model acquisition '
                        '(check the recordings\' sample times and the manifest schedule)')

  def residuals(self, fields, ds: DataSet):
    """`(S, N)` weighted residuals and `{term: (S, M_total, D) model, recorded, weight, time}`."""
    rs, per = [], {t: [] for t in self.spec.loss}
    for w, mp in enumerate(ds.maps):
      for t in self.spec.loss:
        idx, y, wt, ts = mp[t]
        pred = fields[t][w][:, idx]      # (S, M, D)
        rs.append(((pred - y) * wt).reshape(pred.shape[0], -1))
        per[t].append((pred, y, wt, ts))
    r = np.concatenate(rs, axis=1).astype(np.float64)
    return r, per

  def _stack_maps(self, ds):
    maps = {i: tuple(jnp.asarray(np.stack([mp[t][k] for mp in ds.maps])) for k in range(3))
            for i, t in enumerate(self.spec.loss)}
    cmds = ds.commands
    if cmds[0] is None:
      cmds = None
    else:
      cmds = jax.tree.map(lambda *xs: jnp.stack(xs), *cmds)
    first = jnp.asarray([s[0] for s in ds.starts])
    data0 = jax.tree.map(lambda *xs: jnp.stack(xs), *[s[1] for s in ds.starts])
    c0 = [s[2] for s in ds.starts]
    c0 = None if c0[0] is None else jax.tree.map(lambda *xs: jnp.stack(xs), *c0)
    return maps, cmds, (first, data0, c0)

  def evaluate(self, U, ds: DataSet, *, jacobian=False):
    """Residuals (and Jacobians) of each start on a data set.

    Returns:
      `r (S, N)`, per-term details, and with `jacobian` `J (S, N, P)` (in fitted coordinates).
    """
    states, fields, timing = self.forward(U, ds)
    if not ds.maps:
      self.build_maps(ds, timing)
    r, per = self.residuals(fields, ds)
    if not jacobian:
      return r, per, None
    maps, cmds, starts = self._stack_maps(ds)
    with sig.straight_through():
      rw, Jw = self._jac(jnp.asarray(U, jnp.float32), states, cmds, maps, starts)
    # (S, W, R[, P]) in window-major order of concatenated terms → reorder like `residuals`
    S = rw.shape[0]
    Jw = np.asarray(Jw, np.float64)
    # window residual = concat over terms of (M_t*D_t); `residuals` uses the same order
    J = Jw.reshape(S, -1, Jw.shape[-1])
    return r, per, J

  # -------------------------------------------------------------- helpers

  def dataset(self, items) -> DataSet:
    """More recordings (paths or CSV items) cut into this problem's windows, e.g. to evaluate
    residuals on them; recordings with the training recordings' sample grid reuse the compiled
    programs."""
    return self._dataset(list(items), 'extra')

  def n_residuals(self, ds: DataSet) -> int:
    """Number of residuals that are recorded samples (window padding has weight 0)."""
    if not ds.maps:
      raise FibrilError('evaluate the data set once first (it builds the sample maps)')
    return int(sum(np.count_nonzero(mp[t][2]) for mp in ds.maps for t in self.spec.loss))

  def speculate(self, rows: int) -> bool:
    """Whether the fit (`lsq.solve`) evaluates `rows` trial steps with their Jacobians:
    never through MJX (a Jacobian costs P tangents there; `RolloutProblem` overrides)."""
    return False

  def u0(self) -> np.ndarray:
    return np.array([p.to_u(p.init) for p in self.params], np.float64)

  def bounds_u(self):
    b = np.array([p.u_bounds() for p in self.params], np.float64)
    return b[:, 0], b[:, 1]

  def natural(self, U) -> np.ndarray:
    U = np.asarray(U, np.float64)
    logm = np.array([p.log for p in self.params])
    return np.where(logm, np.exp(U), U)
