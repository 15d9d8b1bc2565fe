"""What can vary per world, in the manifest's own vocabulary, and how it is sampled: a
campaign's `vary:` (`fibril_mjx.workflows.campaign`) and the RL env's per-episode device
randomization (`fibril_mjx.rl.randomize`) read the same entries.

A `vary:` entry is a `Distribution` (`distribution(path, model)` from its validated
`fibril_mjx.config.campaign` model); `resolve` turns entries into `Field`s against a built
simulation, `sample` draws each world's value on the host.

Field paths:

- `ID.FIELD` — a component field. A Params field (every continuous error term) varies per
  world and is compiled in even at its default (`load(vary=)`); `latency_s`,
  `command_latency_s`, `feedback_latency_s` vary per world as a latency in ticks (the queue
  is sized for the campaign's largest; a continuous actuator latency, SPEC §6.1.1, is a Params
  field whose distribution must be bounded and stay within the manifest's `<field>_max_s`,
  which RL randomization sizes instead); any other field (period, phase, quantization, ...) is
  static: `dist: choice` only, and worlds are grouped by their choices (one compile each).
- `ID.profiles.LAYER` (`device`, `empirical`, `transport`) — the component's profile of that
  layer, a profile id (or null: none) per choice; `ID.profiles` — its whole `profiles:`
  mapping per choice (`{device: ..., empirical: ...}`). Static (`dist: choice`): each
  choice is a build of the manifest with that selection.
- `ELEMENT:NAME.ATTRIBUTE` — a MJCF attribute as in `parameter_overlays`: body `mass`,
  `inertia`; geom `friction`; joint `damping`, `armature`, `frictionloss`, `stiffness`;
  actuator `gainprm`, `biasprm`, `gear` (the first k entries for a per-axis list of k), and
  the dcmotor parameters of a `dcmotor` actuator (`resistance_ohm`, `motorconst`, ...) vary
  per world through the MJX model (or the dcmotor Params); any other numeric attribute is
  static (`choice`, applied before compile).
- `initial:qpos.JOINT`, `initial:qvel.JOINT` — offsets of a hinge/slide joint's initial state;
  `initial:qpos`, `initial:qvel` — of every hinge and slide joint at once (the whole pose: one
  value, or a per-joint list in model order). Offsets add to the manifest's `keyframe` (else
  to `qpos0` and zero velocity).

Sampling: world `w`'s value of a field is a function of (seed, w, field path) only: the
uniform variates come from the named stream `stream_key(fold_in(PRNGKey(seed), w),
'fibril_campaign', path)` as raw 32-bit words (exact integers), and are transformed on the
host in float64 with element-wise functions, so no batch layout can change them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from scipy import special

from fibril_mjx.builder.build import DCMOTOR_PARAMS
from fibril_mjx.config.campaign import DISTRIBUTIONS, ChoiceDist, numbers
from fibril_mjx.config.manifest import LAYERS
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean
from fibril_mjx.mechanisms import rng
from fibril_mjx.physics import mjcf_fields

STREAM = 'fibril_campaign'


@dataclasses.dataclass(frozen=True)
class Distribution:
  """One `vary:` entry.

  Attributes:
    path: the field path as written (`ahrs.angular_velocity_bias`, `joint:yaw.damping`).
    dist: distribution name; params: its parameters (numbers or per-axis lists).
    relative: the sampled value multiplies the nominal value.
    weights: choice weights (None: equal).
  """
  path: str
  dist: str
  params: dict
  relative: bool = False
  weights: tuple | None = None


def distribution(path: str, d) -> Distribution:
  """The `Distribution` of a validated `vary:` entry (a `config.campaign.Distribution` model;
  parameters as tuples of floats)."""
  if isinstance(d, ChoiceDist):
    values = tuple(tuple(v) if isinstance(v, list) else v for v in d.values)
    return Distribution(path, 'choice', {'values': values}, d.relative,
                        None if d.weights is None else tuple(float(w) for w in d.weights))
  params = {k: tuple(numbers(getattr(d, k))) for k in DISTRIBUTIONS[d.dist]}
  return Distribution(path, d.dist, params, d.relative)


@dataclasses.dataclass(frozen=True, eq=False)
class Field:
  """A resolved `vary:` entry.

  Attributes:
    path: the field path; kind: `param`, `latency`, `static`, `profile`, `mjcf`, `dcmotor`,
      `initial`.
    dist: its distribution; shape: one world's value shape (`()` or `(k,)`).
    nominal: the manifest's value `(shape)` float64 (for `relative` and the report).
    component, name: component id and manifest field (component kinds); for `profile` the
      layer (None: the whole `profiles:` mapping).
    target: `mjx.Model` field (`mjcf`), DcMotorParams field (`dcmotor`), `qpos`/`qvel`
      (`initial`); index: where in it (host-side index tuple into the leaf).
  """
  path: str
  kind: str
  dist: Distribution
  shape: tuple
  nominal: np.ndarray
  component: str | None = None
  name: str | None = None
  target: str | None = None
  index: Any = None

  @property
  def columns(self) -> list[str]:
    if self.shape == ():
      return [self.path]
    return [f'{self.path}[{i}]' for i in range(int(np.prod(self.shape)))]

  def static_value(self, v):
    """A choice value as written in the campaign (for overrides of static fields)."""
    return list(v) if isinstance(v, tuple) else v


def dist_len(d: Distribution) -> int:
  """Values per draw of `d`: 1, or the length of its per-axis lists / list choices."""
  if d.dist == 'choice':
    v = d.params['values'][0]
    return len(v) if isinstance(v, tuple) else 1
  return max(len(v) for v in d.params.values())


def _err(file, d: Distribution, rule, value=None, sub=''):
  return ConfigError(file, f'vary.{d.path}{sub}', rule,
                     d.path if value is None else value)


def _shape_for(file, d: Distribution, natural: tuple) -> tuple:
  n = dist_len(d)
  size = int(np.prod(natural)) if natural else 1
  if d.dist == 'choice':
    for v in d.params['values']:
      k = len(v) if isinstance(v, tuple) else 1
      if natural and k not in (1, size) or not natural and k != 1:
        raise _err(file, d, f'each choice must be a number or a list of {size}', v, '.values')
    return natural
  if n not in (1, size):
    raise _err(file, d, f'per-axis lists must have {size} entries (the field has shape '
               f'{natural})', n)
  return natural


def resolve(sim, dists, file: str, *, sizes_latency: bool = False) -> list[Field]:
  """Resolves `vary:` entries against the nominal build (did-you-mean on unknown names).

  Args:
    sizes_latency: the caller rebuilds each varied continuous latency's `<field>_max_s` at
      the distribution's upper bound (RL randomization); else (a campaign) a distribution
      that can draw above the built `<field>_max_s` is an error.
  """
  out = []
  params = sim.default_params()
  for d in dists:
    element, colon, rest = d.path.partition(':')
    if colon:
      out.append(_resolve_mjcf(sim, params, d, element, rest, file))
    else:
      out.append(_resolve_component(sim, params, d, file))
  for f in out:
    _check_continuous_latency(sim, f, file, sizes_latency)
  return out


def upper_bound(f: Field) -> float | None:
  """The largest value `f`'s distribution can draw (`relative` applied, at least 0; a scalar
  field), or None for an unbounded distribution."""
  d = f.dist
  if d.dist in ('uniform', 'truncated_normal'):
    hi = max(d.params['high'])
  elif d.dist == 'choice':
    hi = max(float(np.max(np.asarray(v, np.float64))) for v in d.params['values'])
  else:
    return None
  if d.relative:
    hi *= float(f.nominal)
  return max(float(hi), 0.0)


def continuous_latency(sim, f: Field):
  """The `actuation.ContinuousLatency` whose per-world latency `f` varies (a `param` of a
  component whose command link is in continuous mode, SPEC §6.1.1), or None."""
  if f.kind != 'param' or f.component is None:
    return None
  c = getattr(getattr(sim.components[f.component], 'link', None), 'continuous', None)
  return c if c is not None and c.field == f.name else None


def _check_continuous_latency(sim, f: Field, file: str, sizes_latency: bool) -> None:
  """A varied continuous latency needs a bounded distribution, and (unless the caller sizes
  the queue) one within the built `<field>_max_s`: a larger draw would be clamped."""
  c = continuous_latency(sim, f)
  if c is None:
    return
  hi = upper_bound(f)
  if hi is None:
    raise _err(file, f.dist, 'a continuous latency sizes the command queue by its largest '
               'value: use a bounded distribution (uniform, truncated_normal, choice)',
               f.dist.dist, '.dist')
  top = c.max_ticks * c.dt
  if not sizes_latency and hi > top * (1 + 1e-9):
    raise _err(file, f.dist, f'draws up to {hi:g} s, above {f.component}.{c.max_field} = '
               f'{top:g} s (it sizes the command queue; a larger latency would be clamped): '
               f'set {c.max_field} >= {hi:g} in the manifest', hi)


def _resolve_component(sim, params, d, file) -> Field:
  cid, dot, name = d.path.partition('.')
  if not dot or cid not in sim.components:
    raise _err(file, d, 'no component of that id (ID.FIELD, ELEMENT:NAME.ATTRIBUTE or '
               'initial:qpos.JOINT)' + did_you_mean(cid, list(sim.components)))
  c = sim.components[cid]
  if name == 'profiles' or name.startswith('profiles.'):
    return _resolve_profiles(sim, d, cid, name.partition('.')[2] or None, file)
  known = [n for n, _ in c.fields]
  try:
    path = c.param_path(name)
  except FibrilError as e:     # a fault path that names no per-world parameter
    raise _err(file, d, str(e)) from None
  if path is not None:
    nominal = np.asarray(c.get_param(params[cid], name), np.float64)
    return Field(d.path, 'param', d, _shape_for(file, d, nominal.shape), nominal, cid, name)
  if name in sim.latency_fields().get(cid, ()):
    return Field(d.path, 'latency', d, _shape_for(file, d, ()),
                 np.asarray(dict(c.fields)[name].value, np.float64), cid, name)
  if name in known:
    if d.dist != 'choice':
      raise _err(file, d, f'{name} is static config of {c.type} (one compiled program per '
                 'value): only dist: choice is allowed', d.dist, '.dist')
    nominal = np.asarray(dict(c.fields)[name].value, dtype=object)
    return Field(d.path, 'static', d, (), nominal, cid, name)
  raise _err(file, d, f'not a field of {c.type}' + did_you_mean(name, known))


def _resolve_profiles(sim, d, cid, layer, file) -> Field:
  """`ID.profiles.LAYER` / `ID.profiles`: every choice names profiles of the catalog, of that
  layer (kind) and for the component's type."""
  c = sim.components[cid]
  if d.dist != 'choice':
    raise _err(file, d, 'a profile selection is static config (one compiled program per '
               'choice): only dist: choice is allowed', d.dist, '.dist')
  if layer is not None and layer not in LAYERS:
    raise _err(file, d, 'unknown profile layer' + did_you_mean(layer, LAYERS)
               + f'; layers: {", ".join(LAYERS)}', layer)
  catalog = sim.manifest.catalog.profiles
  for i, v in enumerate(d.params['values']):
    sub = f'.values[{i}]'
    if layer is None and not isinstance(v, dict):
      raise _err(file, d, "each choice must be a mapping of profile layer to profile id, as "
                 "a component's profiles:", v, sub)
    for lay, pid in ({layer: v} if layer is not None else v).items():
      if lay not in LAYERS:
        raise _err(file, d, 'unknown profile layer' + did_you_mean(lay, LAYERS)
                   + f'; layers: {", ".join(LAYERS)}', lay, sub)
      if pid is None:
        continue
      avail = sorted(q.id for q in catalog.values()
                     if q.kind == lay and c.type in q.component_types)
      listing = f'{lay} profiles for {c.type}: {", ".join(avail) or "(none)"}'
      if not isinstance(pid, str):
        raise _err(file, d, f'must be a profile id (or null: none); {listing}', pid, sub)
      p = catalog.get(pid)
      if p is None:
        raise _err(file, d, 'unknown profile' + did_you_mean(pid, avail or list(catalog))
                   + f'; {listing}', pid, sub)
      if c.type not in p.component_types:
        raise _err(file, d, f'profile {pid!r} is for {", ".join(p.component_types)}, not '
                   f'{c.type} (component {cid!r}); {listing}', pid, sub)
      if p.kind != lay:
        raise _err(file, d, f'profile {pid!r} is a {p.kind} profile, not {lay}; {listing}',
                   pid, sub)
  entry = next(e for e in sim.manifest.model.components if e.id == cid)
  selected = dict(entry.config.get('profiles') or {})
  nominal = selected if layer is None else selected.get(layer)
  return Field(d.path, 'profile', d, (), np.asarray(nominal, dtype=object), cid, layer)


