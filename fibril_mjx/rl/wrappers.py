"""Auto-reset with new draws per episode, for the RL env (`fibril_mjx.rl.env`).

Brax's `AutoResetWrapper` restarts a finished episode from the state its first `reset` cached,
so an env replays its first episode's device draws (world key, turn-on biases, the `vary=`
draws) for the whole training run. `AutoReset` here has the same interface and place (on top
of `EpisodeWrapper`) but restarts a finished env from a fresh `reset` of the episode key
`fold_in(first key, episode count)`:

- the reset is computed only on steps where some env finished (`lax.cond` on the batch —
  a real branch, since the wrapper sits outside the `VmapWrapper`): with a common time limit
  every env finishes on the same step, so a step costs one control period and one reset is
  added per episode length;
- the finished envs take the reset's pipeline state, observation and the env's own
  per-episode `info` (`rng`, `params`, `goal`, `truth`, `model`, `draws`); the episode
  bookkeeping (`steps`, `truncation`, `episode_metrics`, ...) and the step's `reward` /
  `done` / `metrics` stay those of the finished step, as with Brax's wrapper.

`wrap_for_training` has the signature of Brax's `envs.training.wrap` (Brax PPO's
`wrap_env_fn`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# the env's own per-episode entries of `State.info` (`FibrilEnv.reset`)
EPISODE_INFO = ('rng', 'params', 'goal', 'truth', 'model', 'draws')


class AutoReset:
  """Restarts finished episodes from a fresh reset of a new episode key (module doc).

  Args:
    env: an env whose `unwrapped` is a one-world `FibrilEnv`, one world or under one
      `VmapWrapper` (usually `EpisodeWrapper(...)`).
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
    """Finished envs from a fresh reset of `fold_in(episode_key, episode + 1)`."""
    done = state.done > 0
    episode = state.info['episode'] + done.astype(jnp.int32)
    reset = self.env.unwrapped.reset
    if done.ndim:
      keys = jax.vmap(jax.random.fold_in)(state.info['episode_key'], episode)
      fresh = jax.vmap(reset)(keys)
    else:
      fresh = reset(jax.random.fold_in(state.info['episode_key'], episode))

    def pick(new, old):
      return jnp.where(jnp.reshape(done, done.shape + (1,) * (jnp.ndim(new) - done.ndim)),
                       new, old)
    info = dict(state.info)
    for k in EPISODE_INFO:
      if k in fresh.info:
        info[k] = jax.tree.map(pick, fresh.info[k], state.info[k])
    info['episode'] = episode
    return state.replace(pipeline_state=jax.tree.map(pick, fresh.pipeline_state,
                                                     state.pipeline_state),
                         obs=jax.tree.map(pick, fresh.obs, state.obs), info=info)

  # Brax `Wrapper` interface
  @property
  def observation_size(self):
    return self.env.observation_size

  @property
  def action_size(self) -> int:
    return self.env.action_size

  @property
  def unwrapped(self):
    return self.env.unwrapped

  @property
  def backend(self) -> str:
    return self.unwrapped.backend

  def __getattr__(self, name):
    if name == '__setstate__':
      raise AttributeError(name)
    return getattr(self.env, name)


def wrap(env, episode_length: int, action_repeat: int = 1):
  """One world under Brax's `EpisodeWrapper` and `AutoReset`."""
  from brax.envs.wrappers import training   # optional dependency: only the wrappers need it
  return AutoReset(training.EpisodeWrapper(env, episode_length, action_repeat))


def wrap_for_training(env, episode_length: int = 1000, action_repeat: int = 1,
                      randomization_fn=None):
  """Brax's training wrapping (`VmapWrapper`, `EpisodeWrapper`) with `AutoReset` in place of
  its `AutoResetWrapper`: Brax PPO's `wrap_env_fn`. Device randomization is the env's own
  (`FibrilEnv(vary=)`); Brax's `randomization_fn` (of a Brax `System`) is refused."""
  from brax.envs.wrappers import training
  if randomization_fn is not None:
    raise ValueError('wrap_for_training: randomization_fn (a Brax System randomizer) is not '
                     'used by FibrilEnv; randomize the device with FibrilEnv(vary=) or '
                     'randomize=')
  env = training.VmapWrapper(env)
  return AutoReset(training.EpisodeWrapper(env, episode_length, action_repeat))
