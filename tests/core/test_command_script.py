"""The manifest's `command_script`, evaluated for every entry at once
(`fibril_mjx.core.command_script`): each entry's command at each tick against a float64 NumPy
model of SPEC's waveform, with entries of every waveform, a phase, an offset, a start and a
period side by side, on two component types."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import fibril_mjx
from fibril_mjx.core import pipeline
from actuator_rig import DT, motor, scalar, write

XML = """<mujoco model="script_rig"><option timestep="0.002"/>
  <worldbody>
    <body><joint name="a" type="hinge" axis="0 0 1"/>
      <geom type="sphere" size="0.05" mass="0.5" contype="0" conaffinity="0"/></body>
    <body pos="1 0 0"><joint name="b" type="hinge" axis="0 0 1"/>
      <geom type="sphere" size="0.05" mass="0.5" contype="0" conaffinity="0"/></body>
    <body pos="2 0 0"><joint name="c" type="hinge" axis="0 0 1"/>
      <geom type="sphere" size="0.05" mass="0.5" contype="0" conaffinity="0"/></body>
    <body pos="3 0 0"><joint name="d" type="hinge" axis="0 0 1"/>
      <geom type="sphere" size="0.05" mass="0.5" contype="0" conaffinity="0"/></body>
  </worldbody>
  <actuator><motor name="ma" joint="a"/><motor name="mb" joint="b"/><motor name="mc" joint="c"/>
    <motor name="md" joint="d"/></actuator>
</mujoco>"""

# (component, waveform, amplitude, frequency_hz, phase_rad, offset, start_s, period_s)
ENTRIES = [('ma', 'sine', 0.5, 3.0, 0.4, 0.1, 0.0, None),
           ('mb', 'square', -0.8, 7.0, 0.0, 0.2, 0.010, None),
           ('mc', 'constant', 0.0, 0.0, 0.0, -0.3, 0.0, 0.006),
           ('md', 'sine', 2.0, 11.0, -1.0, 0.0, 0.004, 0.004)]


def _sim(tmp):
  script = [dict(component=c, kind='value' if c == 'mc' else 'effort', waveform=w, amplitude=a, frequency_hz=f,
                 phase_rad=p, offset=o, start_s=s, **({} if T is None else {'period_s': T}))
            for c, w, a, f, p, o, s, T in ENTRIES]
  comps = [motor('ma', 'ma'), motor('mb', 'mb'), scalar('mc', 'mc'), motor('md', 'md')]
  return fibril_mjx.load(write(tmp, comps, extra={'command_script': script}, xml=XML))


def _reference(tick: int) -> dict:
  """`{component: value or None (not issued)}` at `tick`, in float64 (SPEC's formulas)."""
  out = {}
  for c, w, a, f, p, o, start, period in ENTRIES:
    t = tick * DT
    first = int(np.ceil(start / DT - 1e-9))
    step = 1 if period is None else int(round(period / DT))
    if tick < first or (tick - first) % step:
      out[c] = None
      continue
    wave = {'sine': np.sin(2 * np.pi * f * t + p), 'square': np.sign(np.sin(2 * np.pi * f * t + p)),
            'constant': 0.0}[w]
    out[c] = o + a * wave
  return out


def test_every_entry_issues_its_waveform_at_its_instants(tmp_path):
  sim = _sim(tmp_path)
  built = sim.built
  assert DT == built.dt
  clocks = pipeline._clocks0(built)   # the clocks before tick 0
  ticks = 40

  def issued(clocks, tick):
    inputs = pipeline.tick_inputs(built, clocks, None, tick)
    return inputs.clocks, inputs.commands
  _, commands = jax.lax.scan(issued, clocks, jnp.arange(ticks, dtype=jnp.int32))
  nulls = {c: built.components[c].null_command() for c, *_ in ENTRIES}
  checked = {'issued': 0, 'null': 0}
  for tick in range(ticks):
    for c, want in _reference(tick).items():
      got = jax.tree.map(lambda x: np.asarray(x[tick]), commands[c])
      if want is None:
        assert all(np.array_equal(g, np.asarray(n)) for g, n in zip(got, nulls[c])), (c, tick)
        checked['null'] += 1
        continue
      value = got.value if hasattr(got, 'value') else got[0]
      np.testing.assert_allclose(value, want, rtol=2e-6, atol=2e-6, err_msg=f'{c} tick {tick}')
      checked['issued'] += 1
  assert checked['issued'] > 60 and checked['null'] > 40, checked
