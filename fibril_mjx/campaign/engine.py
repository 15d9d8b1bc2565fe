"""Runs the worlds of a campaign: groups by static configuration, per-world values, metrics.

`Plan` is everything a process (the driver, or a Ray worker) needs to run any chunk of a
campaign: the validated campaign, its resolved fields, one `Simulation` per static group
(loaded once, compiled once), and `run_chunk(lo, hi)` → one row per world.

Per-world MJX model fields and initial-state offsets need a batched model at reset and step;
`_Runner` is the small adapter over the simulator's single-world functions that does it (to
be replaced by the simulator's per-world model API when it lands).
"""

from __future__ import annotations

import ast
import math
import operator

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx import analysis, dcmotor
from fibril_mjx._mjx import mjx
from fibril_mjx.analysis import common
from fibril_mjx.build import DCMOTOR_PARAMS
from fibril_mjx.campaign import fields as fl
from fibril_mjx.campaign import spec as sp
from fibril_mjx.errors import ConfigError, ConfigErrors, FibrilError, did_you_mean
from fibril_mjx.simulator import SimState, load
from fibril_mjx.transport import with_latency

MAX_SEGMENT_TICKS = 1000


def latency_ticks(latency_s: np.ndarray, dt: float) -> np.ndarray:
  """`ceil(latency / dt)` per world, with the 1e-9 relative tolerance of `ticks_fraction`."""
  r = np.asarray(latency_s, np.float64) / dt
  return np.ceil(r - 1e-9 * np.maximum(r, 1.0)).astype(np.int32)


# ------------------------------------------------------------------------------- adapter

class _Runner:
  """Jitted reset + segment of one static group with per-world model fields, latencies and
  initial-state offsets (the simulator's reset/step with a batched model)."""

  def __init__(self, sim, mx_targets: tuple, latencies: tuple, has_initial: bool, seg: int):
    self.sim = sim
    self.mx_targets = mx_targets
    self.latencies = latencies     # ((component id, latency field), ...)
    self.has_initial = has_initial
    self.reset = jax.jit(self._reset)
    self.segment = jax.jit(lambda mxv, p, st: self._segment(mxv, p, st, seg))

  def _model(self, mxv):
    return self.sim.mx.replace(**mxv) if mxv else self.sim.mx

  def _world_reset(self, mxv, params, key, lat, qoff, voff, tick, dues):
    sim = self.sim
    mx = self._model(mxv)
    d0 = sim._data0
    if self.has_initial:
      d0 = d0.replace(qpos=d0.qpos + qoff, qvel=d0.qvel + voff)
    data = mjx.forward(mx, d0)
    comps = {cid: c.init(params[cid], key) for cid, c in sim.components.items()}
    for (cid, name), (lat_s, lat_t) in zip(self.latencies, lat):
      path = fl.LATENCY_FIELDS[name][1]
      comps[cid] = _replace_path(comps[cid], path, lambda q: with_latency(q, lat_s, lat_t))
    dc = ()
    if sim.dcmotor is not None:
      dc = dcmotor.init(sim.dcmotor, params[DCMOTOR_PARAMS], mx, data)
    ctrl = sim._ctrl0
    for cid, c in sim._actuators:
      comps[cid], ctrl = c.reset_ctrl(params[cid], comps[cid], data, ctrl)
    return data, ctrl, dc, sim._sense(params, comps, data, tick, dues)

  def _reset(self, mxv, params, keys, lat, qoff, voff):
    sim = self.sim
    tick = jnp.int32(0)
    dues, clocks = sim._advance_clocks(sim._clocks0(), tick, False)
    data, ctrl, dc, comps = jax.vmap(
        self._world_reset, in_axes=(0, 0, 0, 0, 0, 0, None, None))(
            mxv, params, keys, lat, qoff, voff, tick, dues)
    state = SimState(tick, clocks, data, ctrl, dc, comps)
    return state, jax.vmap(sim._outputs)(data, comps)

  def _step(self, mxv, params, state):
    sim = self.sim
    n = state.ctrl.shape[0]
    script_dues, clocks = sim._advance_script(state.clocks, state.tick)
    commands = sim._fill_commands(None, n, state.tick, script_dues)
    pre, clocks = sim._advance_clocks(clocks, state.tick, True)
    post, clocks = sim._advance_clocks(clocks, state.tick + 1, False)

    def world(mxv, p, data, ctrl, dc, comps, cmd):
      return sim._world_step(self._model(mxv), p, data, ctrl, dc, comps, cmd, state.tick,
                             pre, post)
    data, ctrl, dc, comps = jax.vmap(world)(mxv, params, state.data, state.ctrl,
                                            state.dcmotor, state.components, commands)
    state = SimState(state.tick + 1, clocks, data, ctrl, dc, comps)
    return state, jax.vmap(sim._outputs)(data, comps)

  def _segment(self, mxv, params, state, seg):
    def body(st, _):
      return self._step(mxv, params, st)
    return jax.lax.scan(body, state, None, length=seg)


