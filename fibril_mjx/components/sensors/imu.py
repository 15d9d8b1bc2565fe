"""`fibril_sim/imu` — raw IMU: gyro + accelerometer with a full error model (SPEC §5.2).

The IMU model of SPEC §5.2:
`z = sat(Q((I + S + M)·x + b + n))` with dynamics in between.
Two channels, `angular_velocity` (rad/s, the MuJoCo gyro) and `linear_acceleration` (specific
force, m/s², the MuJoCo accelerometer — lever-arm terms included by MuJoCo), both in the axes of
the sensors' site, each the shared inertial chain of `components/inertial.py`: gain and
cross-axis → fixed / turn-on / Gauss–Markov / random-walk bias and white noise from the noise
density, and a narrowband vibration line (`<channel>_narrowband_stddev`, `_frequency_hz`,
`_bandwidth_hz`: a second-order resonant Gauss–Markov process, `em.narrowband`) → first-order
bandwidth (noise before or after it) → saturation → LSB.

`filter_rate` (default `physics`): the bandwidth filter runs every physics tick on the
continuous signal and is sampled at acquisition — a MEMS sensor's digital low-pass runs at its
internal rate before decimation to the output data rate, so vibration above the output Nyquist
frequency is attenuated, not aliased. `output` filters the samples at the output period
(`noise_before_filter: true` requires it).

The thermal model (`components/sensors/thermal.py`: ambient table, the sensor's first-order lag,
bias `k1·ΔT + k2·ΔT²` and scale `1 + ks·ΔT` per channel, an optional delivered `temperature_c`
sample field) is absent unless a coefficient is set or `temperature_output: true`. Vibration
from a rotor (`components/sensors/vibration.py`: lines at orders of a hinge joint's rotation,
modulated with its speed, a transmission gain, a broadband floor) is added to the MuJoCo input,
before the gain and the filter, when `vibration_joint` is set.

`integration: average | delta` (`components/sensors/delta_imu.py`): the rate fields become the
means of the physics-rate signal over each output window, and `delta` adds the window's
`delta_angle` and `delta_velocity`, ideal from the site's attitude and velocity at the window's
ends (`log(q₀*⊗q₁)`, `R(q₀)ᵀ(v₁ − v₀ − gT)`), plus the rate errors of the chains (run on the
window means) integrated over the window. The truth carries the ideal increments and the window
means.

Every term whose manifest value is the default is absent from the traced graph (unless the
field is named for per-world variation); every random term has its own named stream (SPEC §4).
Schedule and transport (latency, jitter, loss) are as in SPEC §4; `delivery: fifo` replaces the
queue by a device FIFO read in batches (`mechanisms/fifo.py`, SPEC §4 "FIFO delivery"). The sample carries per-axis
variances (white noise, times the filter gain when added before it, plus q²/12).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple, Optional

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import faults, fifo, quat, rng
from fibril_mjx.mechanisms import transport as tp
from fibril_mjx.core.context import BuildContext, Probe, SensorBinding, Wanted
from fibril_mjx.components import base
from fibril_mjx.components.sensors import delta_imu, inertial, thermal, vibration
from fibril_mjx.components.base import NonNeg, NonNeg3, Positive3, Vec3
from fibril_mjx.errors import ConfigError

TYPE = 'fibril_sim/imu'
SAMPLE_TYPE = 'fibril_sim/imu_sample/v1'

CHANNELS = ('angular_velocity', 'linear_acceleration')

Mat3 = tuple[Vec3, Vec3, Vec3]
ZERO3 = (0.0, 0.0, 0.0)
ZERO33 = (ZERO3, ZERO3, ZERO3)


def _zero_diagonal(m):
  if any(m[i][i] != 0.0 for i in range(3)):
    raise ValueError('diagonal must be 0 (off-diagonal cross-axis terms only; per-axis gain '
                     'belongs in the _scale field)')
  return m


# The IMU's channel fields (of `inertial.FIELDS`), each a manifest field `<channel>_<field>` of
# both channels: `(type, default)`.
CHANNEL_SPEC = {
    'bandwidth_hz': (NonNeg, 0.0),
    'scale': (Positive3, (1.0, 1.0, 1.0)),
    'misalignment': (Mat3, ZERO33),
    'noise_density': (NonNeg3, ZERO3),
    'bias': (Vec3, ZERO3),
    'bias_turn_on_stddev': (NonNeg3, ZERO3),
    'bias_instability_stddev': (NonNeg3, ZERO3),
    'bias_correlation_time_s': (NonNeg3, ZERO3),
    'random_walk': (NonNeg3, ZERO3),
    'narrowband_stddev': (NonNeg3, ZERO3),
    'narrowband_frequency_hz': (NonNeg3, ZERO3),
    'narrowband_bandwidth_hz': (NonNeg3, ZERO3),
    'limit': (NonNeg, 0.0),
    'resolution': (NonNeg, 0.0),
}
CHANNEL_FIELDS = tuple(CHANNEL_SPEC)


class _OwnConfig(base.SamplingConfig, faults.FaultConfig, thermal.ThermalConfig,
                 vibration.VibrationConfig, fifo.FifoConfig, delta_imu.DeltaConfig):
  """The IMU's fields but its channels' (`with_channels` adds those). The MuJoCo gyro and
  accelerometer are named (`gyroscope_sensor`, `accelerometer_sensor`), or added at `site`
  (`fibril_<id>_gyro`, `fibril_<id>_accel`)."""
  gyroscope_sensor: Optional[str] = None
  accelerometer_sensor: Optional[str] = None
  site: Optional[str] = None
  noise_before_filter: bool = False
  filter_rate: Literal['physics', 'output'] = 'physics'

  _diag = pydantic.field_validator('angular_velocity_misalignment',
                                   'linear_acceleration_misalignment',
                                   check_fields=False)(_zero_diagonal)

  @pydantic.model_validator(mode='after')
  def _before_needs_output_rate(self):
    if self.noise_before_filter and self.filter_rate == 'physics':
      raise ValueError("noise_before_filter: true needs filter_rate: output (errors are drawn "
                       "per sample; a physics-rate filter runs between samples)")
    return self


# The error model of each channel (`inertial.channel_errors`), over its manifest fields
# `<channel>_<field>`.
RATE_FIELDS = {ch: {f: f'{ch}_{f}' for f in CHANNEL_FIELDS} for ch in CHANNELS}
RATES = {ch: inertial.channel_errors(ch, RATE_FIELDS[ch]) for ch in CHANNELS}
# Everything the IMU declares: its channels, its delivered temperature, its vibration.
ERRORS = em.partition(**{ch: RATES[ch].chain for ch in CHANNELS},
                      temperature=thermal.DELIVERED,
                      **{f'{ch}_vibration': vibration.ERRORS[ch] for ch in CHANNELS})
SOURCES = tuple(s for ch in CHANNELS for s in RATES[ch].chain.streams) + ('delivery_jitter',
                                                                          'delivery_loss')


class ImuConfigModel(inertial.with_channels(_OwnConfig, CHANNELS, CHANNEL_SPEC)):
  """Validated manifest config of `fibril_sim/imu` (SPEC §5.2).

  Units: `angular_velocity_*` in rad/s (density rad/s/√Hz, random walk rad/s/√s),
  `linear_acceleration_*` in m/s² (density m/s²/√Hz, random walk m/s²/√s).
  """


class Params(NamedTuple):
  """Per-world parameters: `thermal`, `vibration` (their Params, always present, read when their
  model is on), the channels' error model fields (manifest names), faults."""
  thermal: thermal.ThermalParams
  vibration: vibration.VibrationParams
  # angular_velocity (error model)
  angular_velocity_scale: jax.Array
  angular_velocity_misalignment: jax.Array
  angular_velocity_bias: jax.Array
  angular_velocity_bias_turn_on_stddev: jax.Array
  angular_velocity_bias_instability_stddev: jax.Array
  angular_velocity_bias_correlation_time_s: jax.Array
  angular_velocity_random_walk: jax.Array
  angular_velocity_noise_density: jax.Array
  angular_velocity_narrowband_stddev: jax.Array
  angular_velocity_narrowband_frequency_hz: jax.Array
  angular_velocity_narrowband_bandwidth_hz: jax.Array
  angular_velocity_bandwidth_hz: jax.Array
  angular_velocity_limit: jax.Array
  angular_velocity_resolution: jax.Array
  # linear_acceleration (error model)
  linear_acceleration_scale: jax.Array
  linear_acceleration_misalignment: jax.Array
  linear_acceleration_bias: jax.Array
  linear_acceleration_bias_turn_on_stddev: jax.Array
  linear_acceleration_bias_instability_stddev: jax.Array
  linear_acceleration_bias_correlation_time_s: jax.Array
  linear_acceleration_random_walk: jax.Array
  linear_acceleration_noise_density: jax.Array
  linear_acceleration_narrowband_stddev: jax.Array
  linear_acceleration_narrowband_frequency_hz: jax.Array
  linear_acceleration_narrowband_bandwidth_hz: jax.Array
  linear_acceleration_bandwidth_hz: jax.Array
  linear_acceleration_limit: jax.Array
  linear_acceleration_resolution: jax.Array
  faults: tuple  # `faults.FaultParams` per manifest `faults` entry


