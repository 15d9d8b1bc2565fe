"""Per-episode device randomization of the RL env (`FibrilEnv(vary=)`, `fibril_mjx.rl.randomize`,
`fibril_mjx.rl.wrappers.AutoReset`).

References: the campaign's own host sampler (`fibril_mjx.builder.vary.sample`, float64) for
the draws of an episode whose world key is a campaign world's key; a closed-form mean / std of
a normal over many episodes; `Simulation.reset` / `run` with the same Params, model fields,
initial offset and latencies (set here through the simulator's public API, not the env's
helpers) for the observations after several steps.

Compile cost: one env (one jitted reset and step under the episode wrappers, used by every
check of a single world) and one batch of draws (4000 campaign-world keys, for the sampler
comparison and the closed-form moments alike).
"""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fibril_mjx
from fibril_mjx.errors import ConfigError, ConfigErrors
from fibril_mjx.rl.env import FibrilEnv, wrap
from fibril_mjx.builder import vary as fl
from fibril_mjx.batch.simulation import Options, Start

REPO = pathlib.Path(__file__).resolve().parents[2]
EPISODE = 7   # steps: an episode holds the 6 steps compared with `Simulation` below
N_DRAWS = 4000   # episodes drawn (campaign worlds 0 … N_DRAWS − 1)
SEED = 7
spec = importlib.util.spec_from_file_location('train_ppo', REPO / 'examples' / 'train_ppo.py')
train_ppo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train_ppo)

VARY = {
    'imu.angular_velocity_bias': {'dist': 'normal', 'mean': 0.0, 'std': [0.05, 0.02, 0.03]},
    'imu.angular_velocity_misalignment': {'dist': 'uniform', 'low': -0.02, 'high': 0.02},
    'imu.angular_velocity_scale': {'dist': 'truncated_normal', 'mean': 1.0, 'std': 0.02,
                                   'low': 0.97, 'high': 1.05},
    'imu.angular_velocity_bias_turn_on_stddev': {'dist': 'uniform', 'low': 0.01, 'high': 0.02},
    'imu.latency_s': {'dist': 'choice', 'values': [0.0, 0.002, 0.003]},
    'hip.feedback_latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.004},
    'joint:hip.damping': {'dist': 'lognormal', 'mu': 0.0, 'sigma': 0.3, 'relative': True},
    'initial:qpos.hip': {'dist': 'uniform', 'low': -0.2, 'high': 0.2},
}


@pytest.fixture(scope='module')
def sim():
  return fibril_mjx.load(REPO / 'manifests' / 'rl' / 'leg_hold.yaml')


@pytest.fixture(scope='module')
def env(sim):
  task = train_ppo.make_env(sim, episode_length=EPISODE, randomize=False).task
  return FibrilEnv(sim, task, vary=VARY)


@pytest.fixture(scope='module')
def wrapped(env):
  w = wrap(env, EPISODE)
  return w, jax.jit(w.reset), jax.jit(w.step)


def campaign_key(seed, w):
  return jax.random.fold_in(jax.random.PRNGKey(seed), w)


@pytest.fixture(scope='module')
def draws(env):
  """`{path: (N_DRAWS, ...)}` draws of the episodes whose world keys are campaign worlds
  0 … N_DRAWS − 1 of seed SEED."""
  keys = jax.vmap(lambda w: campaign_key(SEED, w))(jnp.arange(N_DRAWS, dtype=jnp.uint32))
  return {k: np.asarray(v, np.float64)
          for k, v in jax.jit(jax.vmap(env.randomization.draw))(keys).items()}


def test_draws_match_the_campaign_sampler(env, draws):
  """An episode whose world key is campaign world w's key draws that world's values."""
  seed, worlds = SEED, np.arange(N_DRAWS)
  assert [f.path for f in env.randomization.fields] == list(VARY)
  for f in env.randomization.fields:
    want, _ = fl.sample(f, seed, worlds)
    got = draws[f.path]
    assert got.shape == want.shape, f.path
    # float32 transforms: a few float32 roundings of the field's scale
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=4e-7 * np.max(np.abs(want)),
                               err_msg=f.path)
    assert len(np.unique(got.reshape(len(worlds), -1)[:, 0])) > 2, f.path   # they vary


def test_normal_draws_closed_form(draws):
  """Mean and std of the normal bias over 4000 episodes, within 4 standard errors."""
  n = N_DRAWS
  x = draws['imu.angular_velocity_bias']
  assert x.shape == (n, 3)
  std = np.array([0.05, 0.02, 0.03])
  assert np.all(np.abs(x.mean(0)) < 4 * std / np.sqrt(n))
  assert np.all(np.abs(x.std(0) - std) < 4 * std / np.sqrt(2 * n))


