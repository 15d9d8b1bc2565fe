"""Per-episode device randomization for the RL env, written as a campaign's `vary:`.

`DeviceRandomization(sim, vary)` takes the distributions of a campaign file's `vary:` section
(`{field path: {dist: uniform, low: ..., high: ...}}`, the same field paths, distributions and
`relative:` — `fibril_mjx.builder.vary`) and turns them into a traced draw per episode:

- `draw(world_key)` → `{field path: value}`: the variates come from the campaign's own named
  stream of the episode's world key, `stream_key(world_key, 'fibril_campaign', path)`, read as
  the same raw 32-bit words and put through the same transforms (in float32, in JAX instead of
  float64 on the host), so an episode whose world key is a campaign world's key draws that
  world's values to float32 rounding — a trained policy's episode can be replayed as a
  campaign world and back.
- `apply(params, draws)` → one world's Params, per-world `mjx.Model` fields, initial-state
  offsets and transport latencies (in seconds and whole ticks), which `pipeline.init` takes.

What can vary is what a campaign varies per world: Params fields, transport latencies, MJCF
physical fields, dcmotor parameters and initial-state offsets; static config (`dist: choice` of
a period, a profile) would need a program per value and is refused. The simulator is rebuilt
with the varied Params fields compiled in and each varied latency's queue sized for the upper
bound of its distribution (a continuous one's `<field>_max_s`, SPEC §6.1.1), so a latency needs
a bounded distribution. The draws are made once per reset and held for the episode.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from fibril_mjx.builder import vary as fl
from fibril_mjx.batch.simulation import Simulation
from fibril_mjx.builder import build
from fibril_mjx.builder.build import DCMOTOR_PARAMS
from fibril_mjx.config.campaign import Distribution as DistributionModel
from fibril_mjx.config.manifest import read_manifest
from fibril_mjx.config.validation import Strict, load_yaml, validate
from fibril_mjx.errors import ConfigError
from fibril_mjx.mechanisms import rng

PER_EPISODE = ('param', 'latency', 'mjcf', 'dcmotor', 'initial')
# a latency within this many ticks above a whole number of ticks is that number (float32 s)
TICK_SNAP = 1e-5


class _Vary(Strict):
  """The `vary:` mapping alone, validated as a campaign file's."""
  vary: dict[str, DistributionModel] = {}


def parse(vary, file: str = 'vary') -> tuple[fl.Distribution, ...]:
  """`vary:` entries as a campaign file writes them → `vary.Distribution`s.

  Args:
    vary: `{field path: {dist: ..., ...}}`, or a campaign file (its `vary:` section, validated
      as the campaign reads it; the rest of the file is not read).

  Raises:
    ConfigErrors: one line per bad entry (`vary.PATH.KEY = value: rule`).
  """
  if isinstance(vary, (str, pathlib.Path)):
    file, doc = str(vary), load_yaml(vary)
    vary = (doc.get('vary') or {}) if isinstance(doc, dict) else doc
  model = validate(_Vary, {'vary': vary}, file=file)
  return tuple(fl.distribution(str(p), d) for p, d in model.vary.items())


def _upper(f: fl.Field, file: str) -> float:
  """The largest latency `f`'s distribution can draw (it sizes the transport's queue)."""
  hi = fl.upper_bound(f)
  if hi is None:
    raise ConfigError(file, f'vary.{f.path}.dist', 'a per-episode latency sizes the queue by '
                      'its largest value: use a bounded distribution (uniform, '
                      'truncated_normal, choice)', f.dist.dist)
  return hi


def _queue_sizes(sim, fields, file: str) -> list:
  """Component overrides that size each varied latency's queue at its distribution's upper
  bound: a whole-tick latency's own field, a continuous one's `<field>_max_s` (SPEC §6.1.1;
  at least the manifest's latency, which it must not undercut)."""
  out = []
  for f in fields:
    cont = fl.continuous_latency(sim, f)
    if f.kind == 'latency':
      out.append({'component': f.component, 'field': f.name, 'value': _upper(f, file)})
    elif cont is not None:
      now = float(dict(sim.components[f.component].fields)[f.name].value)
      out.append({'component': f.component, 'field': cont.max_field,
                  'value': max(_upper(f, file), now)})
  return out


