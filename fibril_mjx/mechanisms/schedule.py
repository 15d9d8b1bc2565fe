"""Acquisition / application schedules in integer ticks (SPEC §4).

An instant `t_n = phase_s + n·period_s` is held as the exact rational tick `base + rem/den`
(period and phase expressed in ticks of `dt` as fractions with a common denominator), and is
advanced with integer remainder accumulation — never by adding floats — so the schedule is
exact for any number of ticks that fits in int32.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import NamedTuple

import jax.numpy as jnp

from fibril_mjx.errors import ConfigError

_REL_TOL = 1e-9
_MAX_DEN = 1 << 20


def ticks_fraction(seconds: float, dt: float) -> Fraction:
  """`seconds / dt` as a fraction: the simplest one within 1e-9 relative (float noise).

  Examples: 0.01 / 0.002 -> 5, 0.003 / 0.002 -> 3/2, (1/300) / 0.002 -> 5/3.
  """
  r = seconds / dt
  for limit in (1, 1000, _MAX_DEN):
    f = Fraction(r).limit_denominator(limit)
    if abs(float(f) - r) <= _REL_TOL * max(abs(r), 1e-300):
      return f
  return Fraction(r).limit_denominator(_MAX_DEN)


def in_ticks(name: str, seconds: float, ticks) -> str:
  """A time in a plan line, as given and in ticks: `<name> <seconds> s = <ticks> ticks`."""
  return f'{name} {seconds:g} s = {ticks} ticks'


def require_whole_ticks(seconds: float, dt: float, where: tuple[str, str],
                        advice: str = '') -> None:
  """The rule of `quantization: strict`: `seconds` is a whole number of ticks of `dt`.

  Raises:
    ConfigError: at `where` (file, field path), naming dt and the ticks, then `advice`.
  """
  if ticks_fraction(seconds, dt).denominator != 1:
    raise ConfigError(*where, f'quantization strict requires an integer multiple of dt = '
                      f'{dt:g} s (it is {seconds / dt:.9g} ticks){advice}', seconds)


@dataclasses.dataclass(frozen=True)
class Schedule:
  """A periodic schedule quantized to ticks.

  Attributes:
    period: period in ticks as `period/den` (int numerator).
    phase: phase in ticks as `phase/den`.
    den: common denominator.
    period_s, phase_s, dt: the values it was built from (for display).
    quantization: `next_boundary` or `strict`.
  """
  period: int
  phase: int
  den: int
  period_s: float
  phase_s: float
  dt: float
  quantization: str

  @staticmethod
  def build(period_s: float, phase_s: float, dt: float, quantization: str, *, origin,
            period_field: str = 'period_s', phase_field: str = 'phase_s'):
    """Builds and validates a schedule.

    Args:
      origin: `field -> (file, field path)` for error messages (`errors.field_origin`).

    Raises:
      ConfigError: period < dt, or `strict` with instants off the tick grid.
    """
    if period_s < dt * (1 - _REL_TOL):
      file, path = origin(period_field)
      override = ("set it in the component's config (it overrides the profile)"
                  if path.startswith('fields.') else 'set it')
      raise ConfigError(file, path, f'must be >= the physics timestep dt = {dt:g} s: '
                        f'{override} to {dt:g} s or a multiple, or run the model at a timestep '
                        f'<= {period_s:g} s (MJCF <option timestep>) to keep this rate',
                        period_s)
    p, ph = ticks_fraction(period_s, dt), ticks_fraction(phase_s, dt)
    if quantization == 'strict':
      for name, secs in ((period_field, period_s), (phase_field, phase_s)):
        require_whole_ticks(secs, dt, origin(name), '; use next_boundary or change it')
    den = p.denominator * ph.denominator // math.gcd(p.denominator, ph.denominator)
    return Schedule(p.numerator * (den // p.denominator), ph.numerator * (den // ph.denominator),
                    den, float(period_s), float(phase_s), float(dt), quantization)

  def tick_of(self, n: int) -> int:
    """Host-side exact tick of instant `n` (next boundary)."""
    return -((-(self.phase + n * self.period)) // self.den)

  @property
  def every_tick(self) -> bool:
    """Every tick from tick 0 is an instant (period = dt, phase 0): callers may skip the
    due-branch statically."""
    return self.period == self.den and self.phase == 0

  @property
  def period_ticks(self) -> Fraction:
    return Fraction(self.period, self.den)

  @property
  def phase_ticks(self) -> Fraction:
    return Fraction(self.phase, self.den)

  def describe(self) -> str:
    return (f'{in_ticks("period", self.period_s, self.period_ticks)}, '
            f'{in_ticks("phase", self.phase_s, self.phase_ticks)}, first tick {self.tick_of(0)}, '
            f'quantization {self.quantization}')


class ScheduleState(NamedTuple):
  """Next instant `n` at exact tick `base + rem/den`; shared by all worlds.

  Attributes:
    n: index of the next instant (int32 scalar).
    base: integer part of its tick (int32 scalar).
    rem: remainder in `[0, den)` (int32 scalar).
  """
  n: jnp.ndarray
  base: jnp.ndarray
  rem: jnp.ndarray


def init(s: Schedule) -> ScheduleState:
  return ScheduleState(jnp.int32(0), jnp.int32(s.phase // s.den), jnp.int32(s.phase % s.den))


def due_tick(st: ScheduleState) -> jnp.ndarray:
  """Tick of the next instant, quantized to the next boundary (int32)."""
  return st.base + (st.rem > 0).astype(jnp.int32)


def advance(s: Schedule, st: ScheduleState, tick) -> tuple[jnp.ndarray, ScheduleState]:
  """At `tick`: whether an instant falls on it, and the state for the following ticks.

  Returns:
    `(due, n, next_state)`: `due` bool scalar, `n` the index of the instant taken (valid
    when due).
  """
  due = due_tick(st) == tick
  total = st.rem + s.period
  nxt = ScheduleState(st.n + 1, st.base + total // s.den, total % s.den)
  new = ScheduleState(*(jnp.where(due, a, b) for a, b in zip(nxt, st)))
  return due, st.n, new
