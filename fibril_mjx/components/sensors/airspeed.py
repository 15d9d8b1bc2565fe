"""`fibril_sim/airspeed` — a pitot-static differential-pressure sensor (docs/guides/sensors.md,
"Navigation sensors, faults and health"): the probe and transducer, kept apart from the wind
model.

The probe axis is the x axis of the site of `velocity_sensor` (a MuJoCo velocimeter: the
site's linear velocity in site axes). With the wind `wind_m_s` (world frame, a per-world input
of this component) and `R` site → world:

    v_air = v_site − Rᵀ·wind                 air-relative velocity, site axes
    u     = v_air · x̂                        along the probe axis (sideslip and angle of attack
                                             reduce it: only the axial component is sensed)
    q     = ½·ρ·u·|u|                        ideal differential pressure (negative in reverse
                                             flow)
    q_f   = first-order lag of q, time constant response_time_s, every physics tick
            (tubing / probe response; started at the first value); q_f = q when it is 0.
            q_f is the state `lagged`, set every tick (`track`), and truth `lagged_pressure_pa`
    z     = Q(sat(q_f + offset_pa + w[k]))   transducer offset, white noise (stream `noise`),
                                             saturation to ±range_pa, quantization

`ρ = air_density_kg_m3`. Terms at their default are absent from the graph.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults, smallmat
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext, SensorBinding, Wanted
from fibril_mjx.components import base
from fibril_mjx.components.base import Positive, Vec3

TYPE = 'fibril_sim/airspeed'
SAMPLE_TYPE = 'fibril_sim/airspeed_sample/v1'

# The error model: the probe's response (every physics tick), then the transducer's offset,
# white noise, range and resolution (every acquisition).
PROBE = em.chain(em.first_order_lag('response_time_s'))
TRANSDUCER = em.chain(em.constant_bias('offset_pa'), em.white_noise('noise_stddev_pa'),
                      em.saturation('range_pa'), em.quantization('resolution_pa'))
ERRORS = em.chain(PROBE, TRANSDUCER)
SOURCES = ERRORS.streams + ('delivery_jitter', 'delivery_loss')


class _OwnConfig(faults.DeviceConfig):
  """The probe's own manifest fields (its error model adds the rest). The MuJoCo velocimeter
  is named (`velocity_sensor`) or added at `site` (`fibril_<id>_vel`)."""
  velocity_sensor: str | None = None
  site: str | None = None
  wind_m_s: Vec3 = (0.0, 0.0, 0.0)
  air_density_kg_m3: Positive = 1.225


class AirspeedConfigModel(em.with_errors(_OwnConfig, ERRORS)):
  """Validated manifest config of `fibril_sim/airspeed` (Pa, m/s, kg/m³, s): its own fields and its
  error model's."""


class Params(NamedTuple):
  """Per-world parameters (config names), faults."""
  # the sensor's own
  wind_m_s: jax.Array
  air_density_kg_m3: jax.Array
  # first-order lag
  response_time_s: jax.Array
  # constant bias
  offset_pa: jax.Array
  # white noise
  noise_stddev_pa: jax.Array
  # saturation
  range_pa: jax.Array
  # quantization
  resolution_pa: jax.Array
  faults: tuple  # `faults.FaultParams` per manifest `faults` entry


Sample = em.sample_type('Sample', ('differential_pressure_pa',), doc="""\
`fibril_sim/airspeed_sample/v1`.

  Attributes:
    differential_pressure_pa: Pa (pitot − static).
  """)


class State(NamedTuple):
  """Per-world state: the RNG stream keys, the error model's, the delivery queue, the held output,
  the faults."""
  streams: dict
  lagged: jax.Array  # first-order lag
  started: jax.Array  # first-order lag
  clip_count: jax.Array  # saturation
  queue: tp.QueueState
  held: tp.Delivered
  faults: faults.FaultState | None


