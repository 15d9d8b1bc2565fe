"""`fibril_sim/lidar` — a multi-beam range scanner on `mjx.ray` (docs/guides/sensors.md,
"Exteroceptive sensors: camera, lidar, optical flow": beam model and scene geometry, min/max
range, no return, dependence on incidence angle and material).

Beams, in the frame of the bound site (ROS REP 103 sensor frame: x forward, y left, z up):
azimuth α_i (about z, from x, `horizontal_samples` evenly from `horizontal_min_deg` to
`horizontal_max_deg` inclusive) × elevation ε_j (from the xy plane, `vertical_samples` from
`vertical_min_deg` to `vertical_max_deg`), direction (cos ε cos α, cos ε sin α, sin ε); beam
index b = i·vertical_samples + j (azimuth-major). A 1-D fan is `vertical_samples: 1`.

Sweep: the columns fire in azimuth order, column i at τ_i = i·`sweep_time_s`/horizontal_samples
after the scan's sample tick (all elevations of a column together, as a spinning multi-beam
unit); the site pose at τ is extrapolated at constant velocity from the tick
(p + v·τ, exp([ω]×τ)·R), so a moving sensor sees a skewed scan. Scene geoms stay at their pose
of the tick. The beam's own body is excluded from the ray.

Per beam: d = MuJoCo's ray distance (−1 no hit), g the hit geom's group, θ the incidence angle
(from the analytic surface normal, `fibril_mjx.components.sensors.scene.Scene.normal`):

    P_return = (1 − dropout_probability) · min(1, ρ_g · cos θ · (reference_range_m / d)²)
               (the range factor only when reference_range_m > 0; ρ_g = group_reflectivity[g])
    return   = hit ∧ u < P_return ∧ θ ≤ max_incidence_deg        (u uniform, stream `return`)
    σ        = noise_stddev_m + noise_fraction·d
    r        = Q(d + σ·w)                      (w normal, stream `noise`; Q: resolution_m)
    beam_valid = return ∧ min_range_m ≤ r ≤ max_range_m

Invalid beams read +inf (no return, beyond range) or −inf (below min range), as ROS REP 117.
Not modelled: multi-echo, multipath, beam divergence (one ray per beam), fog/dust, ambient
light, intensity output.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults, rng
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg, Positive
from fibril_mjx.components.sensors.scene import ViewFields, make_view, rotate, view_of

TYPE = 'fibril_sim/lidar'
SAMPLE_TYPE = 'fibril_sim/lidar_scan/v1'
Unit = pydantic.confloat(ge=0, le=1)


def range_sigma(p, ctx):
  """σ = noise_stddev_m + noise_fraction·d at the true distance `d` (`ctx.inputs`, −1 where
  nothing is hit), terms at their default absent."""
  d = ctx.inputs['distance']
  sigma = jnp.zeros_like(d)
  if ctx.on('noise_stddev_m'):
    sigma = sigma + p.noise_stddev_m
  if ctx.on('noise_fraction'):
    sigma = sigma + p.noise_fraction * jnp.maximum(d, 0.0)
  return sigma


# The error model of a returned beam's range: white noise (one draw per beam), then the
# resolution. Whether a beam returns (dropout, reflectivity, incidence) is the lidar's own.
ERRORS = em.chain(em.white_noise(('noise_stddev_m', 'noise_fraction'), shape=None,
                                 scale_fn=range_sigma),
                  em.quantization('resolution_m'))
SOURCES = ERRORS.streams + ('return', 'delivery_jitter', 'delivery_loss')


class _OwnConfig(faults.DeviceConfig):
  """The lidar's own manifest fields (its error model adds the rest)."""
  site: str
  horizontal_samples: int = pydantic.Field(gt=0, le=4096)
  horizontal_min_deg: float = -180.0
  horizontal_max_deg: float = 180.0
  vertical_samples: int = pydantic.Field(1, gt=0, le=128)
  vertical_min_deg: float = pydantic.Field(0.0, ge=-90, le=90)
  vertical_max_deg: float = pydantic.Field(0.0, ge=-90, le=90)
  sweep_time_s: NonNeg = 0.0
  min_range_m: NonNeg = 0.0
  max_range_m: Positive
  dropout_probability: float = pydantic.Field(0.0, ge=0, le=1)
  reference_range_m: NonNeg = 0.0
  group_reflectivity: tuple[Unit, Unit, Unit, Unit, Unit, Unit] = (1.0,) * 6
  max_incidence_deg: float = pydantic.Field(90.0, gt=0, le=90)


