"""Temperature of an inertial sensor: ambient scenario, the sensor's own lag, temperature-driven
bias and scale, and an optional delivered temperature channel (docs/guides/sensors.md,
"IMU temperature"; used by `fibril_sim/imu`).

Per acquisition `n` at time `t = tick · dt`, `Δ = period_s` (terms off are absent from the graph):

1. **ambient** `T_a(t)`: piecewise-linear in the table `(ambient_temperature_time_s,
   ambient_temperature_c)`, held beyond its ends — one point is a constant, two a ramp (per
   world: the temperatures are Params, the breakpoints static);
2. **sensor temperature** `T_s`: first-order lag of the ambient with time constant τ, exact for
   an input held over each interval: `T_s[0] = T_a(t_0)` (soaked at start),
   `T_s[n] = T_s[n−1] + (1 − e^{−Δ/τ})·(T_a(t_n) − T_s[n−1])` (τ = 0: `T_s = T_a`);
3. per channel (angular velocity, linear acceleration), with `ΔT = T_s − T_ref`:
   **bias** `b_T = k1·ΔT + k2·ΔT²` `(3,)` (added after the bandwidth filter, with the other
   biases) and **scale** `y ← (1 + ks·ΔT)·y` on the (filtered) signal;
4. **delivered temperature** (`temperature_output: true`, sample field `temperature_c`):
   `T_d = lag(T_s; τ_d) + σ·ξ` (stream `temperature_noise`), then `q·round(T_d/q)`.

Truth adds `temperature_c` (sensor), `ambient_temperature_c`, and the thermal bias to the
channel's `*_bias`.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import pydantic

from fibril_mjx import error_models as em
from fibril_mjx.mechanisms import host
from fibril_mjx.mechanisms import signal
from fibril_mjx.components.base import NonNeg, Vec3
from fibril_mjx.config.validation import Strict

CHANNELS = ('angular_velocity', 'linear_acceleration')
COEFFS = ('bias_temperature_k1', 'bias_temperature_k2', 'scale_temperature_k1')
ZERO3 = (0.0, 0.0, 0.0)

# The error model of the delivered temperature channel: white noise, then the resolution.
DELIVERED = em.chain(em.white_noise('temperature_noise_stddev_c', 'temperature_noise'),
                     em.quantization('temperature_resolution_c'))
SOURCES = DELIVERED.streams
STOCHASTIC = DELIVERED.stochastic_fields()   # fields scaling a random draw (tune holds them at 0)


class _OwnConfig(Strict):
  """The thermal model's own config fields (its delivered channel's error model adds the rest).

  Units: °C, s; `*_bias_temperature_k1` in channel units per K (rad/s/K, m/s²/K), `_k2` per K²,
  `*_scale_temperature_k1` per K.
  """
  ambient_temperature_time_s: tuple[float, ...] = (0.0,)
  ambient_temperature_c: tuple[float, ...] = (25.0,)
  temperature_time_constant_s: NonNeg = 0.0
  reference_temperature_c: float = 25.0
  angular_velocity_bias_temperature_k1: Vec3 = ZERO3
  angular_velocity_bias_temperature_k2: Vec3 = ZERO3
  angular_velocity_scale_temperature_k1: Vec3 = ZERO3
  linear_acceleration_bias_temperature_k1: Vec3 = ZERO3
  linear_acceleration_bias_temperature_k2: Vec3 = ZERO3
  linear_acceleration_scale_temperature_k1: Vec3 = ZERO3
  temperature_output: bool = False
  temperature_output_time_constant_s: NonNeg = 0.0

  @pydantic.model_validator(mode='after')
  def _table(self):
    t, v = self.ambient_temperature_time_s, self.ambient_temperature_c
    if len(t) != len(v) or not t:
      raise ValueError(f'ambient_temperature_time_s ({len(t)} points) and '
                       f'ambient_temperature_c ({len(v)} points) must have the same, non-zero '
                       'length')
    if any(b <= a for a, b in zip(t, t[1:])):
      raise ValueError('ambient_temperature_time_s must be strictly increasing')
    return self


class ThermalConfig(em.with_errors(_OwnConfig, DELIVERED)):
  """Config fields of the thermal model; a sensor's config model inherits them (°C, s;
  `*_bias_temperature_k1` in channel units per K, `_k2` per K², `*_scale_temperature_k1` per K)."""


class ThermalParams(NamedTuple):
  """Per-world thermal parameters (manifest field names); the last two are the delivered
  channel's error model's (`DELIVERED.params`)."""
  ambient_temperature_c: jax.Array                     # the table's temperatures `(n_points,)`
  temperature_time_constant_s: jax.Array               # τ
  reference_temperature_c: jax.Array                   # T_ref
  angular_velocity_bias_temperature_k1: jax.Array      # k1 `(3,)`
  angular_velocity_bias_temperature_k2: jax.Array      # k2 `(3,)`
  angular_velocity_scale_temperature_k1: jax.Array     # ks `(3,)`
  linear_acceleration_bias_temperature_k1: jax.Array
  linear_acceleration_bias_temperature_k2: jax.Array
  linear_acceleration_scale_temperature_k1: jax.Array
  temperature_output_time_constant_s: jax.Array        # τ_d
  temperature_noise_stddev_c: jax.Array                # σ
  temperature_resolution_c: jax.Array                  # q


PARAM_FIELDS = ThermalParams._fields   # manifest fields that are Params (per world)


class ThermalState(NamedTuple):
  """Sensor temperature, delivered-channel lag state (°C), and the thermal bias of each
  channel `(3,)` as of the latest acquisition (truth)."""
  sensor_c: jax.Array
  delivered_c: jax.Array
  angular_velocity_bias: jax.Array
  linear_acceleration_bias: jax.Array


@dataclasses.dataclass(frozen=True)
class Thermal:
  """Static part of a built thermal model.

  Attributes:
    times_s: table breakpoints (static).
    on: the manifest fields whose term is in the graph.
    output: the delivered temperature channel is on.
    period_s: acquisition period Δ; `dt`: physics step.
  """
  times_s: tuple[float, ...]
  on: frozenset
  output: bool
  period_s: float
  dt: float

  @classmethod
  def build(cls, cfg, is_on, period_s: float, dt: float) -> 'Thermal | None':
    """None when no thermal term is on (nothing in the graph)."""
    coeffs = frozenset(f'{ch}_{c}' for ch in CHANNELS for c in COEFFS if is_on(f'{ch}_{c}'))
    output = bool(cfg.temperature_output)
    if not coeffs and not output:
      return None
    on = coeffs | {f for f in ('temperature_time_constant_s',) if is_on(f)}
    if output:
      on |= {f for f in ('temperature_output_time_constant_s', 'temperature_noise_stddev_c',
                         'temperature_resolution_c') if is_on(f)}
    return cls(tuple(float(t) for t in cfg.ambient_temperature_time_s), on, output,
               float(period_s), float(dt))

  def uses(self, field: str) -> bool:
    if field in ('ambient_temperature_c', 'reference_temperature_c'):
      return True
    return field in self.on

  @staticmethod
  def params(cfg) -> ThermalParams:
    return ThermalParams(**{f: host.array(getattr(cfg, f)) for f in PARAM_FIELDS})

  def ambient(self, p: ThermalParams, t):
    """`T_a(t)`: piecewise-linear in the table, held beyond its ends."""
    if len(self.times_s) == 1:
      return p.ambient_temperature_c[0]
    return jnp.interp(t, jnp.asarray(self.times_s, jnp.float32), p.ambient_temperature_c)

  def _lag(self, prev, x, tau, first):
    if tau is None:
      return x
    safe = jnp.where(tau > 0, tau, 1.0)
    alpha = jnp.where(tau > 0, -jnp.expm1(-self.period_s / safe), 1.0)
    return signal.lowpass(prev, x, alpha, first)

  def init(self) -> ThermalState:
    z, z3 = jnp.zeros((), jnp.float32), jnp.zeros(3, jnp.float32)
    return ThermalState(z, z, z3, z3)

  def step(self, p: ThermalParams, s: ThermalState, streams: dict, tick, n):
    """One acquisition: the new state, `{channel: (bias (3,) or None, scale (3,) or None)}` and
    the delivered temperature (None when the channel is off)."""
    first = n == 0
    t = jnp.asarray(tick, jnp.float32) * self.dt
    on = self.on
    tau = p.temperature_time_constant_s if 'temperature_time_constant_s' in on else None
    ts = self._lag(s.sensor_c, self.ambient(p, t), tau, first)
    dT = ts - p.reference_temperature_c
    terms, biases = {}, {}
    for ch in CHANNELS:
      k1, k2, ks = (f'{ch}_{c}' for c in COEFFS)
      b = None
      if k1 in on:
        b = getattr(p, k1) * dT
      if k2 in on:
        b = getattr(p, k2) * dT * dT if b is None else b + getattr(p, k2) * dT * dT
      g = 1.0 + getattr(p, ks) * dT if ks in on else None
      terms[ch] = (b, g)
      biases[ch] = jnp.zeros(3, jnp.float32) if b is None else b
    delivered, td = None, s.delivered_c
    if self.output:
      tau_d = (p.temperature_output_time_constant_s
               if 'temperature_output_time_constant_s' in on else None)
      td = self._lag(s.delivered_c, ts, tau_d, first)
      ctx = em.Ctx(on.__contains__, streams, n, self.period_s, {})
      _, delivered, _ = DELIVERED.apply(p, {}, td, ctx)
    new = ThermalState(ts, td, biases['angular_velocity'], biases['linear_acceleration'])
    return new, terms, delivered

  def describe(self) -> list[str]:
    terms = sorted(f for f in self.on if f.endswith(COEFFS))
    return [f'thermal: ambient table of {len(self.times_s)} point(s); sensor lag '
            + ('on' if 'temperature_time_constant_s' in self.on else 'off (sensor = ambient)')
            + f'; terms: {", ".join(terms) if terms else "none"}'
            + ('; delivered temperature_c' if self.output else '')]
