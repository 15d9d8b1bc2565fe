"""The public one-world pipeline (`fibril_mjx.core.pipeline`): `init` / `step` of one world over a
`Built`, jitted equal to eager, vmapped over worlds equal to a loop of one-world calls and to
`Simulation` (the world axis is a wrapper over it), no retrace on a second call.

The manifest is the RL leg (a motor actuator driven by commands, an IMU): commands, transports
and noise all take part.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fibril_mjx
from fibril_mjx.batch import batched
from fibril_mjx.components.actuators import motor
from fibril_mjx.core import pipeline
from ref_helpers import tree_equal

REPO = pathlib.Path(__file__).resolve().parents[2]
WORLDS, TICKS = 3, 12   # the motor applies its command every 5 ticks (CAN cadence)


@pytest.fixture(scope='module')
def sim():
  return fibril_mjx.load(REPO / 'manifests' / 'rl' / 'leg_hold.yaml')


def efforts(tick: int, world: int) -> float:
  return 0.5 * np.sin(0.7 * tick + world) + 0.1 * world


def command(tick: int, world: int):
  return {'hip': motor.command('effort', jnp.float32(efforts(tick, world)))}


def one_world(built, params, key, world, init, step):
  """`(states, outputs)` of one world through `TICKS` steps, calling `init` / `step`."""
  st = init(built, params, key, command(0, world))
  states, outs = [st], [pipeline.outputs(built, st)]
  for t in range(1, TICKS + 1):
    st, out = step(built, params, st, command(t, world))
    states.append(st)
    outs.append(out)
  return states, outs


def _init(built, params, key, cmd):
  return pipeline.init(built, params, key, commands=cmd)


_jit_init = jax.jit(_init, static_argnums=0)
_jit_step = jax.jit(pipeline.step, static_argnums=0)


def test_init_is_tick_zero_and_step_advances_one_tick(sim):
  st = _jit_init(sim.built, sim.default_params(), fibril_mjx.world_keys(0, 1)[0], command(0, 0))
  assert int(st.tick) == 0 and int(st.diverged) == -1
  assert st.ctrl.shape == (sim.mj_model.nu,)          # one world: no world axis anywhere
  st1, out = _jit_step(sim.built, sim.default_params(), st, command(1, 0))
  assert int(st1.tick) == 1
  tree_equal(out, pipeline.outputs(sim.built, st1))


def test_jit_equals_eager(sim):
  params, key = sim.default_params(), fibril_mjx.world_keys(0, 1)[0]
  jitted = one_world(sim.built, params, key, 0, _jit_init, _jit_step)
  eager = one_world(sim.built, params, key, 0, _init, pipeline.step)
  tree_equal(jitted, eager)


def test_vmap_over_worlds_equals_a_loop_of_one_world_steps(sim):
  """One `vmap` of `step` over the worlds (tick and schedules unbatched: `batched.state_axes`)
  = a Python loop of jitted one-world steps = `Simulation.reset` / `step`, bitwise."""
  built, keys = sim.built, fibril_mjx.world_keys(1, WORLDS)
  params = sim.default_params(WORLDS)
  per_world = [jax.tree.map(lambda x, w=w: x[w], params) for w in range(WORLDS)]
  loop = [one_world(built, per_world[w], keys[w], w, _jit_init, _jit_step)
          for w in range(WORLDS)]

  cmds = lambda t: jax.tree.map(lambda *x: jnp.stack(x),   # noqa: E731
                                *[command(t, w) for w in range(WORLDS)])
  axes = batched.state_axes(False)
  v_init = jax.jit(jax.vmap(lambda p, k, c: _init(built, p, k, c), out_axes=axes))
  v_step = jax.jit(jax.vmap(lambda p, s, c: pipeline.step(built, p, s, c),
                            in_axes=(0, axes, 0), out_axes=(axes, 0)))
  st = v_init(params, keys, cmds(0))
  sim_st = sim.reset(params, keys, commands=cmds(0))
  tree_equal(st, sim_st)
  for t in range(1, TICKS + 1):
    st, out = v_step(params, st, cmds(t))
    sim_st, sim_out = sim.step(params, sim_st, cmds(t))
    tree_equal(st, sim_st)
    tree_equal(out, sim_out)
    for w in range(WORLDS):
      pick = lambda x: x[w]   # noqa: E731
      tree_equal(jax.tree.map(pick, out), loop[w][1][t])
      tree_equal(jax.tree.map(pick, (st.data, st.ctrl, st.components, st.diverged)),
                 (loop[w][0][t].data, loop[w][0][t].ctrl, loop[w][0][t].components,
                  loop[w][0][t].diverged))
      tree_equal((st.tick, st.clocks), (loop[w][0][t].tick, loop[w][0][t].clocks))


def test_no_retrace_on_a_second_call(sim):
  """A second call with new values (params, state, commands) and a `Built` rebuilt from the same
  manifest (equal by hash) reuses the compiled step."""
  traces = []

  def counted(built, params, state, commands):
    traces.append(1)
    return pipeline.step(built, params, state, commands)
  step = jax.jit(counted, static_argnums=0)
  key = fibril_mjx.world_keys(0, 1)[0]
  st = _jit_init(sim.built, sim.default_params(), key, command(0, 0))
  st1, _ = step(sim.built, sim.default_params(), st, command(1, 0))
  again = fibril_mjx.load(REPO / 'manifests' / 'rl' / 'leg_hold.yaml').built
  assert again is not sim.built and again == sim.built
  params = jax.tree.map(lambda x: x * 1.01 if jnp.issubdtype(x.dtype, jnp.floating) else x,
                        sim.default_params())
  for cid, c in sim.components.items():   # a compiled-out term must keep its manifest value
    for f in c.compiled_out():
      params[cid] = c.set_param(params[cid], f, c.get_param(sim.default_params()[cid], f))
  step(again, params, st1, command(2, 1))
  assert len(traces) == 1 and step._cache_size() == 1


def test_a_changed_step_is_seen(sim):
  """The equality tests above can fail: another world's commands give other outputs."""
  params, key = sim.default_params(), fibril_mjx.world_keys(0, 1)[0]
  a = one_world(sim.built, params, key, 0, _jit_init, _jit_step)[1][-1]
  b = one_world(sim.built, params, key, 1, _jit_init, _jit_step)[1][-1]
  assert not np.array_equal(np.asarray(a['truth']['hip']['applied_effort']),
                            np.asarray(b['truth']['hip']['applied_effort']))
