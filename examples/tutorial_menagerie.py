"""Tutorial: devices on a robot from MuJoCo Menagerie, as it comes
(docs/tutorials/menagerie.md).

The Unitree Go2 of MuJoCo Menagerie (`unitree_go2/scene_mjx.xml`, its MJX variant: primitive
collision geoms, 12 position actuators, an `imu` site, a `home` keyframe) is used unmodified:
the manifest names its keyframe (every world starts standing) and its `imu` site (the gyro and
accelerometer the IMU reads are added before compile, as `fibril_imu_gyro` / `fibril_imu_accel`);
12 motors and 12 encoders bind its actuators and joints by name. Then:

1. `run` from the keyframe (and, for comparison, from `qpos0`): the IMU's specific force in the
   first second, each joint at tick 0 against MuJoCo C's `mj_resetDataKeyframe`;
2. a campaign whose worlds start from the keyframe plus a whole-pose spread (`initial:qpos`,
   one entry for the 12 joints);
3. the RL env, whose every reset starts there too, with the same spread per episode.

    .venv/bin/python examples/tutorial_menagerie.py --out out/tutorials/menagerie
    .venv/bin/python examples/tutorial_menagerie.py --small      # the test suite's size
"""

from __future__ import annotations

import argparse
import pathlib

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import yaml

import fibril_mjx
from fibril_mjx.components.actuators import motor as motor_mod

SCENE = 'package://fibril_sim_models/examples/menagerie/unitree_go2/scene_mjx.xml'
LEGS = ('FR', 'FL', 'RR', 'RL')   # the model's actuator order
PARTS = ('hip', 'thigh', 'calf')
G = 9.81


def manifest(legs=LEGS, keyframe: str | None = 'home', motors: bool = True) -> dict:
  """The manifest: motors on the model's actuators (unless `motors` is False: the MJCF
  actuators then hold the key's ctrl), encoders on its joints, an ICM-42688-P on its `imu`
  site; `keyframe: home` unless None."""
  comps = []
  for leg in legs:
    for part in PARTS:
      if motors:
        comps.append({'id': f'{leg}_{part}', 'type': 'fibril_sim/motor',
                      'config': {'actuator': f'{leg}_{part}', 'application_period_s': 0.002,
                                 'feedback_period_s': 0.002, 'hold_when_uncommanded': True}})
      comps.append({'id': f'{leg}_{part}_enc', 'type': 'fibril_sim/encoder',
                    'config': {'joint': f'{leg}_{part}_joint', 'period_s': 0.002,
                               'resolution_rad': 2 * np.pi / 2 ** 14}})
  comps.append({'id': 'imu', 'type': 'fibril_sim/imu',
                'config': {'profiles': {'device': 'icm42688p_nominal'}, 'site': 'imu'}})
  doc = {'fibril_manifest': 1, 'model': SCENE}
  if keyframe is not None:
    doc['keyframe'] = keyframe
  doc['components'] = comps
  return doc


