"""RL environment (`fibril_mjx.rl.env`): the Brax API contract (shapes, jit, vmap, determinism by
rng), observations = delivered outputs with `new_data`, truth apart, actions through the motor
adapter, per-reset Params, episodes by Brax's own wrapper and auto-reset with new draws; its observations
after k steps equal `Simulation`'s for the same commands. (Brax PPO on this task runs in
tests/rl/test_policy_robustness.py, which also checks the `train` outputs; learning is
tests/rl/test_ppo_learns.py.)

References are computed here from the simulator's public API (`sim.reset`, `sim.run`,
`sim.outputs`, `pipeline.outputs`), not from the environment's helpers.

Compile cost: every check runs on ONE env structure (one jitted reset and step, one eager
reset), built with non-default Params (a large gyro bias, `params=`) so that the per-reset-Params
checks need no env of their own; the variants (randomized Params, privileged observation) share
one more env, run eagerly (their eager operations are those of the eager check, already
compiled).
"""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fibril_mjx
from fibril_mjx.core import pipeline
from fibril_mjx.rl.env import FibrilEnv, State, wrap
from fibril_mjx.batch.simulation import Options

REPO = pathlib.Path(__file__).resolve().parents[2]
EPISODE = 6   # steps: an episode holds the 5 steps compared with `Simulation` below
spec = importlib.util.spec_from_file_location('train_ppo', REPO / 'examples' / 'train_ppo.py')
train_ppo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train_ppo)


@pytest.fixture(scope='module')
def sim():
  return fibril_mjx.load(REPO / 'manifests' / 'rl' / 'leg_hold.yaml')


@pytest.fixture(scope='module')
def variant(sim):
  """The task's env with per-reset randomized Params and the privileged observation."""
  return train_ppo.make_env(sim, episode_length=EPISODE, control_ticks=5, randomize=True,
                            privileged_obs=True)


@pytest.fixture(scope='module')
def big(sim):
  """One world's Params with a large nominal gyro bias (0.5 rad/s per axis)."""
  return train_ppo.randomize_gyro_bias(jax.random.PRNGKey(0), sim.default_params(), stddev=0.5)


@pytest.fixture(scope='module')
def env(sim, variant, big):
  """One world under Brax's EpisodeWrapper and fibril_mjx's AutoReset, every reset with the
  Params `big` (`FibrilEnv(params=)`, no randomization)."""
  return wrap(FibrilEnv(sim, variant.task, params=big))


@pytest.fixture(scope='module')
def jitted(env):
  return jax.jit(env.reset), jax.jit(env.step)


def reference_obs(sim, params, rng):
  """The observation at reset, from `sim.reset` / `sim.run` / `sim.outputs` directly: the env's
  reset observes the last tick before its first step (tick control_ticks − 1 = 4)."""
  k_world, k_goal, _, _ = jax.random.split(rng, 4)
  pb = jax.tree.map(lambda x: np.asarray(x)[None], params)
  ps = sim.reset(pb, np.asarray(k_world)[None])
  ps, _, _ = sim.run(pb, ps, 4, options=Options(record=False))
  out = jax.tree.map(lambda x: np.asarray(x[0]), sim.outputs(ps))
  goal = jax.random.uniform(k_goal, (), jnp.float32, -train_ppo.TARGET_RAD, train_ppo.TARGET_RAD)
  return obs_of(out, goal), out


def obs_of(out, goal):
  """The task's observation, from one world's outputs."""
  hip, imu = out['sensor']['hip'], out['sensor']['imu']
  return np.concatenate([
      [hip.sample.position, hip.sample.velocity, hip.sample.applied_effort, hip.new_data],
      imu.sample.angular_velocity, imu.sample.linear_acceleration, [imu.new_data],
      [goal]]).astype(np.float32)


def test_contract_shapes(env, jitted):
  reset, step = jitted
  s = reset(jax.random.PRNGKey(0))
  assert isinstance(s, State)
  assert env.observation_size == 12 and env.action_size == 1
  assert s.obs.shape == (12,) and s.obs.dtype == jnp.float32
  assert s.reward.shape == s.done.shape == ()
  assert set(s.metrics) == {'angle_error_rad'}
  for key in ('truncation', 'episode_done', 'episode_metrics', 'truth', 'params', 'rng'):
    assert key in s.info
  s2 = step(s, jnp.zeros(1))
  assert jax.tree.structure(s2) == jax.tree.structure(s)
  assert all(a.shape == b.shape and a.dtype == b.dtype
             for a, b in zip(jax.tree.leaves(s), jax.tree.leaves(s2)))
  assert s.replace(reward=jnp.ones(())).reward == 1


