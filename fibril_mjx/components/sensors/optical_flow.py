"""`fibril_sim/optical_flow` — an abstract downward optical-flow sensor for fusion tests
(docs/guides/sensors.md, "Exteroceptive sensors: camera, lidar, optical flow": flow depends on
texture, light, exposure, blur, height, field of view and rotation; an abstract model must still
produce a quality value, saturation at high angular rate and height-dependent errors).

The sensor frame is the bound site's: optical axis +z (pointing at the ground), image x, y
along the site's x, y. Every physics tick (`track`), with the site's velocity v and angular
rate ω in the sensor frame and d the `mjx.ray` distance along the optical axis to the first geom
(own body excluded), the image-plane angular flow of the scene point on the optical axis is

    ḟ = (−v_x/d − ω_y,  −v_y/d + ω_x)                            (rad/s, exact at the centre)

and the tick's quality (0–255) is

    q = 255 · τ_g · illumination · b · [min_range_m ≤ d ≤ max_range_m] · [|ω_xy| ≤ max_angular_rate]
    b = 1 / (1 + (β/blur_half_quality_px)²),  β = |ḟ|·exposure_s·resolution_px/fov_rad   (px)

with τ_g = `group_texture` of the hit geom's group (1 by default: textured everywhere) and
`illumination` (0–1, the scene's light relative to what the sensor needs). A tick whose
q = 0 tracks nothing (ḟ counts as 0); otherwise each axis of ḟ saturates at
±`max_flow_rate_rad_s`. At each frame (the schedule's instant) the sensor delivers

    flow_rad      = Σ ḟ·dt over the ticks since the last frame + σ_f·w,
                    σ_f = noise_stddev_rad + noise_per_m_rad·d̄   (w normal, stream `noise`,
                    d̄ the frame's mean distance over ticks that tracked)
    body_rate_rad = T·(k ⊙ ω̄ + b + b_on + N/√T·w_g)      (the integrated gyro PX4-class
                    sensors report; T = ticks·dt, ω̄ = Σ ω·dt / T the frame's mean rate)
    integration_time_s = T,  quality = round(mean q over the frame)

The gyro's error model (`GYRO`, per axis, each term compiled out at its default, when
`body_rate_rad` is the ideal Σ ω·dt): scale factor k = `gyro_scale` (1), constant bias b =
`gyro_bias_rad_s`, turn-on bias b_on ~ N(0, `gyro_bias_turn_on_stddev_rad_s`²) drawn once per
episode (stream `gyro_bias_turn_on`, redrawn at a device reset), white rate noise of density
N = `gyro_noise_density` (rad/s/√Hz; w_g normal, stream `gyro_noise`, one draw per frame: the
integral of white rate noise over T has σ = N·√T, so one draw per frame is the same process
as one per tick).

Not modelled: the image itself (texture statistics, feature tracking), flow away from the
optical axis (a tilted view of sloped ground), lens distortion, auto-exposure dynamics, gyro
bias drift (Gauss–Markov or random walk) and gyro saturation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg, Positive
from fibril_mjx.components.sensors.scene import ViewFields, make_view, view_of

TYPE = 'fibril_sim/optical_flow'
SAMPLE_TYPE = 'fibril_sim/optical_flow_sample/v1'
Unit = pydantic.confloat(ge=0, le=1)


def gyro_sigma(p, ctx):
  """σ of the frame's mean rate: N/√T, T the integration time (`ctx.inputs`)."""
  return p.gyro_noise_density / jnp.sqrt(jnp.maximum(ctx.inputs['time'], 1e-9))


def flow_sigma(p, ctx):
  """σ_f = noise_stddev_rad + noise_per_m_rad·d̄, d̄ the frame's summed distance over the ticks
  that tracked (`ctx.inputs`) over their count, terms at their default absent."""
  sigma = jnp.float32(0.0)
  if ctx.on('noise_stddev_rad'):
    sigma = sigma + p.noise_stddev_rad
  if ctx.on('noise_per_m_rad'):
    sigma = sigma + p.noise_per_m_rad * ctx.inputs['distance'] / jnp.maximum(
        ctx.inputs['tracked'], 1)
  return sigma


# The error model of the integrated flow: white noise per axis at each frame, its σ growing
# with the distance. Quality, texture, blur and saturation are the sensor's own.
FLOW = em.chain(em.white_noise(('noise_stddev_rad', 'noise_per_m_rad'), shape=(2,),
                               scale_fn=flow_sigma))
# The error model of the integrated gyro, applied to the frame's mean rate (rad/s).
GYRO = em.chain(em.gain('gyro_scale', shape=(3,)),
                em.turn_on_bias('gyro_bias_turn_on_stddev_rad_s', shape=(3,),
                                stream='gyro_bias_turn_on', state='gyro_turn_on'),
                em.constant_bias('gyro_bias_rad_s', shape=(3,)),
                em.white_noise('gyro_noise_density', stream='gyro_noise', shape=(3,),
                               scale_fn=gyro_sigma))