def _replace_path(obj, path, fn):
  if not path:
    return fn(obj)
  return obj._replace(**{path[0]: _replace_path(getattr(obj, path[0]), path[1:], fn)})


# ------------------------------------------------------------------------------- metrics

_FUNCS = {'abs': np.abs, 'min': np.minimum, 'max': np.maximum, 'sqrt': np.sqrt}
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.Pow: operator.pow}


def _dotted(node):
  if isinstance(node, ast.Name):
    return node.id
  if isinstance(node, ast.Attribute):
    base = _dotted(node.value)
    return None if base is None else f'{base}.{node.attr}'
  return None


def metric_names(expr: str) -> list[str]:
  """Metric names an expression refers to (dotted names outside function position)."""
  out = []

  def visit(node):
    if isinstance(node, (ast.Name, ast.Attribute)):
      name = _dotted(node)
      if name is not None:
        out.append(name)
      return
    if isinstance(node, ast.Call):
      for a in node.args:
        visit(a)
      return
    for child in ast.iter_child_nodes(node):
      visit(child)
  visit(ast.parse(expr, mode='eval'))
  return out


def evaluate(expr: str, values: dict) -> np.ndarray:
  """Evaluates a user metric expression over `{metric: (n,)}` (float64)."""
  def ev(node):
    if isinstance(node, ast.Expression):
      return ev(node.body)
    if isinstance(node, ast.Constant):
      return float(node.value)
    if isinstance(node, ast.BinOp):
      return _OPS[type(node.op)](ev(node.left), ev(node.right))
    if isinstance(node, ast.UnaryOp):
      return -ev(node.operand) if isinstance(node.op, ast.USub) else ev(node.operand)
    if isinstance(node, ast.Call):
      f = _FUNCS[node.func.id]
      args = [ev(a) for a in node.args]
      return f(*args) if len(args) > 1 or f in (np.abs, np.sqrt) else args[0]
    return np.asarray(values[_dotted(node)], np.float64)
  with np.errstate(all='ignore'):
    return np.asarray(ev(ast.parse(expr, mode='eval')), np.float64)


# ------------------------------------------------------------------------------- plan