def profile_selection(f: Field, value) -> dict:
  """`{layer: profile id or None}` that a choice of a `profile` field selects; with the whole
  mapping, layers it leaves out are cleared."""
  if f.name is not None:
    return {f.name: value}
  return {lay: value.get(lay) for lay in LAYERS}


def choice_label(value) -> str:
  """A choice as text (a profile id, `device=a, empirical=b`, a number, a list)."""
  if isinstance(value, dict):
    return ', '.join(f'{k}={v}' for k, v in value.items()) or '(none)'
  return 'none' if value is None else str(value)


def choice_column(f: Field, choice: np.ndarray) -> np.ndarray:
  """A static field's Parquet column: its value when every choice is a number or a string
  (profile ids, modes), else its label for a profile mapping, else the choice index."""
  vals = f.dist.params['values']
  if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
    return np.array([float(vals[c]) for c in choice])
  if f.kind == 'profile' or all(isinstance(x, str) for x in vals):
    return np.array([choice_label(vals[c]) for c in choice], dtype=object).astype(str)
  return np.asarray(choice, np.int64)


_HINGE_SLIDE = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
_EXPECTED_INITIAL = 'expected initial:qpos.JOINT, initial:qvel.JOINT, initial:qpos or initial:qvel'


def _resolve_initial(m, d, rest: str, file) -> Field:
  """`initial:qpos.JOINT` / `initial:qvel.JOINT` (one hinge or slide joint) or the whole pose
  `initial:qpos` / `initial:qvel` (every hinge and slide joint in model order, one value or a
  per-joint list): offsets added to the initial state (the manifest's keyframe, else qpos0)."""
  which, dot, joint = rest.partition('.')
  if which not in ('qpos', 'qvel'):
    raise _err(file, d, _EXPECTED_INITIAL + did_you_mean(which, ('qpos', 'qvel')))
  adr = m.jnt_qposadr if which == 'qpos' else m.jnt_dofadr
  if not dot:
    ids = [j for j in range(m.njnt) if int(m.jnt_type[j]) in _HINGE_SLIDE]
    if not ids:
      raise _err(file, d, 'the model has no hinge or slide joint to offset')
    index = np.asarray([int(adr[j]) for j in ids], np.int64)
    if d.dist != 'choice' and dist_len(d) not in (1, len(ids)):
      names = ', '.join(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) or f'#{j}'
                        for j in ids)
      raise _err(file, d, f'one value or a per-joint list of {len(ids)} (the hinge and slide '
                 f'joints in model order: {names})', dist_len(d))
    return Field(d.path, 'initial', d, _shape_for(file, d, (len(ids),)),
                 np.zeros(len(ids)), None, None, which, index)
  jid = mjcf_fields.object_id(m, 'joint', joint)
  if jid < 0:
    raise _err(file, d, 'no joint of that name'
               + did_you_mean(joint, mjcf_fields.object_names(m, 'joint')))
  if int(m.jnt_type[jid]) not in _HINGE_SLIDE:
    raise _err(file, d, 'initial-state offsets are for hinge and slide joints')
  return Field(d.path, 'initial', d, _shape_for(file, d, ()), np.zeros(()), None, None,
               which, int(adr[jid]))


