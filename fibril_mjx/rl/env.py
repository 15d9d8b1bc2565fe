"""A Brax-compatible RL environment over a `Simulation` (SPEC §8).

`FibrilEnv(sim, task)` is one world: `reset(rng) -> State`, `step(state, action) -> State`,
`observation_size`, `action_size`, and a `State` with `pipeline_state`, `obs`, `reward`, `done`,
`metrics`, `info` (the fields and `replace` of `brax.envs.State`), so Brax's `VmapWrapper` and
trainers (`brax.training.agents.ppo`) take it as it is. Brax is not needed to use it.

- Observations are what the robot would see: the *delivered* outputs of the task's sensor and
  feedback components (latency, noise, lost samples, the held value between deliveries) with
  each component's `new_data` flag, plus the task's goal. Truth (the components' ideal outputs)
  is kept apart in `info['truth']` for privileged critics, or as `obs['privileged_state']`
  with `privileged_obs=True` (Brax PPO's `value_obs_key`).
- Actions become actuator component commands through the task's `commands(action)`, built with
  the components' `command(...)` helpers: issued at the first physics tick of a step, nothing
  issued on the other `control_ticks - 1` ticks (the adapters hold, time out, ... as modelled).
- Timing: an observation is the outputs of the last tick of a step (a sample describes the
  state at its stamp, so the policy sees that tick's state), and the action is issued at the
  next tick, the first of the next step. A reset therefore runs ticks 0 … `control_ticks − 1`
  (null / scripted commands) and observes tick `control_ticks − 1`: each step then covers ticks
  `n·P … n·P + P − 1` (P = `control_ticks`), so an actuator whose application instants fall on
  multiples of P applies the action at the first tick of the step, as a policy running at the
  actuator's cadence expects.
- Randomization per episode: every reset draws the world key from the rng (so noise, turn-on
  biases and jitter differ per episode), the task goal from `sample_goal`, and the Params from
  `randomize(rng, params)` when given; Params passed to `reset(rng, params)` are used as they
  are and kept for the following episodes of that env (unless `randomize` is set).
- Auto-reset on `done` (termination or the time limit): the returned state already holds the
  next episode (as Brax's `AutoResetWrapper` does), with `reward`/`done` of the finished step,
  `info['truncation']` set on time-limit ends, and `info['episode_metrics']` /
  `info['episode_done']` kept as Brax's `EpisodeWrapper` keeps them. Train with
  `wrap_env_fn=lambda env, **_: VmapWrapper(env)` (not Brax's default wrap, which would reset
  a second time to its cached first state).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from fibril_mjx.batch.simulation import Simulation


@dataclasses.dataclass(frozen=True)
class State:
  """Environment state of one world (Brax `State` fields).

  Attributes:
    pipeline_state: the `SimState` (a batch of one world).
    obs: `(observation_size,)` float32, or `{'state', 'privileged_state'}` arrays.
    reward, done: float32 scalars of the last step.
    metrics: `{name: float32 scalar}` from the task's reward.
    info: `rng` (next episode), `params` (this episode's Params), `goal`, `steps`, `truth`
      (flattened truth of the observed components), `truncation`, `episode_done`,
      `episode_metrics`.
  """
  pipeline_state: Any
  obs: Any
  reward: jax.Array
  done: jax.Array
  metrics: dict = dataclasses.field(default_factory=dict)
  info: dict = dataclasses.field(default_factory=dict)

  def replace(self, **changes) -> 'State':
    return dataclasses.replace(self, **changes)


_FIELDS = ('pipeline_state', 'obs', 'reward', 'done', 'metrics', 'info')
jax.tree_util.register_pytree_node(
    State, lambda s: (tuple(getattr(s, f) for f in _FIELDS), None),
    lambda _, xs: State(*xs))


@dataclasses.dataclass(frozen=True)
class Task:
  """What the agent sees, does and is scored on; single-world pure JAX functions.

  Attributes:
    observe: `{component id: sample field names, or None for every field}` of the sensor /
      feedback components whose delivered outputs form the observation (each also adds its
      `new_data` flag as 0/1).
    action_size: length of the action vector.
    commands: `action (action_size,) -> {actuator component id: command}` (one world).
    reward: `(outputs, goal, action) -> (reward, {metric: scalar})`; `outputs` is
      `{'sensor': {id: Delivered}, 'truth': {id: {...}}}` of the world after the step.
    done: `(outputs, goal) -> bool` termination besides the time limit, or None.
    sample_goal: `rng -> goal` (a pytree) drawn per episode, or None.
    goal_obs: `goal -> (n,)` appended to the observation, or None.
    control_ticks: physics ticks per environment step (the policy period is
      `control_ticks · dt`).
    episode_length: steps before the time limit ends an episode.
  """
  observe: dict
  action_size: int
  commands: Callable
  reward: Callable
  done: Callable | None = None
  sample_goal: Callable | None = None
  goal_obs: Callable | None = None
  control_ticks: int = 1
  episode_length: int = 1000


def _flat(leaves) -> jax.Array:
  parts = [jnp.ravel(jnp.asarray(x)).astype(jnp.float32) for x in leaves]
  return jnp.concatenate(parts) if parts else jnp.zeros((0,), jnp.float32)


def _first(tree):
  return jax.tree.map(lambda x: x[0], tree)


def _batch1(tree):
  return jax.tree.map(lambda x: jnp.asarray(x)[None], tree)


class FibrilEnv:
  """Brax-compatible environment of one world of `sim` under `task` (see the module doc).

  Args:
    sim: a `Simulation` (`fibril_mjx.load(...)`) or a manifest path.
    task: the `Task`.
    randomize: optional `(rng, params) -> params` applied at every reset (per-episode Params;
      `params` is one world's `{component id: Params}`).
    auto_reset: reset inside `step` when done (default True).
    privileged_obs: observations as `{'state': robot view, 'privileged_state': robot view +
      truth}` instead of one array.
  """

  def __init__(self, sim: Simulation | str, task: Task, *, randomize: Callable | None = None,
               auto_reset: bool = True, privileged_obs: bool = False):
    if not isinstance(sim, Simulation):
      from fibril_mjx.batch.simulation import load
      sim = load(sim)
    self.sim, self.task, self.randomize = sim, task, randomize
    self.auto_reset, self.privileged_obs = auto_reset, privileged_obs
    self.default_params = sim.default_params()
    unknown = [cid for cid in task.observe if cid not in sim.components]
    if unknown:
      raise ValueError(f'Task.observe: no component {unknown[0]!r}; components: '
                       f'{", ".join(sim.components)}')
    shapes = jax.eval_shape(self.reset, jax.random.PRNGKey(0))
    self._obs_shape = jax.tree.map(lambda x: x.shape, shapes.obs)

  # ------------------------------------------------------------------ Brax interface

  @property
  def observation_size(self):
    """`int`, or `{'state': (n,), 'privileged_state': (m,)}` with `privileged_obs`."""
    if self.privileged_obs:
      return dict(self._obs_shape)
    return self._obs_shape[-1]

  @property
  def action_size(self) -> int:
    return self.task.action_size

  @property
  def backend(self) -> str:
    return 'mjx'

  @property
  def unwrapped(self) -> 'FibrilEnv':
    return self

  def reset(self, rng: jax.Array, params: dict | None = None) -> State:
    """Starts an episode of one world.

    Args:
      rng: `(2,)` key; the world key, goal and randomization are drawn from it.
      params: one world's `{component id: Params}` (default: the manifest's, then
        `randomize` if set).
    """
    k_world, k_goal, k_rand, k_next = jax.random.split(rng, 4)
    if params is None:
      params = self.default_params
      if self.randomize is not None:
        params = self.randomize(k_rand, params)
    ps = self.sim.reset(_batch1(params), k_world[None])
    if self.task.control_ticks > 1:   # observe the last tick before the first step (see above)
      ps, _ = self.sim.run(_batch1(params), ps, self.task.control_ticks - 1, record=False)
    out = _first(self.sim.outputs(ps))
    goal = self.task.sample_goal(k_goal) if self.task.sample_goal is not None else ()
    obs, truth = self._observe(out, goal)
    _, metrics = self.task.reward(out, goal, jnp.zeros((self.task.action_size,), jnp.float32))
    metrics = {k: jnp.zeros((), jnp.float32) for k in metrics}
    zero = jnp.zeros((), jnp.float32)
    episode_metrics = {'sum_reward': zero, 'length': zero, **metrics}
    info = {'rng': k_next, 'params': params, 'goal': goal, 'steps': jnp.zeros((), jnp.int32),
            'truth': truth, 'truncation': zero, 'episode_done': zero,
            'episode_metrics': episode_metrics}
    return State(ps, obs, zero, zero, metrics, info)

  def step(self, state: State, action: jax.Array) -> State:
    """Applies `action` for `control_ticks` physics ticks; auto-resets when done."""
    info = dict(state.info)
    params, goal = info['params'], info['goal']
    pb = _batch1(params)
    trace = self._command_trace(action)
    ps, _ = self.sim.run(pb, state.pipeline_state, self.task.control_ticks, record=False,
                         commands=trace)
    out = _first(self.sim.outputs(ps))
    reward, metrics = self.task.reward(out, goal, action)
    reward = jnp.asarray(reward, jnp.float32)
    metrics = {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}
    term = (jnp.asarray(self.task.done(out, goal), bool) if self.task.done is not None
            else jnp.zeros((), bool))
    steps = info['steps'] + 1
    time_up = steps >= self.task.episode_length
    done = term | time_up
    obs, truth = self._observe(out, goal)

    prev_done = info['episode_done']
    em = dict(info['episode_metrics'])
    em['sum_reward'] = em['sum_reward'] * (1 - prev_done) + reward
    em['length'] = em['length'] * (1 - prev_done) + 1
    for k, v in metrics.items():
      em[k] = em[k] * (1 - prev_done) + v
    info.update(steps=steps, truth=truth, truncation=(time_up & ~term).astype(jnp.float32),
                episode_done=done.astype(jnp.float32), episode_metrics=em)
    if self.auto_reset:
      keep = None if self.randomize is not None else params
      fresh = self.reset(info['rng'], keep)
      sel = lambda a, b: jax.tree.map(lambda x, y: jnp.where(done, x, y), a, b)
      ps, obs = sel(fresh.pipeline_state, ps), sel(fresh.obs, obs)
      for k in ('rng', 'params', 'goal', 'steps', 'truth'):
        info[k] = sel(fresh.info[k], info[k])
    return State(ps, obs, reward, done.astype(jnp.float32), metrics, info)

  # ------------------------------------------------------------------ helpers

  def _command_trace(self, action) -> dict:
    """`{id: command (control_ticks, 1, ...)}`: the action's commands at the first tick, the
    null command (nothing issued) at the others."""
    cmds = self.task.commands(action)
    null = self.sim.null_commands()
    n = self.task.control_ticks
    trace = {}
    for cid, cmd in cmds.items():
      trace[cid] = jax.tree.map(
          lambda c, z: jnp.concatenate([jnp.asarray(c, z.dtype)[None],
                                        jnp.broadcast_to(z, (n - 1,) + z.shape)])[:, None],
          cmd, null[cid])
    return trace

  def _observe(self, out, goal):
    """`(obs, truth)`: delivered fields + new_data per observed component (+ goal), and the
    flattened truth of those components."""
    leaves, truth = [], []
    for cid, names in self.task.observe.items():
      d = out['sensor'][cid]
      sample = d.sample
      if names is None:
        leaves.extend(x for x in jax.tree.leaves(sample))
      else:
        leaves.extend(getattr(sample, n) for n in names)
      leaves.append(d.new_data)
      truth.extend(jax.tree.leaves(out['truth'][cid]))
    if self.task.goal_obs is not None:
      leaves.append(self.task.goal_obs(goal))
    obs, truth = _flat(leaves), _flat(truth)
    if self.privileged_obs:
      return {'state': obs, 'privileged_state': jnp.concatenate([obs, truth])}, truth
    return obs, truth
