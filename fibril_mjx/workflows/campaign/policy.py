"""A trained policy as a campaign's controller (`controller:` in the campaign file).

The policy checkpoint is what `examples/train_ppo.py --out DIR` writes:

- `DIR/policy.msgpack` — Flax msgpack of Brax PPO's `(normalizer_params, policy_params)`;
- `DIR/policy.json` — `{'format': 'fibril_policy/1', 'observation_size', 'action_size',
  'network': {'hidden', 'activation', 'normalize_observations', 'distribution'}, 'env': the
  env config it was trained with, 'training': budget and wall time}`.

The env config (task, observation layout, action scaling, control period) is written in the
campaign file and is the same vocabulary the example trains with: the observation is the RL
env's own (`fibril_mjx.rl.env.observation`: the delivered fields of the observed sensor /
feedback components, each followed by its `new_data` flag, then the goal, float32), and the
functions here are used by both the example (`examples/train_ppo.py`) and the campaign:

- `commands(components, actions, action)`: `action[i]` clipped to [-1, 1] × scale → the
  component's command of that mode (`script_command`, as a `command_script` entry builds it);
- `TASKS`: reward, tracking error and goal of each named task.

Closed loop in a campaign (`Controller.controller`): the per-tick controller of
`Simulation.rollout` acts every `control_ticks` ticks — on the outputs of ticks P−1, 2P−1, …
(P = `control_ticks`), its commands issued at the next tick, nothing issued in between — as
the RL env steps (`fibril_mjx.rl.env`: a reset observes tick P−1). Its carry accumulates the
task's reward and tracking error on the same steps, so the metrics `policy.episode_return`,
`policy.tracking_error_rms` (rad, over the policy steps), `policy.settled_error_max` (the
largest |error| over the last quarter of the steps) and `policy.success` (1 when that is below
the task's tolerance) are those of an episode of the env of the same length.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fibril_mjx.config.campaign import TASKS as TASK_NAMES
from fibril_mjx.core import protocol
from fibril_mjx.errors import ConfigError, did_you_mean
from fibril_mjx.rl.env import observation

FORMAT = 'fibril_policy/1'
METRICS = ('episode_return', 'tracking_error_rms', 'settled_error_max', 'success')
PREFIX = 'policy.'


# ------------------------------------------------------------------------------- tasks

@dataclasses.dataclass(frozen=True)
class TaskDef:
  """A named task.

  Attributes:
    goal_size: length of the goal (0: none); goal_range: the training goal's uniform range.
    error: `(outputs, goal, joint component) -> tracking error` (truth).
    action_cost: weight of Σ action² in the reward `-error² - action_cost Σ a²`.
    success_tol: `policy.success` when the settled |error| is below it.
  """
  goal_size: int
  goal_range: tuple
  error: Callable
  action_cost: float
  success_tol: float

  def reward(self, out, goal, action, joint: str):
    err = self.error(out, goal, joint)
    return -err ** 2 - self.action_cost * jnp.sum(action ** 2), err


def _angle_error(out, goal, joint):
  return out['truth'][joint]['position'] - jnp.reshape(goal, ())


TASKS = {
    # hold a commanded joint angle (manifests/rl/leg_hold.yaml): goal = target angle (rad)
    'leg_hold': TaskDef(goal_size=1, goal_range=(-0.6, 0.6), error=_angle_error,
                        action_cost=0.01, success_tol=0.2),
}
assert tuple(TASKS) == TASK_NAMES


# ------------------------------------------------------------------------------- env pieces

def commands(components: dict, actions, action) -> dict:
  """`{component id: command}` of one action vector: `clip(action[i], -1, 1) · scale` in the
  entry's mode, built as a `command_script` entry builds it."""
  out = {}
  for i, (cid, mode, scale) in enumerate(actions):
    value = scale * jnp.clip(action[i], -1.0, 1.0)
    out[cid] = components[cid].script_command(mode, value, jnp.float32(0.0), {})
  return out


def check_env(components: dict, observe, actions, file: str, where: str = 'controller'):
  """Observed components and actions against the built manifest (one-line errors)."""
  for cid, _ in observe:
    if cid not in components:
      raise ConfigError(file, f'{where}.observe.{cid}', 'no component of that id'
                        + did_you_mean(cid, components), cid)
  for i, (cid, mode, _) in enumerate(actions):
    comp = components.get(cid)
    if comp is None or protocol.ACTUATOR not in comp.roles:
      acts = [k for k, c in components.items() if protocol.ACTUATOR in c.roles]
      raise ConfigError(file, f'{where}.actions[{i}].component', 'no actuator component of '
                        'that id' + did_you_mean(cid, acts), cid)
    if mode not in comp.accepted_kinds:
      raise ConfigError(file, f'{where}.actions[{i}].mode', f'{cid!r} ({comp.type}) accepts '
                        f'{", ".join(comp.accepted_kinds)} commands', mode)


