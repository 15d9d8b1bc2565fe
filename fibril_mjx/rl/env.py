"""The RL env: one world with Brax's / Playground's environment interface (SPEC §8).

`FibrilEnv` is one world: `reset(rng) -> State`, `step(state, action) -> State`,
`restart(state, rng) -> State` (a new episode for the auto-reset), `observation_size`,
`action_size`. It is built one of two ways, with the same wrappers (`fibril_mjx.rl.wrappers`:
`wrap` for one world, `wrap_for_training` as Brax PPO's `wrap_env_fn`) and the same
per-episode device draws (`vary=`, a campaign's `vary:` syntax, `fibril_mjx.rl.randomize`):

- `FibrilEnv(sim, task, vary=...)` — a manifest with its own model; the physics is the
  one-world pipeline's (`pipeline.step`); `task` says what is observed (`Task.observe`), how
  an action becomes commands (`Task.commands`) and the reward. The rest of this doc.
- `fibril_mjx.rl.playground.from_playground(env, manifest)` — a MuJoCo Playground `MjxEnv`
  with devices between its observation and its actions; its physics, reward and termination
  stay the env's; the manifest's `observe:` / `act:` / `vary:` sections say the same three things
  (`fibril_mjx.rl.playground`).

Either way `env.sim` is the `Simulation` of the devices (its `mj_model`: the MJCF with the probe
sensors the components read appended; `sim.components`: the devices by id), which the PyTorch
bridge (`fibril_mjx.rl.torch_bridge.TorchPipeline(env.sim)`) runs too.

The manifest env steps one world's `pipeline.SimState` with `pipeline.step`; it observes the
*delivered* outputs of `Task.observe` (truth apart, `info['truth']` or `privileged_obs`) and
issues the action's commands at the first tick of a step. Timing: a step covers ticks
`n·P … n·P + P − 1` (P = `control_ticks`) and observes its last tick; a reset runs ticks
0 … P − 1. A reset (and so `restart`) draws the world key, the goal, the `vary=` terms and
`randomize`'s Params, which hold for the episode. The reasons, term by term:
docs/internals/rl.md, "The manifest env".
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from fibril_mjx.batch.simulation import Simulation, load
from fibril_mjx.core import groups, pipeline
from fibril_mjx.rl import wrappers
from fibril_mjx.rl.randomize import DeviceRandomization


@dataclasses.dataclass(frozen=True)
class State:
  """Environment state of one world (Brax `State` fields).

  Attributes:
    pipeline_state: the world's `pipeline.SimState` (no world axis).
    obs: `(observation_size,)` float32, or `{'state', 'privileged_state'}` arrays.
    reward, done: float32 scalars of the last step.
    metrics: `{name: float32 scalar}` from the task's reward.
    info: `rng` (a key for the caller's next reset), `params` (this episode's Params), `goal`,
      `truth` (flattened truth of the observed components), `model` (this episode's varied
      `mjx.Model` fields), `draws` (`{vary path: value}`); Brax's `EpisodeWrapper` adds
      `steps`, `truncation`, `episode_done`, `episode_metrics`; `wrappers.AutoReset` adds
      `episode_key`, `episode`.
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
    episode_length: steps before the time limit ends an episode (`wrap`'s default).
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


def observation(observe, out, goal_vec=None) -> jax.Array:
  """One world's observation (float32 vector): for each `(component id, fields or None)` of
  `observe` (a `Task.observe` mapping or its items), its delivered sample's fields (None: every
  field) and its `new_data` flag, then `goal_vec`. A campaign's `controller:` observes with it
  too (`workflows/campaign/policy.py`), so training and campaign agree on the layout."""
  leaves = []
  for cid, names in (observe.items() if isinstance(observe, dict) else observe):
    d = out['sensor'][cid]
    if names is None:
      leaves.extend(jax.tree.leaves(d.sample))
    else:
      leaves.extend(getattr(d.sample, n) for n in names)
    leaves.append(d.new_data)
  if goal_vec is not None:
    leaves.append(goal_vec)
  return _flat(leaves)


class FibrilEnv:
  """The RL env of one world (see the module doc): of `sim` under `task`, or of a Playground
  env (`fibril_mjx.rl.playground.from_playground`).

  Args:
    sim: a `Simulation` (`fibril_mjx.load(...)`) or a manifest path.
    task: the `Task`.
    randomize: optional `(rng, params) -> params` applied at every reset (per-reset Params;
      `params` is one world's `{component id: Params}`).
    params: one world's Params of every reset without `randomize` (default the manifest's).
    privileged_obs: observations as `{'state': robot view, 'privileged_state': robot view +
      truth}` instead of one array.
    vary: per-episode device randomization, `{field path: distribution}` as a campaign
      file's `vary:` (or a campaign file); the simulator is rebuilt with the varied terms
      compiled in (`env.sim`, `env.randomization`).

  Attributes:
    EPISODE_FIELDS: the `State` fields a restart replaces (the physics state).
    EPISODE_INFO: the `State.info` entries of an episode a restart replaces.
    playground: the Playground env under the devices, or None (a manifest env).
  """
  EPISODE_FIELDS = ('pipeline_state',)
  EPISODE_INFO = ('rng', 'params', 'goal', 'truth', 'model', 'draws')
  playground = None

  def __init__(self, sim: Simulation | str, task: Task, *, randomize: Callable | None = None,
               params: dict | None = None, privileged_obs: bool = False, vary=None):
    if not isinstance(sim, Simulation):
      sim = load(sim)
    self.randomization = None
    if vary:
      self.randomization = DeviceRandomization(sim, vary)
      sim = self.randomization.sim
    self.sim, self.task, self.randomize = sim, task, randomize
    self.privileged_obs = privileged_obs
    self.default_params = sim.default_params() if params is None else params
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
    """Starts an episode of one world: ticks 0 … `control_ticks − 1` (`pipeline.before_tick0`,
    then `pipeline.step`).

    Args:
      rng: `(2,)` key; the world key, goal and randomization are drawn from it.
      params: one world's `{component id: Params}` (default: the env's, then `randomize` if
        set).
    """
    k_world, k_goal, k_rand, k_next = jax.random.split(rng, 4)
    if params is None:
      params = self.default_params
      if self.randomize is not None:
        params = self.randomize(k_rand, params)
    model, draws, init = {}, {}, {}
    if self.randomization is not None:
      draws = self.randomization.draw(k_world)
      params, model, qoff, voff, latency = self.randomization.apply(params, draws)
      init = {'qpos_offset': qoff, 'qvel_offset': voff, 'latency': latency}
    mx = self._model(model)
    # ticks 0 … control_ticks − 1: observe the last tick before the first step (see above),
    # in one scan from before tick 0 (tick 0 is the loop body's code: `pipeline.step`)
    ps = pipeline.before_tick0(self.sim.built, params, k_world,
                               pipeline.WorldStart(data0=self.sim.data0, **init), mx=mx)
    ps = self._advance(params, mx, ps, None, self.task.control_ticks, integrate=None)
    out = pipeline.outputs(self.sim.built, ps)
    goal = self.task.sample_goal(k_goal) if self.task.sample_goal is not None else ()
    obs, truth = self._observe(out, goal)
    _, metrics = self.task.reward(out, goal, jnp.zeros((self.task.action_size,), jnp.float32))
    metrics = {k: jnp.zeros((), jnp.float32) for k in metrics}
    zero = jnp.zeros((), jnp.float32)
    info = {'rng': k_next, 'params': params, 'goal': goal, 'truth': truth, 'model': model,
            'draws': draws}
    return State(ps, obs, zero, zero, metrics, info)

  def restart(self, state: State, rng: jax.Array) -> State:
    """A new episode for `wrappers.AutoReset`: `reset(rng)` (a control period of ticks, with
    new draws); `state` (the finished one) is not read."""
    del state
    return self.reset(rng)

  def step(self, state: State, action: jax.Array) -> State:
    """Applies `action` for `control_ticks` physics ticks (`pipeline.step`); `done` is the
    task's termination (the time limit is `EpisodeWrapper`'s)."""
    params, goal = state.info['params'], state.info['goal']
    ps = self._advance(params, self._model(state.info['model']), state.pipeline_state,
                       self._command_trace(action), self.task.control_ticks)
    out = pipeline.outputs(self.sim.built, ps)
    reward, metrics = self.task.reward(out, goal, action)
    # keys an outer wrapper added (Brax's EvalWrapper: `reward`) stay, as Brax envs keep them
    metrics = {**state.metrics, **{k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}}
    term = (jnp.asarray(self.task.done(out, goal), bool) if self.task.done is not None
            else jnp.zeros((), bool))
    obs, truth = self._observe(out, goal)
    return state.replace(pipeline_state=ps, obs=obs, reward=jnp.asarray(reward, jnp.float32),
                         done=term.astype(jnp.float32), metrics=metrics,
                         info={**state.info, 'truth': truth})

  # ------------------------------------------------------------------ helpers

  def _model(self, fields: dict):
    """The `mjx.Model` of an episode: the built one with its varied fields."""
    return self.sim.mx.replace(**fields) if fields else self.sim.mx

  def _advance(self, params, mx, ps, trace, n_ticks: int, integrate: bool | None = True):
    """`n_ticks` one-world steps in a `lax.scan`; `trace` `{id: (n_ticks, ...)}` or None
    (scripted / null commands); `integrate` as in `pipeline.step`."""
    params = groups.pack(self.sim.built, params)   # a group's Params stacked once per call

    def body(st, cmd):
      st, _ = pipeline.step(self.sim.built, params, st, cmd, mx=mx, impl=self.sim.impl,
                            integrate=integrate)
      return st, None
    return jax.lax.scan(body, ps, trace, length=n_ticks)[0]

  def _command_trace(self, action) -> dict:
    """`{id: command (control_ticks, ...)}`: the action's commands at the first tick, the null
    command (nothing issued) at the others."""
    cmds = self.task.commands(action)
    null = self.sim.null_commands()
    n = self.task.control_ticks
    trace = {}
    for cid, cmd in cmds.items():
      trace[cid] = jax.tree.map(
          lambda c, z: jnp.concatenate([jnp.asarray(c, z.dtype)[None],
                                        jnp.broadcast_to(z, (n - 1,) + z.shape)]),
          cmd, null[cid])
    return trace

  def _observe(self, out, goal):
    """`(obs, truth)`: delivered fields + new_data per observed component (+ goal), and the
    flattened truth of those components."""
    obs = observation(self.task.observe, out, None if self.task.goal_obs is None
                      else self.task.goal_obs(goal))
    truth = _flat([x for cid in self.task.observe for x in jax.tree.leaves(out['truth'][cid])])
    if self.privileged_obs:
      return {'state': obs, 'privileged_state': jnp.concatenate([obs, truth])}, truth
    return obs, truth


wrap = wrappers.wrap
wrap_for_training = wrappers.wrap_for_training