Sample = inertial.sample_type('Sample', doc="""`fibril_sim/imu_sample/v1` (device axes = site
axes): `inertial.RATE_SAMPLE_FIELDS` — angular velocity (rad/s), specific force (m/s²), their
per-sample variances (white noise after the filter gain, plus q²/12), saturation flags and
cumulative clip counts.""")
SampleWithTemperature = inertial.sample_type('Sample', leading=('temperature_c',), doc="""
`fibril_sim/imu_sample/v1` with the delivered sensor temperature `temperature_c` (°C) first
(`temperature_output: true`), then `inertial.RATE_SAMPLE_FIELDS`.""")


class State(NamedTuple):
  """Per-world state.

  Attributes:
    streams: named stream keys, `{source: (2,) uint32}`.
    angular_velocity, linear_acceleration: `inertial.ChannelState`.
    queue, held: delivery queue and the delivered output.
    faults: `faults.FaultState` (health, last packet, counters).
    thermal: `thermal.ThermalState`, or None when the thermal model is off.
    delta: `delta_imu.DeltaState`, or None (`integration: none`).
  """
  streams: dict
  angular_velocity: inertial.ChannelState
  linear_acceleration: inertial.ChannelState
  queue: tp.QueueState
  held: tp.Delivered
  faults: faults.FaultState
  thermal: Any = None
  delta: Any = None


