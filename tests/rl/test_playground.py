"""The RL env built from MuJoCo Playground envs (`fibril_mjx.rl.playground.from_playground`,
`fibril_mjx.rl.playground`) and its auto-reset (`fibril_mjx.rl.wrappers.wrap_for_training`).

Envs: Playground's own dm_control_suite `CartpoleBalance` and `AcrobotSwingup` (assets in the
wheel), MJX-JAX. References: the unwrapped env itself under Playground's own
`wrap_for_brax_training` (its observations, and its physics replayed with the controls the
adapters wrote), a shifted / held copy of the env's own observation sequence computed here,
binomial standard errors for lost commands, and the closed-form mean and variance of a uniform
draw for the per-episode device draws.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

registry = pytest.importorskip('mujoco_playground').registry
from mujoco_playground import wrapper as pg_wrapper   # noqa: E402
from fibril_mjx.errors import ConfigError, ConfigErrors   # noqa: E402
from fibril_mjx.rl import playground as pg   # noqa: E402
from fibril_mjx.rl import wrappers   # noqa: E402
from fibril_mjx.rl.env import FibrilEnv   # noqa: E402
from fibril_mjx.rl.playground import from_playground   # noqa: E402

N, T = 32, 24   # envs, env steps
JAX = {'impl': 'jax'}


def cart(**config):
  """A cartpole manifest: a torque motor adapter on `slide`, its feedback on obs 0 and 3."""
  return {'components': [{'id': 'cart', 'type': 'fibril_sim/motor',
                          'config': {'actuator': 'slide', 'application_period_s': 0.01,
                                     **config}}],
          'observe': [{'obs': [0, 1], 'component': 'cart', 'field': 'position'},
                      {'obs': [3, 4], 'component': 'cart', 'field': 'velocity'}],
          'act': [{'actuator': 'slide', 'component': 'cart', 'command': 'effort',
                   'scale': 10.0}]}


@pytest.fixture(scope='module')
def cartpole():
  return registry.load('CartpoleBalance', config_overrides=JAX)


def actions(seed=1, n=N, t=T):
  return jax.random.uniform(jax.random.PRNGKey(seed), (t, n, 1), jnp.float32, -1.0, 1.0)


def rollout(env, acts, seed=0, batched=False):
  """`n` envs vmapped (`batched`: the env is a batch already), `t` steps scanned: `(obs
  (t, n, k), reward, env_obs, ctrl (t, n, nu))`; env_obs and ctrl only for a `FibrilEnv`."""
  keys = jax.random.split(jax.random.PRNGKey(seed), acts.shape[1])
  return run_keys(env, acts, keys, batched)


def run_keys(env, acts, keys, batched):
  reset, step = (env.reset, env.step) if batched else (jax.vmap(env.reset), jax.vmap(env.step))

  @jax.jit
  def run(keys, acts):
    s = reset(keys)

    def body(s, a):
      s = step(s, a)
      dev = s.info.get(pg.KEY)
      extra = () if dev is None else (dev['env_obs'], dev['ps'].ctrl)
      return s, (s.obs, s.reward) + extra
    return jax.lax.scan(body, s, acts)[1]
  return jax.tree.map(np.asarray, run(keys, acts))


def test_devices_off_equal_the_env_under_wrap_for_brax_training(cartpole):
  """Every term off: under `wrappers.wrap_for_training` (vmap, episodes, auto-reset with
  device redraws) observations and rewards equal the env's own under Playground's own
  `wrap_for_brax_training` (its cached auto-reset), for cartpole and acrobot."""
  acro = registry.load('AcrobotSwingup', config_overrides=JAX)
  acro_man = {'components': [{'id': 'elbow', 'type': 'fibril_sim/motor',
                              'config': {'actuator': 'elbow', 'application_period_s': 0.01}}],
              'observe': [{'obs': [5, 6], 'component': 'elbow', 'field': 'velocity'}],
              'act': [{'actuator': 'elbow', 'component': 'elbow', 'command': 'effort',
                       'scale': 2.0}]}
  for env, man in ((cartpole, cart()), (acro, acro_man)):
    dev = from_playground(env, man)
    assert isinstance(dev, FibrilEnv) and dev.observation_size == env.observation_size
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    # Playground's wrapper resets the env with `vmap(split)(keys)[..., 1]` (its last axis)
    ref = run_keys(pg_wrapper.wrap_for_brax_training(env, episode_length=7),
                   actions(n=4, t=10), keys, True)   # an auto-reset inside the run
    got = run_keys(wrappers.wrap_for_training(dev, episode_length=7), actions(n=4, t=10),
                   jax.vmap(jax.random.split)(keys)[..., 1], True)
    out = [ref, got]
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=0, atol=1e-6)


def test_feedback_latency_command_latency_and_loss(cartpole):
  """Feedback 3 ticks late: obs 0 / 3 are the env's own from 3 steps before. Commands 2 ticks
  late and lost with p = 0.3: the applied control is the action of 2 steps before when that
  command arrived, else the held one; arrivals are Binomial(n, 0.7). The env's physics is
  untouched: the bare env driven by the recorded controls gives the same truth."""
  p = 0.3
  dev = from_playground(cartpole, cart(feedback_latency_s=0.03, command_latency_s=0.02,
                                    command_loss_probability=p))
  acts = actions()
  obs, _, truth, ctrl = rollout(dev, acts)
  # feedback: step i (tick i + 1) delivers the sample of tick i + 1 − 3
  np.testing.assert_allclose(obs[3:, :, [0, 3]], truth[:-3, :, [0, 3]], rtol=0, atol=1e-7)
  np.testing.assert_allclose(obs[:, :, [1, 2, 4]], truth[:, :, [1, 2, 4]], rtol=0, atol=0)
  assert np.abs(obs[3:, :, 0] - truth[3:, :, 0]).max() > 1e-4   # it did lag
  # commands: applied at step i is the action of step i − 2 (arrived) or the previous control
  a = acts[..., 0]
  c = ctrl[..., 0]
  arrived = np.isclose(c[2:], a[:-2], atol=1e-6)
  held = np.isclose(c[2:], c[1:-1], atol=1e-7)
  assert np.all(arrived | held)
  assert np.all(c[:2] == 0.0)   # nothing arrives before the latency (safe effort 0)
  n = arrived.size
  se = np.sqrt(p * (1 - p) / n)
  assert abs(arrived.mean() - (1 - p)) < 4 * se, (arrived.mean(), se)
  # the env's own physics under the recorded controls
  ref = rollout(cartpole, ctrl)
  np.testing.assert_allclose(truth, ref[0], rtol=0, atol=1e-5)


def test_feedback_period_holds_values_and_privileged_obs_keeps_the_truth(cartpole):
  """Feedback every 3 ticks: between acquisitions the delivered value is held. With
  `privileged_obs` the critic's `privileged_state` is the env's own observation."""
  dev = from_playground(cartpole, cart(feedback_period_s=0.03), privileged_obs=True)
  assert dev.observation_size == {'state': (5,), 'privileged_state': (5,)}
  obs, _, truth, _ = rollout(dev, actions(n=4))
  np.testing.assert_array_equal(obs['privileged_state'], truth)
  obs = obs['state']
  ticks = np.arange(1, T + 1)
  acquired = (ticks // 3) * 3 - 1   # step index of the last acquisition tick (tick 0: reset)
  ok = acquired >= 0
  np.testing.assert_allclose(obs[ok][:, :, 0], truth[acquired[ok]][:, :, 0], rtol=0,
                             atol=1e-7)
  assert np.abs(obs[ok][:, :, 0] - truth[ok][:, :, 0]).max() > 1e-4   # it did hold


LOW, HIGH = 0.5, 1.5   # the per-episode draw of cart.feedback_current_per_force
EPISODE = 3            # env steps per episode
REDRAW_ENVS, REDRAW_STEPS = 256, 9   # 256 envs x 3 episodes = 768 draws


def test_auto_reset_redraws_the_devices_at_episode_boundaries_only(cartpole, monkeypatch):
  """Under `wrap_for_training` a Params draw holds through an episode and changes at every
  boundary; the draws are Uniform(LOW, HIGH) (mean and variance within 4 standard errors of
  the closed form); a restarted episode starts from the env's reset state; the env's `reset`
  is not in the traced step (the restart redraws the devices only)."""
  man = {**cart(feedback_latency_s=0.01),
         'vary': {'cart.feedback_current_per_force': {'dist': 'uniform', 'low': LOW,
                                                       'high': HIGH},
                  'cart.feedback_latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.03}}}
  dev = from_playground(cartpole, man)
  w = wrappers.wrap_for_training(dev, episode_length=EPISODE)
  own_reset = cartpole.reset
  traced = []
  monkeypatch.setattr(cartpole, 'reset', lambda rng: traced.append(1) or own_reset(rng))
  acts = actions(n=REDRAW_ENVS, t=REDRAW_STEPS)

  def draws(s):
    d = s.info[pg.KEY]
    return (d['params']['cart'].feedback_current_per_force, d['env_obs'], s.info['episode'])

  @jax.jit
  def run(keys):
    s = w.reset(keys)
    return draws(s), jax.lax.scan(lambda s, a: (w.step(s, a),) * 2, s, acts)[1]
  keys = jax.random.split(jax.random.PRNGKey(3), REDRAW_ENVS)
  first, steps = run(keys)
  assert len(traced) == 1   # traced once: in `w.reset`, not in the step
  x0, obs0, _ = jax.tree.map(np.asarray, first)
  x, obs, episode = jax.tree.map(np.asarray, draws(steps))
  x = np.concatenate([x0[None], x])                       # (steps + 1, envs)
  episode = np.concatenate([np.zeros((1, REDRAW_ENVS), int), episode])
  np.testing.assert_array_equal(episode[:, 0], np.arange(REDRAW_STEPS + 1) // EPISODE)
  boundary = np.diff(episode, axis=0) > 0
  change = np.diff(x, axis=0) != 0
  np.testing.assert_array_equal(change, boundary)         # changes exactly at the boundaries
  # the restart's physics is the cached reset state: the env's own observation of step 0
  for t in np.flatnonzero(boundary[:, 0]):
    np.testing.assert_array_equal(obs[t], obs0)
  # one draw per env and episode: Uniform(LOW, HIGH)
  per_episode = x[::EPISODE].ravel()
  n = per_episode.size
  mean, var = (LOW + HIGH) / 2, (HIGH - LOW) ** 2 / 12
  assert abs(per_episode.mean() - mean) < 4 * np.sqrt(var / n), per_episode.mean()
  # var of the sample variance of a uniform: (mu4 - var^2) / n, mu4 = (b - a)^4 / 80
  se_var = np.sqrt(((HIGH - LOW) ** 4 / 80 - var ** 2) / n)
  assert abs(per_episode.var() - var) < 4 * se_var, per_episode.var()
  assert per_episode.min() >= LOW and per_episode.max() <= HIGH
  assert len(np.unique(per_episode)) == n                  # every episode its own draw


def test_the_env_randomization_fn_keeps_the_devices(cartpole):
  """With the env's own `randomization_fn` (here the slider damping, + 5 per env) the batch is
  Playground's domain-randomization vmap over this env: the devices stay (the cart position
  is delivered 3 steps late) and each env steps on its own model (env 0's is the nominal
  one: its truth equals the run without randomization, env 3's does not)."""
  n = 4
  dev = from_playground(cartpole, cart(feedback_latency_s=0.03))

  def rand(mx):
    damping = mx.dof_damping + 5.0 * jnp.arange(n, dtype=jnp.float32)[:, None]
    axes = jax.tree.map(lambda _: None, mx).tree_replace({'dof_damping': 0})
    return mx.tree_replace({'dof_damping': damping}), axes
  keys = jax.random.split(jax.random.PRNGKey(0), n)
  acts = actions(n=n, t=12)
  obs, _, truth, _ = run_keys(wrappers.wrap_for_training(dev, 100, randomization_fn=rand),
                              acts, keys, True)
  _, _, nominal, _ = run_keys(wrappers.wrap_for_training(dev, 100), acts, keys, True)
  np.testing.assert_allclose(obs[3:, :, 0], truth[:-3, :, 0], rtol=0, atol=1e-7)
  np.testing.assert_allclose(truth[:, 0], nominal[:, 0], rtol=0, atol=1e-6)
  assert np.abs(truth[:, 3] - nominal[:, 3]).max() > 1e-4


@pytest.mark.parametrize('change, message', [
    ({'observe': [{'obs': [0, 1], 'component': 'kart', 'field': 'position'}]},
     "manifest: observe[0].component = 'kart': no component of that id"),
    ({'observe': [{'obs': [0, 1], 'component': 'cart', 'field': 'angle'}]},
     "manifest: observe[0].field = 'angle': not a field of cart's sample"),
    ({'observe': [{'obs': [4, 6], 'component': 'cart', 'field': 'position'}]},
     'manifest: observe[0].obs = [4, 6]: a range [start, stop) inside the observation'),
    ({'act': [{'actuator': 'slider', 'component': 'cart'}]},
     "manifest: act[0].actuator = 'slider': no actuator of that name"),
    ({'act': []}, "manifest: act = 'cart': every actuator component needs an act: entry"),
    ({'model': 'x.xml'}, "manifest: model = 'x.xml': the model is the env's own MJCF"),
    ({'vary': {'joint:slider.damping': {'dist': 'uniform', 'low': 0.0, 'high': 1.0}}},
     "manifest: vary.joint:slider.damping = 'joint:slider.damping': "
     'from_playground varies the devices only'),
])
def test_manifest_errors(cartpole, change, message):
  with pytest.raises((ConfigError, ConfigErrors)) as e:
    from_playground(cartpole, {**cart(), **change})
  assert message in str(e.value), str(e.value)