class Plan:
  """A campaign ready to run any chunk of worlds.

  Attributes:
    campaign: the validated `spec.Campaign`; fields: resolved `fields.Field`s.
    sim: the nominal `Simulation` (group 0 when no static field varies).
    n_ticks: ticks per world; chunks: `[(lo, hi), ...]` of global world indices.
    latency_max: `{field path: s}` — each varied latency's largest value over the campaign
      (the queue capacity is sized for it in every group).
    metrics: metric column names kept; criteria: the campaign's criteria.
  """

  def __init__(self, campaign: sp.Campaign):
    self.campaign = c = campaign
    file = str(c.file)
    self._vary = {}
    self._sims, self._runners = {}, {}
    # Nominal build first (for names), then with every Params field compiled in.
    nominal = load(c.manifest)
    self.fields = fl.resolve(nominal, c.vary, file)
    for f in self.fields:
      if f.kind == 'param':
        self._vary.setdefault(f.component, []).append(f.name)
    self.static = [f for f in self.fields if f.kind == 'static']
    self.latency_fields = [f for f in self.fields if f.kind == 'latency']
    self.latency_max = {}
    all_worlds = np.arange(c.worlds)
    for f in self.latency_fields:
      v, _ = fl.sample(f, c.seed, all_worlds)
      self.latency_max[f.path] = float(np.max(v))
    self.sim = self._group_sim(tuple(0 for _ in self.static)) if self.static else None
    if self.sim is None:
      self.sim = self._group_sim(())
    self.n_ticks = max(1, int(math.ceil(c.duration_s / self.sim.dt - 1e-9)))
    n_seg = int(math.ceil(self.n_ticks / MAX_SEGMENT_TICKS))
    self.seg = int(math.ceil(self.n_ticks / n_seg))
    self.n_seg = n_seg
    self.chunks = [(lo, min(c.worlds, lo + c.chunk_worlds))
                   for lo in range(0, c.worlds, c.chunk_worlds)]
    self._check_metrics()

  # ---------------------------------------------------------------- groups

  def _group_sim(self, key: tuple):
    if key in self._sims:
      return self._sims[key]
    comps, mjcf = [], []
    for f, idx in zip(self.static, key):
      value = f.static_value(f.dist.params['values'][idx])
      if f.component is not None:
        comps.append({'component': f.component, 'field': f.name, 'value': value})
      else:
        element, name = f.target.split(':', 1)
        mjcf.append({'element': element, 'name': name, 'attribute': f.index, 'value': value})
    for f in self.latency_fields:
      comps.append({'component': f.component, 'field': f.name,
                    'value': self.latency_max[f.path]})
    overrides = {'components': comps, 'mjcf': mjcf} if comps or mjcf else None
    try:
      sim = load(self.campaign.manifest, overrides, vary=self._vary)
    except ConfigError as e:
      if e.file == 'overrides':
        raise FibrilError(f'{self.campaign.file}: vary: a static choice or latency is invalid '
                          f'for the manifest: {e.rule} ({e.path} = {e.value!r})') from None
      raise
    self._sims[key] = sim
    return sim

  def _runner(self, key):
    if key not in self._runners:
      sim = self._group_sim(key)
      targets = tuple(sorted({f.target for f in self.fields if f.kind == 'mjcf'}))
      lats = tuple((f.component, f.name) for f in self.latency_fields)
      init = any(f.kind == 'initial' for f in self.fields)
      self._runners[key] = _Runner(sim, targets, lats, init, self.seg)
    return self._runners[key]

  # ---------------------------------------------------------------- metrics

  def component_metrics(self) -> list[str]:
    out = []
    for cid, c in self.sim.components.items():
      if analysis.for_type(c.type).metrics is not None:
        out.extend(f'{cid}.{m}' for m in _probe_metrics(self, cid))
    return out

  def _check_metrics(self):
    c = self.campaign
    file = str(c.file)
    available = self.component_metrics()
    errors = []
    kept = list(available) if c.metrics is None else []
    for i, name in enumerate(c.metrics or ()):
      if name not in available:
        errors.append(ConfigError(file, f'metrics[{i}]', 'unknown metric'
                                  + did_you_mean(name, available), name))
      else:
        kept.append(name)
    known = set(available)
    for m in c.user_metrics:
      for ref in metric_names(m.expr):
        if ref not in known:
          errors.append(ConfigError(file, f'metrics.{m.name}', f'unknown metric {ref!r} in the '
                                    'expression' + did_you_mean(ref, known), m.expr))
      known.add(m.name)
    for cr in c.criteria:
      if cr.metric not in known:
        errors.append(ConfigError(file, f'criteria.{cr.name}.metric', 'unknown metric'
                                  + did_you_mean(cr.metric, known), cr.metric))
    if errors:
      raise ConfigErrors(errors)
    self.computed = available
    self.metrics = kept + [m.name for m in c.user_metrics]

  # ---------------------------------------------------------------- sampling

  def sample(self, worlds: np.ndarray) -> dict:
    """`{field path: (values, choice)}` for global world indices `worlds`."""
    return {f.path: fl.sample(f, self.campaign.seed, worlds) for f in self.fields}

  def sampled_columns(self, samples: dict) -> dict:
    cols = {}
    for f in self.fields:
      v, choice = samples[f.path]
      if f.kind == 'static':
        vals = f.dist.params['values']
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals)
        cols[f.path] = (np.array([float(x) for x in v]) if numeric
                        else np.asarray(choice, np.int64))
        continue
      flat = v.reshape(len(v), -1)
      for k, name in enumerate(f.columns):
        cols[name] = flat[:, k]
    return cols

  # ---------------------------------------------------------------- running

  def run_worlds(self, worlds: np.ndarray, samples: dict | None = None, *, trace=False):
    """Runs `worlds` (global indices, one static group) and returns `(metric columns,
    flattened trace or None)`; a world's values do not depend on the others in the batch."""
    worlds = np.asarray(worlds, np.int64)
    samples = samples if samples is not None else self.sample(worlds)
    key = tuple(int(samples[f.path][1][0]) for f in self.static)
    runner = self._runner(key)
    sim = runner.sim
    n = len(worlds)
    # Batches are padded (repeating worlds; extra lanes dropped) to a power of two >= 2:
    # group subsets of any size then share a few compiled shapes, and a batch of one (which
    # XLA compiles to different scalar code, README "Determinism") never occurs.
    idx = np.arange(max(2, 1 << (n - 1).bit_length())) % n
    params = sim.default_params(len(idx))
    mxv = {t: np.array(np.broadcast_to(np.asarray(getattr(sim.mx, t)),
                                       (len(idx),) + np.shape(getattr(sim.mx, t))))
           for t in runner.mx_targets}
    lat = []
    qoff = np.zeros((len(idx), sim.physics_model.nq), np.float32)
    voff = np.zeros((len(idx), sim.physics_model.nv), np.float32)
    for f in self.fields:
      v = samples[f.path][0][idx]
      if f.kind == 'param':
        c = sim.components[f.component]
        params[f.component] = c.set_param(params[f.component], f.name,
                                          jnp.asarray(v, jnp.float32))
      elif f.kind == 'dcmotor':
        dp = params[DCMOTOR_PARAMS]
        leaf = getattr(dp, f.target)
        params[DCMOTOR_PARAMS] = dp._replace(**{f.target: jnp.asarray(leaf).at[
            (slice(None),) + f.index].set(jnp.asarray(v, jnp.float32))})
      elif f.kind == 'mjcf':
        mxv[f.target][(slice(None),) + f.index] = v
      elif f.kind == 'initial':
        (qoff if f.target == 'qpos' else voff)[:, f.index] += v.astype(np.float32)
    for f in self.latency_fields:
      v = samples[f.path][0][idx]
      lat.append((jnp.asarray(v, jnp.float32), jnp.asarray(latency_ticks(v, sim.dt))))
    mxv = {t: jnp.asarray(a) for t, a in mxv.items()}
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(self.campaign.seed), i))(
        jnp.asarray(worlds[idx], jnp.uint32))
    state, out0 = runner.reset(mxv, params, keys, tuple(lat), jnp.asarray(qoff),
                               jnp.asarray(voff))
    pieces = [jax.tree.map(lambda x: np.asarray(x)[:, None], out0)]
    for _ in range(self.n_seg):
      state, outs = runner.segment(mxv, params, state)
      pieces.append(jax.tree.map(lambda x: np.swapaxes(np.asarray(x), 0, 1), outs))
    tr = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1)[:n, :self.n_ticks + 1], *pieces)
    flat = common.flatten(tr)
    cols = self._metrics(sim, flat)
    return cols, (flat if trace else None)

  def _metrics(self, sim, flat) -> dict:
    values = {}
    for cid, c in sim.components.items():
      fn = analysis.for_type(c.type).metrics
      if fn is None:
        continue
      for k, v in fn(common.group(flat, 'sensor', cid), common.group(flat, 'truth', cid)).items():
        values[f'{cid}.{k}'] = np.asarray(v, np.float64)
    for m in self.campaign.user_metrics:
      values[m.name] = evaluate(m.expr, values)
    out = {name: values[name] for name in self.metrics}
    passed = None
    for cr in self.campaign.criteria:
      v = values[cr.metric]
      ok = np.isfinite(v)
      if cr.min is not None:
        ok &= v >= cr.min
      if cr.max is not None:
        ok &= v <= cr.max
      out[f'pass.{cr.name}'] = ok
      passed = ok if passed is None else passed & ok
    if passed is not None:
      out['pass'] = passed
    return out

  def run_chunk(self, lo: int, hi: int) -> dict:
    """One row per world of `[lo, hi)`: `world`, `group`, sampled values, metrics, criteria."""
    worlds = np.arange(lo, hi, dtype=np.int64)
    samples = self.sample(worlds)
    groups = np.zeros(len(worlds), np.int64)
    if self.static:
      keys = np.stack([samples[f.path][1] for f in self.static], axis=1)
      _, groups = np.unique(keys, axis=0, return_inverse=True)
      groups = np.asarray(groups).reshape(-1)
    rows = {}
    for g in np.unique(groups):
      sel = np.nonzero(groups == g)[0]
      sub = {p: (v[sel], None if ch is None else ch[sel]) for p, (v, ch) in samples.items()}
      cols, _ = self.run_worlds(worlds[sel], sub)
      for k, v in cols.items():
        rows.setdefault(k, np.zeros(len(worlds), v.dtype))[sel] = v
    group_id = np.zeros(len(worlds), np.int64)
    for i, f in enumerate(self.static):
      group_id = group_id * len(f.dist.params['values']) + samples[f.path][1]
    return {'world': worlds, 'group': group_id, **self.sampled_columns(samples), **rows}


def _probe_metrics(plan: Plan, cid: str) -> list[str]:
  """Metric names of a component: its analysis run on a zero trace of the right shapes
  (shapes from `jax.eval_shape`, nothing compiled)."""
  cache = getattr(plan, '_probe', None)
  if cache is None:
    sim = plan.sim
    st = jax.eval_shape(sim._reset_batch, None, sim.default_params(2),
                        jax.random.split(jax.random.PRNGKey(0), 2))
    out = jax.eval_shape(jax.vmap(sim._outputs), st.data, st.components)
    fake = jax.tree.map(lambda s: np.zeros((s.shape[0], 3) + s.shape[1:], s.dtype), out)
    flat = common.flatten(fake)
    cache = {}
    for c_id, c in sim.components.items():
      fn = analysis.for_type(c.type).metrics
      if fn is not None:
        with np.errstate(all='ignore'):
          cache[c_id] = list(fn(common.group(flat, 'sensor', c_id),
                                common.group(flat, 'truth', c_id)))
    plan._probe = cache
  return cache.get(cid, [])
