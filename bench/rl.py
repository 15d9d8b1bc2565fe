"""Throughput of the RL env with the device model against a bare MJX Brax env.

Two envs of the same MJCF model (`manifests/rl/leg_hold.xml`) and control rate (5 physics ticks
of 1 ms per env step), both under Brax's `VmapWrapper` and `EpisodeWrapper` with an auto-reset
wrapper, stepped in one `lax.scan` of `--steps` env steps with a fixed action:

- **fibril**: `examples/train_ppo.make_env` — the RS00 motor adapter (5 ms CAN cadence,
  command / feedback transports), the ICM-42688-P IMU (noise, turn-on bias, delivery), the
  observation of delivered samples with `new_data` flags — plus per-episode device
  randomization (`DEVICE_VARY`: IMU latency, misalignment, scale, feedback lag, joint
  damping), under `fibril_mjx.rl.env.wrap_for_training` (auto-reset with new draws).
- **bare**: written here — `mjx.step` ×5 with the action as `ctrl`, ideal observations
  (`qpos`, `qvel`, `sensordata`, goal), the same reward; Brax's own `envs.training.wrap`.
  Its step is `fibril_mjx.physics.mjx.step`: `mujoco.mjx.step` plus the acceleration-stage
  sensors that MJX 3.17 skips in a constraint-free model (this one): without them the
  accelerometer reading would stay at its reset value, not an ideal observation.
- **plain**: the same with `mujoco.mjx.step` as it is (stale accelerometer), for reference
  (`env_steps_ratio_plain_<n>=`).
- **bare_ar**: the bare env under `fibril_mjx.rl.wrappers.AutoReset` instead of Brax's
  `AutoResetWrapper` (which selects over the whole `mjx.Data` at every step): the ratio with
  the same auto-reset on both sides (`env_steps_ratio_same_reset_<n>=`).

Both envs are timed side by side in one process, interleaved, median of `--repeats`. It prints
per env count `env_steps_ratio_<n>=` (fibril env-steps/s ÷ bare_ar env-steps/s: the same
auto-reset on both sides; `env_steps_ratio_brax_reset_<n>=` against the bare env under Brax's
`AutoResetWrapper`, which selects over the whole `mjx.Data` every step) and the device
layer's cost per env step (fibril − bare wall time, in µs per env step and as a share of the
fibril step). The last line is `env_steps_ratio=` of the largest env count. The kernels
each env launches per step, and from which source lines: `bench/rl_kernels.py`.

    nice .venv/bin/python bench/rl.py                       # 1024 and 4096 envs, 300 steps
    nice .venv/bin/python bench/rl.py --envs 256 --steps 50 --repeats 1   # a short run
    .venv/bin/python bench/rl.py --quick   # smoke test: 8 envs x 5 steps, Playground at 4 envs

**Playground** (`--playground-envs`, default 1 64 1024; `--playground-only` skips the
manifest envs): Playground's `CartpoleBalance` (MJX-JAX) bare under Playground's own
`wrap_for_brax_training` and with devices (`fibril_mjx.rl.playground.from_playground`: the
cart motor adapter with 20 ms command and 30 ms feedback latency, command loss 5 %, its feedback
on observations 0 and 3) under `fibril_mjx.rl.wrappers.wrap_for_training`, `--playground-steps` steps:
`env_steps_ratio_playground_<n>=` (devices ÷ bare env-steps/s) and `env_steps_ratio_playground=`
at the largest count.

**Per-episode draws** (`--redraw-envs`, default 64; none skips): Playground's `CheetahRun`
with episodes of `--redraw-episode` steps, side by side: bare under Playground's cached
auto-reset, bare under `full_reset=True` (the env's whole reset every step, the way to new
draws per episode there) and with devices whose draws are redrawn at every episode boundary
(`redraw` below): `redraw_devices_over_cached_<n>=`, `redraw_devices_over_full_reset_<n>=`.

    nice .venv/bin/python bench/rl.py --playground-only --playground-envs 1 64 1024
    nice .venv/bin/python bench/rl.py --playground-only --playground-envs --redraw-envs 64
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import statistics
import time

import jax
import jax.numpy as jnp
import mujoco
from mujoco import mjx

import fibril_mjx
from fibril_mjx.physics.mjx import mjx as ideal_mjx
from fibril_mjx.rl import wrappers
from fibril_mjx.rl.wrappers import wrap_for_training

REPO = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location('train_ppo', REPO / 'examples' / 'train_ppo.py')
train_ppo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train_ppo)


class BareEnv:
  """A bare MJX Brax env of `mj_model`: action × EFFORT_SCALE → ctrl, `control_ticks`
  `mjx.step`s, ideal observations, the leg-hold reward; `restart` and the episode fields for
  `wrappers.AutoReset`, as `FibrilEnv` has them (a new episode is a `reset`)."""
  EPISODE_FIELDS = ('pipeline_state',)
  EPISODE_INFO = ('goal',)

  def __init__(self, mj_model: mujoco.MjModel, control_ticks: int, step=ideal_mjx.step):
    self.physics_step = step
    self.mx = mjx.put_model(mj_model)
    d = mujoco.MjData(mj_model)
    mujoco.mj_forward(mj_model, d)
    self.data0 = mjx.put_data(mj_model, d)
    self.control_ticks = control_ticks

  @property
  def observation_size(self):
    return 2 + int(self.mx.nsensordata) + 1

  @property
  def action_size(self):
    return 1

  @property
  def unwrapped(self):
    return self

  @property
  def backend(self):
    return 'mjx'

  def _obs(self, data, goal):
    return jnp.concatenate([data.qpos, data.qvel, data.sensordata, goal[None]])

  def reset(self, rng):
    from brax.envs.base import State
    goal = jax.random.uniform(rng, (), jnp.float32, -train_ppo.TARGET_RAD, train_ppo.TARGET_RAD)
    data = self.data0
    z = jnp.zeros((), jnp.float32)
    return State(data, self._obs(data, goal), z, z, {'angle_error_rad': z}, {'goal': goal})

  def restart(self, state, rng):
    del state
    return self.reset(rng)

  def step(self, state, action):
    ctrl = train_ppo.EFFORT_SCALE * jnp.clip(action, -1.0, 1.0)
    data = state.pipeline_state.replace(ctrl=ctrl)
    data = jax.lax.scan(lambda d, _: (self.physics_step(self.mx, d), None), data, None,
                        length=self.control_ticks)[0]
    err = data.qpos[0] - state.info['goal']
    reward = -err ** 2 - 0.01 * jnp.sum(action ** 2)
    return state.replace(pipeline_state=data, obs=self._obs(data, state.info['goal']),
                         reward=reward, metrics={'angle_error_rad': jnp.abs(err)})


def programs(env, n_envs: int, n_steps: int):
  """`(reset, run)` jitted: `run(state)` = `n_steps` env steps in one scan."""
  action = jnp.full((n_envs, env.action_size), 0.2, jnp.float32)
  reset = jax.jit(lambda k: env.reset(jax.random.split(k, n_envs)))

  @jax.jit
  def run(state):
    return jax.lax.scan(lambda s, _: (env.step(s, action), None), state, None,
                        length=n_steps)[0]
  return reset, run


def timed(fn, *a):
  t0, c0 = time.perf_counter(), time.process_time()
  out = jax.block_until_ready(fn(*a))
  return out, time.perf_counter() - t0, time.process_time() - c0


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--envs', type=int, nargs='+', default=[1024, 4096])
  ap.add_argument('--steps', type=int, default=300)
  ap.add_argument('--repeats', type=int, default=3)
  ap.add_argument('--episode-length', type=int, default=200)
  ap.add_argument('--no-vary', action='store_true', help='fibril env without DEVICE_VARY')
  ap.add_argument('--playground-envs', type=int, nargs='*', default=[1, 64, 1024])
  ap.add_argument('--playground-steps', type=int, default=200)
  ap.add_argument('--playground-only', action='store_true')
  ap.add_argument('--redraw-envs', type=int, nargs='*', default=[64],
                  help='CheetahRun env counts of the per-episode redraw cost (none: skip)')
  ap.add_argument('--redraw-steps', type=int, default=200)
  ap.add_argument('--redraw-episode', type=int, default=50)
  ap.add_argument('--quick', action='store_true',
                  help='smoke test: 8 envs x 5 steps, one repeat; Playground 4 envs x 5 steps; '
                       'no CheetahRun')
  args = ap.parse_args(argv)
  if args.quick:
    args.envs, args.steps, args.repeats = [8], 5, 1
    args.playground_envs, args.playground_steps = [4] if args.playground_envs else [], 5
    args.redraw_envs = []   # CheetahRun's three compilations: `tests/rl/test_playground.py`
    # runs the redraw path
  # before JAX computes: one XLA CPU device, the host's ISA, a scan over ticks as one kernel
  fibril_mjx.cpu_flags(1, bitwise=False)
  train_ppo.brax_jax_compat()
  from brax.envs.wrappers import training
  print(f'jax {jax.__version__} {jax.default_backend()} devices={len(jax.devices())} '
        f'cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f}')
  if args.playground_envs:
    playground(args)
  if args.redraw_envs:
    redraw(args)
  if args.playground_only:
    return
  sim = fibril_mjx.load(train_ppo.MANIFEST)
  fib = train_ppo.make_env(sim, episode_length=args.episode_length, randomize=False,
                           vary=None if args.no_vary else train_ppo.DEVICE_VARY)
  bare = BareEnv(sim.physics_model, fib.task.control_ticks)
  envs = {'fibril': wrap_for_training(fib, args.episode_length),
          'bare': training.wrap(bare, args.episode_length),
          'plain': training.wrap(BareEnv(sim.physics_model, fib.task.control_ticks,
                                         step=mjx.step), args.episode_length),
          'bare_ar': wrappers.AutoReset(training.EpisodeWrapper(training.VmapWrapper(bare),
                                                                args.episode_length, 1))}
  ratios = {}
  for n in args.envs:
    progs, states, times, cpu = {}, {}, {k: [] for k in envs}, {k: [] for k in envs}
    for name, env in envs.items():
      reset, run = progs[name] = programs(env, n, args.steps)
      s, t_reset, _ = timed(reset, jax.random.PRNGKey(0))
      s, t_first, _ = timed(run, s)
      states[name] = s
      print(f'  {n} envs {name}: reset+compile {t_reset:.1f} s, first run incl. compile '
            f'{t_first:.1f} s', flush=True)
    for r in range(args.repeats):
      order = list(envs) if r % 2 == 0 else list(envs)[::-1]
      for name in order:
        states[name], t, c = timed(progs[name][1], states[name])
        times[name].append(t)
        cpu[name].append(c)
    med = {k: statistics.median(v) for k, v in times.items()}
    sps = {k: n * args.steps / med[k] for k in envs}
    ratios[n] = sps['fibril'] / sps['bare_ar']   # the same auto-reset on both sides
    per_step = {k: med[k] / (n * args.steps) * 1e6 for k in envs}
    device = per_step['fibril'] - per_step['bare']
    cpu_ratio = statistics.median(cpu['bare']) / statistics.median(cpu['fibril'])
    rng = {k: f'[{min(v):.2f}-{max(v):.2f} s]' for k, v in times.items()}
    print(f'{n} envs x {args.steps} steps: fibril {sps["fibril"]:,.0f} env-steps/s '
          f'{rng["fibril"]}, bare {sps["bare"]:,.0f} {rng["bare"]}, plain mjx '
          f'{sps["plain"]:,.0f} {rng["plain"]}; CPU-time ratio fibril/bare {cpu_ratio:.3f}')
    print(f'  device layer: {device:.3f} us per env step ({device / per_step["fibril"]:.1%} '
          f'of the fibril step; bare {per_step["bare"]:.3f} us)')
    print(f'  bare under AutoReset: {sps["bare_ar"]:,.0f} env-steps/s {rng["bare_ar"]}')
    print(f'env_steps_ratio_brax_reset_{n}={sps["fibril"] / sps["bare"]:.3f}')
    print(f'env_steps_ratio_plain_{n}={sps["fibril"] / sps["plain"]:.3f}')
    print(f'env_steps_ratio_{n}={ratios[n]:.3f}', flush=True)
  print(f'env_steps_ratio={ratios[max(ratios)]:.3f}')


PLAYGROUND_DEVICES = {
    'components': [{'id': 'cart', 'type': 'fibril_sim/motor',
                    'config': {'actuator': 'slide', 'application_period_s': 0.01,
                               'command_latency_s': 0.02, 'command_loss_probability': 0.05,
                               'feedback_latency_s': 0.03}}],
    'observe': [{'obs': [0, 1], 'component': 'cart', 'field': 'position'},
                {'obs': [3, 4], 'component': 'cart', 'field': 'velocity'}],
    'act': [{'actuator': 'slide', 'component': 'cart', 'command': 'effort', 'scale': 10.0}]}
# CheetahRun (obs = qpos[1:] then qvel): a motor adapter on the back thigh, its feedback on the
# thigh's position (obs 2) and velocity (obs 11), its feedback lag and a Params field drawn per
# episode
CHEETAH_DEVICES = {
    'components': [{'id': 'bthigh', 'type': 'fibril_sim/motor',
                    'config': {'actuator': 'bthigh', 'application_period_s': 0.01,
                               'command_latency_s': 0.01, 'feedback_latency_s': 0.02}}],
    'observe': [{'obs': [2, 3], 'component': 'bthigh', 'field': 'position'},
                {'obs': [11, 12], 'component': 'bthigh', 'field': 'velocity'}],
    'act': [{'actuator': 'bthigh', 'component': 'bthigh', 'command': 'effort', 'scale': 1.0}],
    'vary': {'bthigh.feedback_latency_s': {'dist': 'uniform', 'low': 0.0, 'high': 0.03},
             'bthigh.feedback_current_per_force': {'dist': 'uniform', 'low': 0.5,
                                                   'high': 1.5}}}


def side_by_side(envs: dict, n: int, steps: int, repeats: int, label: str) -> dict:
  """`{name: env-steps/s}` of each wrapped env at `n` envs: `steps` steps in one scan, timed
  interleaved (the order alternates per repeat), median of `repeats`."""
  progs, states, times = {}, {}, {k: [] for k in envs}
  for name, e in envs.items():
    reset, run = progs[name] = programs(e, n, steps)
    s, _, _ = timed(reset, jax.random.PRNGKey(0))
    states[name], t_first, _ = timed(run, s)
    print(f'  {label} {n} envs {name}: first run incl. compile {t_first:.1f} s', flush=True)
  for r in range(repeats):
    for name in (list(envs) if r % 2 == 0 else list(envs)[::-1]):
      states[name], t, _ = timed(progs[name][1], states[name])
      times[name].append(t)
  return {k: n * steps / statistics.median(v) for k, v in times.items()}


def playground(args):
  """`env_steps_ratio_playground_<n>=`: Playground cartpole with devices
  (`playground.from_playground` under `wrappers.wrap_for_training`) / without (Playground's
  `wrap_for_brax_training`, its cached auto-reset)."""
  from mujoco_playground import registry, wrapper   # optional (the playground extra)
  from fibril_mjx.rl.playground import from_playground
  env = registry.load('CartpoleBalance', config_overrides={'impl': 'jax'})
  envs = {'devices': wrappers.wrap_for_training(from_playground(
              env, PLAYGROUND_DEVICES), 1000),
          'bare': wrapper.wrap_for_brax_training(env, 1000)}
  ratios = {}
  for n in args.playground_envs:
    sps = side_by_side(envs, n, args.playground_steps, args.repeats, 'playground')
    ratios[n] = sps['devices'] / sps['bare']
    print(f'playground {n} envs x {args.playground_steps} steps: devices {sps["devices"]:,.0f} '
          f'env-steps/s, bare {sps["bare"]:,.0f}')
    print(f'env_steps_ratio_playground_{n}={ratios[n]:.3f}', flush=True)
  print(f'env_steps_ratio_playground={ratios[max(ratios)]:.3f}', flush=True)


def redraw(args):
  """The cost of per-episode device draws on Playground's CheetahRun (whose `reset` settles
  the model for 200 physics steps), `--redraw-steps` steps with episodes of
  `--redraw-episode` steps, at each of `--redraw-envs`:

  - **cached**: the bare env under Playground's `wrap_for_brax_training` (cached first state:
    no redraw, no reset cost);
  - **full_reset**: the same with `full_reset=True` (the env's whole reset at every step, so
    that each episode gets new draws);
  - **devices**: `fibril_mjx.rl.playground.from_playground(CHEETAH_DEVICES)` under
    `wrappers.wrap_for_training` (cached physics, devices redrawn at each boundary).

  Prints env-steps/s of each and `redraw_devices_over_cached_<n>=`,
  `redraw_devices_over_full_reset_<n>=`."""
  from mujoco_playground import registry, wrapper
  from fibril_mjx.rl.playground import from_playground
  env = registry.load('CheetahRun', config_overrides={'impl': 'jax'})
  length = args.redraw_episode
  envs = {'cached': wrapper.wrap_for_brax_training(env, length),
          'full_reset': wrapper.wrap_for_brax_training(env, length, full_reset=True),
          'devices': wrappers.wrap_for_training(from_playground(
              env, CHEETAH_DEVICES), length)}
  for n in args.redraw_envs:
    sps = side_by_side(envs, n, args.redraw_steps, args.repeats, 'cheetah')
    print(f'cheetah {n} envs x {args.redraw_steps} steps, episodes of {length}: '
          + ', '.join(f'{k} {v:,.0f}' for k, v in sps.items()) + ' env-steps/s')
    print(f'redraw_devices_over_cached_{n}={sps["devices"] / sps["cached"]:.3f}')
    print(f'redraw_devices_over_full_reset_{n}={sps["devices"] / sps["full_reset"]:.1f}',
          flush=True)


if __name__ == '__main__':
  main()
