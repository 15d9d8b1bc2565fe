"""Differentiable tuning against recordings (SPEC §11): fit continuous component fields and
MJCF physical fields to measured samples by gradients through the components and MJX.

The tune file (YAML):

```yaml
fibril_tune: 1
manifest: ../ahrs_turntable.yaml        # relative to this file
train: [recordings/train_0.npz]          # .npz / .parquet, {csv: log.csv, mapping: {...}},
                                         # or a ROS bag {bag: run_0/, topics: {ahrs: /imu/data}}
heldout: [recordings/heldout_0.npz]
parameters:
  - {mjcf: joint:yaw.damping, bounds: [0.01, 1.0], log: true}
  - {component: ahrs, field: angular_velocity_bias, bounds: [-0.05, 0.05]}      # all 3 axes
  - {component: ahrs, field: linear_acceleration_scale, index: 2, bounds: [0.8, 1.2]}
  - {mjcf: actuator:motor.resistance, bounds: [0.1, 10], log: true}           # dcmotor R
loss:
  - {component: ahrs, field: angular_velocity, weight: 100.0}     # residual × weight (per axis list ok)
windows: {length_s: 1.0}                 # multiple shooting (default: the whole recording)
optimizer: {method: gauss_newton, iterations: 30, starts: 4, start_spread: 0.3, seed: 0}
```

How the fit works:

- **Fitted model.** The manifest is loaded with every stochastic term held at zero (fields
  each component declares in `stochastic_fields()`, read off its error model, are set to
  0 as overrides: noise statistics belong to `validate`, not to the fit) and with the fitted
  component fields named in `vary`, so a field at its default still has a gradient. A static
  field (schedules, latency, names — anything not in Params) is rejected with the reason.
- **Straight-through derivatives.** Quantization and saturation are traced inside
  `fibril_mjx.mechanisms.signal.straight_through()`: same forward values, derivative 1 (rounding has
  zero derivative almost everywhere, so without this a quantized output would report a zero
  gradient, silently).
- **Forward-mode Jacobians.** MJX's constraint solver (joint limits, contacts) runs a
  `lax.while_loop`, which reverse mode cannot differentiate; forward mode (`jax.jacfwd`) can,
  exactly, at a cost of one tangent per parameter (the tangents are batched). Every optimizer
  gets its gradient `2 Jᵀr / N` from that Jacobian.
- **Multiple shooting.** Recordings are cut into windows of `length_s`. Window 0 starts from
  the recording's `initial/qpos|qvel` (or the model's), every later window from the full
  simulator state reached by the current estimate at its start (state estimated by
  simulation, refreshed every iteration). Residuals are therefore exactly the single-shooting
  residuals; derivatives are taken per window (all windows in one vmapped batch, bounded
  length) with the window's start state held fixed — a truncated derivative: the parameters'
  effect carried in from earlier windows is dropped, so with windows the Jacobian and the ±
  are approximations (the default, one window, is exact).
- **Loss.** For each `loss` entry, the component's delivered samples are compared with the
  recorded ones at their sample times (`sample_time_s` → the model's acquisition at that tick);
  residual = weight × (model − recorded); loss = mean squared residual over the recorded
  samples (window padding excluded).
- **Sensitivity check** at the start: a parameter whose Jacobian column is zero is reported
  by name as unidentifiable (error); near-collinear combinations are listed in the report.
- **Multi-start**: `starts` initial guesses (the first is the given start, the others drawn
  uniformly within ±`start_spread` of it in the fitted coordinate) run as one vmapped batch;
  the best is reported with the spread of the others.
- **Uncertainty**: Gauss–Newton covariance `σ̂²·c·(JᵀJ)⁻¹` at the optimum, `σ̂² = rᵀr/(N−P)`,
  `c = (1+ρ)/(1−ρ)` with ρ the lag-1 autocorrelation of the residuals (correlated sensor noise
  would otherwise make the ± too small). The report's ± is 2σ.

Optimizers: `gauss_newton` (Levenberg–Marquardt with exact forward-mode Jacobians; default),
`adam` (optax), `lbfgs` (optax L-BFGS direction with a backtracking step). Bounds are kept by
projection; `log: true` fits `log(x)` (positive quantities).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import hashlib
import json
import math
import os
import pathlib
import re
import shutil
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.io import recording as rec_mod
from fibril_mjx.mechanisms import signal as sig
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean
from fibril_mjx.batch.simulation import load as load_simulation
from fibril_mjx.mechanisms.rng import world_keys
from fibril_mjx.config.version import __version__

METHODS = ('gauss_newton', 'adam', 'lbfgs')
# MJCF physical fields that can be fitted: `element:name.attribute` -> mjx.Model field.
_JOINT_DOF = {'damping': 'dof_damping', 'armature': 'dof_armature',
              'frictionloss': 'dof_frictionloss'}
_JOINT = {'stiffness': 'jnt_stiffness'}
_DCMOTOR = {'resistance': 'resistance_ohm', 'motorconst': 'motorconst'}


# ------------------------------------------------------------------------------ tune file


@dataclasses.dataclass(frozen=True)
class Param:
  """One fitted scalar (a vector field expands to one Param per element).

  Attributes:
    name: display name, e.g. `joint:yaw.damping`, `ahrs.angular_velocity_bias[2]`.
    kind: `component`, `mjx` (an mjx.Model array) or `dcmotor` (DcMotorParams).
    target: `(component id, manifest field)`, `(mjx field, index tuple)` or
      `(DcMotorParams field, motor index)`.
    index: element index into a component field (tuple) or ().
    lower, upper: bounds in natural units; log: fit log(x).
    init: starting value (natural units).
    overlay: how the value is written to an overlay (`('component', cid, field)` or
      `('mjcf', element, name, attribute, vector index or None)`).
  """
  name: str
  kind: str
  target: tuple
  index: tuple
  lower: float
  upper: float
  log: bool
  init: float
  overlay: tuple

  def to_u(self, x):
    return np.log(x) if self.log else np.asarray(x, np.float64)

  def u_bounds(self):
    return (math.log(self.lower), math.log(self.upper)) if self.log else (self.lower, self.upper)


@dataclasses.dataclass(frozen=True)
class LossTerm:
  component: str
  field: str
  weight: tuple   # per axis


@dataclasses.dataclass
class TuneSpec:
  """A parsed tune file (`read_tune_file`); paths are absolute."""
  path: str
  manifest: str
  train: list
  heldout: list
  parameters: list     # raw dict entries
  loss: list
  window_s: float | None = None
  method: str = 'gauss_newton'
  iterations: int = 30
  learning_rate: float = 0.05
  starts: int = 1
  start_spread: float = 0.3
  seed: int = 0
  overlay_id: str = 'tuned'


_TOP = ('fibril_tune', 'manifest', 'train', 'heldout', 'parameters', 'loss', 'windows',
        'optimizer', 'overlay_id')
_OPT = ('method', 'iterations', 'learning_rate', 'starts', 'start_spread', 'seed')


def read_tune_file(path) -> TuneSpec:
  """Reads and checks a tune file; one-line `ConfigError`s naming the key."""
  from fibril_mjx.config.validation import load_yaml
  path = pathlib.Path(path)
  if not path.is_file():
    raise FibrilError(f'{path}: tune file not found')
  raw = load_yaml(path)
  return tune_spec_from_dict(raw, path)


def tune_spec_from_dict(raw: dict, path) -> TuneSpec:
  """A `TuneSpec` from the parsed YAML of a tune file at `path` (for relative paths)."""
  path = pathlib.Path(path)
  f = str(path)
  if not isinstance(raw, dict):
    raise ConfigError(f, '', 'a tune file is a mapping')
  for k in raw:
    if k not in _TOP:
      raise ConfigError(f, k, 'unknown key' + did_you_mean(k, _TOP))
  if raw.get('fibril_tune') != 1:
    raise ConfigError(f, 'fibril_tune', 'required: 1 (schema version)', raw.get('fibril_tune'))
  base = path.resolve().parent
  for k in ('manifest', 'train', 'parameters', 'loss'):
    if not raw.get(k):
      raise ConfigError(f, k, 'required')

  def recs(key):
    items = raw.get(key) or []
    if not isinstance(items, list):
      raise ConfigError(f, key, 'must be a list of recordings', items)
    out = []
    for i, it in enumerate(items):
      if isinstance(it, str):
        out.append(str(base / it))
      elif isinstance(it, dict) and 'csv' in it:
        out.append({'csv': str(base / it['csv']), 'mapping': it.get('mapping'),
                    'where': f'{key}[{i}]'})
      elif isinstance(it, dict) and 'bag' in it:
        unknown = set(it) - {'bag', 'topics'}
        if unknown:
          raise ConfigError(f, f'{key}[{i}].{sorted(unknown)[0]}', 'unknown key (a bag entry '
                            'has bag: PATH and topics: {ID: TOPIC})')
        if not it.get('topics'):
          raise ConfigError(f, f'{key}[{i}].topics', 'required for a bag: {ID: TOPIC}, e.g. '
                            '{imu: /imu/data}')
        from fibril_mjx.io import bags
        bags.parse_topics(it['topics'], f'{f}: {key}[{i}].topics')
        out.append({'bag': str(base / it['bag']), 'topics': it['topics'],
                    'where': f'{key}[{i}]'})
      else:
        raise ConfigError(f, f'{key}[{i}]', 'a recording path, {csv: FILE, mapping: {...}} or '
                          '{bag: PATH, topics: {ID: TOPIC}}', it)
    return out

  win = raw.get('windows') or {}
  opt = raw.get('optimizer') or {}
  for k in opt:
    if k not in _OPT:
      raise ConfigError(f, f'optimizer.{k}', 'unknown key' + did_you_mean(k, _OPT))
  method = opt.get('method', 'gauss_newton')
  if method not in METHODS:
    raise ConfigError(f, 'optimizer.method', f'one of {", ".join(METHODS)}', method)
  for i, p in enumerate(raw['parameters']):
    if not isinstance(p, dict) or ('mjcf' in p) == ('component' in p):
      raise ConfigError(f, f'parameters[{i}]', 'needs either mjcf: ELEMENT:NAME.ATTRIBUTE or '
                        'component: ID with field: FIELD', p)
    b = p.get('bounds')
    if not (isinstance(b, list) and len(b) == 2 and b[0] < b[1]):
      raise ConfigError(f, f'parameters[{i}].bounds', 'required: [lower, upper], lower < upper',
                        b)
    if p.get('log') and b[0] <= 0:
      raise ConfigError(f, f'parameters[{i}].bounds', 'log: true needs a positive lower bound',
                        b)
  loss = []
  for i, t in enumerate(raw['loss']):
    if not isinstance(t, dict) or 'component' not in t or 'field' not in t:
      raise ConfigError(f, f'loss[{i}]', 'needs component: ID and field: FIELD', t)
    w = t.get('weight', 1.0)
    loss.append(LossTerm(t['component'], t['field'],
                         tuple(float(x) for x in (w if isinstance(w, list) else [w]))))
  length = win.get('length_s')
  if length is not None and not (isinstance(length, (int, float)) and length > 0):
    raise ConfigError(f, 'windows.length_s', 'a positive number of seconds', length)
  return TuneSpec(
      path=f, manifest=str(base / raw['manifest']), train=recs('train'),
      heldout=recs('heldout'), parameters=list(raw['parameters']), loss=loss,
      window_s=length, method=method, iterations=int(opt.get('iterations', 30)),
      learning_rate=float(opt.get('learning_rate', 0.05)), starts=int(opt.get('starts', 1)),
      start_spread=float(opt.get('start_spread', 0.3)), seed=int(opt.get('seed', 0)),
      overlay_id=str(raw.get('overlay_id', 'tuned')))


def _load_recording(item, file, types=None):
  if isinstance(item, dict) and 'bag' in item:
    from fibril_mjx.io import bags
    return bags.read_bag(item['bag'], item['topics'], types=types,
                         origin=f'{file}: {item["where"]}.topics')
  if isinstance(item, dict):
    if not item.get('mapping'):
      raise ConfigError(file, f'{item["where"]}.mapping', 'required for a CSV recording')
    return rec_mod.read_csv(item['csv'], item['mapping'], mapping_file=file)
  return rec_mod.read_recording(item)


# ------------------------------------------------------------------------------ parameters


def _stochastic_overrides(sim, fitted: set) -> list:
  out = []
  for cid, c in sim.components.items():
    for name, fv in c.fields:
      if name not in c.stochastic_fields() or c.param_path(name) is None:
        continue
      if (cid, name) in fitted:
        raise FibrilError(f'{cid}.{name}: a stochastic term cannot be fitted here (noise '
                          'statistics belong to fibril-mjx validate / fit-profile)')
      v = np.asarray(fv.value, dtype=float)
      if np.any(v != 0):
        out.append({'component': cid, 'field': name, 'value': np.zeros_like(v).tolist()})
  return out


def _resolve_params(spec: TuneSpec, sim) -> list[Param]:
  """Expands the tune file's parameters to scalar `Param`s against the fitted simulation."""
  from fibril_mjx.builder.build import DCMOTOR_PARAMS
  f = spec.path
  m = sim.mj_model
  import mujoco
  out = []
  base = sim.default_params()
  for i, p in enumerate(spec.parameters):
    where = f'parameters[{i}]'
    lo, hi = (float(x) for x in p['bounds'])
    log = bool(p.get('log', False))
    idx_sel = p.get('index')
    if 'component' in p:
      cid, field = p['component'], p.get('field')
      if cid not in sim.components:
        raise ConfigError(f, f'{where}.component', 'no component of that id'
                          + did_you_mean(cid, sim.components), cid)
      c = sim.components[cid]
      names = [n for n, _ in c.fields]
      if field not in names:
        raise ConfigError(f, f'{where}.field', f'unknown field of {c.type}'
                          + did_you_mean(field, names), field)
      if c.param_path(field) is None:
        raise ConfigError(f, f'{where}.field', 'static field (timing, schedule or structure): '
                          'it fixes the compiled graph and the tick schedule, so it has no '
                          'derivative; fit it by comparing runs (e.g. fibril-mjx validate)',
                          field)
      val = np.asarray(c.get_param(base[cid], field), np.float64)
      elems = [()] if val.ndim == 0 else [tuple(int(j) for j in np.unravel_index(k, val.shape))
                                          for k in range(val.size)]
      if idx_sel is not None:
        sel = tuple(idx_sel) if isinstance(idx_sel, list) else (int(idx_sel),)
        if sel not in elems:
          raise ConfigError(f, f'{where}.index', f'out of range for shape {val.shape}', idx_sel)
        elems = [sel]
      for e in elems:
        name = f'{cid}.{field}' + (f'[{",".join(map(str, e))}]' if e else '')
        init = float(p.get('init', val[e])) if len(elems) == 1 else float(
            np.asarray(p['init'])[e] if isinstance(p.get('init'), list) else p.get('init', val[e]))
        out.append(Param(name, 'component', (cid, field), e, lo, hi, log, init,
                         ('component', cid, field)))
      continue
    key = str(p['mjcf'])
    mt = re.fullmatch(r'(\w+):([^.]+)\.(\w+)(?:\[(\d+)\])?', key)
    if not mt:
      raise ConfigError(f, f'{where}.mjcf', 'expected ELEMENT:NAME.ATTRIBUTE, e.g. '
                        'joint:yaw.damping or actuator:motor.gainprm[0]', key)
    element, ename, attr, k = mt.group(1), mt.group(2), mt.group(3), mt.group(4)
    k = None if k is None else int(k)
    init = p.get('init')
    if element == 'joint':
      jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, ename)
      if jid < 0:
        names = [m.joint(j).name for j in range(m.njnt)]
        raise ConfigError(f, f'{where}.mjcf', 'no joint of that name' + did_you_mean(ename, names),
                          key)
      if attr in _JOINT_DOF:
        adr, ndof = int(m.jnt_dofadr[jid]), {0: 6, 1: 3, 2: 1, 3: 1}[int(m.jnt_type[jid])]
        cur = float(getattr(m, _JOINT_DOF[attr])[adr])
        target = (_JOINT_DOF[attr], tuple(range(adr, adr + ndof)))
      elif attr in _JOINT:
        cur = float(getattr(m, _JOINT[attr])[jid])
        target = (_JOINT[attr], (jid,))
      else:
        raise ConfigError(f, f'{where}.mjcf', 'fittable joint attributes: '
                          + ', '.join([*_JOINT_DOF, *_JOINT]), key)
      out.append(Param(key, 'mjx', target, (), lo, hi, log,
                       float(init if init is not None else cur),
                       ('mjcf', 'joint', ename, attr, None)))
    elif element == 'body':
      bid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, ename)
      if bid < 0 or attr != 'mass':
        raise ConfigError(f, f'{where}.mjcf', 'needs an existing body and attribute mass', key)
      out.append(Param(key, 'mjx', ('body_mass', (bid,)), (), lo, hi, log,
                       float(init if init is not None else m.body_mass[bid]),
                       ('mjcf', 'body', ename, 'mass', None)))
    elif element == 'geom':
      gid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, ename)
      if gid < 0 or attr != 'friction':
        raise ConfigError(f, f'{where}.mjcf', 'needs an existing geom and attribute friction '
                          '(sliding friction, [0])', key)
      j = 0 if k is None else k
      out.append(Param(key, 'mjx', ('geom_friction', (gid, j)), (), lo, hi, log,
                       float(init if init is not None else m.geom_friction[gid, j]),
                       ('mjcf', 'geom', ename, 'friction', j)))
    elif element == 'actuator':
      aid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, ename)
      if aid < 0:
        names = [m.actuator(a).name for a in range(m.nu)]
        raise ConfigError(f, f'{where}.mjcf', 'no actuator of that name'
                          + did_you_mean(ename, names), key)
      dset = sim.dcmotor
      dc_ids = [] if dset is None else [int(a) for a in dset.actuator_id]
      if aid in dc_ids and attr in _DCMOTOR:
        di = dc_ids.index(aid)
        cur = float(getattr(base[DCMOTOR_PARAMS], _DCMOTOR[attr])[di])
        out.append(Param(key, 'dcmotor', (_DCMOTOR[attr], di), (), lo, hi, log,
                         float(init if init is not None else cur),
                         ('mjcf', 'actuator', ename, 'gainprm', 0 if attr == 'resistance' else 1)))
      elif attr in ('gainprm', 'biasprm') and k is not None and aid not in dc_ids:
        fld = f'actuator_{attr}'
        out.append(Param(key, 'mjx', (fld, (aid, k)), (), lo, hi, log,
                         float(init if init is not None else getattr(m, fld)[aid, k]),
                         ('mjcf', 'actuator', ename, attr, k)))
      else:
        raise ConfigError(f, f'{where}.mjcf', 'fittable actuator attributes: gainprm[k], '
                          'biasprm[k]; for a dcmotor: resistance, motorconst', key)
    else:
      raise ConfigError(f, f'{where}.mjcf', 'fittable elements: joint (damping, armature, '
                        'frictionloss, stiffness), body (mass), geom (friction), actuator', key)
  for q in out:
    if not q.lower <= q.init <= q.upper:
      raise FibrilError(f'{f}: {q.name}: start value {q.init:g} outside bounds '
                        f'[{q.lower:g}, {q.upper:g}]')
  return out