def _resolve_mjcf(sim, params, d, element, rest, file) -> Field:
  m = sim.physics_model
  name, dot, attr = rest.rpartition('.')
  if element == 'initial':
    return _resolve_initial(m, d, rest, file)
  objects = list(mjcf_fields.OBJECTS)
  if element not in objects or not dot:
    raise _err(file, d, 'expected ELEMENT:NAME.ATTRIBUTE with ELEMENT one of '
               + ', '.join(objects + ['initial']) + did_you_mean(element, objects))
  oid = mjcf_fields.object_id(m, element, name)
  if oid < 0:
    names = mjcf_fields.object_names(m, element)
    raise _err(file, d, f'no {element} of that name' + did_you_mean(name, names))
  dc = sim.dcmotor
  if element == 'actuator' and dc is not None:
    ids = [int(i) for i in dc.actuator_id]
    am = mjcf_fields.object_id(sim.mj_model, 'actuator', name)
    leaf = getattr(params[DCMOTOR_PARAMS], attr, None) if am in ids else None
    if leaf is not None and attr in params[DCMOTOR_PARAMS]._fields:
      k = ids.index(am)
      nominal = np.asarray(leaf[k], np.float64)
      return Field(d.path, 'dcmotor', d, _shape_for(file, d, nominal.shape), nominal,
                   target=attr, index=(k,))
  where = mjcf_fields.model_index(m, element, oid, attr, count=dist_len(d))
  if where is not None:
    target, index = where
    arr = np.asarray(getattr(sim.mx, target))
    nominal = np.asarray(arr[index], np.float64)
    return Field(d.path, 'mjcf', d, _shape_for(file, d, nominal.shape), nominal,
                 target=target, index=index)
  if d.dist != 'choice':
    per_world = sorted(a for (e, a) in mjcf_fields.MODEL_FIELDS if e == element)
    raise _err(file, d, f'{element} {attr} is not varied per world (per-world {element} '
               f'attributes: {", ".join(per_world) or "none"}); as static config only dist: '
               'choice is allowed', d.dist, '.dist')
  return Field(d.path, 'static', d, (), np.asarray(None, dtype=object), None, None,
               f'{element}:{name}', attr)


