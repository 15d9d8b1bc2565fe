"""The wrappers of the RL env (`fibril_mjx.rl.env.FibrilEnv`, from a manifest or from a
Playground env): `AutoReset` (new device draws per episode), `SyncVmap` (a batch of envs in
step) and `wrap_for_training` (the signature of Brax's `envs.training.wrap`, Brax PPO's
`wrap_env_fn`, for either kind of env). How they differ from Brax's and Playground's
wrappers, and why: docs/internals/rl.md, "Auto-reset with new draws".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


class _Wrapper:
  """Brax's `Wrapper` interface over `self.env`: its sizes and `unwrapped`, the backend of
  the unwrapped env, and any other attribute."""
  observation_size = property(lambda self: self.env.observation_size)
  action_size = property(lambda self: self.env.action_size)
  unwrapped = property(lambda self: self.env.unwrapped)
  backend = property(lambda self: self.unwrapped.backend)

  def __getattr__(self, name):
    if name == '__setstate__':
      raise AttributeError(name)
    return getattr(self.env, name)


class AutoReset(_Wrapper):
  """Restarts the finished envs with `env.restart(state, fold_in(first key, episode count))`,
  new device draws per episode, on the steps where some env finished (`lax.cond` on the
  batch). The finished envs take the restart's `FibrilEnv.EPISODE_FIELDS`, observation and
  `FibrilEnv.EPISODE_INFO` entries; the episode bookkeeping (`steps`, `truncation`, ...) and
  the step's `reward` / `done` / `metrics` stay the finished step's, as with Brax's wrapper.

  Args:
    env: an env whose `unwrapped` is a one-world `FibrilEnv`, one world or under one vmap
      wrapper (usually `EpisodeWrapper(...)`).
  """

  def __init__(self, env):
    self.env = env

  def reset(self, rng: jax.Array):
    state = self.env.reset(rng)
    state.info['episode_key'] = rng
    state.info['episode'] = jnp.zeros(rng.shape[:-1], jnp.int32)
    return state

  def step(self, state, action: jax.Array):
    if 'steps' in state.info:   # as Brax's wrapper: a finished episode counts from 0 again
      state.info.update(steps=jnp.where(state.done > 0, jnp.zeros_like(state.info['steps']),
                                        state.info['steps']))
    state = state.replace(done=jnp.zeros_like(state.done))
    state = self.env.step(state, action)
    return jax.lax.cond(jnp.any(state.done > 0), self._restart, lambda s: s, state)

  def _restart(self, state):
    """Finished envs restarted with the episode key `fold_in(episode_key, episode + 1)`."""
    done = state.done > 0
    episode = state.info['episode'] + done.astype(jnp.int32)
    env = self.env.unwrapped
    shared = None
    if done.ndim:
      keys = jax.vmap(jax.random.fold_in)(state.info['episode_key'], episode)
      sync = getattr(self.env, 'sync_restart', None)   # a SyncVmap below: shared clocks
      fresh = jax.vmap(env.restart)(state, keys) if sync is None else sync(state, keys)
      shared = None if sync is None else self.env.shared_leaves(fresh.pipeline_state)
    else:
      fresh = env.restart(state, jax.random.fold_in(state.info['episode_key'], episode))

    def pick(new, old):
      return jnp.where(jnp.reshape(done, done.shape + (1,) * (jnp.ndim(new) - done.ndim)),
                       new, old)
    info = dict(state.info)
    for k in env.EPISODE_INFO:
      if k in fresh.info:
        info[k] = jax.tree.map(pick, fresh.info[k], state.info[k])
    info['episode'] = episode
    changes = {'obs': jax.tree.map(pick, fresh.obs, state.obs), 'info': info}
    for f in env.EPISODE_FIELDS:
      new, old = getattr(fresh, f), getattr(state, f)
      if shared is None:
        changes[f] = jax.tree.map(pick, new, old)
      else:   # envs in step finish together: the shared tick and clocks are the restart's
        changes[f] = jax.tree.map(lambda is_shared, n, o: n if is_shared else pick(n, o),
                                  shared, new, old)
    return state.replace(**changes)


class SyncVmap(_Wrapper):
  """Brax's `VmapWrapper` for a batch of envs in step: the tick and the schedule clocks of the
  pipeline state are shared by the batch (unbatched), every other leaf has the env axis.

  Only for manifest-built envs whose task has no termination (`Task.done` None), whose envs
  all reset together under `EpisodeWrapper` + `AutoReset`; `wrap_for_training` checks this.
  """

  def __init__(self, env):
    if getattr(env.unwrapped.task, 'done', None) is not None:
      raise ValueError('SyncVmap: the task terminates episodes on its own (Task.done), so its '
                       'envs fall out of step; use Brax VmapWrapper')
    self.env = env

  @staticmethod
  def _axes(state):
    """vmap axes of a state (extra `info` entries of outer wrappers included): None at the
    shared tick and clocks, 0 elsewhere."""
    ps = state.pipeline_state
    ps_axes = jax.tree.map(lambda _: 0, ps)._replace(
        tick=None, clocks=jax.tree.map(lambda _: None, ps.clocks))
    # 0 over whole `obs`, `metrics`, `info` (a prefix): an outer wrapper (Brax's EvalWrapper)
    # may add entries to the input state that the step's output does not have yet
    return jax.tree.map(lambda _: 0, state).replace(pipeline_state=ps_axes, obs=0, reward=0,
                                                     done=0, metrics=0, info=0)

  def reset(self, rng: jax.Array):
    one = jax.eval_shape(self.env.reset, rng[0])
    return jax.vmap(self.env.reset, out_axes=self._axes(one))(rng)

  def sync_restart(self, state, rng: jax.Array):
    one = jax.eval_shape(self.env.reset, rng[0])
    return jax.vmap(self.env.unwrapped.restart, in_axes=(self._axes(state), 0),
                    out_axes=self._axes(one))(state, rng)

  def step(self, state, action: jax.Array):
    ax = self._axes(state)
    return jax.vmap(self.env.step, in_axes=(ax, 0), out_axes=ax)(state, action)

  def shared_leaves(self, pipeline_state):
    """A tree like `pipeline_state`: True at the shared (unbatched) leaves."""
    return jax.tree.map(lambda _: False, pipeline_state)._replace(
        tick=True, clocks=jax.tree.map(lambda _: True, pipeline_state.clocks))


def wrap(env, episode_length: int | None = None, action_repeat: int = 1):
  """One world under Brax's `EpisodeWrapper` and `AutoReset` (as Brax's training `wrap` is
  without its `VmapWrapper`).

  Args:
    episode_length: steps per episode (default the task's `episode_length`; 1000 on a
      Playground env, as Playground's).
  """
  from brax.envs.wrappers import training   # optional dependency: only the wrappers need it
  length = episode_length or getattr(env.unwrapped.task, 'episode_length', 1000)
  return AutoReset(training.EpisodeWrapper(env, length, action_repeat))


def wrap_for_training(env, episode_length: int = 1000, action_repeat: int = 1,
                      randomization_fn=None):
  """Brax's training wrapping (a vmap, `EpisodeWrapper`) with `AutoReset` in place of its
  `AutoResetWrapper`: Brax PPO's `wrap_env_fn`, for either kind of env.

  The batch: on a Playground env, Brax's `VmapWrapper`, or Playground's
  `BraxDomainRandomizationVmapWrapper` with the env's own `randomization_fn` (of its
  `mjx.Model`); on a manifest env, a `SyncVmap` (shared tick and clocks) when the task has no
  termination of its own, else Brax's `VmapWrapper`, and `randomization_fn` is refused (vary
  the model with `FibrilEnv(vary=)`)."""
  from brax.envs.wrappers import training
  inner = env.unwrapped
  if inner.playground is not None:
    if randomization_fn is None:
      env = training.VmapWrapper(env)
    else:
      from mujoco_playground import wrapper as pg_wrapper   # the playground extra
      env = pg_wrapper.BraxDomainRandomizationVmapWrapper(env, randomization_fn)
  else:
    if randomization_fn is not None:
      raise ValueError('wrap_for_training: randomization_fn (a Brax System randomizer) is not '
                       'used by a manifest FibrilEnv; randomize the model and the devices '
                       'with FibrilEnv(vary=)')
    env = SyncVmap(env) if inner.task.done is None else training.VmapWrapper(env)
  return AutoReset(training.EpisodeWrapper(env, episode_length, action_repeat))