class DeviceRandomization:
  """Per-episode draws of a campaign-style `vary:` over one simulator (see the module doc).

  Attributes:
    sim: the simulator rebuilt with the varied terms compiled in and the latency queues sized
      for the largest draw (the given one when nothing needed a rebuild).
    fields: the resolved `fields.Field`s, in `vary:` order.
  """

  def __init__(self, sim: Simulation, vary, *, file: str = 'vary'):
    dists = parse(vary, file)
    self.fields = fl.resolve(sim, dists, file, sizes_latency=True)
    for f in self.fields:
      if f.kind not in PER_EPISODE:
        raise ConfigError(file, f'vary.{f.path}', 'static config (one compiled program per '
                          'value) cannot change per episode; build one env per value, or vary '
                          'it in a campaign', f.path)
    compiled = {cid: set(names) for cid, names in sim.built.vary.items()}
    grow = False
    for f in self.fields:
      if f.kind == 'param' and f.name not in compiled.get(f.component, ()):
        compiled.setdefault(f.component, set()).add(f.name)
        grow = True
    latency = _queue_sizes(sim, self.fields, file)
    if grow or latency:
      man = sim.manifest
      over = dict(man.overrides or {})
      over['components'] = list(over.get('components', ())) + latency
      man = read_manifest(man.path, overrides=over) if latency else man
      sim = Simulation(build.build(man, vary={k: sorted(v) for k, v in compiled.items()}),
                       impl=sim.impl)
    self.sim = sim
    self._tables = {f.path: self._table(f) for f in self.fields}

  # ---------------------------------------------------------------- host constants

  def _table(self, f: fl.Field) -> dict:
    """float32 constants of `f`'s transform (per axis), computed once on the host."""
    d = f.dist
    size = int(np.prod(f.shape)) if f.shape else 1
    per = {k: np.broadcast_to(np.asarray(v, np.float64).reshape(-1) if len(v) > 1
                              else np.asarray(v[0], np.float64), (size,))
           for k, v in d.params.items() if k != 'values'}
    t = {'size': size}
    if d.dist == 'truncated_normal':
      t['a'] = special.ndtr((per['low'] - per['mean']) / per['std'])
      t['b'] = special.ndtr((per['high'] - per['mean']) / per['std'])
    if d.dist == 'choice':
      w = np.asarray(d.weights if d.weights else [1.0] * len(d.params['values']), np.float64)
      t['cum'] = np.cumsum(w) / w.sum()
      t['values'] = np.stack([np.broadcast_to(np.asarray(v, np.float64).reshape(-1)
                                              if isinstance(v, tuple) else np.float64(v),
                                              (size,)) for v in d.params['values']])
    t.update(per)
    return {k: (np.asarray(v, np.float32) if isinstance(v, np.ndarray) else v)
            for k, v in t.items()}

  # ---------------------------------------------------------------- traced draws

  def draw(self, world_key: jax.Array) -> dict:
    """`{field path: value (field shape) float32}` of one episode, from `world_key`'s
    campaign streams (traced; `fields.sample` is the host reference)."""
    return {f.path: _sample(f, self._tables[f.path], world_key) for f in self.fields}

  def apply(self, params: dict, draws: dict):
    """One world's `(params, model fields, qpos_offset, qvel_offset, latency)` with `draws`.

    Returns:
      params: `{component id: Params}` with the varied Params / dcmotor fields set.
      model: `{mjx.Model field: array}` to `replace` into the model (empty when none varies).
      qpos_offset, qvel_offset: `(nq,)` / `(nv,)` or None.
      latency: `{component id: {field: (latency_s, delay_ticks)}}` for `pipeline.init`, or
        None.
    """
    sim = self.sim
    params, model, latency = dict(params), {}, {}
    qoff = voff = None
    for f in self.fields:
      v = draws[f.path]
      if f.kind == 'param':
        c = sim.components[f.component]
        params[f.component] = c.set_param(params[f.component], f.name, v)
      elif f.kind == 'dcmotor':
        dp = params[DCMOTOR_PARAMS]
        leaf = jnp.asarray(getattr(dp, f.target))
        params[DCMOTOR_PARAMS] = dp._replace(**{f.target: leaf.at[f.index].set(v)})
      elif f.kind == 'mjcf':
        leaf = model.get(f.target, jnp.asarray(getattr(sim.mx, f.target)))
        model[f.target] = leaf.at[f.index].set(v.astype(leaf.dtype))
      elif f.kind == 'initial':
        n = sim.physics_model.nq if f.target == 'qpos' else sim.physics_model.nv
        off = (qoff if f.target == 'qpos' else voff)
        off = (jnp.zeros((n,), jnp.float32) if off is None else off).at[f.index].add(v)
        qoff, voff = (off, voff) if f.target == 'qpos' else (qoff, off)
      else:
        lat = jnp.maximum(v, 0.0)
        latency.setdefault(f.component, {})[f.name] = (lat, latency_ticks(lat, sim.dt))
    return params, model, qoff, voff, latency or None