# ------------------------------------------------------------------------------- sampling

@jax.jit
def _world_bits(seed, worlds, path_hash, like):
  """Raw uint32 words `(n, size)` of the campaign stream `path_hash` of each world."""
  root = jax.random.PRNGKey(seed)
  base = rng.name_hash(STREAM)

  def one(w):
    k = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(root, w), base), path_hash)
    return jax.random.bits(k, like.shape, jnp.uint32)
  return jax.vmap(one)(worlds)


def uniforms(seed: int, worlds: np.ndarray, path: str, size: int) -> np.ndarray:
  """`(n, size)` float64 uniforms in (0, 1) of each world, from 53 random bits each."""
  bits = np.asarray(_world_bits(jnp.uint32(seed), jnp.asarray(worlds, jnp.uint32),
                                jnp.uint32(rng.name_hash(path)),
                                jnp.zeros((2 * size,), jnp.uint32)), np.uint64)
  hi, lo = bits[:, 0::2] >> np.uint64(5), bits[:, 1::2] >> np.uint64(6)
  return ((hi * np.uint64(1 << 26) + lo).astype(np.float64) + 0.5) / float(1 << 53)


def _per_axis(v, size):
  a = np.asarray(v, np.float64)
  return np.broadcast_to(a if a.size > 1 else a.reshape(()), (size,)) if size else a


