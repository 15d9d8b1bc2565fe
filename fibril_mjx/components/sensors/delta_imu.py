"""Integrated IMU outputs: Δθ and Δv over each output period, exact from the physics state,
and the window-mean rates (used by `fibril_sim/imu`).

`integration:` `none` (default: point samples of the rates, this module absent from the graph),
`average` (the rate fields of each sample are the means of the physics-rate signal over its
collection window) or `delta` (the same, plus `delta_angle` (rad), `delta_velocity` (m/s) and
`delta_time_s` (s) in the sample). The collection window of sample `n` runs from the state of
acquisition `n − 1` (tick `k₀`) to the state of acquisition `n` (tick `k₁`), `T = (k₁ − k₀)·dt`;
the first sample's window starts at the first tick the sensor sees (an acquisition at tick 0:
an empty window, `T = 0`, deltas 0, the rates of its tick).

**Ideal increments** (`exact`), from the sensor site's attitude `q` (site → world, the
`framequat` probe), its world-frame velocity `v` (the site point's, `framelinvel`: lever arm
included, as the MuJoCo accelerometer's) and the model's gravity `g` (`opt.gravity`, static) at
the window's two ends:

  `Δθ = log(q₀* ⊗ q₁)`                         (rotation vector, sensor axes at the window start)
  `Δv = R(q₀)ᵀ (v₁ − v₀ − g·T)`

`Δθ` is the rotation of the sensor frame over the window, whatever the motion inside it (coning
included, to all orders); `Δv = ∫ R(q₀)ᵀ R(q(t)) f(t) dt` is the integral of the specific force
`f = R(q)ᵀ(a − g)` — what the accelerometer senses, `+|g|` up at rest — in the start axes
(sculling and rotation compensation included), since `∫ a dt = v₁ − v₀` and `g` is constant.
These are what an ideal integrating IMU delivers: no trapezoid between physics ticks, no
truncated coning / sculling series. A device's own integration algorithm (its internal rate,
its truncation) is not modelled: a tactical IMU runs it at kHz with errors far below its noise;
when it matters it is an error term of its own, with its rate.

**Window means** (the rate fields in `average` and `delta`, the chains' inputs): the mean of
the window's tick values `x̄ = (1/L) Σ x_k` over its `L` ticks `k₀ < k ≤ k₁` (the decimating
average of the device; the inputs include the vibration term).

**Device errors** (`inertial.Channel`: gain, biases, noise, saturation, resolution, thermal
terms) apply to the rates, the tactical-IMU model: each channel's chain runs once per sample on
the window-mean input `x̄`, and its rate error `e = chain(x̄) − x̄_mj` against the window mean of
the MuJoCo signal alone `x̄_mj` (vibration is an error), constant over the window, integrates to
`T·e`: `Δθ = log(q₀*⊗q₁) + T·e_ω`, `Δv = R(q₀)ᵀ(v₁ − v₀ − gT) + T·e_f`. White noise of density N
drawn at the nominal period Δ = `period_s` (σ = N/√Δ) gives `Δθ` the angle random walk `N·√T`
when `T = Δ`. The bandwidth low-pass, when on, runs on the window means (`filter_rate:
output`); the window's boxcar is the anti-alias filter of an integrating IMU.

The truth (`truth/<imu>/...`) carries, as of the latest acquisition, the ideal increments
`delta_angle`, `delta_velocity` (`delta` mode) and the window means of the MuJoCo signal
`angular_velocity_window_mean`, `linear_acceleration_window_mean`: what the run summary
compares the delivered fields with (like with like).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx.config.validation import Strict
from fibril_mjx.errors import ConfigError
from fibril_mjx.mechanisms import quat

MODES = ('none', 'average', 'delta')
# Sample fields added by `integration: delta`, after the rate fields.
DELTA_FIELDS = ('delta_angle', 'delta_velocity', 'delta_time_s')
# Truth fields of an integrating IMU: `delta` mode's (first two) and every mode's window means.
TRUTH_FIELDS = ('delta_angle', 'delta_velocity', 'angular_velocity_window_mean',
                'linear_acceleration_window_mean')


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


class Pose(NamedTuple):
  """The sensor site's attitude `quat` `(4,)` (site → world, `[w, x, y, z]`) and world-frame
  velocity `velocity` `(3,)` m/s at one tick."""
  quat: jax.Array
  velocity: jax.Array


class Window(NamedTuple):
  """One collection window at its end.

  Attributes:
    delta_angle: ideal rotation vector `log(q₀* ⊗ q₁)` `(3,)` rad (zeros without a pose).
    delta_velocity: ideal specific-force increment `R(q₀)ᵀ(v₁ − v₀ − gT)` `(3,)` m/s, start axes.
    duration_s: `T = L · dt` `()` s.
    mean_rate, mean_accel: window means of the MuJoCo gyro / accelerometer `(3,)` (the tick's
      values when `L = 0`).
    input_rate, input_accel: the same of the inputs (vibration included): the chains' inputs.
  """
  delta_angle: jax.Array
  delta_velocity: jax.Array
  duration_s: jax.Array
  mean_rate: jax.Array
  mean_accel: jax.Array
  input_rate: jax.Array
  input_accel: jax.Array


class DeltaState(NamedTuple):
  """Per-world state of the integrator.

  Attributes:
    sums: `(2, 3)` Σ of the MuJoCo gyro (rad/s) and accelerometer (m/s²) over the window's
      ticks; input_sums: the same of the inputs (vibration included).
    ticks: int32 ticks `L` in the window; started: bool, a tick has been seen.
    start: `Pose` at the window start (identity and zeros without a pose).
    last: the `Window` of the latest acquisition, errors not included (the truth).
  """
  sums: jax.Array
  input_sums: jax.Array
  ticks: jax.Array
  started: jax.Array
  start: Pose
  last: Window


def init(dtype=jnp.float32) -> DeltaState:
  """The integrator before the first physics tick: zeros, nothing seen."""
  z3, z23 = jnp.zeros(3, dtype), jnp.zeros((2, 3), dtype)
  start = Pose(jnp.array([1.0, 0.0, 0.0, 0.0], dtype), z3)
  last = Window(z3, z3, jnp.zeros((), dtype), z3, z3, z3, z3)
  return DeltaState(z23, z23, jnp.zeros((), jnp.int32), jnp.zeros((), bool), start, last)


def accumulate(st: DeltaState, raw, inputs, pose: Pose | None = None) -> DeltaState:
  """One physics tick: its values into the window's sums (the first tick ever only starts the
  window: its pose).

  Args:
    raw: `(gyro, accel)` `(3,)` each, the MuJoCo signal; inputs: the same with vibration.
    pose: this tick's `Pose`, or None (`average` mode).
  """
  on = st.started.astype(st.sums.dtype)
  start = st.start if pose is None else jax.tree.map(
      lambda s, x: jnp.where(st.started, s, x), st.start, pose)
  return st._replace(sums=st.sums + on * jnp.stack(raw),
                     input_sums=st.input_sums + on * jnp.stack(inputs),
                     ticks=st.ticks + st.started.astype(jnp.int32), started=jnp.ones((), bool),
                     start=start)


def exact(start: Pose, end: Pose, duration_s, gravity) -> tuple[jax.Array, jax.Array]:
  """The ideal increments `(Δθ, Δv)` `(3,)` each of a window from its end poses (module
  docstring); `gravity` `(3,)` m/s², `duration_s` `T`."""
  dtheta = quat.to_rotvec(quat.multiply(quat.conjugate(start.quat), end.quat))
  dv_world = end.velocity - start.velocity - jnp.asarray(gravity, end.velocity.dtype) * duration_s
  return dtheta, quat.rotate(quat.conjugate(start.quat), dv_world)


def window(st: DeltaState, raw, inputs, dt, pose: Pose | None = None, gravity=(0., 0., 0.)):
  """The `Window` ending now: ideal increments (with `pose`, else zeros) and means.

  Args:
    raw, inputs: this tick's `(gyro, accel)` (already in the sums when `L > 0`), the means of
      an empty window.
    dt: physics timestep (s).
  """
  t = st.ticks.astype(st.sums.dtype) * dt
  empty = st.ticks == 0
  inv = 1.0 / jnp.where(empty, 1, st.ticks).astype(st.sums.dtype)
  mean = jnp.where(empty, jnp.stack(raw), st.sums * inv)
  mean_in = jnp.where(empty, jnp.stack(inputs), st.input_sums * inv)
  dtheta = dv = jnp.zeros_like(mean[0])
  if pose is not None:
    dtheta, dv = (jnp.where(empty, 0.0, x) for x in exact(st.start, pose, t, gravity))
  return Window(dtheta, dv, t, mean[0], mean[1], mean_in[0], mean_in[1])


def restart(st: DeltaState, w: Window, pose: Pose | None = None) -> DeltaState:
  """A new window at this acquisition: the sums zeroed, `pose` its start, `w` kept (truth)."""
  return st._replace(sums=jnp.zeros_like(st.sums), input_sums=jnp.zeros_like(st.input_sums),
                     ticks=jnp.zeros((), jnp.int32), start=st.start if pose is None else pose,
                     last=w)


@functools.cache
def with_deltas(sample_cls):
  """The sample NamedTuple `sample_cls` with `DELTA_FIELDS` appended (one class per base)."""
  cls = NamedTuple(sample_cls.__name__, [(f, jax.Array)
                                         for f in sample_cls._fields + DELTA_FIELDS])
  cls.__doc__ = ((sample_cls.__doc__ or '') + '\nWith `integration: delta`: `delta_angle` (rad, '
                 'rotation vector of the window), `delta_velocity` (m/s, specific-force '
                 'increment in the sensor axes at the window start), `delta_time_s` (s).')
  return cls


@dataclasses.dataclass(frozen=True)
class Integrator:
  """Static integrated-output config of an IMU (hashable).

  Attributes:
    mode: `average` or `delta`.
    dt: physics timestep (s).
    gravity: the model's `opt.gravity` `(3,)` m/s² (`delta`: the ideal Δv).
  """
  mode: str
  dt: float
  gravity: tuple = (0.0, 0.0, 0.0)

  @classmethod
  def build(cls, cfg, dt: float, gravity=(0.0, 0.0, 0.0)) -> 'Integrator | None':
    """From the validated config (`DeltaConfig` fields); None when `integration: none`."""
    return None if cfg.integration == 'none' else cls(
        cfg.integration, float(dt), tuple(float(g) for g in gravity))

  @property
  def delivers(self) -> bool:
    """Whether the sample carries `DELTA_FIELDS` (and the integrator reads the site's pose)."""
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

  def accumulate(self, st: DeltaState, raw, inputs, pose: Pose | None) -> DeltaState:
    """Every physics tick (`accumulate`)."""
    return accumulate(st, raw, inputs, pose)

  def window(self, st: DeltaState, raw, inputs, pose: Pose | None) -> Window:
    """The window ending at this acquisition (`window`)."""
    return window(st, raw, inputs, self.dt, pose, self.gravity)

  def finish(self, fields: dict, st: DeltaState, w: Window,
             pose: Pose | None) -> tuple[dict, DeltaState]:
    """The sample's fields with the integrated rate errors added to the ideal increments.

    Args:
      fields: the sample fields of the chains run on `w.input_rate`, `w.input_accel`.

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
    return fields, restart(st, w, pose)

  def truth(self, st: DeltaState) -> dict:
    """`TRUTH_FIELDS` of the latest acquisition's window (the ideal increments in `delta`)."""
    last = st.last
    out = {'angular_velocity_window_mean': last.mean_rate,
           'linear_acceleration_window_mean': last.mean_accel}
    if self.delivers:
      out = {'delta_angle': last.delta_angle, 'delta_velocity': last.delta_velocity} | out
    return out

  def describe(self) -> list[str]:
    return [f'integration: {self.mode} over each output window (window-mean rates'
            + ('; ideal delta_angle / delta_velocity from the site pose and velocity at the '
               "window's ends, plus the rate errors" if self.delivers else '') + ')']