@dataclasses.dataclass(frozen=True)
class Imu(inertial.RateSensor, base.SensorBase):
  """A built `fibril_sim/imu` component: static, hashable; arrays live in Params / State.

  Attributes:
    channels: the two `inertial.Channel`s (angular velocity, linear acceleration).
    orientation: probe of the sensors' site orientation (`framequat`), for the true attitude.
    velocity: probe of the site's world-frame linear velocity (`framelinvel`) with
      `integration: delta` (the ideal Δv), else None.
    thermal: the static `thermal.Thermal`, or None (off).
    vibration: the static `vibration.Vibration`, or None (off).
    integrator: the static `delta_imu.Integrator`, or None (`integration: none`).
  """
  reads_sensors_only = True
  sensors: tuple[SensorBinding, SensorBinding]
  channels: tuple[inertial.Channel, inertial.Channel]
  orientation: Probe
  velocity: Any = None
  thermal: Any = None
  vibration: Any = None
  integrator: Any = None

  type = TYPE
  sample_type = SAMPLE_TYPE
  params_type, state_type = Params, State
  errors = ERRORS
  # in a group (`core/groups.py`): its MuJoCo sensors' and site probes' addresses per member
  per_member = ('sensors', 'orientation', 'velocity')
  member_config = ('gyroscope_sensor', 'accelerometer_sensor', 'site')

  @property
  def samples(self) -> tuple:
    """`(Sample, SampleWithTemperature)` of `RateSensor._sample`, with the delta fields in
    `integration: delta`."""
    plain = (Sample, SampleWithTemperature)
    return plain if self.integrator is None else self.integrator.sample_types(plain)

  def default_params(self) -> Params:
    own = {f: host.array(getattr(self.cfg, f)) for f in Params._fields
           if f not in ('thermal', 'vibration', 'faults')}
    return Params(thermal.Thermal.params(self.cfg), vibration.Vibration.params(self.cfg), **own,
                  faults=faults.default_params(self.cfg))

  def field_path(self, field: str):
    if field in thermal.PARAM_FIELDS:
      return ('thermal', field)
    if field in vibration.PARAM_FIELDS:
      return ('vibration', field)
    return self.channel_path(field)

  def field_uses(self, field: str) -> bool:
    if field in thermal.PARAM_FIELDS:
      return self.thermal is not None and self.thermal.uses(field)
    if field in vibration.PARAM_FIELDS:
      return self.vibration is not None and self.vibration.uses(field)
    return self.channel_uses(field)

  def init(self, params: Params, world_key: jax.Array) -> State:
    sources = (SOURCES + (thermal.SOURCES if self.thermal is not None else ())
               + (vibration.SOURCES if self.vibration is not None else ()))
    streams = {s: rng.stream_key(world_key, self.id, s) for s in sources}
    w, a = (c.init(params, streams) for c in self.channels)
    neutral = self.neutral_rates(params)
    if self.thermal is not None and self.thermal.output:
      neutral['temperature_c'] = jnp.zeros((), jnp.float32)
    th = self.thermal.init() if self.thermal is not None else None
    integ = self.integrator
    if integ is not None:
      neutral |= integ.neutral_fields()
    return State(streams, w, a, *self.init_transport(self._sample(**neutral)), th,
                 None if integ is None else integ.init())

  def _read(self, sensordata):
    return tuple(b.read(sensordata) for b in self.sensors)

  def _inputs(self, p: Params, s: State, data, tick):
    """`(raw, inputs)`: the MuJoCo `(gyro, accel)`, and the same plus the vibration term when
    it is on (else `raw` itself)."""
    raw = self._read(data.sensordata)
    if self.vibration is None:
      return raw, raw
    v = self.vibration.term(p.vibration, data, s.streams, tick)
    return raw, tuple(x + v[ch] if ch in v else x for x, ch in zip(raw, CHANNELS))

  def _pose(self, data):
    """The site's `delta_imu.Pose` of `data` with `integration: delta`, else None."""
    if self.velocity is None:
      return None
    return delta_imu.Pose(self.orientation.read(data), self.velocity.read(data))

  def track(self, p: Params, s: State, data, tick) -> State:
    """Every physics tick: the integrated outputs' sums, the physics-rate bandwidth filters
    (each absent when off)."""
    filters = any(c.filters_every_tick for c in self.channels)
    if not filters and self.integrator is None:
      return s
    raw, (gyro, accel) = self._inputs(p, s, data, tick)
    if self.integrator is not None:
      s = s._replace(delta=self.integrator.accumulate(s.delta, raw, (gyro, accel),
                                                      self._pose(data)))
    if not filters:
      return s
    w_c, a_c = self.channels
    return s._replace(angular_velocity=w_c.track(p, s.angular_velocity, gyro, tick),
                      linear_acceleration=a_c.track(p, s.linear_acceleration, accel, tick))

  def acquire(self, p: Params, s: State, data, tick, n) -> tuple[State, Sample]:
    """Computes sample `n` from `mjx.Data` of `tick`; returns the new state and the sample.

    Args:
      data: anything with `sensordata` `(nsensordata,)` (an `mjx.Data`).
      tick: int32 tick of that state (unused by the model; kept for a uniform signature).
      n: int32 acquisition index (the RNG index; `n == 0` starts filters and processes).
    """
    raw, (gyro, accel) = self._inputs(p, s, data, tick)
    window = pose = None
    if self.integrator is not None:   # the chains run on the window means (`delta_imu`)
      pose = self._pose(data)
      window = self.integrator.window(s.delta, raw, (gyro, accel), pose)
      gyro, accel = window.input_rate, window.input_accel
    if self.thermal is None:
      fields, s = self.step_rates(p, s, gyro, accel, n)
      return self._finish(s, fields, window, pose)
    th, terms, delivered = self.thermal.step(p.thermal, s.thermal, s.streams, tick, n)
    (wb, wg), (ab, ag) = terms['angular_velocity'], terms['linear_acceleration']
    fields, s = self.step_rates(p, s, gyro, accel, n, extra=wb, accel_extra=ab, gains=(wg, ag))
    if delivered is not None:
      fields['temperature_c'] = delivered
    return self._finish(s._replace(thermal=th), fields, window, pose)

  def _finish(self, s: State, fields: dict, window, pose) -> tuple[State, Sample]:
    """The sample of `fields`, with the integrated outputs of `window` (ending at `pose`) when
    on."""
    if window is not None:
      fields, delta = self.integrator.finish(fields, s.delta, window, pose)
      s = s._replace(delta=delta)
    return s, self._sample(**fields)

  def site_orientation(self, data) -> jax.Array:
    """True attitude of the IMU site, body → world `(4,)` `[w, x, y, z]`, `w >= 0`."""
    return quat.canonical(self.orientation.read(data))

  def truth(self, s: State, data) -> dict:
    """Ideal outputs of this tick for `truth/<id>/...`: the MuJoCo gyro and accelerometer,
    the site's attitude, and the additive bias of the error model (fixed + turn-on +
    Gauss–Markov + random walk, as of the latest acquisition); with `integration:`, the
    latest window's ideal increments and means (`delta_imu.TRUTH_FIELDS`)."""
    gyro, accel = self._read(data.sensordata)
    out = {'angular_velocity': gyro, 'linear_acceleration': accel,
           'orientation': self.site_orientation(data),
           'angular_velocity_bias': s.angular_velocity.bias,
           'linear_acceleration_bias': s.linear_acceleration.bias,
           'health': s.faults.health}
    if self.thermal is not None:   # thermal bias included; sensor and ambient temperature
      out['angular_velocity_bias'] = out['angular_velocity_bias'] + s.thermal.angular_velocity_bias
      out['linear_acceleration_bias'] = (out['linear_acceleration_bias']
                                         + s.thermal.linear_acceleration_bias)
      out['temperature_c'] = s.thermal.sensor_c
    if self.integrator is not None:
      out |= self.integrator.truth(s.delta)
    return out

  def describe(self) -> list[str]:
    return (super().describe() + (self.thermal.describe() if self.thermal is not None else [])
            + (self.vibration.describe() if self.vibration is not None else [])
            + (self.integrator.describe() if self.integrator is not None else []))


