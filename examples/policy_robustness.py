"""Does device randomization in training buy robustness? Train the leg-hold policy twice and
run both through ONE robustness campaign.

1. `ideal`: the nominal device every episode (`examples/train_ppo.py --ideal`: no per-episode
   draw of the gyro bias, latencies, misalignment or plant);
2. `randomized`: per-episode device randomization (`train_ppo.DEVICE_VARY`: IMU and RS00
   feedback latency, IMU misalignment and scale, joint damping, plus the gyro bias draw).

Both policies, with the same budget and seed, go through `manifests/campaigns/leg_hold_policy.yaml`
(the same worlds: same seed, same draws; only `--policy` differs), and the failure rate of its
`hold` criterion is reported with its 95 % Wilson interval
(`fibril_mjx.analysis.stats.wilson`).

    .venv/bin/python examples/policy_robustness.py --timesteps 200000 --worlds 1024 --out out/robust
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import time

import numpy as np

import fibril_mjx
from fibril_mjx.analysis.stats import wilson
from fibril_mjx.workflows import campaign

HERE = pathlib.Path(__file__).resolve().parent
CAMPAIGN = HERE.parent / 'manifests' / 'campaigns' / 'leg_hold_policy.yaml'
_spec = importlib.util.spec_from_file_location('train_ppo', HERE / 'train_ppo.py')
train_ppo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_ppo)

VARIANTS = {'ideal': {'randomize': False, 'vary': None},
            'randomized': {'randomize': True, 'vary': train_ppo.DEVICE_VARY}}


def run(out, *, timesteps=200_000, envs=64, episode_length=200, seed=0, worlds=None,
        duration_s=None, campaign_file=CAMPAIGN, train_kw=None, log=print) -> dict:
  """Trains both policies, runs both through `campaign_file`; returns (and writes to
  `out/results.json`) `{variant: {training, campaign}}`."""
  out = pathlib.Path(out)
  sim = fibril_mjx.load(train_ppo.MANIFEST)
  results = {}
  for name, kw in VARIANTS.items():
    env = train_ppo.make_env(sim, episode_length=episode_length, **kw)
    t0 = time.perf_counter()
    _, params, _ = train_ppo.train(env, timesteps=timesteps, num_envs=envs,
                                   episode_length=episode_length, seed=seed, run_evals=False,
                                   **(train_kw or {}))
    train_s = time.perf_counter() - t0
    training = {'timesteps': timesteps, 'envs': envs, 'episode_length': episode_length,
                'seed': seed, 'wall_s': round(train_s, 1)}
    path = train_ppo.save_policy(out / name, env, params, training=training,
                                 hidden=(train_kw or {}).get('hidden', (32, 32)))
    t1 = time.perf_counter()
    mc = out / f'{name}_campaign'
    campaign.run(campaign_file, mc, campaign.Overrides(worlds=worlds, duration_s=duration_s,
                                                       policy=path), progress=False)
    camp_s = time.perf_counter() - t1
    rows = campaign.read_rows(mc)
    n = len(rows['world'])
    k = int(np.sum(~rows['pass'].astype(bool)))
    lo, hi = wilson(k, n)
    results[name] = {'training': training, 'policy': str(path), 'campaign': {
        'dir': str(mc), 'worlds': n, 'failures': k, 'failure_rate': k / n, 'wilson95': [lo, hi],
        'median_settled_error_rad': float(np.nanmedian(rows['policy.settled_error_max'])),
        'median_episode_return': float(np.nanmedian(rows['policy.episode_return'])),
        'wall_s': round(camp_s, 1)}}
    log(f'{name:>10}: trained {timesteps} steps ({envs} envs) in {train_s:.0f} s; campaign '
        f'{n} worlds in {camp_s:.0f} s: {k}/{n} fail = {k / n:.3f} [{lo:.3f}, {hi:.3f}]')
  (out / 'results.json').write_text(json.dumps(results, indent=2))
  return results


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--timesteps', type=int, default=200_000)
  ap.add_argument('--envs', type=int, default=64)
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument('--worlds', type=int, default=None, help="replaces the campaign file's")
  ap.add_argument('--out', default='out/robust')
  args = ap.parse_args(argv)
  # before JAX computes: one XLA CPU device (Brax's PPO splits its envs over every device), the
  # host's ISA, a scan over ticks as one kernel
  fibril_mjx.cpu_flags(1, bitwise=False)
  run(args.out, timesteps=args.timesteps, envs=args.envs, seed=args.seed, worlds=args.worlds)
  print(f'wrote {args.out}/results.json')


if __name__ == '__main__':
  main()
