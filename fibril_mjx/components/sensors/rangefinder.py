"""`fibril_sim/rangefinder` — a single-beam distance sensor (lidar / sonar altimeter) from
MuJoCo's `rangefinder` sensor (docs/guides/sensors.md, "Navigation sensors, faults and health").

MuJoCo casts the ray along the z axis of the sensor's site and returns the distance to the
first geom hit (−1 when nothing is hit). Per acquisition `k`:

    cos θ = −ẑ_site · ẑ_world                       incidence on horizontal ground (θ = 0 looking
                                                    straight down)
    σ     = (noise_stddev_m + noise_fraction·d)·(1 + incidence_noise_gain·(1/cos θ − 1))
    d_m   = Q(d + σ·w[k])                           white noise (stream `noise`), resolution_m

A sample is **out of range** — `in_range = false`, distance ±inf as in ROS REP 117 — when
nothing is hit, `d_m > max_range_m` or `θ > max_incidence_deg` (`+inf`: no return), or
`d_m < min_range_m` (`−inf`: too close). The incidence model assumes the beam ends on
horizontal ground; MuJoCo does not report the surface normal.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults
from fibril_mjx.core.context import BuildContext, SensorBinding, Wanted
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg, Positive
from fibril_mjx.components.sensors.lidar import range_sigma

TYPE = 'fibril_sim/rangefinder'
SAMPLE_TYPE = 'fibril_sim/range_sample/v1'


def beam_sigma(p, ctx):
  """σ = (noise_stddev_m + noise_fraction·d)·(1 + incidence_noise_gain·(1/cos θ − 1)) at the
  true distance `d` and incidence `cos θ` (`ctx.inputs`), terms at their default absent."""
  sigma = range_sigma(p, ctx)
  if ctx.on('incidence_noise_gain'):
    safe = jnp.maximum(ctx.inputs['cos'], 1e-3)
    sigma = sigma * (1.0 + p.incidence_noise_gain * (1.0 / safe - 1.0))
  return sigma


ERRORS = em.chain(em.white_noise(('noise_stddev_m', 'noise_fraction'), scale_fn=beam_sigma,
                                 extra=('incidence_noise_gain',)),
                  em.quantization('resolution_m'))
SOURCES = ERRORS.streams + ('delivery_jitter', 'delivery_loss')


class _OwnConfig(faults.DeviceConfig):
  """The rangefinder's own manifest fields (its error model adds the rest). The MuJoCo
  rangefinder is named (`rangefinder_sensor`) or added at `site` (`fibril_<id>_range`)."""
  rangefinder_sensor: str | None = None
  site: str | None = None
  min_range_m: NonNeg = 0.0
  max_range_m: Positive
  max_incidence_deg: float = pydantic.Field(90.0, gt=0, le=90)


class RangefinderConfigModel(em.with_errors(_OwnConfig, ERRORS)):
  """Validated manifest config of `fibril_sim/rangefinder` (m, deg): its own fields and its error
  model's."""


class Params(NamedTuple):
  """Per-world parameters (config names; `max_incidence_deg` as its cosine in the graph), faults."""
  # the sensor's own
  min_range_m: jax.Array
  max_range_m: jax.Array
  max_incidence_deg: jax.Array
  # white noise
  noise_stddev_m: jax.Array
  noise_fraction: jax.Array
  incidence_noise_gain: jax.Array
  # quantization
  resolution_m: jax.Array
  faults: tuple  # `faults.FaultParams` per manifest `faults` entry


class Sample(NamedTuple):
  """`fibril_sim/range_sample/v1`.

  Attributes:
    distance_m: measured distance; +inf no return / beyond range, −inf below min range.
    in_range: bool, a valid measurement.
    variance: σ² of this sample's noise (m², at the true distance and incidence) + q²/12.
    health: int32 (`fibril_mjx.mechanisms.faults`).
  """
  distance_m: jax.Array
  in_range: jax.Array
  variance: jax.Array
  health: jax.Array


State = base.SensorState   # no error-model state: streams, queue, held, faults


@dataclasses.dataclass(frozen=True)
class Rangefinder(base.SiteFields, base.SensorBase):
  """A built `fibril_sim/rangefinder` (static, hashable; `cfg` a `RangefinderConfigModel`,
  the common fields of `base.SensorBase` and `base.SiteFields`)."""
  sensor: SensorBinding

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type, state_type = Params, State
  errors = ERRORS
  # in a group (`core/groups.py`): its site's probes and its MuJoCo rangefinder per member
  per_member = ('site_id', 'site', 'sensor')
  member_config = ('rangefinder_sensor', 'site')
  always_used = ('min_range_m', 'max_range_m')

  def init(self, p: Params, world_key) -> State:
    z = jnp.float32(0.0)
    neutral = Sample(z, jnp.bool_(False), z, jnp.int32(faults.HEALTHY))
    return self.init_state(State, p, world_key, neutral)

  def cos_incidence(self, data):
    return -self.site.mat(data)[2, 2]

  def acquire(self, p: Params, s: State, data, tick, n):
    del tick
    d = data.sensordata[self.sensor.adr]
    hit = d >= 0
    cos = self.cos_incidence(data)
    ctx = self.error_ctx(s.streams, n, distance=d, cos=cos)
    _, x, _ = ERRORS.apply(p, {}, d, ctx)
    far = ~hit | (x > p.max_range_m)
    if self._on('max_incidence_deg'):
      far = far | (cos < jnp.cos(jnp.deg2rad(p.max_incidence_deg)))
    near = ~far & (x < p.min_range_m)     # also a noisy reading below 0 with min_range_m 0
    x = jnp.where(far, jnp.inf, jnp.where(near, -jnp.inf, x))
    var = ERRORS.variance(p, ctx)
    sample = Sample(x, ~(far | near), jnp.asarray(var, jnp.float32), jnp.int32(faults.HEALTHY))
    return s, sample

  def truth(self, s: State, data) -> dict:
    """MuJoCo's distance (−1: no hit) and the incidence angle (rad) on horizontal ground."""
    cos = jnp.clip(self.cos_incidence(data), -1.0, 1.0)
    return {'distance_m': data.sensordata[self.sensor.adr], 'incidence_rad': jnp.arccos(cos),
            'health': s.faults.health}

  def describe(self) -> list[str]:
    c = self.cfg
    b = self.sensor
    return self.describe_errors([
        f'beam: z axis of site {b.site!r} ({b.name}, rangefinder, adr {b.adr}); range '
        f'{c.min_range_m:g} … {c.max_range_m:g} m'],
        ('max_incidence_deg',))


def build(cid: str, raw, ctx: BuildContext, catalog) -> Rangefinder:
  sb = base.SensorBuild(RangefinderConfigModel, TYPE, cid, raw, ctx, catalog)
  cfg = sb.cfg
  base.check(cfg.max_range_m > cfg.min_range_m, *sb.origin('max_range_m'),
             f'must be > min_range_m = {cfg.min_range_m:g}', cfg.max_range_m)
  sensor, = ctx.site_sensors(cid, cfg.site, [Wanted(
      'rangefinder_sensor', cfg.rangefinder_sensor, mujoco.mjtSensor.mjSENS_RANGEFINDER, 1,
      'range')])
  sid = mujoco.mj_name2id(ctx.model, mujoco.mjtObj.mjOBJ_SITE, sensor.site)
  z = host.zeros()
  return sb.make(Rangefinder, Sample(z, host.zeros((), bool), z, host.zeros((), np.int32)),
                 sensor=sensor,
                 **base.at_site(ctx, sid))


CONFIG_MODEL = RangefinderConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