class LidarConfigModel(em.with_errors(_OwnConfig, ERRORS)):
  """Validated manifest config of `fibril_sim/lidar` (m, deg, s): its own fields and its error
  model's."""


class Params(NamedTuple):
  """Per-world parameters (config names), faults."""
  # the sensor's own
  min_range_m: jax.Array
  max_range_m: jax.Array
  dropout_probability: jax.Array
  reference_range_m: jax.Array
  group_reflectivity: jax.Array
  max_incidence_deg: jax.Array
  # white noise
  noise_stddev_m: jax.Array
  noise_fraction: jax.Array
  # quantization
  resolution_m: jax.Array
  faults: tuple  # `faults.FaultParams` per manifest `faults` entry


class Sample(NamedTuple):
  """`fibril_sim/lidar_scan/v1` (N beams, azimuth-major).

  Attributes:
    range_m: (N,) measured range; +inf no return / beyond max, −inf below min.
    beam_valid: (N,) bool (not `valid`: that name is the delivery's, `transport.Delivered`).
    beam_time_s: (N,) firing time of each beam after the scan's sample tick.
    health: int32.
  """
  range_m: jax.Array
  beam_valid: jax.Array
  beam_time_s: jax.Array
  health: jax.Array


class State(NamedTuple):
  """Per-world state: stream keys, queue, held output, faults, `ideal` (distance, cos incidence) of
  the last scan."""
  streams: dict
  queue: tp.QueueState
  held: tp.Delivered
  faults: faults.FaultState | None
  ideal: tuple


def beam_pattern(cfg) -> tuple[np.ndarray, np.ndarray]:
  """`(directions (N, 3) in the site frame, firing offsets (N,) s)`, float64."""
  az = np.radians(np.linspace(cfg.horizontal_min_deg, cfg.horizontal_max_deg,
                              cfg.horizontal_samples))
  el = np.radians(np.linspace(cfg.vertical_min_deg, cfg.vertical_max_deg,
                              cfg.vertical_samples))
  A, E = np.meshgrid(az, el, indexing='ij')
  d = np.stack([np.cos(E) * np.cos(A), np.cos(E) * np.sin(A), np.sin(E)], -1).reshape(-1, 3)
  t = np.repeat(np.arange(cfg.horizontal_samples) * cfg.sweep_time_s / cfg.horizontal_samples,
                cfg.vertical_samples)
  return d, t