def test_compiled_in_set_follows_vary(sim, env):
  """Varied Params terms that the manifest leaves at the default are compiled in; the latency
  queues are sized for the distributions' upper bounds."""
  out = set(sim.components['imu'].compiled_out())
  for name in ('angular_velocity_misalignment', 'angular_velocity_scale'):
    assert name in out and name not in env.sim.components['imu'].compiled_out()
    assert name in env.sim.built.vary['imu']
  assert env.sim.components['imu'].transport.latency_s == pytest.approx(0.003)
  assert env.sim.components['hip'].fb_transport.latency_s == pytest.approx(0.004)
  # without vary nothing is rebuilt
  plain = FibrilEnv(sim, env.task)
  assert plain.sim is sim and plain.randomization is None


def turn_on(ps):
  flat = jax.tree_util.tree_flatten_with_path(ps.components['imu'])[0]
  return [np.asarray(x) for p, x in flat if 'turn_on' in jax.tree_util.keystr(p)]


def test_redrawn_at_auto_reset_and_persistent_within_an_episode(wrapped):
  """Brax's AutoResetWrapper would replay the first draws; AutoReset redraws them (the
  env's reset of fold_in(key, episode)) and they hold through the episode."""
  w, reset, step = wrapped
  rng = jax.random.PRNGKey(5)
  s = reset(rng)
  episodes = [[s]]
  for _ in range(3 * EPISODE):
    s = step(s, jnp.array([0.2]))
    if float(s.done):
      episodes.append([s])      # the state after an auto-reset starts the next episode
    else:
      episodes[-1].append(s)
  assert [len(e) for e in episodes] == [EPISODE, EPISODE, EPISODE, 1]
  for e, states in enumerate(episodes):
    first = states[0]
    assert int(first.info['episode']) == e
    for st in states[1:]:
      for k, v in first.info['draws'].items():
        np.testing.assert_array_equal(np.asarray(st.info['draws'][k]), np.asarray(v))
      for a, b in zip(jax.tree.leaves(st.info['params']), jax.tree.leaves(first.info['params'])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
      for a, b in zip(turn_on(st.pipeline_state), turn_on(first.pipeline_state)):
        np.testing.assert_array_equal(a, b)
  for a, b in zip(episodes[:-1], episodes[1:]):
    x, y = a[0], b[0]
    assert not np.array_equal(np.asarray(x.info['draws']['imu.angular_velocity_bias']),
                              np.asarray(y.info['draws']['imu.angular_velocity_bias']))
    assert not np.array_equal(turn_on(x.pipeline_state)[0], turn_on(y.pipeline_state)[0])
  # the restarted state is the env's own reset of the folded key, with its observation
  # (the wrappers' reset adds only their `info` entries)
  fresh = reset(jax.random.fold_in(rng, 1))
  np.testing.assert_array_equal(np.asarray(episodes[1][0].obs), np.asarray(fresh.obs))
  for a, b in zip(jax.tree.leaves(episodes[1][0].pipeline_state),
                  jax.tree.leaves(fresh.pipeline_state)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert int(episodes[1][0].pipeline_state.tick) == 4


def test_no_retrace_on_a_second_call(wrapped):
  _, reset, step = wrapped
  s = reset(jax.random.PRNGKey(0))
  s = step(s, jnp.array([0.1]))
  s = step(s, jnp.array([-0.1]))
  reset(jax.random.PRNGKey(1))
  assert step._cache_size() == 1 and reset._cache_size() == 1


def test_observations_equal_the_simulation_with_the_same_draws(env, wrapped):
  """k env steps (k = 6, one episode: no auto-reset) = `Simulation.reset` + `run` of the
  rebuilt simulator with the episode's Params (set by field name), joint damping (a per-world
  model field), initial offset and latencies (seconds, rounded on the host), for the same
  commands."""
  sim = env.sim
  _, reset, step = wrapped
  rng = jax.random.PRNGKey(4)
  actions = [0.7, -0.4, 0.1, 1.0, -0.2, 0.5]
  assert len(actions) < EPISODE
  s = reset(rng)
  draws = {k: np.asarray(v) for k, v in s.info['draws'].items()}
  obs = []
  for a in actions:
    s = step(s, jnp.array([a]))
    assert float(s.done) == 0.0
    obs.append(np.asarray(s.obs))
  k_world = jax.random.split(rng, 4)[0]
  p = sim.default_params()
  imu = sim.components['imu']
  for name in ('angular_velocity_bias', 'angular_velocity_misalignment',
               'angular_velocity_scale', 'angular_velocity_bias_turn_on_stddev'):
    p['imu'] = imu.set_param(p['imu'], name, jnp.asarray(draws[f'imu.{name}']))
  pb = jax.tree.map(lambda x: np.asarray(x)[None], p)
  damping = np.array(sim.mx.dof_damping)[None] * 0 + draws['joint:hip.damping']
  model = {'dof_damping': jnp.asarray(damping, jnp.float32)}
  # seconds as the campaign gives them (the float32 draw of 3 ms is 3 ms + 2.6e-11 s)
  latency = {'imu': {'latency_s': round(float(draws['imu.latency_s']), 9)},
             'hip': {'feedback_latency_s': round(float(draws['hip.feedback_latency_s']), 9)}}
  start = Start(latency=latency,
                qpos_offset=jnp.asarray(draws['initial:qpos.hip']).reshape(1, 1))
  ps = sim.reset(pb, np.asarray(k_world)[None], model=model, start=start)
  ps, _, _ = sim.run(pb, ps, 4, model=model, options=Options(record=False))
  null = sim.null_commands()['hip']
  goal = float(s.info['goal'])
  for i, a in enumerate(actions):
    cmd = train_ppo._commands(jnp.array([a]))['hip']
    trace = {'hip': jax.tree.map(
        lambda c, z: np.concatenate([np.asarray(c, z.dtype)[None],   # numpy: no compiles
                                     np.broadcast_to(z, (4,) + z.shape)])[:, None], cmd, null)}
    ps, _, _ = sim.run(pb, ps, 5, commands=trace, model=model, options=Options(record=False))
    out = jax.tree.map(lambda x: np.asarray(x[0]), sim.outputs(ps))
    hip, im = out['sensor']['hip'], out['sensor']['imu']
    want = np.concatenate([
        [hip.sample.position, hip.sample.velocity, hip.sample.applied_effort, hip.new_data],
        im.sample.angular_velocity, im.sample.linear_acceleration, [im.new_data],
        [goal]]).astype(np.float32)
    np.testing.assert_allclose(obs[i], want, rtol=1e-5, atol=1e-6, err_msg=f'step {i}')
  assert int(ps.tick) == 4 + 5 * len(actions)


def test_user_errors(sim, env):
  task = env.task
  with pytest.raises(ConfigError, match=r'vary\.imu\.period_s.*static config'):
    FibrilEnv(sim, task, vary={'imu.period_s': {'dist': 'choice', 'values': [0.001, 0.002]}})
  with pytest.raises(ConfigError, match=r"vary\.imu\.latency_s\.dist = 'normal': .*bounded"):
    FibrilEnv(sim, task, vary={'imu.latency_s': {'dist': 'normal', 'mean': 0.002, 'std': 1e-3}})
  with pytest.raises(ConfigErrors, match=r'vary\.imu\.angular_velocity_bias\.std = -1'):
    FibrilEnv(sim, task, vary={'imu.angular_velocity_bias': {'dist': 'normal', 'mean': 0,
                                                             'std': -1}})
  with pytest.raises(ConfigError, match=r"vary\.imu\.angular_velocty_bias.*did you mean"):
    FibrilEnv(sim, task, vary={'imu.angular_velocty_bias': {'dist': 'normal', 'mean': 0,
                                                            'std': 1}})


def test_sync_vmap_equals_brax_vmap(env):
  """`wrap_for_training`'s batch keeps one tick and one set of clocks (SyncVmap: envs in step)
  and gives the observations, rewards and draws of Brax's VmapWrapper, across auto-resets."""
  from brax.envs.wrappers import training
  from fibril_mjx.rl import wrappers
  sync = wrappers.wrap_for_training(env, EPISODE)
  plain = wrappers.AutoReset(training.EpisodeWrapper(training.VmapWrapper(env), EPISODE, 1))
  keys = jax.random.split(jax.random.PRNGKey(2), 3)
  actions = jnp.array([[0.5], [-0.3], [0.1]])
  states = {}
  for name, w in (('sync', sync), ('plain', plain)):
    step = jax.jit(w.step)
    s, seen = jax.jit(w.reset)(keys), []
    for _ in range(2 * EPISODE + 1):
      s = step(s, actions)
      seen.append(s)
    states[name] = seen
  assert states['sync'][0].pipeline_state.tick.shape == ()
  assert states['plain'][0].pipeline_state.tick.shape == (3,)
  for a, b in zip(states['sync'], states['plain']):
    np.testing.assert_allclose(np.asarray(a.obs), np.asarray(b.obs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(a.reward), np.asarray(b.reward), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(a.done), np.asarray(b.done))
    np.testing.assert_array_equal(np.asarray(a.info['draws']['imu.latency_s']),
                                  np.asarray(b.info['draws']['imu.latency_s']))
    assert np.all(np.asarray(b.pipeline_state.tick) == int(a.pipeline_state.tick))
  assert float(states['sync'][EPISODE - 1].done[0]) == 1.0
