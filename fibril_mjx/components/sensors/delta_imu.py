"""Integrated IMU outputs: Δθ and Δv over each output period from the physics-rate signal, with
coning and sculling compensation, and the window-mean rates (used by `fibril_sim/imu`).

`integration:` `none` (default: point samples of the rates, this module absent from the graph),
`average` (the rate fields of each sample are the means of the physics-rate signal over its
collection window) or `delta` (the same, plus `delta_angle` (rad), `delta_velocity` (m/s) and
`delta_time_s` (s) in the sample). The collection window of sample `n` holds the physics ticks
after acquisition `n − 1` up to and including acquisition `n` (`T = ticks · dt`); the first
sample's window is empty (`T = 0`, deltas 0, the rates of its tick).

Per physics tick `l` (inputs `ω_l` rad/s, `f_l` m/s², after the vibration term), increments of
the signal linear between ticks (trapezoid): `Δα_l = ½(ω_{l−1} + ω_l)·dt`, `Δυ_l = ½(f_{l−1} +
f_l)·dt`, and Savage's recursive second-order algorithms for a rate linear within each tick
(Savage, "Strapdown inertial navigation integration algorithm design", J. Guidance 21(1–2),
1998: part 1 eq. for β, part 2 for the sculling term; PX4's `IntegratorConing` uses the same β):

  `β_l = β_{l−1} + ½ (α_{l−1} + Δα_{l−1}/6) × Δα_l`                       (coning)
  `s_l = s_{l−1} + ½ [(α_{l−1} + Δα_{l−1}/6) × Δυ_l + (υ_{l−1} + Δυ_{l−1}/6) × Δα_l]`  (sculling)
  `α_l = α_{l−1} + Δα_l`, `υ_l = υ_{l−1} + Δυ_l`  (α, υ, β, s zero at the window start; Δα_{l−1},
  Δυ_{l−1} carry over from the previous window),

and at the end of the window `Δθ = α + β` (the rotation vector of the window, body frame at its
start to its end), `Δv = υ + ½ α × υ + s` (specific-force velocity increment in the body frame at
the window's start: rotation compensation plus sculling). The neglected terms are third order in
the window's angle (the Bortz equation's `(1/12) α × (α × ω)`).

The error model (`inertial.Channel`: gain, biases, noise, saturation, resolution, thermal terms)
applies to the rates before integration, the tactical-IMU model: each channel's chain runs once
per sample on the window-mean rate `x̄ = α/T` (`υ/T`), and the rate error `e = chain(x̄) − x̄`,
constant over the window, integrates to `T·e`: `Δθ = α + β + T·e_ω`, `Δv = υ + ½α×υ + s + T·e_f`.
White noise of density N drawn at the nominal period Δ = `period_s` (σ = N/√Δ) gives `Δθ` the
angle random walk `N·√T` when `T = Δ`. The bandwidth low-pass, when on, runs on the window means
(`filter_rate: output`); the window's boxcar is the anti-alias filter of an integrating IMU.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx.config.validation import Strict
from fibril_mjx.errors import ConfigError

MODES = ('none', 'average', 'delta')
# Sample fields added by `integration: delta`, after the rate fields.
DELTA_FIELDS = ('delta_angle', 'delta_velocity', 'delta_time_s')


class DeltaConfig(Strict):
  """Config field of integrated outputs; the IMU's config model inherits it.

  `integration`: `none` (point samples), `average` (window-mean rates), `delta` (window-mean
  rates plus `delta_angle`, `delta_velocity`, `delta_time_s`)."""
  integration: Literal['none', 'average', 'delta'] = 'none'


def check(cfg, origin) -> None:
  """Build-time rule of a sensor's validated config: integrated outputs with a bandwidth filter
  need it at the output rate (on the window means).

  Args:
    cfg: the sensor's validated config (`DeltaConfig`, `filter_rate`, `<channel>_bandwidth_hz`).
    origin: `field -> (file, path)` of the manifest.

  Raises:
    ConfigError: one line naming `integration`.
  """
  if cfg.integration == 'none' or cfg.filter_rate != 'physics':
    return
  on = [f'{ch}_bandwidth_hz' for ch in ('angular_velocity', 'linear_acceleration')
        if getattr(cfg, f'{ch}_bandwidth_hz') > 0.0]
  if on:
    raise ConfigError(*origin('integration'), f'with {on[0]} > 0 needs filter_rate: output (the '
                      'low-pass then runs on the window means) or a bandwidth of 0',
                      cfg.integration)


class DeltaState(NamedTuple):
  """Per-world state of the integrator (all `(3,)` float32 but `ticks`, `started`).

  Attributes:
    alpha: `α`, Σ Δα of the window (rad); beta: coning term `β` (rad).
    nu: `υ`, Σ Δυ of the window (m/s); sculling: sculling term `s` (m/s).
    last_dalpha, last_dnu: the previous tick's increments `Δα_{l−1}`, `Δυ_{l−1}`.
    prev_rate, prev_accel: the previous tick's inputs `ω_{l−1}` (rad/s), `f_{l−1}` (m/s²).
    ticks: int32 ticks in the window; started: bool, an input has been seen.
  """
  alpha: jax.Array
  beta: jax.Array
  nu: jax.Array
  sculling: jax.Array
  last_dalpha: jax.Array
  last_dnu: jax.Array
  prev_rate: jax.Array
  prev_accel: jax.Array
  ticks: jax.Array
  started: jax.Array


class Window(NamedTuple):
  """One collection window at its end.

  Attributes:
    delta_angle: coning-compensated rotation vector `α + β` `(3,)` rad.
    delta_velocity: rotation- and sculling-compensated `υ + ½α×υ + s` `(3,)` m/s.
    duration_s: `T = ticks · dt` `()` s.
    mean_rate, mean_accel: `α/T`, `υ/T` `(3,)` (the tick's inputs when `T = 0`).
  """
  delta_angle: jax.Array
  delta_velocity: jax.Array
  duration_s: jax.Array
  mean_rate: jax.Array
  mean_accel: jax.Array


def init(dtype=jnp.float32) -> DeltaState:
  """The integrator before the first physics tick: zeros, nothing seen."""
  z = jnp.zeros(3, dtype)
  return DeltaState(z, z, z, z, z, z, z, z, jnp.zeros((), jnp.int32), jnp.zeros((), bool))


def accumulate(st: DeltaState, rate, accel, dt) -> DeltaState:
  """One physics tick of inputs: the trapezoid increments and the coning / sculling sums.

  Args:
    st: the integrator state.
    rate: angular velocity `(3,)` rad/s at this tick; accel: specific force `(3,)` m/s².
    dt: physics timestep (s).

  Returns:
    The new state (the first tick ever only stores its inputs).
  """
  on = st.started.astype(rate.dtype)
  da = on * 0.5 * (st.prev_rate + rate) * dt
  dv = on * 0.5 * (st.prev_accel + accel) * dt
  a_ref = st.alpha + st.last_dalpha / 6.0
  v_ref = st.nu + st.last_dnu / 6.0
  beta = st.beta + 0.5 * jnp.cross(a_ref, da)
  scul = st.sculling + 0.5 * (jnp.cross(a_ref, dv) + jnp.cross(v_ref, da))
  return DeltaState(st.alpha + da, beta, st.nu + dv, scul,
                    jnp.where(st.started, da, st.last_dalpha),
                    jnp.where(st.started, dv, st.last_dnu), rate, accel,
                    st.ticks + st.started.astype(jnp.int32), jnp.ones((), bool))


def window(st: DeltaState, rate, accel, dt) -> Window:
  """The compensated increments and the mean inputs of the window ending now.

  Args:
    rate, accel: this tick's inputs `(3,)`, the means of an empty window.
    dt: physics timestep (s).
  """
  t = st.ticks.astype(rate.dtype) * dt
  empty = st.ticks == 0
  inv = jnp.where(empty, 0.0, 1.0 / jnp.where(empty, 1.0, t))
  dv = st.nu + 0.5 * jnp.cross(st.alpha, st.nu) + st.sculling
  return Window(st.alpha + st.beta, dv, t, jnp.where(empty, rate, st.alpha * inv),
                jnp.where(empty, accel, st.nu * inv))


def restart(st: DeltaState) -> DeltaState:
  """A new window: the sums zeroed; the previous tick's inputs and increments kept."""
  z = jnp.zeros_like(st.alpha)
  return st._replace(alpha=z, beta=z, nu=z, sculling=z, ticks=jnp.zeros((), jnp.int32))


@functools.cache
def with_deltas(sample_cls):
  """The sample NamedTuple `sample_cls` with `DELTA_FIELDS` appended (one class per base)."""
  cls = NamedTuple(sample_cls.__name__, [(f, jax.Array)
                                         for f in sample_cls._fields + DELTA_FIELDS])
  cls.__doc__ = ((sample_cls.__doc__ or '') + '\nWith `integration: delta`: `delta_angle` (rad, '
                 'coning-compensated), `delta_velocity` (m/s, sculling-compensated, body axes '
                 'at the window start), `delta_time_s` (s).')
  return cls


@dataclasses.dataclass(frozen=True)
class Integrator:
  """Static integrated-output config of an IMU (hashable).

  Attributes:
    mode: `average` or `delta`.
    dt: physics timestep (s).
  """
  mode: str
  dt: float

  @classmethod
  def build(cls, cfg, dt: float) -> 'Integrator | None':
    """From the validated config (`DeltaConfig` fields); None when `integration: none`."""
    return None if cfg.integration == 'none' else cls(cfg.integration, float(dt))

  @property
  def delivers(self) -> bool:
    """Whether the sample carries `DELTA_FIELDS`."""
    return self.mode == 'delta'

  def sample_types(self, plain: tuple) -> tuple:
    """The sensor's `(Sample, SampleWithTemperature)` for this mode."""
    return tuple(with_deltas(c) for c in plain) if self.delivers else plain

  def neutral_fields(self) -> dict:
    """The delta fields of the neutral sample (zeros), or none."""
    if not self.delivers:
      return {}
    z = jnp.zeros(3, jnp.float32)
    return {'delta_angle': z, 'delta_velocity': z, 'delta_time_s': jnp.zeros((), jnp.float32)}

  def init(self) -> DeltaState:
    return init()

  def accumulate(self, st: DeltaState, rate, accel) -> DeltaState:
    """Every physics tick (`accumulate`)."""
    return accumulate(st, rate, accel, self.dt)

  def window(self, st: DeltaState, rate, accel) -> Window:
    """The window ending at this acquisition (`window`)."""
    return window(st, rate, accel, self.dt)

  def finish(self, fields: dict, st: DeltaState, w: Window) -> tuple[dict, DeltaState]:
    """The sample's fields with the integrated rate errors added to the increments.

    Args:
      fields: the sample fields of the chains run on `w.mean_rate`, `w.mean_accel`.

    Returns:
      `(fields, state)`: with `DELTA_FIELDS` in `delta` mode; the restarted integrator.
    """
    if self.delivers:
      t = w.duration_s
      fields = {**fields,
                'delta_angle': w.delta_angle + t * (fields['angular_velocity'] - w.mean_rate),
                'delta_velocity': (w.delta_velocity
                                   + t * (fields['linear_acceleration'] - w.mean_accel)),
                'delta_time_s': t}
    return fields, restart(st)

  def describe(self) -> list[str]:
    return [f'integration: {self.mode} over each output window (physics-rate trapezoid'
            + (', coning and sculling compensated deltas)' if self.delivers else ')')]
