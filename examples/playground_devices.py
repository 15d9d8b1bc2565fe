"""The sim-to-sim gap a device model reveals, on a MuJoCo Playground task (`.[playground]`).

Trains Playground's `CartpoleBalance` (MJX-JAX) with Brax PPO twice at a CPU-sized budget —
on the env as it is (ideal observations, actions straight to `ctrl`; Playground's own
`wrap_for_brax_training`) and as `fibril_mjx.rl.playground.from_playground` (the cart motor
adapter: command latency and loss, a feedback latency drawn per episode, its feedback on the cart position /
velocity entries; `fibril_mjx.rl.wrappers.wrap_for_training`, which redraws the devices at every
episode boundary). Then evaluates both policies, each under
the ideal env and under the device model with per-episode variation (`EVAL_VARY`, a campaign's
`vary:` syntax) and faults (command loss): mean return and the failure rate (the pole falls
past `FALL_COS` or the cart leaves `CART_LIMIT_M` at any step, read from the true state) with
95 % Wilson intervals (docs/tutorials/playground.md reads the table). `--small`: a few
thousand steps, 8 evaluation episodes (the test suite's run).

    .venv/bin/python examples/playground_devices.py   # 12 M steps per policy, 256 episodes
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from mujoco_playground import registry, wrapper

import fibril_mjx
from fibril_mjx.analysis.stats.proportion import wilson
from fibril_mjx.rl import wrappers
from fibril_mjx.rl.env import FibrilEnv
from fibril_mjx.rl.playground import KEY, from_playground

REPO = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location('train_ppo', REPO / 'examples' / 'train_ppo.py')
train_ppo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train_ppo)

FALL_COS = 0.8          # cos of the pole angle below which the episode failed (37 deg)
CART_LIMIT_M = 1.5      # |cart position| above which it failed
MOTOR = {'actuator': 'slide', 'application_period_s': 0.01, 'command_latency_s': 0.02,
         'command_loss_probability': 0.05, 'feedback_latency_s': 0.01, 'timeout_s': 0.1}
OBSERVE = [{'obs': [0, 1], 'component': 'cart', 'field': 'position'},
           {'obs': [3, 4], 'component': 'cart', 'field': 'velocity'}]
ACT = [{'actuator': 'slide', 'component': 'cart', 'command': 'effort', 'scale': 10.0}]
TRAIN_VARY = {'cart.feedback_latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.03}}
# evaluation: longer lags and more command loss than trained on (a worse unit, a busy bus)
EVAL_MOTOR = {**MOTOR, 'command_loss_probability': 0.2}
EVAL_VARY = {'cart.feedback_latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.05},
             'cart.command_latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.04}}


def manifest(motor, vary):
  return {'components': [{'id': 'cart', 'type': 'fibril_sim/motor', 'config': motor}],
          'observe': OBSERVE, 'act': ACT, 'vary': vary}


# Brax PPO settings: Playground's recipe for this task
# (`dm_control_suite_params.brax_ppo_config('CartpoleBalance')`: reward scaling 10, entropy
# 1e-2, normalized observations) at a CPU budget: 256 envs, a lower learning rate and a clipped
# gradient norm. `num_evals` sets how Brax splits the steps into iterations, so it is part of
# the recipe (13: the run docs/tutorials/playground.md reports)
PPO = dict(num_envs=256, batch_size=256, num_minibatches=8, unroll_length=20,
           num_updates_per_batch=8, discounting=0.99, learning_rate=3e-4, entropy_cost=1e-2,
           reward_scaling=10.0, max_grad_norm=1.0, normalize_observations=True, num_evals=13,
           num_eval_envs=16, deterministic_eval=True)
HIDDEN = (32, 32)       # policy and value MLPs


def train(env, timesteps, seed, episode_length, num_envs):
  """Brax PPO (`PPO`, with `num_envs` envs = the batch size) under Playground's
  `wrap_for_brax_training` (the env as it is) or `wrappers.wrap_for_training` (a `FibrilEnv`):
  `(make_policy, params)`."""
  train_ppo.brax_jax_compat()
  from brax.training.agents.ppo import networks as ppo_networks
  from brax.training.agents.ppo import train as ppo
  network = functools.partial(ppo_networks.make_ppo_networks,
                              policy_hidden_layer_sizes=HIDDEN, value_hidden_layer_sizes=HIDDEN)
  make_policy, params, _ = ppo.train(
      environment=env, num_timesteps=timesteps, episode_length=episode_length,
      **{**PPO, 'num_envs': num_envs, 'batch_size': num_envs}, network_factory=network,
      seed=seed, wrap_env_fn=(wrappers.wrap_for_training if isinstance(env, FibrilEnv)
                              else wrapper.wrap_for_brax_training))
  return make_policy, params


def evaluate(env, policy, n, length, seed):
  """`(returns (n,), failed (n,) bool, worst pole angle (n,) deg)` of `n` episodes of `length`
  steps (deterministic policy), from the true state (the env's own observation)."""
  keys = jax.random.split(jax.random.PRNGKey(seed), n)

  @jax.jit
  def run(keys):
    s = jax.vmap(env.reset)(keys)

    def body(carry, _):
      s, ret, failed, worst = carry
      a, _ = jax.vmap(policy)(s.obs, keys)
      s = jax.vmap(env.step)(s, a)
      truth = s.info[KEY]['env_obs'] if KEY in s.info else s.obs
      bad = (truth[:, 1] < FALL_COS) | (jnp.abs(truth[:, 0]) > CART_LIMIT_M)
      angle = jnp.degrees(jnp.arctan2(jnp.abs(truth[:, 2]), truth[:, 1]))
      return (s, ret + s.reward, failed | bad, jnp.maximum(worst, angle)), None
    z = jnp.zeros(n)
    return jax.lax.scan(body, (s, z, z.astype(bool), z), None, length=length)[0][1:]
  ret, failed, worst = run(keys)
  return np.asarray(ret), np.asarray(failed), np.asarray(worst)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--timesteps', type=int, default=12_000_000)
  ap.add_argument('--episode-length', type=int, default=200)
  ap.add_argument('--envs', type=int, default=256, help='PPO training envs (= batch size)')
  ap.add_argument('--eval-envs', type=int, default=256)
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument('--small', action='store_true',
                  help='12 PPO iterations of 640 steps, 4 envs, 8 evaluation episodes of 8 steps '
                       '(a smoke run)')
  args = ap.parse_args(argv)
  if args.small:
    args.timesteps, args.envs, args.eval_envs, args.episode_length = 640, 4, 8, 8
  fibril_mjx.cpu_flags(1, bitwise=False)
  env = registry.load('CartpoleBalance', config_overrides={'impl': 'jax'})
  train_envs = {'ideal': env,
                'devices': from_playground(env, manifest(MOTOR, TRAIN_VARY))}
  eval_envs = {'ideal': env, 'devices+faults': from_playground(
      env, manifest(EVAL_MOTOR, EVAL_VARY))}
  policies = {}
  for name, e in train_envs.items():
    t0 = time.perf_counter()
    make_policy, params = train(e, args.timesteps, args.seed, args.episode_length, args.envs)
    policies[name] = make_policy(params, deterministic=True)
    print(f'trained on {name}: {args.timesteps} env steps in {time.perf_counter() - t0:.0f} s',
          flush=True)
  rows = []
  print('\n| trained on | evaluated on | mean return | median worst pole angle (deg) | '
        'failure rate [95 % Wilson] |')
  print('|---|---|---|---|---|')
  for tname, pol in policies.items():
    for ename, e in eval_envs.items():
      ret, failed, worst = evaluate(e, pol, args.eval_envs, args.episode_length,
                                    args.seed + 1)
      k, n = int(failed.sum()), failed.size
      lo, hi = wilson(k, n)
      rows.append({'trained_on': tname, 'evaluated_on': ename, 'mean_return': float(ret.mean()),
                   'median_worst_angle_deg': float(np.median(worst)), 'failures': k,
                   'episodes': n, 'wilson95': (lo, hi)})
      print(f'| {tname} | {ename} | {ret.mean():.1f} | {np.median(worst):.1f} | '
            f'{k}/{n} = {k / n:.3f} '
            f'[{lo:.3f}, {hi:.3f}] |', flush=True)
  return rows


if __name__ == '__main__':
  main()
