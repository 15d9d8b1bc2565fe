"""Brax PPO learns on the shipped training path, and a run without gradient does not.

The task is the smallest one with a known optimum: one free wheel (a hinge on a vertical axis,
no gravity torque) driven by a `fibril_sim/motor` on a MuJoCo `<motor>`; each episode draws a
target effort g ~ U(−√3, √3) N·m, the policy sees g and commands effort 2·clip(a, −1, 1) N·m;
the reward is −(τ − g)², τ the joint effort MuJoCo applied (the motor's truth
`applied_effort`, read after the step that issued the command). Closed form: a = g / 2 makes
τ = g at every step, so the optimal return is 0 (checked below with that policy).

Training is `examples/train_ppo.py`'s `train` (Brax PPO over `FibrilEnv` under
`wrap_for_training`), 8192 env steps for each of seeds 0 and 1. The initial policy of a seed
is what `ppo.train` returns after 0 steps with that seed (the same initialisation as the run,
checked below on the run without gradient, whose final policy equals it). Each policy is evaluated
deterministically (the tanh-normal's mode) on the same N_EVAL episodes (same keys).

Margin: an evaluated return is a mean over N_EVAL episodes, with standard error
SE = std(per-episode return) / √N_EVAL. The margin is Z = 4 standard errors of the noisiest
initial return over the seeds, `Z · max_seed SE(initial)`: a change that the evaluation noise
of the initial return alone reaches with probability below 1e-4 (normal tail). "Learned" is
`trained − initial > margin`; every seed must pass it and also close ≥ 80 % of the gap to the
optimum 0. With `learning_rate=0` (Adam then returns exactly zero updates, so only Brax's
observation normalizer moves) the same criterion must fail: the goal observation has mean 0
and variance 1, which is where the normalizer starts, so that run keeps its initial behaviour
(gain ≈ 0).

Measured (2-core CPU): mean returns over the 2048 episodes, initial → trained,
seed 0 −5.57 → −0.36, seed 1 −1.65 → −0.08; zeroed gradient (seed 0) −5.57 → −5.58; SEs
0.111 / 0.053, margin 0.44. About 23 s warm on the idle 2-core machine (55 s when shared),
most of it Brax tracing the three training runs (the sizes barely matter).
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip('brax')

import fibril_mjx  # noqa: E402
from fibril_mjx.components.actuators import motor  # noqa: E402
from fibril_mjx.rl.env import FibrilEnv, Task  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location('train_ppo', REPO / 'examples' / 'train_ppo.py')
train_ppo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train_ppo)

MJCF = """<mujoco model="wheel_effort">
  <option timestep="0.01"/>
  <worldbody>
    <body name="wheel">
      <joint name="spin" type="hinge" axis="0 0 1" armature="0.01"/>
      <geom type="cylinder" size="0.1 0.02" mass="1.0" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="spin_motor" joint="spin" ctrllimited="true" ctrlrange="-2 2"/>
  </actuator>
</mujoco>
"""
MANIFEST = """fibril_manifest: 1
model: wheel.xml
components:
  - id: wheel
    type: fibril_sim/motor
    config: {actuator: spin_motor, application_period_s: 0.01}
