"""Vibration from rotating machinery at an inertial sensor (docs/guides/sensors.md, "IMU vibration
from a rotor": not white noise — lines at the rotor frequency, blade-pass and harmonics,
modulated with speed, transmitted through the frame, plus a broadband floor); used by
`fibril_sim/imu`.

Driven by a hinge joint of the model (`vibration_joint`, e.g. a rotor): its angle θ and speed ω
are read from the physics state every tick, so the lines stay synchronized with the motor model
(a notch at `order · ω / 2π` Hz removes one line). Per axis `a` and channel (angular velocity,
linear acceleration), added to the MuJoCo input before the gain and the bandwidth filter (it is
physical motion the sensor filters like any other):

  `v_a(t) = g_a · s(ω) · [ Σ_k A[k, a] · sin(order_k · θ + φ[k, a]) + σ_a · ξ_a(tick) ]`,
  `s(ω) = (|ω| / ω_ref)^p` (default p = 2: imbalance force ∝ ω²),

`orders` the lines in multiples of the shaft frequency (for an N-blade rotor the blade-pass line
is order N), `A` their amplitudes at ω_ref, `g` the frame's transmission gain per axis, `σ` the
broadband floor (white per physics tick, stream `<channel>_vibration_floor`, indexed by tick so
the physics-rate filter and the acquisition see the same value). Off (absent from the graph)
unless `vibration_joint` is set.

Each channel's lines and floor are an error model (`ERRORS`, `fibril_mjx.error_models`):
`sinusoids` of the line amplitudes at the angles `order_k·θ + φ`, then `white_noise` of the floor
σ drawn per physics tick; the sum is scaled by `g·s(ω)`.
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
from fibril_mjx.components.base import NonNeg3, Positive, Vec3
from fibril_mjx.core.context import BuildContext, JointProbe
from fibril_mjx.errors import ConfigError
from fibril_mjx.config.validation import Strict
from fibril_mjx.mechanisms import host

CHANNELS = ('angular_velocity', 'linear_acceleration')
ZERO3 = (0.0, 0.0, 0.0)


def channel_errors(ch: str) -> em.Chain:
  """The vibration of channel `ch` before the transmission: its lines, then the broadband floor
  (white per physics tick, stream `<ch>_vibration_floor`)."""
  return em.chain(em.sinusoids(f'{ch}_vibration_amplitude'),
                  em.white_noise(f'{ch}_vibration_floor_stddev', f'{ch}_vibration_floor', (3,)))


ERRORS = {ch: channel_errors(ch) for ch in CHANNELS}
SOURCES = tuple(s for ch in CHANNELS for s in ERRORS[ch].streams)
STOCHASTIC = tuple(f for ch in CHANNELS for f in ERRORS[ch].stochastic_fields())


class VibrationConfig(Strict):
  """Config fields of the vibration term; a sensor's config model inherits them.

  Units: rad/s (angular velocity lines / floor), m/s² (linear acceleration), rad (phases).
  """
  vibration_joint: str = ''
  vibration_orders: tuple[pydantic.PositiveFloat, ...] = ()
  angular_velocity_vibration_amplitude: tuple[Vec3, ...] = ()
  linear_acceleration_vibration_amplitude: tuple[Vec3, ...] = ()
  vibration_phase_rad: tuple[Vec3, ...] = ()
  vibration_reference_speed_rad_s: Positive = 1.0
  vibration_speed_exponent: float = 2.0
  vibration_transmission_gain: Vec3 = (1.0, 1.0, 1.0)
  angular_velocity_vibration_floor_stddev: NonNeg3 = ZERO3
  linear_acceleration_vibration_floor_stddev: NonNeg3 = ZERO3

  @pydantic.model_validator(mode='after')
  def _lines(self):
    k = len(self.vibration_orders)
    for name in ('angular_velocity_vibration_amplitude',
                 'linear_acceleration_vibration_amplitude', 'vibration_phase_rad'):
      n = len(getattr(self, name))
      if n not in (0, k):
        raise ValueError(f'{name} has {n} rows; vibration_orders has {k} (one row per order, '
                         'or none)')
    return self


class VibrationParams(NamedTuple):
  """Per-world vibration parameters (manifest field names)."""
  angular_velocity_vibration_amplitude: jax.Array      # A `(n_orders, 3)`, rad/s at ω_ref
  linear_acceleration_vibration_amplitude: jax.Array   # A `(n_orders, 3)`, m/s² at ω_ref
  vibration_phase_rad: jax.Array                       # φ `(n_orders, 3)`
  vibration_reference_speed_rad_s: jax.Array           # ω_ref
  vibration_speed_exponent: jax.Array                  # p
  vibration_transmission_gain: jax.Array               # g `(3,)`
  angular_velocity_vibration_floor_stddev: jax.Array   # σ `(3,)`, rad/s
  linear_acceleration_vibration_floor_stddev: jax.Array  # σ `(3,)`, m/s²


PARAM_FIELDS = VibrationParams._fields   # manifest fields that are Params (per world)


@dataclasses.dataclass(frozen=True)
class Vibration:
  """Static part: the joint's position / velocity probes (`probe.joint` names it), the orders,
  which terms are on."""
  probe: JointProbe
  orders: tuple[float, ...]
  on: frozenset
  dt: float

  @classmethod
  def build(cls, cfg, is_on, ctx: BuildContext, dt: float, origin) -> 'Vibration | None':
    model = ctx.model
    if not cfg.vibration_joint:
      return None
    jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, cfg.vibration_joint)
    if jid < 0:
      raise ConfigError(*origin('vibration_joint'), 'no joint of that name in the compiled model',
                        cfg.vibration_joint)
    if model.jnt_type[jid] != mujoco.mjtJoint.mjJNT_HINGE:
      raise ConfigError(*origin('vibration_joint'), 'must name a hinge joint (a rotor)',
                        cfg.vibration_joint)
    on = frozenset(f for f in PARAM_FIELDS if is_on(f))
    n = len(cfg.vibration_orders)
    if n and not any(f'{ch}_vibration_amplitude' in on for ch in CHANNELS) and not on & {
        f'{ch}_vibration_floor_stddev' for ch in CHANNELS}:
      raise ConfigError(*origin('vibration_orders'), 'lines need an amplitude '
                        '(angular_velocity_ / linear_acceleration_vibration_amplitude)', n)
    return cls(ctx.joint_probe(jid), tuple(float(o) for o in cfg.vibration_orders), on,
               float(dt))

  def uses(self, field: str) -> bool:
    if field in ('vibration_reference_speed_rad_s', 'vibration_speed_exponent',
                 'vibration_transmission_gain'):
      return True
    return field in self.on

  @staticmethod
  def params(cfg) -> VibrationParams:
    out = {}
    n = len(cfg.vibration_orders)
    for f in PARAM_FIELDS:
      v = getattr(cfg, f)
      if f in ('angular_velocity_vibration_amplitude', 'linear_acceleration_vibration_amplitude',
               'vibration_phase_rad') and len(v) == 0:
        v = [ZERO3] * n
      out[f] = host.array(np.reshape(np.asarray(v, np.float32), (n, 3)) if f in (
          'angular_velocity_vibration_amplitude', 'linear_acceleration_vibration_amplitude',
          'vibration_phase_rad') else v)
    return VibrationParams(**out)

  def term(self, p: VibrationParams, data, streams: dict, tick) -> dict:
    """`{channel: (3,) additive input}` of this tick (channels whose terms are off absent)."""
    theta, omega = self.probe.state(data)
    speed = jnp.abs(omega) / p.vibration_reference_speed_rad_s
    s = jnp.where(speed > 0, speed, 1.0) ** p.vibration_speed_exponent
    s = jnp.where(speed > 0, s, 0.0)
    out = {}
    phase = p.vibration_phase_rad if 'vibration_phase_rad' in self.on else 0.0
    angles = jnp.asarray(self.orders, jnp.float32)[:, None] * theta + phase   # (K, 3)
    ctx = em.Ctx(self._on, streams, tick, self.dt, {'angles': angles})
    for ch in CHANNELS:
      if ERRORS[ch].on_terms(ctx.on):
        # from −0.0, the exact additive identity: a lone term's value is kept bit for bit
        _, v, _ = ERRORS[ch].apply(p, {}, jnp.full(3, -0.0, jnp.float32), ctx)
        out[ch] = p.vibration_transmission_gain * s * v
    return out

  def _on(self, field: str) -> bool:
    """Switch of a term of `ERRORS`: its field is on (lines also need orders)."""
    return field in self.on and (bool(self.orders) or not field.endswith('_amplitude'))

  def describe(self) -> list[str]:
    return [f'vibration: joint {self.probe.joint!r}, orders {list(self.orders)} per revolution; '
            f'terms: {", ".join(sorted(self.on)) or "none"}']
