"""Fibril devices on MuJoCo Playground envs (`fibril_mjx.rl.playground.DeviceEnv`).

Envs: Playground's own dm_control_suite `CartpoleBalance` and `AcrobotSwingup` (assets in the
wheel), MJX-JAX. References: the unwrapped env itself (its observations, and its physics
replayed with the controls the adapters wrote), a shifted / held copy of the env's own
observation sequence computed here, and binomial / multinomial standard errors for the
probabilistic terms.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

registry = pytest.importorskip('mujoco_playground').registry
from fibril_mjx.errors import ConfigError, ConfigErrors   # noqa: E402
from fibril_mjx.rl import playground as pg   # noqa: E402

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
  (t, n, k), reward, env_obs, ctrl (t, n, nu))`; env_obs and ctrl only for a `DeviceEnv`."""
  keys = jax.random.split(jax.random.PRNGKey(seed), acts.shape[1])
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
  """Every term off: observations and rewards equal the env's own, under Playground's own
  `wrap_for_brax_training` (vmap, episodes, auto-reset), for cartpole and acrobot."""
  acro = registry.load('AcrobotSwingup', config_overrides=JAX)
  acro_man = {'components': [{'id': 'elbow', 'type': 'fibril_sim/motor',
                              'config': {'actuator': 'elbow', 'application_period_s': 0.01}}],
              'observe': [{'obs': [5, 6], 'component': 'elbow', 'field': 'velocity'}],
              'act': [{'actuator': 'elbow', 'component': 'elbow', 'command': 'effort',
                       'scale': 2.0}]}
  for env, man in ((cartpole, cart()), (acro, acro_man)):
    dev = pg.DeviceEnv(env, man)
    assert dev.observation_size == env.observation_size
    out = []
    for e in (env, dev):
      w = pg.wrap_for_brax_training(e, episode_length=7)   # an auto-reset inside the run
      out.append(rollout(w, actions(n=4, t=10), batched=True))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=0, atol=1e-6)


def test_feedback_latency_command_latency_and_loss(cartpole):
  """Feedback 3 ticks late: obs 0 / 3 are the env's own from 3 steps before. Commands 2 ticks
  late and lost with p = 0.3: the applied control is the action of 2 steps before when that
  command arrived, else the held one; arrivals are Binomial(n, 0.7). The env's physics is
  untouched: the bare env driven by the recorded controls gives the same truth."""
  p = 0.3
  dev = pg.DeviceEnv(cartpole, cart(feedback_latency_s=0.03, command_latency_s=0.02,
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
  dev = pg.DeviceEnv(cartpole, cart(feedback_period_s=0.03), privileged_obs=True)
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
     "manifest: vary.joint:slider.damping = 'joint:slider.damping': DeviceEnv varies the "
     'devices only'),
])
def test_manifest_errors(cartpole, change, message):
  with pytest.raises((ConfigError, ConfigErrors)) as e:
    pg.DeviceEnv(cartpole, {**cart(), **change})
  assert message in str(e.value), str(e.value)