def specific_force(sim, ticks: int) -> np.ndarray:
  """`|a|` (m/s^2) of the IMU's delivered samples of world 0 over `ticks`."""
  _, tr, _ = sim.rollout(sim.default_params(1), fibril_mjx.world_keys(0, 1), ticks)
  return np.linalg.norm(np.asarray(tr['sensor']['imu'].sample.linear_acceleration)[0], axis=-1)


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--out', default='out/tutorials/menagerie')
  ap.add_argument('--small', action='store_true',
                  help="CI: one leg's encoders and the IMU, no motor components (the MJCF "
                  'actuators hold the key), 0.1 s and 4 worlds on MuJoCo C')
  args = ap.parse_args(argv)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  legs = LEGS[:1] if args.small else LEGS
  ticks = 150 if args.small else 500         # 0.3 s / 1 s at the model's 2 ms step
  settle = 50                                # the key's feet sit 1.6 cm above the floor
  # without motor components nothing closes a loop on physics: MuJoCo C can step it (no MJX
  # compile of the rollout: the small form stays short)
  physics = 'c' if args.small else 'mjx'
  res = {}

  # 1. run from the keyframe
  path = out / 'go2.yaml'
  path.write_text(yaml.safe_dump(manifest(legs, motors=not args.small), sort_keys=False))
  sim = fibril_mjx.load(path, physics=physics)
  print('sensors added at the imu site:', '; '.join(sim.built.probes.describe_added()))
  a = specific_force(sim, ticks)
  res['keyframe_max_dev'] = float(np.abs(a - G).max())
  res['keyframe_settled_max_dev'] = float(np.abs(a[settle:] - G).max())
  print(f'from the keyframe: |a| - g up to {res["keyframe_max_dev"]:.2f} m/s^2 while the feet '
        f'settle ({settle * sim.dt:g} s), then within {res["keyframe_settled_max_dev"]:.3f} '
        f'm/s^2 to {ticks * sim.dt:g} s')
  if not args.small:
    (out / 'go2_qpos0.yaml').write_text(yaml.safe_dump(manifest(legs, None), sort_keys=False))
    a0 = specific_force(fibril_mjx.load(out / 'go2_qpos0.yaml'), ticks)
    res['qpos0_max_dev'] = float(np.abs(a0 - G).max())
    res['qpos0_settled_max_dev'] = float(np.abs(a0[settle:] - G).max())
    print(f'from qpos0:        |a| - g up to {res["qpos0_max_dev"]:.1f} m/s^2, '
          f'{res["qpos0_settled_max_dev"]:.1f} m/s^2 after {settle * sim.dt:g} s')
  # each joint at tick 0 against MuJoCo C's keyframe state
  m = sim.mj_model
  d = mujoco.MjData(m)
  mujoco.mj_resetDataKeyframe(m, d, mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, 'home'))
  st = sim.reset(sim.default_params(1), fibril_mjx.world_keys(0, 1))
  q0 = np.asarray(st.data.qpos[0], np.float64)
  res['tick0_max_dev'] = float(np.abs(q0 - d.qpos).max())
  print(f'tick 0 vs mj_resetDataKeyframe: max |qpos - key| = {res["tick0_max_dev"]:.2e}')

  # 2. a campaign: every world from the keyframe plus a whole-pose spread (one entry)
  from fibril_mjx.workflows.campaign import engine, spec
  camp = {'fibril_campaign': 1, 'manifest': 'go2.yaml', 'worlds': 4 if args.small else 64,
          'seed': 0, 'duration_s': ticks * sim.dt, 'physics': physics,
          'vary': {'initial:qpos': {'dist': 'normal', 'mean': 0.0, 'std': 0.05}},
          'metrics': []}
  (out / 'campaign.yaml').write_text(yaml.safe_dump(camp, sort_keys=False))
  plan = engine.Plan(spec.read(out / 'campaign.yaml'))
  worlds = np.arange(camp['worlds'])
  samples = plan.sample(worlds)
  _, flat = plan.run_worlds(worlds, samples, trace=True)
  enc0 = np.stack([np.asarray(flat[f'truth/{leg}_{part}_enc/position'])[:, 0]
                   for leg in legs for part in PARTS], -1)
  jadr = [m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f'{leg}_{part}_joint')]
          for leg in legs for part in PARTS]
  pose = samples['initial:qpos'][0]                     # (worlds, 12): every hinge of the model
  hinge = [m.jnt_qposadr[j] for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
  want = d.qpos[jadr] + pose[:, [hinge.index(a) for a in jadr]]
  res['campaign_tick0_max_dev'] = float(np.abs(enc0 - want).max())
  print(f'campaign: {len(worlds)} worlds, tick-0 joints = key + their draw within '
        f'{res["campaign_tick0_max_dev"]:.1e} rad (encoder truth)')

  # 3. the RL env: every reset starts at the keyframe plus the same spread
  from fibril_mjx.rl.env import FibrilEnv, Task
  home = {f'{leg}_{part}': float(d.ctrl[m.actuator(f'{leg}_{part}').id])
          for leg in legs for part in PARTS if f'{leg}_{part}' in sim.components}
  ids = list(home)

  def commands(action):   # position targets around the key's pose
    return {cid: motor_mod.command('position', home[cid] + 0.3 * action[i])
            for i, cid in enumerate(ids)}

  task = Task(observe={'imu': ('angular_velocity', 'linear_acceleration')},
              action_size=max(1, len(ids)), commands=commands,
              # one tick per env step: the state a reset returns is tick 0's (with 10, ticks
              # 0 … 9 run in the reset)
              reward=lambda o, goal, a: (jnp.float32(0.0), {}), control_ticks=1)
  env = FibrilEnv(fibril_mjx.load(path), task, vary={'initial:qpos': {'dist': 'normal', 'mean': 0.0,
                                                    'std': 0.05}})
  s = jax.jit(env.reset)(jax.random.PRNGKey(1))
  qpos = np.asarray(s.pipeline_state.data.qpos, np.float64)
  draw = np.asarray(s.info['draws']['initial:qpos'], np.float64)
  res['rl_reset_max_dev'] = float(np.abs(qpos[hinge] - (d.qpos[hinge] + draw)).max())
  print(f'RL reset: joints = key + the episode draw within {res["rl_reset_max_dev"]:.1e} rad')
  return res


if __name__ == '__main__':
  main()