# ------------------------------------------------------------------------------- checkpoint

def network(meta: dict):
  """Brax PPO networks of a checkpoint's `policy.json` (brax: the `rl` extra)."""
  from brax.training.acme import running_statistics
  from brax.training.agents.ppo import networks as ppo_networks
  import flax.linen as nn
  net = meta['network']
  pre = (running_statistics.normalize if net.get('normalize_observations', True)
         else (lambda x, y: x))
  return ppo_networks.make_ppo_networks(
      meta['observation_size'], meta['action_size'], preprocess_observations_fn=pre,
      policy_hidden_layer_sizes=tuple(net['hidden']), value_hidden_layer_sizes=tuple(net['hidden']),
      activation=getattr(nn, net.get('activation', 'swish')),
      distribution_type=net.get('distribution', 'tanh_normal'))


def _target(nets, meta):
  from brax.training.acme import running_statistics, specs
  norm = running_statistics.init_state(specs.Array((meta['observation_size'],),
                                                   jnp.dtype('float32')))
  return (norm, nets.policy_network.init(jax.random.PRNGKey(0)))


def init_params(meta: dict, seed: int = 0):
  """A freshly initialised `(normalizer, policy)` of a `policy.json` network (an untrained
  policy: tests, a baseline)."""
  nets = network(meta)
  norm, _ = _target(nets, meta)
  return norm, nets.policy_network.init(jax.random.PRNGKey(seed))


def save(out, params, meta: dict) -> pathlib.Path:
  """Writes `out/policy.msgpack` (`(normalizer, policy)` of Brax PPO's params) and
  `out/policy.json`; returns the checkpoint path."""
  import flax.serialization
  out = pathlib.Path(out)
  out.mkdir(parents=True, exist_ok=True)
  path = out / 'policy.msgpack'
  path.write_bytes(flax.serialization.to_bytes(jax.device_get((params[0], params[1]))))
  (out / 'policy.json').write_text(json.dumps({'format': FORMAT, **meta}, indent=2))
  return path


@dataclasses.dataclass(frozen=True, eq=False)
class Policy:
  """A loaded checkpoint: `act(obs) -> action` (deterministic: the distribution's mode)."""
  path: pathlib.Path
  meta: dict
  act: Callable
  sha256: str


def load(path, file: str = '', where: str = 'controller.policy') -> Policy:
  """Loads a checkpoint; a malformed one is a one-line error naming `file: where`."""
  import flax.serialization
  path = pathlib.Path(path)
  meta_path = path.with_name('policy.json')

  def err(rule):
    return ConfigError(file, where, rule, str(path))
  if not meta_path.is_file():
    raise err(f'no policy.json beside the checkpoint ({meta_path}); write it with '
              'examples/train_ppo.py --out')
  try:
    meta = json.loads(meta_path.read_text())
  except json.JSONDecodeError:
    raise err(f'{meta_path} is not JSON') from None
  if meta.get('format') != FORMAT:
    raise err(f'{meta_path}: format {meta.get("format")!r}, expected {FORMAT}')
  nets = network(meta)
  target = _target(nets, meta)
  try:
    state = flax.serialization.msgpack_restore(path.read_bytes())
  except Exception:   # noqa: BLE001 (msgpack raises several types on a bad file)
    raise err('not a Flax msgpack checkpoint') from None
  want = flax.serialization.to_state_dict(target)
  got_shapes = jax.tree.map(np.shape, state)
  want_shapes = jax.tree.map(np.shape, want)
  if got_shapes != want_shapes:
    raise err(f'array shapes differ from the network of policy.json (observation_size '
              f'{meta["observation_size"]}, action_size {meta["action_size"]}, hidden '
              f'{meta["network"]["hidden"]})')
  params = flax.serialization.from_state_dict(target, state)
  from brax.training.agents.ppo import networks as ppo_networks
  infer = ppo_networks.make_inference_fn(nets)(params, deterministic=True)
  key = jax.random.PRNGKey(0)
  act = lambda obs: infer(obs, key)[0]   # noqa: E731
  return Policy(path, meta, act, hashlib.sha256(path.read_bytes()).hexdigest())


# ------------------------------------------------------------------------------- controller