# ------------------------------------------------------------------------------ data sets


@dataclasses.dataclass
class DataSet:
  """Recordings cut into windows, with the gather maps from model ticks to samples.

  Attributes:
    recordings: the `Recording`s.
    windows: per recording, the number of windows.
    data0: per recording, the initial `mjx.Data` (one world).
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

  def __init__(self, spec: TuneSpec, *, progress: bool | None = None):
    self.spec = spec
    self.progress = (os.environ.get('FIBRIL_MJX_NO_PROGRESS') != '1') if progress is None \
        else progress
    nominal = load_simulation(spec.manifest)
    fitted = {(p['component'], p.get('field')) for p in spec.parameters if 'component' in p}
    vary = {}
    for cid, field in fitted:
      if cid in nominal.components and nominal.components[cid].param_path(field) is not None:
        vary.setdefault(cid, []).append(field)
    self.zeroed = _stochastic_overrides(nominal, fitted)
    self.sim = load_simulation(spec.manifest, overrides={'components': self.zeroed} if
                               self.zeroed else None, vary=vary)
    self.params = _resolve_params(spec, self.sim)
    for t in spec.loss:
      if t.component not in self.sim.components:
        raise ConfigError(spec.path, 'loss', f'no component {t.component!r} in the manifest'
                          + did_you_mean(t.component, self.sim.components), t.component)
    self.dt = float(self.sim.dt)
    rec_lengths = []
    self.train = self._dataset(spec.train, 'train')
    self.heldout = self._dataset(spec.heldout, 'heldout') if spec.heldout else None
    del rec_lengths
    self._base = self.sim.default_params(1)
    self._keys = jax.random.PRNGKey(0)[None]
    self._compile()

  @classmethod
  def from_file(cls, path, **kw) -> 'Problem':
    return cls(read_tune_file(path), **kw)

  # -------------------------------------------------------------- recordings → windows

  def _dataset(self, items, which) -> DataSet:
    types = {cid: c.type for cid, c in self.sim.components.items()}
    recs = [_load_recording(it, self.spec.path, types) for it in items]
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
    import mujoco  # noqa: F401
    data0s, windows, cmds, cmds0, starts = [], [], [], [], []
    m = self.sim.mj_model
    for r, end in zip(recs, ends):
      n = int(math.ceil((end / self.dt + 2) / L))
      windows.append(n)
      d0 = self.sim._data0
      if r.initial:
        qpos = np.asarray(r.initial.get('qpos', np.asarray(d0.qpos)))
        qvel = np.asarray(r.initial.get('qvel', np.asarray(d0.qvel)))
        if qpos.shape != (m.nq,) or qvel.shape != (m.nv,):
          raise ConfigError(r.path, 'initial/qpos', f'shapes must be ({m.nq},), ({m.nv},)',
                            f'{qpos.shape}, {qvel.shape}')
        d0 = d0.replace(qpos=jnp.asarray(qpos, d0.qpos.dtype),
                        qvel=jnp.asarray(qvel, d0.qvel.dtype))
      data0s.append(d0)
      first, per_window = self._window_commands(r, n, L)
      cmds0.append(first)
      cmds.extend(per_window)
      starts.extend((w == 0, d0, first) for w in range(n))
    return DataSet(recs, windows, data0s, cmds, cmds0, starts)

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
    from fibril_mjx.builder.build import DCMOTOR_PARAMS
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
        if len(idx) == 2 and arr.ndim == 2:
          arr = arr.at[idx].set(x.astype(arr.dtype))
        else:
          arr = arr.at[np.asarray(idx)].set(x.astype(arr.dtype))
        mx = mx.replace(**{name: arr})
      else:
        name, di = p.target
        dp = params[DCMOTOR_PARAMS]
        leaf = getattr(dp, name)
        params[DCMOTOR_PARAMS] = dp._replace(**{name: leaf.at[0, di].set(x.astype(leaf.dtype))})
    return mx, params

  def _reset1(self, u, data0, cmds0):
    mx, params = self._apply(u)
    s = copy.copy(self.sim)
    s._data0 = data0
    return s._reset_batch(mx, params, self._keys, commands=cmds0)

  def _advance1(self, u, state, cmds):
    """One window of one start: `(state at its end, {term: (L, D) samples}, {term: (new_data
    (L,), sample_tick (L,))})`."""
    mx, params = self._apply(u)
    (state, _), outs = self.sim._run_batch(mx, params, state, None, cmds, n_ticks=self.L,
                                           record=True)
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
    kept = self.sim.refresh(mx, params, state)
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
    self._jac = jax.jit(lambda u, st, c, mp, s0: (res(u, st, c, mp, s0),
                                                  jac(u, st, c, mp, s0)))

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
        if len(s_all):
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

  def u0(self) -> np.ndarray:
    return np.array([p.to_u(p.init) for p in self.params], np.float64)

  def bounds_u(self):
    b = np.array([p.u_bounds() for p in self.params], np.float64)
    return b[:, 0], b[:, 1]

  def natural(self, U) -> np.ndarray:
    U = np.asarray(U, np.float64)
    logm = np.array([p.log for p in self.params])
    return np.where(logm, np.exp(U), U)


# ------------------------------------------------------------------------------ fitting


@dataclasses.dataclass
class TuneResult:
  """What `tune` returns (and `write_outputs` writes).

  Attributes:
    names, estimate, sigma (1σ, natural units), start, lower, upper: per parameter.
    starts: `(S, P)` starting values; finals `(S, P)`; final_losses `(S,)`; best: index.
    spread: `(P,)` standard deviation of the converged starts' estimates.
    loss_curve: `(iterations + 1, S)` training loss per start.
    train_rms_before / after, heldout_rms_before / after: `{term: (D,)}` residual RMS in the
      sensor's units (unweighted).
    train_loss, heldout_loss: final mean squared weighted residual.
    unidentifiable_combinations: near-collinear parameter groups at the start (names).
    correlation: `(P, P)` at the optimum.
    traces: held-out traces for the plot.
  """
  names: list
  estimate: np.ndarray
  sigma: np.ndarray
  start: np.ndarray
  lower: np.ndarray
  upper: np.ndarray
  starts: np.ndarray
  finals: np.ndarray
  final_losses: np.ndarray
  best: int
  spread: np.ndarray
  loss_curve: np.ndarray
  train_rms_before: dict
  train_rms_after: dict
  heldout_rms_before: dict | None
  heldout_rms_after: dict | None
  train_loss: float
  heldout_loss: float | None
  correlation: np.ndarray
  collinear: list
  method: str
  wall_s: float
  iterations: int
  traces: dict | None = None
  problem: Any = None


def _rms(per):
  out = {}
  for t, items in per.items():
    num = sum(np.sum(((p - y) ** 2) * (w != 0), axis=1) for p, y, w, _ in items)  # (S, D)
    den = sum(np.sum(w != 0, axis=0) for p, y, w, _ in items)
    out[f'{t.component}.{t.field}'] = np.sqrt(num / np.maximum(den, 1))
  return out


def _pick(d, s):
  return None if d is None else {k: v[s].tolist() for k, v in d.items()}


def _sensitivity(prob: Problem, J0: np.ndarray):
  norms = np.linalg.norm(J0, axis=0)
  scale = max(float(norms.max()), 1e-300)
  dead = [p.name for p, n in zip(prob.params, norms) if not n > 1e-7 * scale]
  if dead:
    raise FibrilError(f'{prob.spec.path}: unidentifiable parameter(s) {", ".join(dead)}: the '
                      'loss does not change with them at the start (zero derivative) — add a '
                      'loss term on a sensor that sees them, or remove them')
  Jn = J0 / norms
  _, sv, vt = np.linalg.svd(Jn, full_matrices=False)
  out = []
  for k in range(len(sv)):
    if sv[k] < 1e-3 * sv[0]:
      v = vt[k]
      big = np.argsort(-np.abs(v))[:3]
      out.append(' + '.join(f'{v[i]:+.2f}·{prob.params[i].name}' for i in big
                            if abs(v[i]) > 0.1) + f' (singular value {sv[k] / sv[0]:.1e})')
  return out


def _lag1(r):
  r = r[np.isfinite(r)]
  if r.size < 3 or np.var(r) == 0:
    return 0.0
  return float(np.corrcoef(r[:-1], r[1:])[0, 1])


def _correlation_inflation(prob: Problem, ds: DataSet, r: np.ndarray) -> float:
  """Variance inflation `(1+ρ)/(1−ρ)` of serially correlated residuals (AR(1)), ρ the lag-1
  autocorrelation per loss term and axis over consecutive samples, averaged over series."""
  series: dict = {}
  k = 0
  for mp in ds.maps:
    for t in prob.spec.loss:
      idx, y, w, ts = mp[t]
      n = y.size
      block = r[k:k + n].reshape(y.shape)
      k += n
      for d in range(y.shape[1]):
        ok = w[:, d] != 0
        series.setdefault((t, d), []).append(block[ok, d])
  factors = []
  for parts in series.values():
    rho = np.clip(_lag1(np.concatenate(parts)), 0.0, 0.95)
    factors.append((1 + rho) / (1 - rho))
  return float(np.mean(factors)) if factors else 1.0


def tune(spec_or_path, *, progress: bool | None = None, problem: Problem | None = None
         ) -> TuneResult:
  """Fits the tune file's parameters; see the module docstring.

  Args:
    spec_or_path: a tune file path or a `TuneSpec`.
    problem: a prepared `Problem` (reuses its compiled programs).

  Returns:
    a `TuneResult`.
  """
  t_start = time.perf_counter()
  if problem is None:
    spec = spec_or_path if isinstance(spec_or_path, TuneSpec) else read_tune_file(spec_or_path)
    problem = Problem(spec, progress=progress)
  prob, spec = problem, problem.spec
  P, S = len(prob.params), max(1, spec.starts)
  lo, hi = prob.bounds_u()
  u0 = np.clip(prob.u0(), lo, hi)
  rng = np.random.default_rng(spec.seed)
  U = np.tile(u0, (S, 1))
  if S > 1:
    width = np.where([p.log for p in prob.params], np.log1p(spec.start_spread),
                     spec.start_spread * np.maximum(np.abs(u0), 1e-3))
    U[1:] = np.clip(u0 + rng.uniform(-1, 1, (S - 1, P)) * width, lo, hi)
  starts = U.copy()

  r, per0, J = prob.evaluate(U, prob.train, jacobian=True)
  collinear = _sensitivity(prob, J[0])
  N = prob.n_residuals(prob.train)     # recorded samples × axes (window padding excluded)
  cost = np.sum(r ** 2, axis=1)
  curve = [cost / N]
  rms_before = _rms(per0)

  from tqdm import tqdm
  bar = tqdm(range(spec.iterations), desc=f'tune ({spec.method}, {S} start(s))',
             disable=not prob.progress, leave=False)
  if spec.method == 'gauss_newton':
    lam = np.full(S, 1e-3)
    for _ in bar:
      g = np.einsum('snp,sn->sp', J, r)
      H = np.einsum('snp,snq->spq', J, J)
      D = np.einsum('spp->sp', H) + 1e-12
      step = np.stack([-np.linalg.solve(H[s] + lam[s] * np.diag(D[s]), g[s]) for s in range(S)])
      Un = np.clip(U + step, lo, hi)
      du = Un - U
      # decrease of rᵀr the linear model predicts for the (projected) step
      pred = -(2 * np.einsum('sp,sp->s', g, du) + np.einsum('sp,spq,sq->s', du, H, du))
      if np.all(pred <= 1e-6 * cost):
        break                     # converged: no start can decrease its loss any more
      # residuals first; the Jacobian only where a step is accepted
      rn, _, _ = prob.evaluate(Un, prob.train)
      cn = np.sum(rn ** 2, axis=1)
      ok = cn < cost
      if ok.any():
        Ua = np.where(ok[:, None], Un, U)
        ra, _, Ja = prob.evaluate(Ua, prob.train, jacobian=True)
        U, r, J = Ua, ra, Ja
        cost = np.where(ok, cn, cost)
      lam = np.where(ok, np.maximum(lam / 3, 1e-9), np.minimum(lam * 4, 1e9))
      curve.append(cost / N)
      bar.set_postfix(loss=f'{cost.min() / N:.4g}')
      if np.all(lam >= 1e9):
        break
  else:
    import optax
    if spec.method == 'adam':
      opt = optax.adam(spec.learning_rate)
    else:
      opt = optax.lbfgs(learning_rate=1.0, linesearch=None)
    state = jax.vmap(opt.init)(jnp.asarray(U))
    upd = jax.jit(jax.vmap(lambda g, s, u: opt.update(g, s, u)))
    for _ in bar:
      g = 2.0 * np.einsum('snp,sn->sp', J, r) / N
      updates, state = upd(jnp.asarray(g), state, jnp.asarray(U))
      step = np.asarray(updates, np.float64)
      if spec.method == 'lbfgs':
        scale = np.ones(S)
        for _ls in range(8):      # backtracking per start, all starts in one batch
          Un = np.clip(U + scale[:, None] * step, lo, hi)
          rn, _, Jn = prob.evaluate(Un, prob.train, jacobian=True)
          cn = np.sum(rn ** 2, axis=1)
          bad = cn > cost
          if not bad.any():
            break
          scale = np.where(bad, scale * 0.3, scale)
        ok = cn <= cost
      else:
        Un = np.clip(U + step, lo, hi)
        rn, _, Jn = prob.evaluate(Un, prob.train, jacobian=True)
        cn = np.sum(rn ** 2, axis=1)
        ok = np.ones(S, bool)
      U = np.where(ok[:, None], Un, U)
      r = np.where(ok[:, None], rn, r)
      J = np.where(ok[:, None, None], Jn, J)
      cost = np.where(ok, cn, cost)
      curve.append(cost / N)
      bar.set_postfix(loss=f'{cost.min() / N:.4g}')
  bar.close()

  best = int(np.argmin(cost))
  # uncertainty at the optimum of the best start
  rb, Jb = r[best], J[best]
  dof = max(N - P, 1)
  s2 = float(rb @ rb) / dof
  infl = _correlation_inflation(prob, prob.train, rb)
  H = Jb.T @ Jb
  cov_u = s2 * infl * np.linalg.pinv(H)
  x = prob.natural(U[best])
  logm = np.array([p.log for p in prob.params])
  sig_u = np.sqrt(np.maximum(np.diag(cov_u), 0))
  sigma = np.where(logm, x * sig_u, sig_u)
  dn = np.where(sig_u > 0, sig_u, 1.0)
  corr = cov_u / np.outer(dn, dn)
  conv = cost <= 1.1 * cost[best]
  spread = np.std(prob.natural(U[conv]), axis=0) if conv.sum() > 1 else np.zeros(P)

  # before / after RMS on train and held-out (best start and the starting point)
  UU = np.stack([starts[0], U[best]])
  _, per_t, _ = prob.evaluate(UU, prob.train)
  rms_t = _rms(per_t)
  rms_h, h_loss, traces = None, None, None
  if prob.heldout is not None:
    rh, per_h, _ = prob.evaluate(UU, prob.heldout)
    rms_h = _rms(per_h)
    h_loss = float(np.sum(rh[1] ** 2) / prob.n_residuals(prob.heldout))
    traces = {f'{t.component}.{t.field}': per_h[t] for t in spec.loss}
  del per0, rms_before
  return TuneResult(
      names=[p.name for p in prob.params], estimate=x, sigma=sigma,
      start=prob.natural(starts[0]), lower=np.array([p.lower for p in prob.params]),
      upper=np.array([p.upper for p in prob.params]), starts=prob.natural(starts),
      finals=prob.natural(U), final_losses=cost / N, best=best, spread=spread,
      loss_curve=np.array(curve), train_rms_before=_pick(rms_t, 0),
      train_rms_after=_pick(rms_t, 1), heldout_rms_before=_pick(rms_h, 0),
      heldout_rms_after=_pick(rms_h, 1), train_loss=float(cost[best] / N), heldout_loss=h_loss,
      correlation=corr, collinear=collinear, method=spec.method,
      wall_s=time.perf_counter() - t_start, iterations=len(curve) - 1, traces=traces,
      problem=prob)


# ------------------------------------------------------------------------------ outputs


def _sha256(path) -> str:
  """SHA-256 of a file, or of a directory (a rosbag2 bag): its files' relative names and
  contents in sorted order."""
  h = hashlib.sha256()
  p = pathlib.Path(path)
  if p.is_dir():
    for f in sorted(q for q in p.rglob('*') if q.is_file()):
      h.update(str(f.relative_to(p)).encode() + b'\0' + bytes.fromhex(_sha256(f)))
    return h.hexdigest()
  with open(path, 'rb') as fh:
    for chunk in iter(lambda: fh.read(1 << 20), b''):
      h.update(chunk)
  return h.hexdigest()


def overlay_dict(res: TuneResult) -> dict:
  """The §3.4 overlay (`fibril_overlay: 1`) with the fitted values and provenance."""
  prob = res.problem
  spec = prob.spec
  comps: dict = {}
  mjcf: dict = {}
  m = prob.sim.mj_model
  import mujoco
  for p, x in zip(prob.params, res.estimate):
    ov = p.overlay
    if ov[0] == 'component':
      _, cid, field = ov
      if (cid, field) not in comps:
        c = prob.sim.components[cid]
        comps[(cid, field)] = np.array(c.get_param(c.default_params(), field), np.float64)
      if p.index:
        comps[(cid, field)][p.index] = x
      else:
        comps[(cid, field)] = np.asarray(x, np.float64)
    else:
      _, element, name, attr, k = ov
      key = (element, name, attr)
      if k is None:
        mjcf[key] = float(x)
      else:
        if key not in mjcf:
          if element == 'actuator':
            aid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, name)
            mjcf[key] = np.array(getattr(m, f'actuator_{attr}')[aid], np.float64)
          else:
            gid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, name)
            mjcf[key] = np.array(m.geom_friction[gid], np.float64)
        mjcf[key][k] = x

  def val(v):
    v = np.asarray(v, np.float64)
    return float(v) if v.ndim == 0 else [float(a) for a in v.reshape(-1)]

  def recs(items):
    out = []
    for it in items:
      pth = (it.get('csv') or it.get('bag')) if isinstance(it, dict) else it
      out.append({'file': str(pth), 'sha256': _sha256(pth)})
    return out

  return {
      'fibril_overlay': 1,
      'id': spec.overlay_id,
      'provenance': {
          'recordings': {'train': recs(spec.train), 'heldout': recs(spec.heldout)},
          'manifest': {'file': spec.manifest, 'sha256': _sha256(spec.manifest)},
          'tune_file': spec.path,
          'fitted_with': (f'fibril_mjx {__version__} tune: {res.method}, forward-mode '
                          f'Jacobians through MJX, multiple shooting {prob.L * prob.dt:g} s '
                          f'windows, {len(res.starts)} start(s), straight-through '
                          'quantization/saturation, stochastic terms held at zero'),
          'train_loss': res.train_loss,
          'heldout_loss': res.heldout_loss,
          'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
          'estimates': {n: {'value': float(x), 'sigma': float(s)}
                        for n, x, s in zip(res.names, res.estimate, res.sigma)},
      },
      'mjcf': [{'element': e, 'name': n, 'attribute': a, 'value': val(v)}
               for (e, n, a), v in mjcf.items()],
      'components': [{'component': c, 'field': f, 'value': val(v)}
                     for (c, f), v in comps.items()],
  }


def render_report(res: TuneResult) -> str:
  """The text report."""
  lines = [f'tune: {res.method}, {res.iterations} iterations, {len(res.starts)} start(s), '
           f'{res.wall_s:.1f} s', '',
           f'{"parameter":40s} {"start":>12s} {"estimate":>12s} {"± 2σ":>10s} '
           f'{"spread":>10s}  bounds']
  for i, n in enumerate(res.names):
    lines.append(f'{n:40s} {res.start[i]:12.6g} {res.estimate[i]:12.6g} '
                 f'{2 * res.sigma[i]:10.3g} {res.spread[i]:10.3g}  '
                 f'[{res.lower[i]:g}, {res.upper[i]:g}]')
  lines += ['', f'train loss {res.train_loss:.6g}' + (
      f', held-out loss {res.heldout_loss:.6g}' if res.heldout_loss is not None else ''), '',
      'residual RMS (sensor units)       before → after']
  for k in res.train_rms_before:
    b, a = res.train_rms_before[k], res.train_rms_after[k]
    lines.append(f'  train   {k:28s} {_fmt(b)} → {_fmt(a)}')
    if res.heldout_rms_before is not None:
      b, a = res.heldout_rms_before[k], res.heldout_rms_after[k]
      lines.append(f'  heldout {k:28s} {_fmt(b)} → {_fmt(a)}')
  lines += ['', 'multi-start: final loss per start: '
            + ', '.join(f'{x:.4g}' for x in res.final_losses) + f' (best: {res.best})']
  if res.collinear:
    lines += ['', 'poorly identifiable combinations at the start:'] + [
        f'  {c}' for c in res.collinear]
  P = len(res.names)
  high = [(res.names[i], res.names[j], res.correlation[i, j]) for i in range(P)
          for j in range(i + 1, P) if abs(res.correlation[i, j]) > 0.95]
  if high:
    lines += ['', 'strongly correlated estimates (|ρ| > 0.95):'] + [
        f'  {a} / {b}: {c:+.3f}' for a, b, c in high]
  return '\n'.join(lines) + '\n'


def _fmt(v):
  return '[' + ', '.join(f'{x:.4g}' for x in np.atleast_1d(v)) + ']'


def write_outputs(res: TuneResult, out, *, overwrite: bool = False) -> pathlib.Path:
  """Writes `overlay.yaml`, `report.txt`, `report.json`, `loss_curve.png`,
  `heldout_traces.png` to `out` (a temporary sibling renamed when complete)."""
  import yaml
  out = pathlib.Path(out)
  if out.exists():
    if not overwrite:
      raise FibrilError(f'{out}: already exists (use --overwrite)')
    shutil.rmtree(out)
  tmp = out.parent / f'.{out.name}.partial-{os.getpid()}'
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  try:
    ov = overlay_dict(res)
    (tmp / 'overlay.yaml').write_text(
        '# written by fibril-mjx tune; include with parameter_overlays: [{file: <this file>}]\n'
        + yaml.safe_dump(ov, sort_keys=False))
    (tmp / 'report.txt').write_text(render_report(res))
    js = {'names': res.names, 'estimate': res.estimate.tolist(), 'sigma': res.sigma.tolist(),
          'start': res.start.tolist(), 'spread': res.spread.tolist(),
          'final_losses': res.final_losses.tolist(), 'best': res.best,
          'loss_curve': res.loss_curve.tolist(), 'train_loss': res.train_loss,
          'heldout_loss': res.heldout_loss, 'train_rms_before': res.train_rms_before,
          'train_rms_after': res.train_rms_after, 'heldout_rms_before': res.heldout_rms_before,
          'heldout_rms_after': res.heldout_rms_after, 'method': res.method,
          'iterations': res.iterations, 'wall_s': res.wall_s, 'collinear': res.collinear}
    (tmp / 'report.json').write_text(json.dumps(js, indent=2))
    _plots(res, tmp)
    tmp.rename(out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return out


def _plots(res: TuneResult, d: pathlib.Path):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6, 4))
  ax.semilogy(res.loss_curve)
  ax.set_xlabel('iteration')
  ax.set_ylabel('training loss (mean squared weighted residual)')
  ax.set_title(f'{res.method}: one line per start')
  fig.tight_layout()
  fig.savefig(d / 'loss_curve.png', dpi=100)
  plt.close(fig)
  if not res.traces:
    return
  rows = sum(items[0][1].shape[1] for items in res.traces.values())
  fig, axes = plt.subplots(rows, 1, figsize=(9, 2.0 * rows), squeeze=False, sharex=True)
  r = 0
  for name, items in res.traces.items():
    # first held-out recording's windows: concatenate valid samples in time order
    pred = np.concatenate([p for p, _, _, _ in items], axis=1)    # (2, M, D)
    y = np.concatenate([yy for _, yy, _, _ in items], axis=0)
    w = np.concatenate([ww for _, _, ww, _ in items], axis=0)
    ts = np.concatenate([tt for _, _, _, tt in items])
    ok = np.isfinite(ts) & np.any(w != 0, axis=1)
    order = np.argsort(ts[ok])
    for k in range(y.shape[1]):
      ax = axes[r, 0]
      ax.plot(ts[ok][order], y[ok][order, k], 'k.', ms=2, label='recorded')
      ax.plot(ts[ok][order], pred[0][ok][order, k], '-', color='tab:gray', lw=0.8,
              label='start')
      ax.plot(ts[ok][order], pred[1][ok][order, k], '-', color='tab:red', lw=1.0,
              label='fitted')
      ax.set_ylabel(f'{name}[{k}]', fontsize=7)
      r += 1
  axes[0, 0].legend(fontsize=7, loc='upper right')
  axes[-1, 0].set_xlabel('sample time (s), held-out recordings')
  fig.tight_layout()
  fig.savefig(d / 'heldout_traces.png', dpi=90)
  plt.close(fig)


def run_cli(tune_file, out, *, overwrite=False) -> TuneResult:
  """`fibril-mjx tune TUNE.yaml --out DIR`."""
  res = tune(tune_file)
  write_outputs(res, out, overwrite=overwrite)
  return res


# ------------------------------------------------------------------------------ simulated data


def simulate_recording(manifest, *, overrides=None, seed: int = 0, duration_s: float,
                       qpos0=None, qvel0=None, world: int = 0, meta: dict | None = None):
  """A recording of a simulated unit (noise on, as configured): world `world` of `seed`.

  Args:
    manifest: manifest path; overrides: the unit's "true" values (overlay entries).
    qpos0, qvel0: optional initial joint positions `(nq,)` / velocities `(nv,)` (stored as
      `initial/qpos`, `initial/qvel`).

  Returns:
    a `Recording` (`recording_from_trace`: samples where delivered, truth apart).
  """
  return simulate_recordings(manifest, overrides=overrides, seed=seed, duration_s=duration_s,
                             qpos0=qpos0, qvel0=qvel0, worlds=[world], meta=meta)[0]


def simulate_recordings(manifest, *, overrides=None, seed: int = 0, duration_s: float,
                        qpos0=None, qvel0=None, worlds=(0, 1), meta: dict | None = None):
  """Recordings of worlds `worlds` of run `seed` of a simulated unit, from one batched run.

  Same initial state in every world; the worlds differ by their noise draws (independent
  recordings of one unit, e.g. a training and a held-out one). Arguments as
  `simulate_recording`.

  Returns:
    a list of `Recording`s, one per entry of `worlds`.
  """
  sim = load_simulation(manifest, overrides=overrides)
  n = int(round(duration_s / sim.dt))
  nw = max(2, max(worlds) + 1)
  keys = world_keys(seed, nw)
  params = sim.default_params(nw)
  s = sim
  if qpos0 is not None or qvel0 is not None:
    s = copy.copy(sim)
    d0 = sim._data0
    if qpos0 is not None:
      d0 = d0.replace(qpos=jnp.asarray(qpos0, d0.qpos.dtype))
    if qvel0 is not None:
      d0 = d0.replace(qvel=jnp.asarray(qvel0, d0.qvel.dtype))
    s._data0 = d0
  st = jax.jit(s._reset_batch)(None, params, keys)
  out0 = sim.outputs(st)
  st, outs = sim.run(params, st, n)
  trace = jax.tree.map(lambda a, b: jnp.concatenate([a[:, None], jnp.swapaxes(b, 0, 1)], 1),
                       out0, outs)
  trace = jax.tree.map(np.asarray, trace)
  out = []
  for w in worlds:
    info = {'seed': seed, **(meta or {})}
    rec = rec_mod.recording_from_trace(trace, w, sim=sim, meta=info)
    if qpos0 is not None or qvel0 is not None:
      rec.initial = {
          'qpos': np.asarray(sim._data0.qpos if qpos0 is None else qpos0, np.float64),
          'qvel': np.zeros(sim.mj_model.nv) if qvel0 is None else np.asarray(qvel0, np.float64)}
    out.append(rec)
  return out
