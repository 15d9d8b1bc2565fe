"""`fibril_sim/magnetometer` — a 3-axis magnetometer on a MuJoCo site
(docs/guides/sensors.md, "Navigation sensors, faults and health").

Per acquisition `k` (`Δ = period_s`; µT; sensor axes = site axes; `R` = site → world):

    B_ext = Rᵀ (B_earth + d[k])                        Earth field + common-mode disturbance
    m     = S·B_ext + h + Σ_j c_j·i_j + b_on + b_gm[k] + w[k]
    z     = Q(sat(m))

- `B_earth` (world frame, x east, y north, z up): `earth_field_ut`, or from
  `declination_deg` D (east of north), `inclination_deg` I (down from horizontal) and
  `intensity_ut` F: `[F cos I sin D, F cos I cos D, −F sin I]`;
- `d[k]`: common-mode external disturbance in the world frame, first-order Gauss–Markov
  `σ_cm·x[k]` with unit process `x` (stationary start, `φ = exp(−Δ/τ_cm)`) drawn from the
  shared stream `shared:<common_mode_stream>` — two magnetometers naming the same stream see
  the same disturbance, each rotated into its own axes (stream `external_field`);
- `S` soft iron (3×3, default identity), `h` hard iron (µT);
- `c_j·i_j`: field of motor / actuator currents: `i_j` is the `current` of the delivered
  feedback of component `current_components[j]` (listed earlier in the manifest), passed
  through a first-order lag `current_lag_s` every physics tick; `c_j` is µT per A in sensor
  axes;
- `b_on ~ N(0, bias_turn_on_stddev_ut²)` per episode (redrawn at a `reset` fault; stream
  `bias_turn_on`), `b_gm` Gauss–Markov bias instability (`bias_instability`), `w` white noise
  of per-sample σ `noise_stddev_ut` (`noise`);
- `sat` to `±range_ut` with per-axis flags, `Q` to `resolution_ut`.

Truth (`truth/<id>/…`) keeps the ideal Earth field in sensor axes and the true yaw of the site
apart from the measurement. Terms left at their default are absent from the graph.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple
import math

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults, smallmat
from fibril_mjx.mechanisms import signal as sig
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext
from fibril_mjx.components import base
from fibril_mjx.components.base import NonNeg, Vec3
from fibril_mjx.errors import ConfigError, did_you_mean

TYPE = 'fibril_sim/magnetometer'
SAMPLE_TYPE = 'fibril_sim/magnetometer_sample/v1'
Mat3 = tuple[Vec3, Vec3, Vec3]
IDENTITY = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
ZERO3 = (0.0, 0.0, 0.0)

# The error model: the common-mode disturbance joins the Earth field in the world frame; the
# device's own errors enter in sensor axes after soft / hard iron and the current couplings.
WORLD = em.chain(em.common_mode('common_mode_stddev_ut', 'common_mode_correlation_time_s',
                                'external_field', 'common', 'common_mode_stream', (3,)))
DEVICE = em.chain(
    em.turn_on_bias('bias_turn_on_stddev_ut', (3,)),
    em.gauss_markov('bias_instability_stddev_ut', 'bias_correlation_time_s', 'bias_instability',
                    'gm', (3,)),
    em.white_noise('noise_stddev_ut', shape=(3,)),
    em.saturation('range_ut', shape=(3,)),
    em.quantization('resolution_ut'))
ERRORS = em.chain(WORLD, DEVICE)
SOURCES = ERRORS.streams + ('delivery_jitter', 'delivery_loss')


class _OwnConfig(faults.DeviceConfig):
  """The magnetometer's own manifest fields (its error model adds the rest)."""
  site: str
  earth_field_ut: Vec3 | None = None
  declination_deg: float | None = None
  inclination_deg: float | None = pydantic.Field(None, ge=-90, le=90)
  intensity_ut: NonNeg | None = None
  hard_iron_ut: Vec3 = ZERO3
  soft_iron: Mat3 = IDENTITY
  current_components: tuple[str, ...] = ()
  current_coefficients_ut_per_a: tuple[Vec3, ...] = ()
  current_lag_s: NonNeg = 0.0


class MagnetometerConfigModel(em.with_errors(_OwnConfig, ERRORS)):
  """Validated manifest config of `fibril_sim/magnetometer` (fields in µT unless named): its own and
  its error model's."""