@dataclasses.dataclass(frozen=True)
class Lidar(ViewFields, base.SensorBase):
  """A built `fibril_sim/lidar` (static, hashable; the fields of `base.SensorBase` and
  `ViewFields`)."""
  directions: tuple      # ((x, y, z), ...) site frame
  offsets: tuple         # firing offsets (s)

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type, state_type = Params, State
  errors = ERRORS
  always_used = ('min_range_m', 'max_range_m')

  @property
  def n_beams(self) -> int:
    return len(self.offsets)

  def neutral(self):
    z = host.zeros((self.n_beams,))
    return Sample(z, host.zeros((self.n_beams,), bool), z, host.array(faults.HEALTHY, np.int32))

  def init(self, p: Params, world_key) -> State:
    z = jnp.zeros((self.n_beams,), jnp.float32)
    return self.init_state(State, p, world_key, self.neutral(), streams=('return',),
                           ideal=(z - 1.0, z + 1.0))

  def rays(self, data):
    """World origins and unit directions `(N, 3)` of the beams (pose extrapolated per beam)."""
    p, R = self.motion.pose.pos(data), self.motion.pose.mat(data)
    d = jnp.asarray(np.array(self.directions), jnp.float32) @ R.T
    if self.cfg.sweep_time_s == 0:
      return jnp.broadcast_to(p, d.shape), d
    v, w = self.motion.velocity(data)
    t = jnp.asarray(np.array(self.offsets), jnp.float32)[:, None]
    return p + v * t, rotate(w * t, d)

  def geometry(self, data):
    """`(d (N,), geom id (N,), cos θ (N,))` of the ideal beams."""
    pnt, vec = self.rays(data)

    def one(o, u):
      d, g = self.scene.cast(data, o, u, self.body)
      n = self.scene.normal(data, g, o + jnp.maximum(d, 0.0) * u, u)
      return d, g, -jnp.dot(n, u)
    return jax.vmap(one)(pnt, vec)

  def acquire(self, p: Params, s: State, data, tick, n):
    del tick
    N = self.n_beams
    d, gid, cos = self.geometry(data)
    hit = d >= 0
    ret = hit
    prob = None
    if self._on('dropout_probability'):
      prob = (1.0 - p.dropout_probability) * jnp.ones_like(d)
    if self._on('group_reflectivity') or self._on('reference_range_m'):
      strength = jnp.clip(cos, 0.0, 1.0)
      if self._on('group_reflectivity'):
        strength = strength * p.group_reflectivity[self.scene.group_of(gid)]
      if self._on('reference_range_m'):
        strength = strength * (p.reference_range_m / jnp.maximum(d, 1e-6)) ** 2
      prob = jnp.minimum(1.0, strength) * (1.0 if prob is None else prob)
    if prob is not None:
      ret = ret & (rng.uniform(s.streams['return'], n, (N,)) < prob)
    if self._on('max_incidence_deg'):
      ret = ret & (cos >= jnp.cos(jnp.deg2rad(p.max_incidence_deg)))
    _, x, _ = ERRORS.apply(p, {}, d, self.error_ctx(s.streams, n, distance=d))
    far = ~ret | (x > p.max_range_m)
    near = ~far & (x < p.min_range_m)
    x = jnp.where(far, jnp.inf, jnp.where(near, -jnp.inf, x))
    sample = Sample(x.astype(jnp.float32), ~(far | near),
                    jnp.asarray(np.array(self.offsets), jnp.float32), jnp.int32(faults.HEALTHY))
    return s._replace(ideal=(d, cos)), sample

  def truth(self, s: State, data) -> dict:
    """Ideal per-beam distance (−1 no hit) and incidence angle (rad) of the latest scan (with
    the sweep extrapolation; kept from its acquisition, so at a sample's `sample_tick` it is
    that scan's: the rays are not cast again every tick), the site position."""
    d, cos = s.ideal
    return {'range_m': d, 'incidence_rad': jnp.arccos(jnp.clip(cos, -1.0, 1.0)),
            'position_m': self.motion.pose.pos(data), 'health': s.faults.health}

  def describe(self) -> list[str]:
    c = self.cfg
    return self.describe_errors([
        f'beams: {c.horizontal_samples} x {c.vertical_samples} = {self.n_beams} on site '
        f'{c.site!r} (az {c.horizontal_min_deg:g} … {c.horizontal_max_deg:g} deg, el '
        f'{c.vertical_min_deg:g} … {c.vertical_max_deg:g} deg), sweep {c.sweep_time_s:g} s, '
        f'range {c.min_range_m:g} … {c.max_range_m:g} m; mjx.ray against {self.scene.ngeom} '
        'geoms'],
        ('dropout_probability', 'reference_range_m', 'group_reflectivity',
         'max_incidence_deg'))


def build(cid: str, raw, ctx: BuildContext, catalog) -> Lidar:
  sb = base.SensorBuild(LidarConfigModel, TYPE, cid, raw, ctx, catalog)
  cfg = sb.cfg
  base.check(cfg.max_range_m > cfg.min_range_m, *sb.origin('max_range_m'),
             f'must be > min_range_m = {cfg.min_range_m:g}', cfg.max_range_m)
  base.check(cfg.horizontal_max_deg >= cfg.horizontal_min_deg, *sb.origin('horizontal_max_deg'),
             f'must be ≥ horizontal_min_deg = {cfg.horizontal_min_deg:g}', cfg.horizontal_max_deg)
  base.check(cfg.vertical_max_deg >= cfg.vertical_min_deg, *sb.origin('vertical_max_deg'),
             f'must be ≥ vertical_min_deg = {cfg.vertical_min_deg:g}', cfg.vertical_max_deg)
  base.check(cfg.sweep_time_s <= cfg.period_s, *sb.origin('sweep_time_s'),
             f'must be ≤ period_s = {cfg.period_s:g}', cfg.sweep_time_s)
  d, t = beam_pattern(cfg)
  return make_view(sb, Lidar, view_of(ctx, faults.bind_site(ctx, cfg.site, sb.origin)),
                   directions=tuple(map(tuple, d.tolist())), offsets=tuple(t.tolist()))


CONFIG_MODEL = LidarConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
