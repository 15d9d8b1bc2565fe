"""The fitted parameters: stochastic terms held at zero, and the tune file's parameters
expanded to scalar `Param`s against the fitted simulation."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fibril_mjx.builder.build import DCMOTOR_PARAMS
from fibril_mjx.core.latencies import LATENCY_FIELDS
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean
from fibril_mjx.physics import mjcf_fields
from fibril_mjx.workflows.tune.spec import TuneSpec

# MJCF physical fields that can be fitted (`physics.mjcf_fields` says where each lives): per
# element, the attributes `mjcf: ELEMENT:NAME.ATTRIBUTE` takes (`[k]`: one entry, k required);
# a `dcmotor` actuator's by their short names. The tuning guide lists exactly these
# (tests/workflows/test_tune_docs.py).
_JOINT_ATTRIBUTES = [a for e, a in mjcf_fields.MODEL_FIELDS if e == 'joint'] + ['ref']
FITTABLE_MJCF = {'joint': tuple(_JOINT_ATTRIBUTES), 'body': ('mass',), 'geom': ('friction',),
                 'actuator': ('gainprm[k]', 'biasprm[k]'),
                 'dcmotor': tuple(mjcf_fields.DCMOTOR_ATTRIBUTES)}


def _fittable(element: str) -> str:
  return ', '.join(FITTABLE_MJCF[element])


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


def stochastic_overrides(sim, fitted: set) -> list:
  """Overrides holding every stochastic field of `sim`'s components at zero during the fit
  (a `FibrilError` when one is among the `fitted` `(component, field)` pairs)."""
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


def latency_overrides(spec: TuneSpec, nominal=None) -> list:
  """Fitted transport latencies built at their upper bound (it sizes the delivery queue;
  each evaluation then sets its own latency per world, `latencies.latency_inputs`). A
  continuous latency (a per-world parameter of `nominal`'s component: `latency_mode:
  continuous`) keeps its value and gets its `<name>_max_s` at the upper bound instead."""
  out = []
  for p in spec.parameters:
    if 'component' not in p or p.get('field') not in LATENCY_FIELDS:
      continue
    cid, field, top = p['component'], p['field'], float(p['bounds'][1])
    c = None if nominal is None else nominal.components.get(cid)
    if c is not None and c.param_path(field) is not None:
      now = float(dict(c.fields)[field].value)
      out.append({'component': cid, 'field': field[:-2] + '_max_s', 'value': max(top, now)})
    else:
      out.append({'component': cid, 'field': field, 'value': top})
  return out


def _latency_param(f, where, p, cid, field, nominal, sim, loss) -> Param:
  """A fitted transport latency: searched over whole ticks (`kind 'latency'`)."""
  lo, hi = (float(x) for x in p['bounds'])
  if p.get('log'):
    raise ConfigError(f, f'{where}.log', 'a latency is searched over whole ticks, not in log',
                      True)
  if lo < 0 or math.floor(hi / sim.dt + 1e-9) < math.ceil(lo / sim.dt - 1e-9):
    raise ConfigError(f, f'{where}.bounds', f'a latency needs bounds >= 0 s spanning at least '
                      f'one whole tick (dt = {sim.dt:g} s)', [lo, hi])
  terms = [t for t in loss if t.component == cid]
  if not terms or any(t.time != 'arrival' for t in terms):
    raise ConfigError(f, f'{where}.field', f'a latency is invisible to samples matched at '
                      f'their sample time: give the loss terms of {cid!r} time: arrival', field)
  init = p.get('init')
  if init is None:
    init = dict(nominal.components[cid].fields)[field].value
  return Param(f'{cid}.{field}', 'latency', (cid, field), (), lo, hi, False, float(init),
               ('component', cid, field))


def resolve_params(spec: TuneSpec, sim, nominal=None) -> list[Param]:
  """Expands the tune file's parameters to scalar `Param`s against the fitted simulation
  (`nominal`: the manifest as written, for a fitted latency's start)."""
  f = spec.path
  out = []
  base = sim.default_params()
  lat_fields = sim.latency_fields()
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
      if field in lat_fields.get(cid, ()) and c.param_path(field) is None:   # whole ticks
        out.append(_latency_param(f, where, p, cid, field, nominal or sim, sim, spec.loss))
        continue
      if field in LATENCY_FIELDS and lo < 0:   # a continuous latency (a per-world Param)
        raise ConfigError(f, f'{where}.bounds', 'a latency needs bounds >= 0 s', [lo, hi])
      mode = field[:-2] + '_mode'    # latency_s -> latency_mode, command_latency_s -> ...
      if c.param_path(field) is None and field in LATENCY_FIELDS and mode in names:
        raise ConfigError(f, f'{where}.field', 'a whole-tick latency of this component is '
                          f'static: give it {mode}: continuous to fit it by gradients',
                          field)
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
    out.append(_mjcf_param(f, where, p, sim, base, lo, hi, log))
  for q in out:
    if not q.lower <= q.init <= q.upper:
      raise FibrilError(f'{f}: {q.name}: start value {q.init:g} outside bounds '
                        f'[{q.lower:g}, {q.upper:g}]')
  return out


def _current(m, field: str, index: tuple) -> float:
  """The compiled model's value at `index` of `field` (a joint's first dof)."""
  return float(np.asarray(getattr(m, field)[index]).reshape(-1)[0])


def _mjcf_param(f, where, p, sim, base, lo, hi, log) -> Param:
  """The `Param` of a `mjcf: ELEMENT:NAME.ATTRIBUTE` entry: a joint, body, geom or actuator
  array of the MJX model, or a dcmotor actuator's DcMotorParams field."""
  key = str(p['mjcf'])
  parsed = mjcf_fields.parse_key(key)
  if parsed is None:
    raise ConfigError(f, f'{where}.mjcf', 'expected ELEMENT:NAME.ATTRIBUTE, e.g. '
                      'joint:yaw.damping or actuator:motor.gainprm[0]', key)
  element, ename, attr, k = parsed.element, parsed.name, parsed.attribute, parsed.entry
  m = sim.mj_model
  init = p.get('init')
  if element == 'joint':
    jid = mjcf_fields.object_id(m, 'joint', ename)
    if jid < 0:
      names = mjcf_fields.object_names(m, 'joint')
      raise ConfigError(f, f'{where}.mjcf', 'no joint of that name' + did_you_mean(ename, names),
                        key)
    located = mjcf_fields.model_index(m, 'joint', jid, attr)
    if attr == 'ref' and mjcf_fields.joint_dofs(m, jid) == 1:
      # a hinge / slide's zero: the body is at qpos - ref (MJX kinematics read qpos0)
      located = ('qpos0', (int(m.jnt_qposadr[jid]),))
    if located is None:
      raise ConfigError(f, f'{where}.mjcf', 'fittable joint attributes: ' + _fittable('joint'),
                        key)
    return Param(key, 'mjx', located, (), lo, hi, log,
                 float(init if init is not None else _current(m, *located)),
                 ('mjcf', 'joint', ename, attr, None))
  if element == 'body':
    bid = mjcf_fields.object_id(m, 'body', ename)
    if bid < 0 or attr != 'mass':
      raise ConfigError(f, f'{where}.mjcf', 'needs an existing body and attribute mass', key)
    located = mjcf_fields.model_index(m, 'body', bid, 'mass')
    return Param(key, 'mjx', located, (), lo, hi, log,
                 float(init if init is not None else _current(m, *located)),
                 ('mjcf', 'body', ename, 'mass', None))
  if element == 'geom':
    gid = mjcf_fields.object_id(m, 'geom', ename)
    if gid < 0 or attr != 'friction':
      raise ConfigError(f, f'{where}.mjcf', 'needs an existing geom and attribute friction '
                        '(sliding friction, [0])', key)
    j = 0 if k is None else k
    located = mjcf_fields.model_index(m, 'geom', gid, 'friction', entry=j)
    return Param(key, 'mjx', located, (), lo, hi, log,
                 float(init if init is not None else _current(m, *located)),
                 ('mjcf', 'geom', ename, 'friction', j))
  if element == 'actuator':
    aid = mjcf_fields.object_id(m, 'actuator', ename)
    if aid < 0:
      names = mjcf_fields.object_names(m, 'actuator')
      raise ConfigError(f, f'{where}.mjcf', 'no actuator of that name'
                        + did_you_mean(ename, names), key)
    dset = sim.dcmotor
    dc_ids = [] if dset is None else [int(a) for a in dset.actuator_id]
    if aid in dc_ids and attr in mjcf_fields.DCMOTOR_ATTRIBUTES:
      di = dc_ids.index(aid)
      field, slot = mjcf_fields.DCMOTOR_ATTRIBUTES[attr]
      cur = float(getattr(base[DCMOTOR_PARAMS], field)[di])
      return Param(key, 'dcmotor', (field, di), (), lo, hi, log,
                   float(init if init is not None else cur),
                   ('mjcf', 'actuator', ename, 'gainprm', slot))
    if attr in ('gainprm', 'biasprm') and k is not None and aid not in dc_ids:
      located = mjcf_fields.model_index(m, 'actuator', aid, attr, entry=k)
      return Param(key, 'mjx', located, (), lo, hi, log,
                   float(init if init is not None else _current(m, *located)),
                   ('mjcf', 'actuator', ename, attr, k))
    raise ConfigError(f, f'{where}.mjcf', f'fittable actuator attributes: '
                      f'{_fittable("actuator")}; for a dcmotor: {_fittable("dcmotor")}', key)
  raise ConfigError(f, f'{where}.mjcf', 'fittable elements: ' + ', '.join(
      f'{e} ({_fittable(e)})' for e in ('joint', 'body', 'geom', 'actuator')), key)
