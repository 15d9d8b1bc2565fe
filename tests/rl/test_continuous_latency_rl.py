"""Per-episode continuous actuator latency in the RL env (SPEC §6.1.1): a `FibrilEnv` with a
`fibril_sim/motor` in `command_latency_mode: continuous` and a `vary:` on its
`command_latency_s` draws a latency per episode, sizes the command queue for the
distribution's upper bound (`command_latency_max_s`, so no draw is clamped), and each
episode's applied effort (the ctrl and `truth/motor/setpoint`) is the float64 NumPy mean over
each physics tick of the command held at the actuator, for that episode's latency.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import yaml

import fibril_mjx
from fibril_mjx.components.actuators import motor as motor_mod
from fibril_mjx.core import pipeline
from fibril_mjx.rl.env import FibrilEnv, Task
from latency_rig import ARM_XML

DT, STEPS, HIGH_S = 0.002, 30, 0.012


def held_mean(u, latency_ticks: float) -> np.ndarray:
  """NumPy: per tick j the mean over [j, j + 1) of the held command — `u[m]` from `m + L` on
  for the issued entries (NaN: nothing issued at tick m), 0 (the safe effort) before the
  first arrival."""
  u = np.asarray(u, np.float64)
  k = np.flatnonzero(~np.isnan(u))
  arrive = k + latency_ticks
  out = np.zeros(len(u))
  for j in range(len(u)):
    edges = np.concatenate([[j], arrive[(arrive > j) & (arrive < j + 1)], [j + 1]])
    for a, b in zip(edges[:-1], edges[1:]):
      got = np.flatnonzero(arrive <= a)
      out[j] += (b - a) * (u[k[got[-1]]] if len(got) else 0.0)
  return out


def make_env(tmp):
  (tmp / 'arm.xml').write_text(ARM_XML)
  comps = [{'id': 'motor', 'type': 'fibril_sim/motor',
            'config': {'actuator': 'motor', 'application_period_s': DT,
                       'command_latency_s': 0.002, 'command_latency_mode': 'continuous'}}]
  path = tmp / 'm.yaml'
  path.write_text(yaml.safe_dump({'fibril_manifest': 1, 'model': 'arm.xml',
                                  'components': comps}))
  task = Task(observe={'motor': ('position',)}, action_size=1,
              commands=lambda a: {'motor': motor_mod.command('effort', a[0])},
              reward=lambda out, goal, a: (jnp.float32(0.0), {}), control_ticks=1)
  vary = {'motor.command_latency_s': {'dist': 'uniform', 'low': 0.0005, 'high': HIGH_S}}
  return FibrilEnv(fibril_mjx.load(path), task, vary=vary)


def test_latency_drawn_per_episode_and_applied_as_the_mix(tmp_path):
  env = make_env(tmp_path)
  cont = env.sim.components['motor'].link.continuous
  # the manifest's queue held 1 tick; the vary: upper bound sized it (no silent clamp)
  assert abs(cont.max_ticks - HIGH_S / DT) < 1e-9, cont

  def episode(rng, actions):
    s = env.reset(rng)

    def body(st, a):
      st = env.step(st, a)
      truth = pipeline.outputs(env.sim.built, st.pipeline_state)['truth']['motor']
      return st, (st.pipeline_state.ctrl[0], truth['setpoint'])
    _, (ctrl, setpoint) = jax.lax.scan(body, s, actions)
    return s.info['draws']['motor.command_latency_s'], ctrl, setpoint

  rngs = jax.random.split(jax.random.PRNGKey(0), 4)
  actions = np.random.default_rng(0).uniform(-0.1, 0.1, (len(rngs), STEPS, 1)).astype(np.float32)
  lat, ctrl, setpoint = jax.jit(jax.vmap(episode))(rngs, jnp.asarray(actions))
  lat = np.asarray(lat, np.float64)
  assert len(np.unique(lat)) == len(rngs), lat              # one latency per episode
  assert lat.max() / DT > 2.0 and np.all(lat <= HIGH_S), lat  # above the manifest's 1 tick
  for e in range(len(rngs)):
    # tick 0 is the reset (nothing issued); step k issues action k at tick k + 1
    u = np.concatenate([[np.nan], actions[e, :, 0].astype(np.float64)])
    ref = held_mean(u, lat[e] / DT)[1:]
    np.testing.assert_allclose(np.asarray(ctrl[e]), ref, atol=2e-5,
                               err_msg=f'episode {e}, latency {lat[e] / DT:.3f} ticks')
    np.testing.assert_allclose(np.asarray(setpoint[e]), ref, atol=2e-5)