def latency_ticks(latency_s, dt: float) -> jax.Array:
  """A traced latency in whole ticks, rounded up as `latencies.latency_ticks` rounds it; a
  value within `TICK_SNAP` ticks above a whole number (float32 rounding of e.g. 3 ms at 1 ms)
  is that number."""
  r = jnp.asarray(latency_s, jnp.float32) / jnp.float32(dt)
  n = jnp.round(r)
  near = jnp.abs(r - n) <= TICK_SNAP * jnp.maximum(1.0, n)
  return jnp.where(near, n, jnp.ceil(r)).astype(jnp.int32)


def _uniforms(world_key, path: str, size: int):
  """`(u, 1 - u)` float32 `(size,)` from the campaign stream's 53-bit variates
  (`fields.uniforms`), each side exact in its small tail."""
  k = rng.stream_key(world_key, fl.STREAM, path)
  bits = jax.random.bits(k, (2 * size,), jnp.uint32)
  hi, lo = bits[0::2] >> 5, bits[1::2] >> 6
  top, low = jnp.uint32((1 << 27) - 1), jnp.uint32((1 << 26) - 1)

  def value(h, l):
    return (h.astype(jnp.float32) + (l.astype(jnp.float32) + 0.5) * 2.0 ** -26) * 2.0 ** -27
  return value(hi, lo), value(top - hi, low - lo), hi < (1 << 26)


def _ndtri(u, v, lower):
  """The standard normal quantile of `u`, from whichever of `u`, `1 − u` is small."""
  return jnp.where(lower, jax.scipy.special.ndtri(u), -jax.scipy.special.ndtri(v))


def _sample(f: fl.Field, t: dict, world_key) -> jax.Array:
  d = f.dist
  size = t['size']
  u, v, lower = _uniforms(world_key, f.path, 1 if d.dist == 'choice' else size)
  if d.dist == 'uniform':
    x = t['low'] + (t['high'] - t['low']) * u
  elif d.dist == 'normal':
    x = t['mean'] + t['std'] * _ndtri(u, v, lower)
  elif d.dist == 'truncated_normal':
    p = t['a'] + (t['b'] - t['a']) * u
    x = jnp.clip(t['mean'] + t['std'] * jax.scipy.special.ndtri(p), t['low'], t['high'])
  elif d.dist == 'lognormal':
    x = jnp.exp(t['mu'] + t['sigma'] * _ndtri(u, v, lower))
  else:
    i = jnp.minimum(jnp.searchsorted(jnp.asarray(t['cum']), u[0], side='right'),
                    len(t['cum']) - 1)
    x = jnp.asarray(t['values'])[i]
  if d.relative:
    x = x * jnp.asarray(np.reshape(f.nominal, (-1,))[:size] if f.shape
                        else np.float32(f.nominal), jnp.float32)
  return jnp.reshape(x.astype(jnp.float32), f.shape)