@dataclasses.dataclass(frozen=True)
class Airspeed(base.SiteFields, base.SensorBase):
  """A built `fibril_sim/airspeed` (static, hashable; `cfg` an `AirspeedConfigModel`, the
  common fields of `base.SensorBase` and `base.SiteFields`); `site_id` is the probe's site."""
  velocity: SensorBinding

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type, state_type = Params, State
  errors = ERRORS
  always_used = ('wind_m_s', 'air_density_kg_m3')
  # in a group (`core/groups.py`): its site's probes and velocimeter per member
  per_member = ('site_id', 'site', 'velocity')
  member_config = ('velocity_sensor', 'site')

  def variance(self, p: Params):
    return ERRORS.variance(p, self.error_ctx({}))

  def init(self, p: Params, world_key) -> State:
    neutral = Sample(jnp.float32(0.0), self.variance(p), jnp.bool_(False),
                     jnp.int32(faults.HEALTHY))
    return self.init_state(State, p, world_key, neutral)

  def air_velocity(self, p: Params, data):
    """Air-relative velocity of the probe in site axes `(3,)` m/s."""
    v = self.velocity.read(data.sensordata)
    return v - smallmat.matvec(self.site.mat(data).T, p.wind_m_s)

  def ideal(self, p: Params, data):
    """Ideal differential pressure ½ρu|u| (Pa) along the probe axis."""
    u = self.air_velocity(p, data)[0]
    return 0.5 * p.air_density_kg_m3 * u * jnp.abs(u)

  def track(self, p: Params, s: State, data, tick) -> State:
    """Every physics tick: the probe's pressure `lagged` (Pa), ½ρu|u| through the first-order
    response, or ½ρu|u| itself when the response is off (the lag absent from the graph)."""
    del tick
    q = self.ideal(p, data)
    if not self._on('response_time_s'):
      return s._replace(lagged=q)
    ctx = self.error_ctx(s.streams, period_s=self.dt)
    st, _, _ = PROBE.apply(p, ERRORS.state_of(s), q, ctx)
    return s._replace(**st)

  def acquire(self, p: Params, s: State, data, tick, n):
    del tick, data
    x = s.lagged       # this tick's probe pressure (`track` runs first, on the same data)
    st, x, flag = TRANSDUCER.apply(p, ERRORS.state_of(s), x, self.error_ctx(s.streams, n))
    sample = Sample(x, self.variance(p), flag, jnp.int32(faults.HEALTHY))
    return s._replace(**st), sample

  def truth(self, s: State, data) -> dict:
    """The probe-axis velocity relative to the ground (the wind is a per-world param, not
    known here), the health, and `lagged_pressure_pa`: this tick's probe pressure (½ρu|u|
    through the response lag; ½ρu|u| itself when `response_time_s` is 0)."""
    b = self.velocity
    return {'probe_ground_speed_m_s': data.sensordata[b.adr], 'lagged_pressure_pa': s.lagged,
            'health': s.faults.health}

  def describe(self) -> list[str]:
    b = self.velocity
    return self.describe_errors([
        f'probe: x axis of site {b.site!r} ({b.name}, velocimeter, adr {b.adr}); wind (world) '
        f'{list(self.cfg.wind_m_s)} m/s, density {self.cfg.air_density_kg_m3:g} kg/m³'],
        ())


def build(cid: str, raw, ctx: BuildContext, catalog) -> Airspeed:
  sb = base.SensorBuild(AirspeedConfigModel, TYPE, cid, raw, ctx, catalog)
  velocity, = ctx.site_sensors(cid, sb.cfg.site, [Wanted(
      'velocity_sensor', sb.cfg.velocity_sensor, mujoco.mjtSensor.mjSENS_VELOCIMETER, 3, 'vel')])
  sid = mujoco.mj_name2id(ctx.model, mujoco.mjtObj.mjOBJ_SITE, velocity.site)
  z = host.zeros()
  return sb.make(Airspeed, Sample(z, z, host.zeros((), bool), host.zeros((), np.int32)), velocity=velocity,
                 **base.at_site(ctx, sid))


CONFIG_MODEL = AirspeedConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
