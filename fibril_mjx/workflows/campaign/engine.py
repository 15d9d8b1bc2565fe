"""Runs the worlds of a campaign: groups by static configuration, per-world values, metrics.

`Plan` is everything a process (the driver, or a Ray worker) needs to run any chunk of a
campaign: the validated campaign, its resolved fields, one `Simulation` per static group
(loaded once, compiled once per batch shape), and `run_chunk(lo, hi)` → one row per world.

A static group is a build of the manifest with its static choices applied: component and MJCF
static fields as `overrides`, profile selections and the campaign's `scenario:` (open-loop
drives) on the parsed manifest (`manifest_variant`), every varied Params field compiled in
(`vary`), and each varied latency at its largest value of the campaign (which sizes the
queues).

Worlds run through the simulator's public world axis (`Simulation.rollout`,
`fibril_mjx.batch.worlds`): per-world MJCF fields as `model={field: (nworld, ...)}` (the rest of the
model stays compiled in as constants), initial-state offsets as `qpos_offset` /
`qvel_offset`, transport latencies as `latency=`, device sharding, LAPACK-safe sub-batches,
the one-world guard, and shared physics when only sensor / transport fields vary.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import math
import operator

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx import analysis
from fibril_mjx.builder import build
from fibril_mjx.builder import vary as fl
from fibril_mjx.batch import worlds as worlds_axis
from fibril_mjx.analysis import common
from fibril_mjx.builder.build import DCMOTOR_PARAMS
from fibril_mjx.workflows.campaign import policy as pol
from fibril_mjx.workflows.campaign import spec as sp
from fibril_mjx.errors import ConfigError, ConfigErrors, FibrilError, did_you_mean
from fibril_mjx.config.manifest import read_manifest
from fibril_mjx.batch import physics_c
from fibril_mjx.batch.simulation import Controller, Options, Simulation, Start

SUB_BATCH = 256                       # worlds per vmapped call at most (`Plan.sub_batch`)


def pow2_sub_batch(cap: int | None) -> int | None:
  """The largest power of two <= `cap` (>= 2): sub-batches that divide a power-of-two batch
  evenly, so the world axis adds no padding."""
  return None if cap is None else max(2, 1 << (int(cap).bit_length() - 1))


# ------------------------------------------------------------------------------- manifests

def manifest_variant(manifest, profiles: dict, scenario: dict | None):
  """`manifest` with component profile selections replaced and the scenario's drives.

  Args:
    profiles: `{component id: {layer: profile id or None}}` — layers replaced (None: no
      profile in that layer); the other layers of the component's `profiles:` stay.
    scenario: `{'actuator_script' | 'command_script': entries}` replacing the manifest's.

  The variant's `sha256` (the compiled-code key of `build.Built`) covers the changes.
  """
  if not profiles and not scenario:
    return manifest
  comps = []
  for e in manifest.model.components:
    if e.id not in profiles:
      comps.append(e)
      continue
    sel = {**(e.config.get('profiles') or {}), **profiles[e.id]}
    sel = {k: v for k, v in sel.items() if v is not None}
    comps.append(e.model_copy(update={'config': {**e.config, 'profiles': sel}}))
  update = {'components': comps, **{k: list(v) for k, v in (scenario or {}).items()}}
  change = json.dumps({'profiles': profiles, 'scenario': {
      k: [x.model_dump() for x in v] for k, v in (scenario or {}).items()}}, sort_keys=True)
  sha = hashlib.sha256((manifest.sha256 + change).encode()).hexdigest()
  return dataclasses.replace(manifest, model=manifest.model.model_copy(update=update),
                             sha256=sha)


def _scenario_error(e: ConfigError, manifest, campaign_file) -> ConfigError:
  """A build error in a drive the scenario replaced, pointed at the campaign file."""
  if e.file == str(manifest.path) and e.path.split('[')[0] in sp.SCENARIO_KEYS:
    return ConfigError(str(campaign_file), f'scenario.{e.path}', e.rule, e.value)
  return e


@dataclasses.dataclass(frozen=True)
class Inputs:
  """One batch's per-world inputs to `Simulation.rollout` (built on the host).

  Attributes:
    params: `{id: Params}`, leaves `(nworld, ...)`.
    keys: `(nworld, 2)` world keys `fold_in(PRNGKey(seed), w)`.
    model: `{mjx.Model field: (nworld, ...)}` per-world MJCF fields, or None.
    qpos_offset, qvel_offset: `(nworld, nq)` / `(nworld, nv)` or None.
    latency: `{component id: {latency field: (nworld,) s}}`, or None.
  """
  params: dict
  keys: jax.Array
  model: dict | None
  qpos_offset: jax.Array | None
  qvel_offset: jax.Array | None
  latency: dict | None

  def rollout(self, sim, n_ticks: int, **kw):
    """`sim.rollout` of these worlds (full trace)."""
    return sim.rollout(self.params, self.keys, n_ticks, model=self.model,
                       start=Start(self.qpos_offset, self.qvel_offset, self.latency), **kw)


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
    campaign: the validated `spec.Campaign`; fields: resolved `vary.Field`s.
    sim: the nominal `Simulation` (group 0 when no static field varies).
    n_ticks: ticks per world; chunks: `[(lo, hi), ...]` of global world indices.
    latency_max: `{field path: s}` — each varied latency's largest value over the campaign
      (the queue capacity is sized for it in every group).
    metrics: metric column names kept; criteria: the campaign's criteria.
  """

  def __init__(self, campaign: sp.Campaign, physics: str | None = None):
    """`physics` replaces the campaign file's backend (`replay` passes the one that ran)."""
    self.campaign = c = campaign
    self.physics_asked = physics or c.physics
    self.physics, self.physics_why = None, ''
    file = str(c.file)
    self.policy = None if c.controller is None else pol.load(c.controller.policy, file)
    self._controllers = {}   # {id(group Simulation): policy.Controller}
    self._vary = {}
    self.group_sims = {}   # {static choice indices: Simulation}
    # Nominal build first (for names), then with every Params field compiled in.
    nominal = self._build(None, {})
    self.fields = fl.resolve(nominal, c.vary, file) + self._goal_field(file)
    for f in self.fields:
      if f.kind == 'param':
        self._vary.setdefault(f.component, []).append(f.name)
    self.static = [f for f in self.fields if f.kind in ('static', 'profile')]
    self.latency_fields = [f for f in self.fields if f.kind == 'latency']
    self.latency_max = {}
    all_worlds = np.arange(c.worlds)
    for f in self.latency_fields:
      v, _ = fl.sample(f, c.seed, all_worlds)
      self.latency_max[f.path] = float(np.max(v))
    self.sim = self.group_sim(tuple(0 for _ in self.static)) if self.static else None
    if self.sim is None:
      self.sim = self.group_sim(())
    self.n_ticks = max(1, int(math.ceil(c.duration_s / self.sim.dt - 1e-9)))
    self.controller(self.sim)   # the controller's errors (shapes, modes) before anything runs
    self.chunks = [(lo, min(c.worlds, lo + c.chunk_worlds))
                   for lo in range(0, c.worlds, c.chunk_worlds)]
    self._check_metrics()

  # ---------------------------------------------------------------- groups

  def _build(self, overrides, profiles, vary=None) -> Simulation:
    """The campaign's manifest with `overrides`, profile selections and its scenario."""
    c = self.campaign
    man = read_manifest(c.manifest, overrides=overrides)
    var = manifest_variant(man, profiles, c.scenario)
    try:
      built = build.build(var, vary=vary)
      if self.physics is None:   # decided once, on the nominal build, for every group
        self.physics, self.physics_why = physics_c.choose(
            built, self.physics_asked, controller=c.controller)
      return Simulation(built, physics=self.physics if vary is not None else 'mjx')
    except ConfigError as e:
      raise _scenario_error(e, man, c.file) from None

  def group_sim(self, key: tuple):
    """The `Simulation` of a static group (`group_key` of its samples), built once."""
    if key in self.group_sims:
      return self.group_sims[key]
    comps, mjcf, profiles = [], [], {}
    for f, idx in zip(self.static, key):
      value = f.static_value(f.dist.params['values'][idx])
      if f.kind == 'profile':
        profiles.setdefault(f.component, {}).update(fl.profile_selection(f, value))
      elif f.component is not None:
        comps.append({'component': f.component, 'field': f.name, 'value': value})
      else:
        element, name = f.target.split(':', 1)
        mjcf.append({'element': element, 'name': name, 'attribute': f.index, 'value': value})
    for f in self.latency_fields:
      comps.append({'component': f.component, 'field': f.name,
                    'value': self.latency_max[f.path]})
    overrides = {'components': comps, 'mjcf': mjcf} if comps or mjcf else None
    try:
      sim = self._build(overrides, profiles, self._vary)
    except ConfigError as e:
      if e.file == 'overrides':
        raise FibrilError(f'{self.campaign.file}: vary: a static choice or latency is invalid '
                          f'for the manifest: {e.rule} ({e.path} = {e.value!r})') from None
      raise
    self.group_sims[key] = sim
    return sim

  # ---------------------------------------------------------------- controller

  def _goal_field(self, file) -> list:
    """The `controller.goal` distribution as a sampled field (kind `goal`)."""
    ctl = self.campaign.controller
    if ctl is None or ctl.goal is None:
      return []
    size = pol.TASKS[ctl.task].goal_size
    if fl.dist_len(ctl.goal) not in (1, size):
      raise ConfigError(file, 'controller.goal', f'per-axis lists must have {size} entries '
                        f'(the goal of task {ctl.task})', fl.dist_len(ctl.goal))
    shape = () if size == 1 else (size,)
    return [fl.Field('controller.goal', 'goal', ctl.goal, shape, np.zeros(shape))]

  def controller(self, sim) -> pol.Controller | None:
    """The policy controller of a group's `Simulation` (built once per group)."""
    if self.policy is None:
      return None
    if id(sim) not in self._controllers:
      self._controllers[id(sim)] = pol.Controller(self.campaign.controller, self.policy, sim,
                                                  self.n_ticks, str(self.campaign.file))
    return self._controllers[id(sim)]

  def goals(self, samples: dict, n: int) -> np.ndarray:
    ctl = self.campaign.controller
    if ctl.goal is None:
      return pol.default_goals(ctl.task, n)
    return samples['controller.goal'][0].reshape(n, -1)

  # ---------------------------------------------------------------- metrics

  def component_metrics(self) -> list[str]:
    out = [pol.PREFIX + m for m in pol.METRICS] if self.policy is not None else []
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
      if f.kind in ('static', 'profile'):
        cols[f.path] = fl.choice_column(f, choice)
        continue
      flat = v.reshape(len(v), -1)
      for k, name in enumerate(f.columns):
        cols[name] = flat[:, k]
    return cols

  # ---------------------------------------------------------------- running

  def group_key(self, samples: dict) -> tuple:
    """The static group of a batch whose worlds share their static choices."""
    return tuple(int(samples[f.path][1][0]) for f in self.static)

  def inputs(self, sim, worlds: np.ndarray, samples: dict) -> Inputs:
    """Per-world rollout inputs of `worlds` (global indices, one static group, already in
    their batch order) from their sampled values."""
    n = len(worlds)
    params = sim.default_params(n)
    targets = sorted({f.target for f in self.fields if f.kind == 'mjcf'})
    mxv = {t: np.array(np.broadcast_to(np.asarray(getattr(sim.mx, t)),
                                       (n,) + np.shape(getattr(sim.mx, t)))) for t in targets}
    initial = {f.target for f in self.fields if f.kind == 'initial'}
    qoff = np.zeros((n, sim.physics_model.nq), np.float32) if 'qpos' in initial else None
    voff = np.zeros((n, sim.physics_model.nv), np.float32) if 'qvel' in initial else None
    for f in self.fields:
      v = samples[f.path][0]
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
    latency = {}
    for f in self.latency_fields:
      latency.setdefault(f.component, {})[f.name] = samples[f.path][0]
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(self.campaign.seed), i))(
        jnp.asarray(worlds, jnp.uint32))
    return Inputs(params, keys, mxv or None, None if qoff is None else jnp.asarray(qoff),
                  None if voff is None else jnp.asarray(voff), latency or None)

  def sub_batch(self, sim) -> int:
    """Worlds per vmapped call, the same for every batch of the campaign whatever its size,
    device count or backend: XLA's CPU code for a batched call depends on its batch size,
    which can change a world's last bits (docs/internals/performance.md, "Sub-batches and the
    LAPACK deadlock"). At most SUB_BATCH, the chunk size and the LAPACK-safe size, as a power
    of two."""
    # MJX's LAPACK-safe cap (a trace of its step); MuJoCo C runs no LAPACK in JAX
    cap = None if getattr(sim, 'physics', 'mjx') == 'c' else sim.sub_batch_cap()[0]
    k = min(SUB_BATCH, 1 << max(1, (self.campaign.chunk_worlds - 1).bit_length()))
    return k if cap is None else min(k, pow2_sub_batch(cap))

  def run_worlds(self, worlds: np.ndarray, samples: dict | None = None, *, trace=False,
                 devices=None):
    """Runs `worlds` (global indices, one static group) and returns `(metric columns,
    flattened trace or None)`; a world's values do not depend on the others in the batch.

    The batch is padded on the host, by repeating worlds (extra lanes dropped), to a multiple
    of devices x `sub_batch`, then laid out by the world axis (`Simulation.rollout`): every
    vmapped call of the campaign has the same size and the program pads nothing.
    """
    worlds = np.asarray(worlds, np.int64)
    samples = samples if samples is not None else self.sample(worlds)
    sim = self.group_sim(self.group_key(samples))
    n = len(worlds)
    devs = worlds_axis.resolve_devices(devices)
    k = self.sub_batch(sim)
    per = len(devs) * k
    idx = np.arange(-(-n // per) * per) % n
    padded = {p: (v[idx], None if ch is None else ch[idx]) for p, (v, ch) in samples.items()}
    inp = self.inputs(sim, worlds[idx], padded)
    ctl, extra = self.controller(sim), {}
    if ctl is None:
      _, tr, _ = inp.rollout(sim, self.n_ticks, options=Options(devices=devs, sub_batch=k))
    else:   # closed loop: a carry per world (its goal), metrics from the final carry
      loop = Controller(ctl.controller, ctl.init(self.goals(padded, len(idx))), per_world=True,
                        observe_truth=True)
      _, tr, carry = inp.rollout(sim, self.n_ticks, controller=loop,
                                 options=Options(devices=devs, sub_batch=k))
      extra = ctl.metrics(jax.tree.map(lambda x: np.asarray(x)[:n], carry))
    flat = common.flatten(jax.tree.map(lambda x: np.asarray(x)[:n], tr))
    cols = self.metric_columns(sim, flat, extra)
    return cols, (flat if trace else None)

  def metric_columns(self, sim, flat, extra=None) -> dict:
    """Metric columns and `pass.<criterion>` / `pass` of a flat trace (+ `extra` metrics)."""
    values = dict(extra or {})
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
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    if plan.physics == 'c':   # the same outputs, without tracing MJX
      out = physics_c.output_shapes(sim.built, sim.default_params(2), keys)
    else:
      out = jax.eval_shape(lambda p, k: sim.outputs(sim.reset(p, k)), sim.default_params(2),
                           keys)
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
