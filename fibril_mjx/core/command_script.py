"""The manifest's open-loop drives, evaluated inside the simulator step: `command_script`
(commands to actuator components) and `actuator_script` (raw `ctrl` of test-rig actuators).
Both use one waveform implementation (`waves`).

Each entry drives one actuator component with a waveform of time. It is evaluated inside the
simulator step (no host-side arrays, so any duration costs nothing extra); a component for
which the caller passes commands, or whose commands a controller returns, is not scripted.
Issue instants use the integer-tick schedules of SPEC §4 (`period_s`, phase `start_s`).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from fibril_mjx.mechanisms.schedule import Schedule, ticks_fraction
from fibril_mjx.core import protocol
from fibril_mjx.errors import ConfigError, did_you_mean

KEY = 'command_script'   # its clocks live in SimState.clocks[KEY]


def waves(entries, tick, dt: float) -> tuple:
  """`(values, rates)` `(len(entries),)`: every entry's drive and its time derivative at tick
  `tick` (time `t = tick·dt`), in one expression (one kernel, not one per entry).

  `value = offset + amplitude·w(2π f t + φ)` with `w = sin` (`waveform: sine`), `sign(sin)`
  (`square`) or 0 (`constant`); the rate is the sine's derivative (0 for square and
  constant). An entry has `waveform`, `amplitude`, `frequency_hz`, `phase_rad` and `offset`.
  The phase is computed as `float32(float32(2π f)·float32(dt))·tick + φ`, the float32
  operations of the scalar expression once XLA has folded its two constants: the value of an
  entry does not depend on the entries beside it or on a `vmap` over ticks.
  """
  col = lambda f: np.asarray([getattr(e, f) for e in entries], np.float64)   # noqa: E731
  kinds, freq = np.asarray([e.waveform for e in entries]), col('frequency_hz')
  step = (2 * math.pi * freq).astype(np.float32) * np.float32(dt)
  arg = step * jnp.asarray(tick).astype(jnp.float32) + col('phase_rad').astype(np.float32)
  amplitude = col('amplitude').astype(np.float32)
  wave = jnp.where(kinds == 'sine', jnp.sin(arg),
                   jnp.where(kinds == 'square', jnp.sign(jnp.sin(arg)), 0.0))
  rate = (col('amplitude') * 2 * math.pi * freq).astype(np.float32) * jnp.cos(arg)
  return (col('offset').astype(np.float32) + amplitude * wave,
          jnp.where(kinds == 'sine', rate, 0.0))


@dataclasses.dataclass(frozen=True)
class ActuatorScript:
  """Static open-loop ctrl drive of test-rig actuators (manifest `actuator_script`).

  Attributes:
    ctrl_index: the control each entry writes.
    entries: the validated entries, each a frozen (so hashable) `ScriptEntry` of
      `fibril_mjx/config/manifest.py`: `waveform`, `amplitude`, `frequency_hz`, `phase_rad`,
      `offset`.
  """
  ctrl_index: tuple[int, ...]
  entries: tuple

  def ctrl(self, ctrl0, tick, dt: float):
    """`ctrl0` `(nu,)` with the scripted entries replaced by their value at tick `tick` of
    `dt` seconds."""
    if not self.ctrl_index:
      return ctrl0
    vals = waves(self.entries, tick, dt)[0]
    # A dense select instead of per-entry scatters: elementwise under vmap (scatters into a
    # batched ctrl cost a quarter of a small model's step on the CPU).
    dense = jnp.zeros(ctrl0.shape, ctrl0.dtype).at[np.asarray(self.ctrl_index)].set(
        vals.astype(ctrl0.dtype))
    mask = np.zeros(ctrl0.shape, bool)
    mask[np.asarray(self.ctrl_index)] = True
    return jnp.where(mask, dense, ctrl0)


def build_actuator_script(manifest, m) -> ActuatorScript:
  """Binds `actuator_script` entries to controls of the compiled model `m`."""
  import mujoco
  file = str(manifest.path)
  ctrl_index = []
  for i, s in enumerate(manifest.model.actuator_script):
    aid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, s.actuator)
    if aid < 0:
      names = [m.actuator(j).name for j in range(m.nactuator)]
      raise ConfigError(file, f'actuator_script[{i}].actuator',
                        'no MuJoCo actuator of that name' + did_you_mean(s.actuator, names),
                        s.actuator)
    if m.actuator_ctrlnum[aid] != 1:
      raise ConfigError(file, f'actuator_script[{i}].actuator',
                        f'the actuator owns {m.actuator_ctrlnum[aid]} controls; scripts drive '
                        'single-control actuators', s.actuator)
    ctrl_index.append(int(m.actuator_ctrladr[aid]))
  return ActuatorScript(tuple(ctrl_index), tuple(manifest.model.actuator_script))


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
  schedule: Schedule | None   # None: every tick from start_tick
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

  def commands(self, components: dict, tick, dues: dict) -> dict:
    """`{component id: single-world command}` at `tick` (shared by all worlds).

    Args:
      dues: `{entry index as str: (due, n)}` of the entries with a period.
    """
    if not self.entries:
      return {}
    values, rates = waves(self.entries, tick, self.dt)
    dues = jnp.stack([dues[str(i)][0] if e.schedule is not None else tick >= e.start_tick
                      for i, e in enumerate(self.entries)])
    cmds, nulls, alike = [], [], {}
    for i, e in enumerate(self.entries):
      comp = components[e.component]
      cmds.append(comp.script_command(e.kind, values[i], rates[i], dict(e.extra)))
      nulls.append(comp.null_command())
      shapes = tuple((jnp.shape(x), jnp.result_type(x)) for x in cmds[-1] + nulls[-1])
      alike.setdefault((type(cmds[-1]), shapes), []).append(i)
    out = {}
    for (command_type, _), idx in alike.items():   # scripted or null: one select per field
      due = dues[np.asarray(idx)]
      fields = [jnp.where(due.reshape((-1,) + (1,) * jnp.ndim(cmds[idx[0]][f])),
                          jnp.stack([cmds[i][f] for i in idx]),
                          jnp.stack([nulls[i][f] for i in idx]))
                for f in range(len(cmds[idx[0]]))]
      for j, i in enumerate(idx):
        out[self.entries[i].component] = command_type(*(x[j] for x in fields))
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
    if protocol.ACTUATOR not in comp.roles:
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
    start = ticks_fraction(s.start_s, dt)
    schedule = None
    if s.period_s is not None:
      schedule = Schedule.build(
          s.period_s, s.start_s, dt, 'next_boundary',
          origin=lambda f, p=path: (file, f'{p}.{"period_s" if f == "period_s" else "start_s"}'))
    entries.append(Entry(s.component, s.kind, s.waveform, s.amplitude, s.frequency_hz,
                         s.phase_rad, s.offset, int(math.ceil(start)), schedule, extra))
  return CommandScript(tuple(entries), dt)