def build(cid: str, raw, ctx: BuildContext, catalog) -> Imu:
  """Validates the config (profiles layered) and binds the MuJoCo sensors and their site."""
  sb = base.SensorBuild(ImuConfigModel, TYPE, cid, raw, ctx, catalog)
  cfg, origin = sb.cfg, sb.origin
  ERRORS.check(sb)
  sensors = ctx.site_sensors(cid, cfg.site, [
      Wanted('gyroscope_sensor', cfg.gyroscope_sensor, mujoco.mjtSensor.mjSENS_GYRO, 3, 'gyro'),
      Wanted('accelerometer_sensor', cfg.accelerometer_sensor, mujoco.mjtSensor.mjSENS_ACCELEROMETER, 3,
             'accel')])
  if sensors[0].site != sensors[1].site:
    raise ConfigError(*origin('accelerometer_sensor'),
                      f'must be on the same site as gyroscope_sensor {cfg.gyroscope_sensor!r} '
                      f'(site {sensors[0].site!r}); {cfg.accelerometer_sensor!r} is on site '
                      f'{sensors[1].site!r}', cfg.accelerometer_sensor)
  m = ctx.model
  sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, sensors[0].site)
  channels = tuple(
      inertial.Channel.build(ch, RATE_FIELDS[ch], sb.is_on, period_s=cfg.period_s,
                             dt=ctx.dt,
                             noise_before_filter=cfg.noise_before_filter,
                             filter_rate=cfg.filter_rate)
      for ch in CHANNELS)
  th = thermal.Thermal.build(cfg, sb.is_on, cfg.period_s, ctx.dt)
  vib = vibration.Vibration.build(cfg, sb.is_on, ctx, ctx.dt, origin)
  rates = [host.zeros(3)] * 4 + [host.zeros(3, bool)] * 2 + [host.zeros(3, np.int32)] * 2
  neutral = (SampleWithTemperature(host.zeros(), *rates)
             if th is not None and th.output else Sample(*rates))
  delta_imu.check(cfg, origin)
  integ = delta_imu.Integrator.build(cfg, ctx.dt, m.opt.gravity)
  if integ is not None and integ.delivers:
    neutral = delta_imu.with_deltas(type(neutral))(*neutral, host.zeros(3), host.zeros(3),
                                                   host.zeros())
  return sb.make(Imu, neutral, sensors=sensors, channels=channels,
                 orientation=ctx.site_quat(sid),
                 velocity=ctx.site_velocity(sid)[0] if integ is not None and integ.delivers
                 else None, thermal=th,
                 vibration=vib, integrator=integ)


CONFIG_MODEL = ImuConfigModel

# The registration: this module is the type (found by the builder walking components/).
from fibril_mjx.core import registry  # noqa: E402
registry.register(TYPE, build=build, config_model=CONFIG_MODEL)