"""
EFFORT_SCALE = 2.0          # N·m per unit action (the actuator's ctrlrange)
GOAL_HALF_RANGE = 3 ** 0.5  # target effort ~ U(−√3, √3) N·m: mean 0, variance 1
EPISODE = 4                 # steps of 10 ms
STEPS = 8192                # env steps per seed: 4 PPO iterations of 128 envs × 4 unroll × 4
TRAIN = dict(num_envs=128, batch_size=128, num_minibatches=4, unroll_length=4,
             num_updates_per_batch=4, hidden=(16, 16), episode_length=EPISODE, num_evals=2,
             run_evals=False)
LEARNING_RATE = 1e-2
SEEDS = (0, 1)
N_EVAL = 2048               # evaluation episodes (the same keys for every policy)
Z = 4.0                     # standard errors in the margin


def _commands(action):
  return {'wheel': motor.command('effort', EFFORT_SCALE * jnp.clip(action[0], -1.0, 1.0))}


def _reward(out, goal, action):
  err = out['truth']['wheel']['applied_effort'] - goal
  return -err ** 2, {'effort_error_nm': jnp.abs(err)}


@pytest.fixture(scope='module')
def env(tmp_path_factory):
  d = tmp_path_factory.mktemp('wheel')
  (d / 'wheel.xml').write_text(MJCF)
  (d / 'wheel.yaml').write_text(MANIFEST)
  task = Task(observe={}, action_size=1, commands=_commands, reward=_reward,
              sample_goal=lambda k: jax.random.uniform(k, (), jnp.float32, -GOAL_HALF_RANGE,
                                                       GOAL_HALF_RANGE),
              goal_obs=lambda g: jnp.reshape(g, (1,)), control_ticks=1,
              episode_length=EPISODE)
  return FibrilEnv(fibril_mjx.load(d / 'wheel.yaml'), task)


def _episode_returns(env, policy, keys):
  """Per-episode returns `(n,)` of `policy(obs (n, 1)) -> actions (n, 1)` over `EPISODE`
  steps from resets at `keys`."""
  state = jax.vmap(env.reset)(keys)

  def body(s, _):
    s = jax.vmap(env.step)(s, policy(s.obs))
    return s, s.reward
  return jax.lax.scan(body, state, None, length=EPISODE)[1].sum(0)


def _learned(initial, trained, margin) -> bool:
  """The criterion under test: the mean return gained over the evaluation episodes exceeds
  the margin."""
  return float(trained.mean() - initial.mean()) > margin


@pytest.fixture(scope='module')
def runs(env):
  """`{name: (initial returns (N_EVAL,), final returns (N_EVAL,), initial params, final
  params)}` for each seed and for seed 0 with `learning_rate=0`."""
  keys = jax.random.split(jax.random.PRNGKey(1234), N_EVAL)
  evaluate = None
  out, initial = {}, {}
  for name, seed, lr in [*((f'seed {s}', s, LEARNING_RATE) for s in SEEDS),
                         ('zero gradient', SEEDS[0], 0.0)]:
    if seed not in initial:   # `ppo.train` after 0 steps: the seed's initialisation
      make_policy, p0, _ = train_ppo.train(env, timesteps=0, seed=seed, **TRAIN)
      if evaluate is None:   # one compiled evaluation for every policy (same network)
        evaluate = jax.jit(lambda params, k, mp=make_policy: _episode_returns(
            env, lambda obs: mp(params, deterministic=True)(obs, None)[0], k))
      initial[seed] = (p0, np.asarray(evaluate(p0, keys), np.float64))
    p0, r0 = initial[seed]
    _, p1, _ = train_ppo.train(env, timesteps=STEPS, seed=seed, learning_rate=lr, **TRAIN)
    out[name] = (r0, np.asarray(evaluate(p1, keys), np.float64), p0, p1)
  optimal = jax.jit(functools.partial(
      _episode_returns, env, lambda obs: obs[:, -1:] / EFFORT_SCALE))(keys)
  return out, np.asarray(optimal, np.float64)


def test_ppo_beats_initial_policy_and_not_without_gradient(runs):
  res, optimal = runs
  # the closed-form optimum (a = g / 2): τ = g at every step, return 0
  np.testing.assert_allclose(optimal, 0.0, atol=1e-9)
  se = {name: r[0].std(ddof=1) / np.sqrt(N_EVAL) for name, r in res.items()}
  margin = Z * max(se[f'seed {s}'] for s in SEEDS)
  report = '; '.join(f'{n}: initial {r[0].mean():.3f} ± {se[n]:.3f}, final {r[1].mean():.3f}'
                     for n, r in res.items()) + f'; margin {margin:.3f}'
  print(report)   # shown with `pytest -s`
  for s in SEEDS:
    initial, trained, _, _ = res[f'seed {s}']
    assert _learned(initial, trained, margin), report
    # ... and most of the way to the optimum 0
    assert trained.mean() > 0.2 * initial.mean(), report
  initial, final, p0, p1 = res['zero gradient']
  # without gradient the policy is the initial one, parameter for parameter (so `timesteps=0`
  # returns the initialisation the runs start from) ...
  jax.tree.map(np.testing.assert_array_equal, p0[1:], p1[1:])
  # ... and the same criterion says it did not learn
  assert not _learned(initial, final, margin), report