class Params(NamedTuple):
  """Per-world parameters (config names; `earth_field_ut` from D/I/F,
  `current_coefficients_ut_per_a` `(n_currents, 3)`), faults."""
  # the sensor's own
  earth_field_ut: jax.Array
  hard_iron_ut: jax.Array
  soft_iron: jax.Array
  current_coefficients_ut_per_a: jax.Array
  current_lag_s: jax.Array
  # common-mode process
  common_mode_stddev_ut: jax.Array
  common_mode_correlation_time_s: jax.Array
  # turn-on bias
  bias_turn_on_stddev_ut: jax.Array
  # Gauss–Markov drift
  bias_instability_stddev_ut: jax.Array
  bias_correlation_time_s: jax.Array
  # white noise
  noise_stddev_ut: jax.Array
  # saturation
  range_ut: jax.Array
  # quantization
  resolution_ut: jax.Array
  faults: tuple  # `faults.FaultParams` per manifest `faults` entry


def earth_field(cfg: MagnetometerConfigModel) -> np.ndarray:
  """World-frame Earth field (x east, y north, z up), µT, float64."""
  if cfg.earth_field_ut is not None:
    return np.asarray(cfg.earth_field_ut, np.float64)
  d, i = math.radians(cfg.declination_deg), math.radians(cfg.inclination_deg)
  f = cfg.intensity_ut
  return np.array([f * math.cos(i) * math.sin(d), f * math.cos(i) * math.cos(d),
                   -f * math.sin(i)])


Sample = em.sample_type('Sample', ('magnetic_field_ut',), doc="""\
`fibril_sim/magnetometer_sample/v1`.

  Attributes:
    magnetic_field_ut: `(3,)` measured field, sensor axes, µT.
  """)


class State(NamedTuple):
  """Per-world state: stream keys, the world Earth field (truth), lagged currents, the error
  model's, queue, held, faults."""
  streams: dict
  earth_field: jax.Array
  current: jax.Array
  common: jax.Array  # common-mode process
  turn_on: jax.Array  # turn-on bias
  gm: jax.Array  # Gauss–Markov drift
  clip_count: jax.Array  # saturation
  queue: tp.QueueState
  held: tp.Delivered
  faults: faults.FaultState | None


@dataclasses.dataclass(frozen=True)
class Magnetometer(base.SiteFields, base.SensorBase):
  """A built `fibril_sim/magnetometer` (static, hashable; `cfg` a `MagnetometerConfigModel`,
  the common fields of `base.SensorBase` and `base.SiteFields`).

  Attributes:
    site_id: MuJoCo site id; current_ids: components whose feedback `current` is read.
  """
  current_ids: tuple[str, ...]

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type, state_type = Params, State
  errors = ERRORS
  # in a group (`core/groups.py`): its site's probes per member
  per_member = ('site_id', 'site')
  member_config = ('site',)

  def default_params(self) -> Params:
    c = self.cfg
    resolved = {'earth_field_ut': earth_field(c), 'current_coefficients_ut_per_a': np.asarray(
        c.current_coefficients_ut_per_a, np.float64).reshape(-1, 3)}
    return Params(*(host.array(resolved[f] if f in resolved else getattr(c, f))
                    for f in Params._fields[:-1]), faults.default_params(c))

  def field_path(self, field: str):
    if field in ('declination_deg', 'inclination_deg', 'intensity_ut'):
      return ('earth_field_ut',)
    return (field,) if field in Params._fields else None

  def field_uses(self, field: str) -> bool:
    return self.param_path(field) == ('earth_field_ut',) or super().field_uses(field)

  def variance(self, p: Params):
    return ERRORS.variance(p, self.error_ctx({}), (3,))

  def init(self, p: Params, world_key) -> State:
    neutral = Sample(jnp.zeros(3, jnp.float32), self.variance(p), jnp.zeros(3, bool),
                     jnp.int32(faults.HEALTHY))
    return self.init_state(State, p, world_key, neutral, p.earth_field_ut,
                           jnp.zeros(len(self.current_ids), jnp.float32))

  def on_reset(self, p: Params, s: State, index) -> State:
    """A device reset redraws the turn-on bias (draw `index` of its stream)."""
    return s._replace(**ERRORS.redraw(p, ERRORS.state_of(s), self.error_ctx(s.streams), index))

  def observe(self, p: Params, s: State, env, tick) -> State:
    """Every tick: the lagged currents of the named components' delivered feedback."""
    del tick
    if not self.current_ids:
      return s
    i = jnp.stack([jnp.asarray(env[c].sample.current, jnp.float32).reshape(()) for c in
                   self.current_ids])
    if self._on('current_lag_s'):
      i = s.current + sig.lag_alpha(self.dt, p.current_lag_s) * (i - s.current)
    return s._replace(current=i)

  def acquire(self, p: Params, s: State, data, tick, n):
    del tick
    ctx = self.error_ctx(s.streams, n)
    rot = self.site.mat(data)
    st, b_world, _ = WORLD.apply(p, ERRORS.state_of(s), p.earth_field_ut, ctx)
    m = smallmat.matvec(rot.T, b_world)
    if self._on('soft_iron'):
      m = smallmat.matvec(p.soft_iron, m)
    if self._on('hard_iron_ut'):
      m = m + p.hard_iron_ut
    if self.current_ids:
      m = m + smallmat.matvec(p.current_coefficients_ut_per_a.T, s.current)
    st, m, flags = DEVICE.apply(p, st, m, ctx)
    sample = Sample(m, self.variance(p), flags, jnp.int32(faults.HEALTHY))
    return s._replace(**st), sample

  def truth(self, s: State, data) -> dict:
    """Ideal Earth field in sensor axes (no disturbance or errors), the true yaw of the site
    (rad, about world z, of its x axis), the lagged currents, the bias state, the health."""
    rot = self.site.mat(data)
    return {'magnetic_field_ut': smallmat.matvec(rot.T, s.earth_field),
            'yaw_rad': jnp.arctan2(rot[1, 0], rot[0, 0]),
            'bias_ut': s.turn_on + s.gm, 'current_a': s.current, 'health': s.faults.health}

  def describe(self) -> list[str]:
    c = self.cfg
    return self.describe_errors([
        f'site {c.site!r} (id {self.site_id}); Earth field (world, µT) '
        f'{[round(float(v), 3) for v in earth_field(c)]}',
        f'currents from: {", ".join(self.current_ids) or "none"}'],
        ('hard_iron_ut', 'soft_iron', 'current_lag_s'))


