"""The manifest's built-in open-loop command trace (`command_script`), for demos and runs.

Each entry drives one actuator component with a waveform of time. It is evaluated inside the
simulator step (no host-side arrays, so any duration costs nothing extra); a component for
which the caller passes commands, or whose commands a controller returns, is not scripted.
Issue instants use the integer-tick schedules of SPEC §4 (`period_s`, phase `start_s`).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from fibril_mjx import schedule as sch
from fibril_mjx.errors import ConfigError, did_you_mean

KEY = 'command_script'   # its clocks live in SimState.clocks[KEY]


@dataclasses.dataclass(frozen=True)
class Entry:
  """One validated `command_script` entry (static)."""
  component: str
  kind: str
  waveform: str
  amplitude: float
  frequency_hz: float
  phase_rad: float
  offset: float
  start_tick: int
  schedule: sch.Schedule | None   # None: every tick from start_tick
  extra: tuple                    # (('kp', v), ...) for motion commands

  def describe(self) -> str:
    when = (f'every tick from tick {self.start_tick}' if self.schedule is None
            else f'at {self.schedule.describe()}')
    w = ('constant' if self.waveform == 'constant' else
         f'{self.waveform} amplitude {self.amplitude:g}, {self.frequency_hz:g} Hz, phase '
         f'{self.phase_rad:g} rad')
    extra = ''.join(f', {k} {v:g}' for k, v in self.extra)
    return f'{self.component}: {self.kind} = {self.offset:g} + {w}{extra}; issued {when}'


@dataclasses.dataclass(frozen=True)
class CommandScript:
  entries: tuple[Entry, ...]
  dt: float

  @property
  def schedules(self) -> dict:
    return {str(i): e.schedule for i, e in enumerate(self.entries) if e.schedule is not None}

  @property
  def components(self) -> tuple[str, ...]:
    return tuple(e.component for e in self.entries)

  def commands(self, components: dict, tick, dues: dict) -> dict:
    """`{component id: single-world command}` at `tick` (shared by all worlds).

    Args:
      dues: `{entry index as str: (due, n)}` of the entries with a period.
    """
    t = tick.astype(jnp.float32) * self.dt
    out = {}
    for i, e in enumerate(self.entries):
      arg = 2 * math.pi * e.frequency_hz * t + e.phase_rad
      wave = {'sine': jnp.sin(arg), 'square': jnp.sign(jnp.sin(arg)),
              'constant': jnp.zeros_like(t)}[e.waveform]
      value = e.offset + e.amplitude * wave
      velocity = (e.amplitude * 2 * math.pi * e.frequency_hz * jnp.cos(arg)
                  if e.waveform == 'sine' else jnp.zeros_like(t))
      due = dues[str(i)][0] if e.schedule is not None else tick >= e.start_tick
      comp = components[e.component]
      cmd = comp.script_command(e.kind, value, velocity, dict(e.extra))
      null = comp.null_command()
      out[e.component] = type(cmd)(*(jnp.where(due, a, b) for a, b in zip(cmd, null)))
    return out

  def describe(self) -> list[str]:
    return [e.describe() for e in self.entries]


def build(manifest, components: dict, dt: float) -> CommandScript:
  """Validates `command_script` against the built components (construction errors)."""
  file = str(manifest.path)
  entries, seen = [], {}
  for i, s in enumerate(manifest.model.command_script):
    path = f'command_script[{i}]'
    comp = components.get(s.component)
    if comp is None:
      raise ConfigError(file, f'{path}.component', 'no component of that id'
                        + did_you_mean(s.component, components), s.component)
    if not hasattr(comp, 'null_command'):
      raise ConfigError(file, f'{path}.component', f'{s.component!r} is a {comp.type}, not an '
                        'actuator component', s.component)
    if s.component in seen:
      raise ConfigError(file, f'{path}.component', f'already scripted by command_script'
                        f'[{seen[s.component]}]; one entry per component', s.component)
    seen[s.component] = i
    accepted = comp.accepted_kinds
    if s.kind not in accepted:
      raise ConfigError(file, f'{path}.kind', f'{s.component!r} ({comp.type}) accepts '
                        f'{", ".join(accepted)} commands with its binding and config', s.kind)
    extra = tuple((k, getattr(s, k)) for k in ('kp', 'kd', 'effort_ff')
                  if getattr(s, k) is not None)
    if extra and s.kind != 'motion':
      raise ConfigError(file, f'{path}.{extra[0][0]}', 'only for kind motion', extra[0][1])
    for k, v in extra:
      if k in ('kp', 'kd') and v < 0:
        raise ConfigError(file, f'{path}.{k}', 'must be >= 0', v)
    start = sch.ticks_fraction(s.start_s, dt)
    schedule = None
    if s.period_s is not None:
      schedule = sch.Schedule.build(
          s.period_s, s.start_s, dt, 'next_boundary',
          origin=lambda f, p=path: (file, f'{p}.{"period_s" if f == "period_s" else "start_s"}'))
    entries.append(Entry(s.component, s.kind, s.waveform, s.amplitude, s.frequency_hz,
                         s.phase_rad, s.offset, int(math.ceil(start)), schedule, extra))
  return CommandScript(tuple(entries), dt)