ERRORS = em.chain(FLOW, GYRO)
SOURCES = ERRORS.streams + ('delivery_jitter', 'delivery_loss')


class _OwnConfig(faults.DeviceConfig):
  """The optical-flow sensor's own manifest fields (its error model adds the rest)."""
  site: str
  fov_deg: float = pydantic.Field(gt=0, lt=180)
  resolution_px: int = pydantic.Field(gt=0)
  min_range_m: NonNeg = 0.0
  max_range_m: Positive
  max_flow_rate_rad_s: Positive
  max_angular_rate_rad_s: Positive
  exposure_s: NonNeg = 0.0
  blur_half_quality_px: Positive = 1.0
  illumination: Unit = 1.0
  group_texture: tuple[Unit, Unit, Unit, Unit, Unit, Unit] = (1.0,) * 6


class OpticalFlowConfigModel(em.with_errors(_OwnConfig, ERRORS)):
  """Validated manifest config of `fibril_sim/optical_flow` (rad, m, s, px): its own fields and its
  error model's."""


class Params(NamedTuple):
  """Per-world parameters (config names), faults."""
  # the sensor's own
  min_range_m: jax.Array
  max_range_m: jax.Array
  max_flow_rate_rad_s: jax.Array
  max_angular_rate_rad_s: jax.Array
  exposure_s: jax.Array
  blur_half_quality_px: jax.Array
  illumination: jax.Array
  group_texture: jax.Array
  # white noise
  noise_stddev_rad: jax.Array
  noise_per_m_rad: jax.Array
  # scale factor
  gyro_scale: jax.Array
  # turn-on bias
  gyro_bias_turn_on_stddev_rad_s: jax.Array
  # constant bias
  gyro_bias_rad_s: jax.Array
  # white noise
  gyro_noise_density: jax.Array
  faults: tuple  # `faults.FaultParams` per manifest `faults` entry


class Sample(NamedTuple):
  """`fibril_sim/optical_flow_sample/v1`.

  Attributes:
    flow_rad: (2,) integrated image flow about the frame (rad).
    body_rate_rad: (3,) integrated angular rate (rad) in the sensor frame.
    integration_time_s: time integrated (s).
    quality: int32 0–255.
    health: int32.
  """
  flow_rad: jax.Array
  body_rate_rad: jax.Array
  integration_time_s: jax.Array
  quality: jax.Array
  health: jax.Array


class Acc(NamedTuple):
  flow: jax.Array      # (2,)
  gyro: jax.Array      # (3,)
  quality: jax.Array   # Σ q
  distance: jax.Array  # Σ d over tracked ticks
  tracked: jax.Array   # ticks with q > 0
  ticks: jax.Array


class State(NamedTuple):
  """Per-world state: stream keys, the error model's, queue, held output, faults, `acc` (the frame's
  `Acc`)."""
  streams: dict
  gyro_turn_on: jax.Array  # turn-on bias
  queue: tp.QueueState
  held: tp.Delivered
  faults: faults.FaultState | None
  acc: Acc


def _zero_acc():
  z = jnp.float32(0.0)
  return Acc(jnp.zeros(2, jnp.float32), jnp.zeros(3, jnp.float32), z, z, jnp.int32(0),
             jnp.int32(0))


