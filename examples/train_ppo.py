"""Train the leg-hold task (manifests/rl/leg_hold.yaml) with Brax PPO and plot the learning
curve.

The policy sees the delivered RS00 feedback (position, velocity, applied effort, 5 ms CAN
cadence) and ICM-42688-P samples with their `new_data` flags, plus the commanded angle; it
commands hip effort through the `fibril_sim/motor` adapter every 5 ms. Each reset draws a new
world key (IMU noise and turn-on bias), a new target angle in [-0.6, 0.6] rad and a new nominal
gyro bias (per-reset Params); `--device-randomization` also draws transport latencies, IMU
misalignment and scale, the feedback lag and the joint damping per episode (`DEVICE_VARY`, a
campaign's `vary:` syntax). Brax's vmap and episode wrappers run the episodes, with
`fibril_mjx.rl.wrappers.AutoReset` redrawing all of it at every auto-reset.
Reward: -(q - q*)² - 0.01 a², with q the true joint angle (task `leg_hold`,
`fibril_mjx.workflows.campaign.policy.TASKS`).

`--out DIR` gets the policy checkpoint (`policy.msgpack`, `policy.json`) that a campaign's
`controller:` runs closed loop (`ENV` is the env config such a campaign file repeats: task,
observation layout, action scaling, control period; `examples/policy_robustness.py`).

    .venv/bin/python examples/train_ppo.py --timesteps 300000 --out out/ppo
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import re
import time

import jax
import jax.numpy as jnp

import fibril_mjx
from fibril_mjx.components.actuators import motor
from fibril_mjx.rl.env import FibrilEnv, Task, wrap_for_training
from fibril_mjx.workflows.campaign import policy as policy_io

MANIFEST = pathlib.Path(__file__).resolve().parents[1] / 'manifests' / 'rl' / 'leg_hold.yaml'
EFFORT_SCALE = 3.0      # N·m per unit action (gravity torque of the link is ≤ 1.5 N·m)
TASK = policy_io.TASKS['leg_hold']
TARGET_RAD = TASK.goal_range[1]
# The env config: what a campaign's `controller:` names with the checkpoint (same keys).
ENV = {'task': 'leg_hold',
       'observe': {'hip': ['position', 'velocity', 'applied_effort'],
                   'imu': ['angular_velocity', 'linear_acceleration']},
       'actions': [{'component': 'hip', 'mode': 'effort', 'scale': EFFORT_SCALE}],
       'control_period_s': 0.005}
ACTIONS = tuple((a['component'], a['mode'], a['scale']) for a in ENV['actions'])


def _commands(action):
  """The hip's effort command written out (the tests' reference for `policy_io.commands`)."""
  return {'hip': motor.command('effort', EFFORT_SCALE * jnp.clip(action[0], -1.0, 1.0))}


def _reward(out, goal, action):
  r, err = TASK.reward(out, goal, action, 'hip')
  return r, {'angle_error_rad': jnp.abs(err)}


GYRO_BIAS = re.compile(r'angular_velocity[\W_]*bias$')


def randomize_gyro_bias(rng, params, stddev=2e-3):
  """Per-episode Params: the IMU's nominal gyro bias ~ N(0, stddev²) per axis (found by its
  pytree path, `angular_velocity_bias` or `angular_velocity.bias`)."""
  flat, treedef = jax.tree_util.tree_flatten_with_path(params['imu'])
  keys = jax.random.split(rng, len(flat))
  leaves = [stddev * jax.random.normal(k, x.shape, x.dtype)
            if GYRO_BIAS.search(jax.tree_util.keystr(path)) else x
            for k, (path, x) in zip(keys, flat)]
  return {**params, 'imu': jax.tree_util.tree_unflatten(treedef, leaves)}


# Per-episode device randomization in a campaign file's `vary:` syntax (`--device-randomization`):
# transport latencies, IMU misalignment and scale, the RS00 feedback lag, joint damping.
DEVICE_VARY = {
    'imu.latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.003},
    'imu.angular_velocity_misalignment': {'dist': 'normal', 'mean': 0.0, 'std': 0.01},
    'imu.angular_velocity_scale': {'dist': 'uniform', 'low': 0.98, 'high': 1.02},
    'hip.feedback_latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.004},
    'joint:hip.damping': {'dist': 'lognormal', 'mu': 0.0, 'sigma': 0.2, 'relative': True},
}


def make_env(sim=None, *, episode_length=200, control_ticks=None, randomize=True,
             privileged_obs=False, vary=None) -> FibrilEnv:
  """The leg-hold environment (`control_ticks` ms per step at dt = 1 ms); `vary` is a
  campaign-style per-episode device randomization (e.g. `DEVICE_VARY`)."""
  sim = sim if sim is not None else fibril_mjx.load(MANIFEST)
  commands = functools.partial(policy_io.commands, sim.components, ACTIONS)
  if control_ticks is None:
    control_ticks = int(round(ENV['control_period_s'] / sim.dt))
  task = Task(
      observe={cid: tuple(f) for cid, f in ENV['observe'].items()},
      action_size=len(ACTIONS), commands=commands, reward=_reward,
      sample_goal=lambda k: jax.random.uniform(k, (), jnp.float32, -TARGET_RAD, TARGET_RAD),
      goal_obs=lambda g: jnp.reshape(g, (1,)),
      control_ticks=control_ticks, episode_length=episode_length)
  return FibrilEnv(sim, task,
                   randomize=randomize_gyro_bias if randomize else None,
                   privileged_obs=privileged_obs, vary=vary)


def brax_jax_compat() -> None:
  """brax 0.14.2 (the latest release) calls `jax.device_put_replicated`, which jax 0.10 removed
  (see its pmap migration guide). Installs an equivalent for brax's use (a copy per device on
  a leading axis, which `pmap` shards) when it is missing; nothing else of brax needed a
  change."""
  try:
    jax.device_put_replicated
  except AttributeError:
    def device_put_replicated(x, devices):
      return jax.tree.map(lambda a: jnp.broadcast_to(jnp.asarray(a), (len(devices),)
                                                     + jnp.shape(a)), x)
    jax.device_put_replicated = device_put_replicated


def train(env, *, timesteps, num_envs=64, episode_length=200, seed=0, progress=None,
          num_evals=8, hidden=(32, 32), unroll_length=10, batch_size=64, num_minibatches=4,
          num_updates_per_batch=4, num_eval_envs=64, run_evals=True, learning_rate=1e-3,
          reward_scaling=1.0):
  """Brax PPO on the one-world `env`, under Brax's `VmapWrapper` and `EpisodeWrapper` with
  `fibril_mjx.rl.wrappers.AutoReset` (new device draws at every auto-reset); returns
  `(make_policy, params, [(steps, eval reward)])`."""
  brax_jax_compat()
  from brax.training.agents.ppo import networks as ppo_networks
  from brax.training.agents.ppo import train as ppo
  curve = []

  def log(step, metrics):
    if 'eval/episode_reward' not in metrics:   # run_evals=False: training metrics only
      return
    curve.append((int(step), float(metrics['eval/episode_reward'])))
    if progress:
      progress(step, metrics)
  network = functools.partial(ppo_networks.make_ppo_networks, policy_hidden_layer_sizes=hidden,
                              value_hidden_layer_sizes=hidden)
  make_policy, params, _ = ppo.train(
      environment=env, num_timesteps=timesteps, episode_length=episode_length,
      num_envs=num_envs,
      num_eval_envs=num_eval_envs, num_evals=num_evals, learning_rate=learning_rate,
      entropy_cost=1e-3, discounting=0.97, unroll_length=unroll_length, batch_size=batch_size,
      num_minibatches=num_minibatches, num_updates_per_batch=num_updates_per_batch,
      normalize_observations=True, network_factory=network, seed=seed, progress_fn=log,
      run_evals=run_evals, wrap_env_fn=wrap_for_training, reward_scaling=reward_scaling)
  return make_policy, params, curve


def save_policy(out, env, params, *, hidden=(32, 32), training=None):
  """Writes the checkpoint a campaign's `controller:` loads (`policy.msgpack`, `policy.json`
  with the network, the env config `ENV` and `training`); returns its path."""
  vary = env.randomization is not None
  meta = {'observation_size': int(env.observation_size), 'action_size': int(env.action_size),
          'network': {'hidden': list(hidden), 'activation': 'swish',
                      'normalize_observations': True, 'distribution': 'tanh_normal'},
          'env': {**ENV, 'episode_length': env.task.episode_length,
                  'device_randomization': DEVICE_VARY if vary else None,
                  'gyro_bias_randomized': env.randomize is not None},
          'training': training or {}}
  return policy_io.save(out, params, meta)


def plot(curve, path, title):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6, 3.5))
  ax.plot([c[0] for c in curve], [c[1] for c in curve], marker='o')
  ax.set_xlabel('environment steps')
  ax.set_ylabel('eval episode reward')
  ax.set_title(title)
  ax.grid(True, alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--timesteps', type=int, default=300_000)
  ap.add_argument('--envs', type=int, default=64)
  ap.add_argument('--episode-length', type=int, default=200, help='steps of 5 ms')
  ap.add_argument('--evals', type=int, default=8)
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument('--learning-rate', type=float, default=1e-3)
  ap.add_argument('--out', default='out/ppo')
  ap.add_argument('--device-randomization', action='store_true',
                  help='per-episode device randomization (DEVICE_VARY)')
  ap.add_argument('--no-evals', action='store_true',
                  help='no evaluation episodes (faster; the learning curve is then empty)')
  ap.add_argument('--ideal', action='store_true',
                  help='no per-episode randomization at all (the nominal device; not even '
                  'the gyro bias draw)')
  args = ap.parse_args(argv)
  # before JAX computes: one XLA CPU device (Brax's PPO splits its envs over every device), the
  # host's ISA, a scan over ticks as one kernel
  fibril_mjx.cpu_flags(1, bitwise=False)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  env = make_env(episode_length=args.episode_length, randomize=not args.ideal,
                 vary=DEVICE_VARY if args.device_randomization else None)
  t0 = time.perf_counter()
  _, params, curve = train(env, timesteps=args.timesteps, num_envs=args.envs,
                      episode_length=args.episode_length, seed=args.seed, num_evals=args.evals,
                      learning_rate=args.learning_rate, run_evals=not args.no_evals,
                      progress=lambda s, m: print(f'{s:>9} steps  eval reward '
                                                  f'{float(m["eval/episode_reward"]):9.3f}  '
                                                  f'angle error '
                                                  f'{float(m.get("eval/episode_angle_error_rad", float("nan"))) / args.episode_length:.3f} rad'
                                                  f'  ({time.perf_counter() - t0:.0f} s)',
                                                  flush=True))
  plot(curve, out / 'learning_curve.png', f'PPO on leg_hold ({args.envs} envs, seed {args.seed})')
  (out / 'learning_curve.json').write_text(json.dumps(curve))
  wall = time.perf_counter() - t0
  save_policy(out, env, params, training={
      'timesteps': args.timesteps, 'envs': args.envs, 'episode_length': args.episode_length,
      'seed': args.seed, 'wall_s': round(wall, 1)})
  print(f'wrote {out}/policy.msgpack, policy.json, learning_curve.png, learning_curve.json '
        f'({wall:.0f} s)')


if __name__ == '__main__':
  main()