def earlier_feedback(ctx: BuildContext, cid: str, name: str, origin, field: str, index: int):
  """Checks that component `name` is listed before `cid` and has a delivered `current`."""
  file, path = origin(field)
  where = f'{path}[{index}]'
  ids = [i for i, _ in ctx.entries]
  if name not in ids or name == cid:
    raise ConfigError(file, where, 'no other component of that id in the manifest'
                      + did_you_mean(name, [i for i in ids if i != cid]), name)
  if name not in ctx.built:
    raise ConfigError(file, where, 'must name a component listed before this one', name)
  c = ctx.built[name]
  neutral = jax.eval_shape(lambda: c.output(c.init(c.default_params(),
                                                   jax.random.PRNGKey(0))))
  if 'current' not in type(neutral.sample)._fields:   # samples are NamedTuples
    raise ConfigError(file, where, f'must name a component whose feedback has a current '
                      f'(e.g. fibril_sim/motor); {name!r} is a {c.type}', name)


def build(cid: str, raw, ctx: BuildContext, catalog) -> Magnetometer:
  sb = base.SensorBuild(MagnetometerConfigModel, TYPE, cid, raw, ctx, catalog)
  cfg, origin = sb.cfg, sb.origin
  dii = (cfg.declination_deg, cfg.inclination_deg, cfg.intensity_ut)
  if cfg.earth_field_ut is not None and any(v is not None for v in dii):
    raise ConfigError(*origin('earth_field_ut'), 'give earth_field_ut or declination_deg/'
                      'inclination_deg/intensity_ut, not both', list(cfg.earth_field_ut))
  if cfg.earth_field_ut is None and not all(v is not None for v in dii):
    raise ConfigError(*origin('earth_field_ut'), 'required unless declination_deg, '
                      'inclination_deg and intensity_ut are all given')
  base.check(len(cfg.current_coefficients_ut_per_a) == len(cfg.current_components),
             *origin('current_coefficients_ut_per_a'), 'needs one [x, y, z] per entry of '
             f'current_components ({len(cfg.current_components)})',
             [list(v) for v in cfg.current_coefficients_ut_per_a])
  sid = faults.bind_site(ctx, cfg.site, origin)
  for j, name in enumerate(cfg.current_components):
    earlier_feedback(ctx, cid, name, origin, 'current_components', j)
  ERRORS.check(sb)
  z3 = host.zeros(3)
  return sb.make(Magnetometer, Sample(z3, z3, host.zeros(3, bool), host.zeros((), np.int32)),
                 **base.at_site(ctx, sid),
                 current_ids=tuple(cfg.current_components))


CONFIG_MODEL = MagnetometerConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