def sample(f: Field, seed: int, worlds: np.ndarray):
  """Values of `f` for `worlds` (global indices).

  Returns:
    `(values, choice)`: values `(n, *shape)` float64 as used (float32-rounded where the graph
    is float32), or for a static field the chosen values (object array); `choice` `(n,)`
    int index for `dist: choice`, else None.
  """
  d = f.dist
  size = int(np.prod(f.shape)) if f.shape else 1
  u = uniforms(seed, worlds, f.path, 1 if d.dist == 'choice' else size)
  choice = None
  p = {k: _per_axis(v, size) for k, v in d.params.items() if k != 'values'}
  if d.dist == 'uniform':
    x = p['low'] + (p['high'] - p['low']) * u
  elif d.dist == 'normal':
    x = p['mean'] + p['std'] * special.ndtri(u)
  elif d.dist == 'truncated_normal':
    a = special.ndtr((p['low'] - p['mean']) / p['std'])
    b = special.ndtr((p['high'] - p['mean']) / p['std'])
    x = np.clip(p['mean'] + p['std'] * special.ndtri(a + (b - a) * u), p['low'], p['high'])
  elif d.dist == 'lognormal':
    z = p['mu'] + p['sigma'] * special.ndtri(u)
    x = np.array([math.exp(v) for v in z.reshape(-1)], np.float64).reshape(z.shape)
  else:
    vals = d.params['values']
    w = np.asarray(d.weights if d.weights else [1.0] * len(vals), np.float64)
    cum = np.cumsum(w) / w.sum()
    choice = np.minimum(np.searchsorted(cum, u[:, 0], side='right'), len(vals) - 1)
    if f.kind in ('static', 'profile'):
      x = np.empty(len(worlds), dtype=object)
      for i, c in enumerate(choice):
        x[i] = vals[c]
      return x, choice
    x = np.stack([_per_axis(vals[c], size) for c in choice]).astype(np.float64)
  if d.relative:
    x = x * np.reshape(f.nominal, (-1,))[None, :size] if f.shape else x * float(f.nominal)
  x = x.reshape((len(worlds),) + f.shape)
  if f.kind == 'latency':
    return np.maximum(x, 0.0), choice
  return x.astype(np.float32).astype(np.float64), choice