@dataclasses.dataclass(frozen=True)
class OpticalFlow(ViewFields, base.SensorBase):
  """A built `fibril_sim/optical_flow` (static, hashable; the fields of `base.SensorBase` and
  `ViewFields`)."""

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type, state_type = Params, State
  errors = ERRORS
  always_used = ('min_range_m', 'max_range_m', 'max_flow_rate_rad_s', 'max_angular_rate_rad_s')

  def neutral(self):
    return Sample(host.zeros(2), host.zeros(3), host.zeros(), host.zeros((), np.int32),
                  host.array(faults.HEALTHY, np.int32))

  def init(self, p: Params, world_key) -> State:
    return self.init_state(State, p, world_key, self.neutral(), acc=_zero_acc())

  def on_reset(self, p: Params, s: State, index) -> State:
    """A device reset redraws the gyro's turn-on bias (draw `index` of its stream)."""
    return s._replace(**ERRORS.redraw(p, ERRORS.state_of(s), self.error_ctx(s.streams), index))

  def gyro(self, p: Params, s: State, n):
    """`(error-model state, body_rate_rad (3,))` of the frame: the ideal integral when every
    gyro term is off (none traced), else T·GYRO(ω̄)."""
    a = s.acc
    if not GYRO.on_terms(self._on):
      return GYRO.state_of(s), a.gyro
    t = jnp.maximum(a.ticks, 1) * jnp.float32(self.dt)
    st, rate, _ = GYRO.apply(p, GYRO.state_of(s), a.gyro / t,
                             self.error_ctx(s.streams, n, time=t))
    return st, rate * t

  def kinematics(self, data):
    """`(v, ω)` in the sensor frame, distance d along the optical axis (−1 no hit), hit geom."""
    R = self.motion.pose.mat(data)
    v, w = self.motion.velocity(data)
    d, g = self.scene.cast(data, self.motion.pose.pos(data), R[:, 2], self.body)
    return v @ R, w @ R, d, g

  def rates(self, p: Params, data):
    """`(measured ḟ (2,), ω (3,), q, d)` of this tick."""
    v, w, d, g = self.kinematics(data)
    ds = jnp.where(d > 0, d, 1.0)
    f_true = jnp.stack([-v[0] / ds - w[1], -v[1] / ds + w[0]])
    q = 255.0 * ((d >= p.min_range_m) & (d <= p.max_range_m) & (d > 0)
                 & (jnp.hypot(w[0], w[1]) <= p.max_angular_rate_rad_s)).astype(jnp.float32)
    if self._on('group_texture'):
      q = q * p.group_texture[self.scene.group_of(g)]
    if self._on('illumination'):
      q = q * p.illumination
    if self._on('exposure_s'):
      px_per_rad = self.cfg.resolution_px / math.radians(self.cfg.fov_deg)
      blur = jnp.linalg.norm(f_true) * p.exposure_s * px_per_rad
      q = q / (1.0 + (blur / p.blur_half_quality_px) ** 2)
    f = jnp.where(q > 0, jnp.clip(f_true, -p.max_flow_rate_rad_s, p.max_flow_rate_rad_s), 0.0)
    return f, w, q, d

  def track(self, p: Params, s: State, data, tick) -> State:
    del tick
    f, w, q, d = self.rates(p, data)
    a = s.acc
    ok = q > 0
    dt = jnp.float32(self.dt)
    acc = Acc(a.flow + f * dt, a.gyro + w * dt, a.quality + q,
              a.distance + jnp.where(ok, d, 0.0), a.tracked + ok.astype(jnp.int32), a.ticks + 1)
    return s._replace(acc=acc)

  def acquire(self, p: Params, s: State, data, tick, n):
    del data, tick
    a = s.acc
    ticks = jnp.maximum(a.ticks, 1)
    ctx = self.error_ctx(s.streams, n, distance=a.distance, tracked=a.tracked)
    _, flow, _ = FLOW.apply(p, {}, a.flow, ctx)
    st, gyro = self.gyro(p, s, n)
    quality = jnp.round(a.quality / ticks).astype(jnp.int32)
    sample = Sample(flow.astype(jnp.float32), gyro.astype(jnp.float32),
                    (a.ticks * self.dt).astype(jnp.float32), quality, jnp.int32(faults.HEALTHY))
    return s._replace(acc=_zero_acc(), **st), sample

  def truth(self, s: State, data) -> dict:
    """This tick's ideal flow rate (rad/s, unsaturated), angular rate (rad/s, sensor frame) and
    distance along the optical axis (m; −1 no hit)."""
    v, w, d, _ = self.kinematics(data)
    ds = jnp.where(d > 0, d, 1.0)
    f = jnp.stack([-v[0] / ds - w[1], -v[1] / ds + w[0]])
    return {'flow_rate_rad_s': f, 'angular_rate_rad_s': w, 'distance_m': d,
            'health': s.faults.health}

  def describe(self) -> list[str]:
    c = self.cfg
    return self.describe_errors([
        f'optical flow: site {c.site!r} (optical axis +z), fov {c.fov_deg:g} deg, '
        f'{c.resolution_px} px, range {c.min_range_m:g} … {c.max_range_m:g} m, saturation '
        f'{c.max_flow_rate_rad_s:g} rad/s flow, {c.max_angular_rate_rad_s:g} rad/s body rate'],
        ('exposure_s', 'illumination', 'group_texture'))


def build(cid: str, raw, ctx: BuildContext, catalog) -> OpticalFlow:
  sb = base.SensorBuild(OpticalFlowConfigModel, TYPE, cid, raw, ctx, catalog)
  cfg = sb.cfg
  base.check(cfg.max_range_m > cfg.min_range_m, *sb.origin('max_range_m'),
             f'must be > min_range_m = {cfg.min_range_m:g}', cfg.max_range_m)
  base.check(cfg.exposure_s <= cfg.period_s, *sb.origin('exposure_s'),
             f'must be ≤ period_s = {cfg.period_s:g}', cfg.exposure_s)
  return make_view(sb, OpticalFlow, view_of(ctx, faults.bind_site(ctx, cfg.site, sb.origin)))


CONFIG_MODEL = OpticalFlowConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
