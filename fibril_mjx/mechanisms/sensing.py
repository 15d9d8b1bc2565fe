"""The sensing cycle (SPEC §4), the one every sensing component runs after physics.

Per tick: `observe` (optional, with the outputs of the components sensed before) → `track`
(optional, every physics tick) → at an acquisition instant, under `lax.cond`: reset edges of the
fault plan (`on_reset`) → `acquire` → data faults, stale packet, condition and health of the
fault plan (`fibril_mjx.mechanisms.faults`) → `send` into the transport → every tick: `receive`.

A component gives its cycle as a `Cycle`: its static timing, its fault plan (None: no fault
code in the graph, no `faults` in Params and State) and its stages, the optional ones None
where absent. A sensor's cycle reads its schedule, queue, output, transport streams and fault
params / state under the names of `SENSOR`; an actuator's feedback runs the same cycle under
those of `FEEDBACK` (its faults in `feedback_faults`, beside the actuator's own `faults`).
`check` says at build time what a cycle lacks; the traced code branches on the declared
stages only (a Python `if` on static structure, so an absent stage is absent from the graph).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from fibril_mjx.mechanisms import faults
from fibril_mjx.mechanisms import transport as tp


class Slots(NamedTuple):
  """Where a cycle finds its parts: the schedule's key in `dues`, the State fields of the
  delivery queue and of the delivered output, the `streams` keys of the transport's
  jitter and loss, and the Params and State field of the fault plan's `FaultParams` /
  `FaultState`."""
  schedule: str
  queue: str
  held: str
  jitter: str
  loss: str
  faults: str


SENSOR = Slots('acquisition', 'queue', 'held', 'delivery_jitter', 'delivery_loss', 'faults')
FEEDBACK = Slots('feedback', 'fb_queue', 'fb_held', 'feedback_jitter', 'feedback_loss',
                 'feedback_faults')


class Cycle(NamedTuple):
  """One component's sensing cycle (static: built from the component's fields and methods).

  Attributes:
    transport: the delivery `transport.Transport`, or a `fifo.Fifo`.
    dt: physics timestep (s).
    acquire: `(p, s, data, tick, n) -> (state, sample)`: sample `n` (a NamedTuple) from the
      `mjx.Data` of `tick`.
    fault_plan: the static `faults.FaultPlan` (Params and State then carry the field
      `slots.faults`), or None.
    observe: optional `(p, s, env, tick) -> state`, every tick, with `env` (`{component id:
      output}` of the components sensed before this one).
    track: optional `(p, s, data, tick) -> state`, every physics tick before acquisition (e.g.
      a digital filter at the device's internal rate).
    on_reset: optional `(p, s, index) -> state`: the state re-initialized by the `index`-th
      device reset of the fault plan (absent: a reset leaves the state as it is).
    condition: optional `(p, sample) -> int32` `faults.OK` or `faults.WEAK`: the component's own
      degraded condition (e.g. no GNSS fix), read where the fault plan is `weak`.
    slots: the names of the schedule, queue, output and streams (`SENSOR`, `FEEDBACK`).
    every_tick: the schedule has an instant every tick: acquire unconditionally (no
      `lax.cond` in the graph); False: acquire under `lax.cond` on `due`.
  """
  transport: Any
  dt: float
  acquire: Callable
  fault_plan: faults.FaultPlan | None = None
  observe: Callable | None = None
  track: Callable | None = None
  on_reset: Callable | None = None
  condition: Callable | None = None
  slots: Slots = SENSOR
  every_tick: bool = False


def check(cycle: Cycle, who: str) -> None:
  """Raises `TypeError` (at build time) where a stage is neither a function nor None, or where
  a weak fault plan has no `condition` to read."""
  stages = {'acquire': cycle.acquire, 'observe': cycle.observe, 'track': cycle.track,
            'on_reset': cycle.on_reset, 'condition': cycle.condition}
  for name, stage in stages.items():
    if not callable(stage) and (stage is not None or name == 'acquire'):
      raise TypeError(f'{who}: sensing stage {name} must be a function'
                      + (' or None' if name != 'acquire' else '') + f', got {stage!r}')
  plan = cycle.fault_plan
  if plan is not None and plan.weak and cycle.condition is None:
    raise TypeError(f'{who}: a weak fault plan reads the component\'s condition(p, sample), '
                    'which it lacks')


def sense(cycle: Cycle, p, s, data, tick, dues, env):
  """One tick after physics (module docstring): the new state.

  `due` and `n` are shared by all worlds (the schedule is static), so under `vmap` the
  `lax.cond` stays a branch and off-instant ticks skip the acquisition work.

  Args:
    p, s: the component's Params and State of one world (State with `streams` incl. the
      jitter and loss keys of `cycle.slots`, its queue and held fields; with a fault plan,
      Params and State with the faults field of `cycle.slots`).
    data: `mjx.Data` of `tick`.
    dues: `{schedule: (due, n), ...}` of this tick (`cycle.slots.schedule`), shared by all
      worlds.
    env: outputs of the components sensed before this one (read by `observe` only).
  """
  names = cycle.slots
  due, n = dues[names.schedule]
  if cycle.observe is not None:
    s = cycle.observe(p, s, env, tick)
  if cycle.track is not None:
    s = cycle.track(p, s, data, tick)
  plan = cycle.fault_plan

  fps = getattr(p, names.faults) if plan is not None else None

  def acquire(st):
    if plan is not None:
      reset = None if cycle.on_reset is None else functools.partial(cycle.on_reset, p)
      st, fs = faults.reset_edges(plan, fps, st, getattr(st, names.faults), tick, cycle.dt,
                                  reset)
    st, sample = cycle.acquire(p, st, data, tick, n)
    seq, stamp, active = n, tick, None
    if plan is not None:
      cond = cycle.condition(p, sample) if plan.weak else jnp.int32(faults.OK)
      sample, seq, stamp, active, fs = faults.packet(plan, fps, fs, sample, cond, n, tick,
                                                     cycle.dt)
      st = st._replace(**{names.faults: fs})
    q = tp.send(cycle.transport, getattr(st, names.queue), sample, seq, stamp,
                st.streams[names.jitter], st.streams[names.loss], active=active)
    return st._replace(**{names.queue: q})

  s = acquire(s) if cycle.every_tick else jax.lax.cond(due, acquire, lambda st: st, s)
  queue, held = tp.receive(cycle.transport, getattr(s, names.queue), getattr(s, names.held),
                           tick, dues)
  return s._replace(**{names.queue: queue, names.held: held})