def test_observation_is_the_delivered_output(sim, env, jitted, big):
  rng = jax.random.PRNGKey(3)
  s = jitted[0](rng)
  want, out = reference_obs(sim, big, rng)
  np.testing.assert_allclose(np.asarray(s.obs), want, rtol=1e-6, atol=1e-7)
  assert int(s.pipeline_state.tick) == 4
  assert s.obs[10] == 1.0                      # the IMU (1 kHz) delivers at every tick
  truth = np.concatenate([np.ravel(x) for x in jax.tree.leaves(out['truth']['hip'])]
                         + [np.ravel(x) for x in jax.tree.leaves(out['truth']['imu'])])
  np.testing.assert_allclose(np.asarray(s.info['truth']), truth.astype(np.float32), rtol=1e-6,
                             atol=1e-7)


def test_jit_matches_eager_and_is_deterministic_by_rng(env, jitted):
  reset, step = jitted
  a = jnp.array([0.5])
  k = jax.random.PRNGKey(11)
  s_j = step(reset(k), a)
  s_e = env.step(env.reset(k), a)
  for x, y in zip(jax.tree.leaves(s_j), jax.tree.leaves(s_e)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
  s_again = step(reset(k), a)
  for x, y in zip(jax.tree.leaves(s_j), jax.tree.leaves(s_again)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  other = reset(jax.random.PRNGKey(12))
  assert not np.array_equal(np.asarray(other.obs), np.asarray(reset(k).obs))  # noise, goal


def test_vmap_matches_single_worlds(env, jitted):
  keys = jax.random.split(jax.random.PRNGKey(5), 3)
  actions = jnp.array([[1.0], [-1.0], [0.2]])
  batch = jax.jit(jax.vmap(lambda k, a: env.step(env.reset(k), a)))(keys, actions)
  for i in range(3):
    one = jitted[1](jitted[0](keys[i]), actions[i])
    np.testing.assert_allclose(np.asarray(batch.obs[i]), np.asarray(one.obs), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(float(batch.reward[i]), float(one.reward), rtol=1e-5)


def test_action_reward_and_truth(sim, env, jitted):
  reset, step = jitted
  s = reset(jax.random.PRNGKey(2))
  s1 = step(s, jnp.array([1.0]))
  out = jax.tree.map(np.asarray, pipeline.outputs(sim.built, s1.pipeline_state))
  # the effort command went through the motor adapter: issued and applied at tick 5 (the first
  # of the step), reported at tick 9 (its last; the reset observed tick 4)
  assert int(s.pipeline_state.tick) == 4 and int(s1.pipeline_state.tick) == 9
  assert out['truth']['hip']['applied_effort'] == pytest.approx(train_ppo.EFFORT_SCALE, rel=1e-5)
  assert out['sensor']['hip'].sample.applied_effort == pytest.approx(train_ppo.EFFORT_SCALE,
                                                                      rel=1e-5)
  q, goal = float(out['truth']['hip']['position']), float(s.info['goal'])
  assert float(s1.reward) == pytest.approx(-(q - goal) ** 2 - 0.01, rel=1e-5)
  assert float(s1.metrics['angle_error_rad']) == pytest.approx(abs(q - goal), rel=1e-5)
  assert q > 0   # positive effort turns the hip positive


def test_auto_reset_and_episode_metrics(env, jitted):
  """Brax's EpisodeWrapper with our AutoReset: the time limit ends the episode (truncation),
  the finished env restarts from a fresh reset of fold_in(key, 1) (new world key: new noise
  and turn-on biases, unlike Brax's AutoResetWrapper, which replays the cached first state),
  and the episode metrics restart."""
  reset, step = jitted
  first = reset(jax.random.PRNGKey(7))
  s = first
  rewards = []
  for _ in range(EPISODE):
    s = step(s, jnp.array([0.3]))
    rewards.append(float(s.reward))
  assert float(s.done) == 1.0 and float(s.info['truncation']) == 1.0
  assert int(s.info['steps']) == EPISODE
  # the env's reset of that key (the wrappers' reset adds only their `info` entries)
  fresh = reset(jax.random.fold_in(jax.random.PRNGKey(7), 1))
  np.testing.assert_array_equal(np.asarray(s.obs), np.asarray(fresh.obs))   # restarted
  for a, b in zip(jax.tree.leaves(s.pipeline_state), jax.tree.leaves(fresh.pipeline_state)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert not np.array_equal(np.asarray(s.obs), np.asarray(first.obs))       # new draws
  assert int(s.info['episode']) == 1
  em = s.info['episode_metrics']
  assert float(em['length']) == EPISODE
  assert float(em['sum_reward']) == pytest.approx(sum(rewards), rel=1e-5)
  s2 = step(s, jnp.array([0.3]))
  assert float(s2.done) == 0.0 and float(s2.info['episode_metrics']['length']) == 1
  assert int(s2.info['steps']) == 1
  one = step(reset(jax.random.fold_in(jax.random.PRNGKey(7), 1)), jnp.array([0.3]))
  np.testing.assert_array_equal(np.asarray(s2.obs), np.asarray(one.obs))   # that episode's


def test_observations_equal_the_simulation_for_the_same_commands(sim, env, jitted, big):
  """k env steps of one world = `Simulation.reset` + `run` with the same command trace (the
  action's command at the first tick of each step, null at the others), bitwise; k = 5 steps
  of one episode (no auto-reset)."""
  reset, step = jitted
  rng = jax.random.PRNGKey(4)
  actions = [0.7, -0.4, 0.1, 1.0, -0.2]
  assert len(actions) < EPISODE
  s = reset(rng)
  obs = []
  for a in actions:
    s = step(s, jnp.array([a]))
    assert float(s.done) == 0.0
    obs.append(np.asarray(s.obs))
  k_world, _, _, _ = jax.random.split(rng, 4)
  pb = jax.tree.map(lambda x: np.asarray(x)[None], big)
  ps = sim.reset(pb, np.asarray(k_world)[None])
  ps, _, _ = sim.run(pb, ps, 4, options=Options(record=False))
  null = sim.null_commands()['hip']
  goal = float(s.info['goal'])
  for i, a in enumerate(actions):
    cmd = train_ppo._commands(jnp.array([a]))['hip']
    trace = {'hip': jax.tree.map(
        lambda c, z: np.concatenate([np.asarray(c, z.dtype)[None],   # numpy: no compiles
                                     np.broadcast_to(z, (4,) + z.shape)])[:, None], cmd, null)}
    ps, _, _ = sim.run(pb, ps, 5, commands=trace, options=Options(record=False))
    out = jax.tree.map(lambda x: np.asarray(x[0]), sim.outputs(ps))
    np.testing.assert_array_equal(obs[i], obs_of(out, goal))
  assert int(s.pipeline_state.tick) == int(ps.tick) == 4 + 5 * len(actions)


def test_params_passed_at_reset(sim, env, jitted, big):
  """Params given to `reset` replace the env's, and an env built with Params (`env` here, with
  `big`) starts and keeps them through its episodes (no randomize function)."""
  p = sim.default_params()
  assert any(not np.array_equal(np.asarray(a), np.asarray(b))
             for a, b in zip(jax.tree.leaves(p['imu']), jax.tree.leaves(big['imu'])))
  rng = jax.random.PRNGKey(9)
  s_nom = env.unwrapped.reset(rng, p)   # eager: the eager check compiled its operations
  s_big = jitted[0](rng)
  want, _ = reference_obs(sim, big, rng)
  np.testing.assert_allclose(np.asarray(s_big.obs), want, rtol=1e-6, atol=1e-6)
  want_nom, _ = reference_obs(sim, p, rng)
  np.testing.assert_allclose(np.asarray(s_nom.obs), want_nom, rtol=1e-6, atol=1e-6)
  gyro = slice(4, 7)
  assert np.max(np.abs(np.asarray(s_big.obs[gyro]) - np.asarray(s_nom.obs[gyro]))) > 0.05
  for a, b in zip(jax.tree.leaves(s_nom.info['params']), jax.tree.leaves(p)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  s = s_big
  for _ in range(EPISODE + 1):   # through an auto-reset
    s = jitted[1](s, jnp.zeros(1))
  assert int(s.info['episode']) == 1
  for a, b in zip(jax.tree.leaves(s.info['params']), jax.tree.leaves(big)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_randomize_draws_params_per_reset(sim, variant):
  """`randomize` draws the gyro bias per reset from the manifest's Params; the rest stay the
  manifest's."""
  p = sim.default_params()
  p0 = variant.reset(jax.random.PRNGKey(0)).info['params']
  p1 = variant.reset(jax.random.PRNGKey(1)).info['params']
  assert any(not np.array_equal(np.asarray(a), np.asarray(b))
             for a, b in zip(jax.tree.leaves(p0['imu']), jax.tree.leaves(p1['imu'])))
  for params in (p0, p1):
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    for (path, a), b in zip(flat, jax.tree.leaves(p)):
      if not train_ppo.GYRO_BIAS.search(jax.tree_util.keystr(path)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=str(path))


def test_privileged_observation(variant):
  s = variant.reset(jax.random.PRNGKey(0))
  assert variant.observation_size == {'state': (12,),
                                      'privileged_state': (12 + s.info['truth'].shape[0],)}
  np.testing.assert_array_equal(np.asarray(s.obs['privileged_state'][12:]),
                                np.asarray(s.info['truth']))


def test_unknown_observed_component(sim, variant):
  import dataclasses
  with pytest.raises(ValueError, match=r"Task.observe: no component 'hipp'; components: hip, imu"):
    FibrilEnv(sim, dataclasses.replace(variant.task, observe={'hipp': None}))