class Controller:
  """The per-tick controller of a campaign's policy (module doc).

  Args:
    cfg: the campaign's `spec.Controller`; policy: the loaded `Policy`; sim: a group's
      `Simulation`; n_ticks: ticks per world; file: the campaign file (errors).
  """

  def __init__(self, cfg, policy: Policy, sim, n_ticks: int, file: str):
    self.cfg, self.policy, self.task = cfg, policy, TASKS[cfg.task]
    check_env(sim.components, cfg.observe, cfg.actions, file)
    ticks = cfg.control_period_s / sim.dt
    self.control_ticks = int(round(ticks))
    if self.control_ticks < 1 or abs(ticks - self.control_ticks) > 1e-6 * ticks:
      raise ConfigError(file, 'controller.control_period_s', f'must be a whole number of '
                        f'physics ticks (dt = {sim.dt:g} s)', cfg.control_period_s)
    self.joint = cfg.actions[0][0]
    self.components = sim.components
    self.null = sim.null_commands()
    self.n_steps = max(1, n_ticks // self.control_ticks - 1)   # scored steps (module doc)
    self.settle_from = self.n_steps - max(1, self.n_steps // 4)
    out = jax.eval_shape(lambda p, k: sim.outputs(sim.reset(p, k)), sim.default_params(2),
                         jax.random.split(jax.random.PRNGKey(0), 2))
    one = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), out)
    n_obs = jax.eval_shape(lambda o: observation(cfg.observe, o, self.goal_vec(
        jnp.zeros((self.task.goal_size,), jnp.float32))), one).shape[0]
    n_act = len(cfg.actions)
    m = policy.meta
    if n_obs != m['observation_size'] or n_act != m['action_size']:
      raise ConfigError(file, 'controller', f'the policy takes {m["observation_size"]} '
                        f'observations and gives {m["action_size"]} actions; the controller\'s '
                        f'observe / actions give {n_obs} and {n_act}', str(policy.path))
    self.controller = self._controller   # one function object: one compiled program

  def goal_vec(self, goal):
    return jnp.reshape(goal, (self.task.goal_size,)) if self.task.goal_size else None

  def init(self, goals: np.ndarray) -> dict:
    """Per-world carry `{name: (nworld, ...)}` of goals `(nworld, goal_size)`."""
    n = len(goals)
    z = jnp.zeros((n,), jnp.float32)
    return {'tick': jnp.zeros((n,), jnp.int32), 'goal': jnp.asarray(goals, jnp.float32),
            'action': jnp.zeros((n, len(self.cfg.actions)), jnp.float32), 'ret': z,
            'err2': z, 'settled': z, 'steps': z}

  def _controller(self, obs, carry):
    """One world, one tick: acts on the outputs of ticks P−1, 2P−1, …"""
    i = carry['tick']
    act_now = (i + 1) % self.control_ticks == 0
    scored = act_now & (i + 1 >= 2 * self.control_ticks)   # a step has been taken
    goal = carry['goal']
    r, err = self.task.reward(obs, goal, carry['action'], self.joint)
    step = (i + 1) // self.control_ticks - 2                # 0-based index of the scored step
    f = scored.astype(jnp.float32)
    settled = jnp.where(scored & (step >= self.settle_from),
                        jnp.maximum(carry['settled'], jnp.abs(err)), carry['settled'])
    new_action = self.policy.act(observation(self.cfg.observe, obs, self.goal_vec(goal)))
    action = jnp.where(act_now, new_action, carry['action'])
    cmds = commands(self.components, self.cfg.actions, new_action)
    cmds = {cid: jax.tree.map(lambda c, z: jnp.where(act_now, c, z), c, self.null[cid])
            for cid, c in cmds.items()}
    carry = {'tick': i + 1, 'goal': goal, 'action': action, 'ret': carry['ret'] + f * r,
             'err2': carry['err2'] + f * err ** 2, 'settled': settled,
             'steps': carry['steps'] + f}
    return cmds, carry

  def metrics(self, carry) -> dict:
    """`{policy.<metric>: (nworld,) float64}` from the final carry (NaN when a world
    diverged: its criteria fail)."""
    c = {k: np.asarray(v, np.float64) for k, v in carry.items()}
    rms = np.sqrt(c['err2'] / np.maximum(c['steps'], 1.0))
    settled = c['settled']
    ok = np.isfinite(c['ret']) & np.isfinite(settled)
    success = np.where(ok, (settled < self.task.success_tol).astype(np.float64), np.nan)
    vals = {'episode_return': c['ret'], 'tracking_error_rms': rms,
            'settled_error_max': np.where(ok, settled, np.nan), 'success': success}
    return {PREFIX + k: vals[k] for k in METRICS}


def default_goals(task: str, n: int) -> np.ndarray:
  """The goal of every world when the campaign draws none: the middle of the training
  range."""
  t = TASKS[task]
  return np.full((n, t.goal_size), 0.5 * (t.goal_range[0] + t.goal_range[1]), np.float64)

