"""The attitude EKFs of `fibril_mjx/attitude_ekf` against outside filters on the same samples.

One process: each manifest is rolled out (`--worlds`, `--duration`, `--seed`); the EKF
components run in the loop on the IMU's delivered samples; the same delivered samples (with
their sample times) are then fed on the host to x-io Fusion (`imufusion`, default settings:
gain 0.5, NWU) and to the `ahrs` package's EKF, Mahony and Madgwick filters (defaults,
initialized from the first accelerometer sample). Score: tilt error (angle between the true and
estimated gravity directions in the IMU frame, yaw excluded) vs the true site attitude at each
sample's tick, samples after `--skip-s`; RMS per world, then the mean over worlds.

  pip install imufusion ahrs                # peers, for this bench only
  .venv/bin/python bench/ekf_vs_peers.py    # both cases, 16 worlds, 10 s (~3 min on 2 cores)
  .venv/bin/python bench/ekf_vs_peers.py --quick --no-peers   # smoke: first case, 2 worlds, 2 s

Prints `case=<manifest stem>` then one `tilt_rms_deg_<filter>=<deg>` line per filter.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
CASES = ('manifests/imu_ekf.yaml', 'manifests/imu_ekf_violent.yaml')
EKFS = {'ekf_quat': 'quaternion_ekf', 'ekf_rpy': 'rpy_ekf'}


def up_in_body(q):
  w, x, y, z = np.moveaxis(np.asarray(q, np.float64), -1, 0)
  return np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z], -1)


def tilt_deg(q_est, q_true):
  u, v = up_in_body(q_est), up_in_body(q_true)
  return np.degrees(np.arctan2(np.linalg.norm(np.cross(u, v), axis=-1), np.sum(u * v, -1)))


def rollout(manifest, worlds, duration_s, seed):
  import fibril_mjx
  sim = fibril_mjx.load(str(ROOT / manifest))
  params = sim.default_params(n_worlds=worlds)
  keys = fibril_mjx.world_keys(seed=seed, n_worlds=worlds)
  _, trace, _ = sim.rollout(params, keys, n_ticks=int(round(duration_s / sim.dt)))
  imu, truth = trace['sensor']['imu'], trace['truth']['imu']
  flat = {'sensor/imu/new_data': imu.new_data, 'sensor/imu/sample_tick': imu.sample_tick,
          'sensor/imu/angular_velocity': imu.sample.angular_velocity,
          'sensor/imu/linear_acceleration': imu.sample.linear_acceleration,
          'truth/imu/orientation': truth['orientation']}
  for cid in EKFS:
    flat[f'sensor/{cid}/orientation'] = trace['sensor'][cid].sample.orientation
  return {k: np.asarray(v) for k, v in flat.items()}, float(sim.dt)


def samples(flat, dt):
  """Per world: delivered (gyro, accel, sample period, sample time, true attitude, index)."""
  new = flat['sensor/imu/new_data'].astype(bool)
  out = []
  for w in range(new.shape[0]):
    idx = np.nonzero(new[w])[0]
    ticks = flat['sensor/imu/sample_tick'][w, idx]
    out.append(dict(gyro=flat['sensor/imu/angular_velocity'][w, idx].astype(np.float64),
                    accel=flat['sensor/imu/linear_acceleration'][w, idx].astype(np.float64),
                    dts=np.diff(ticks, prepend=ticks[0]) * dt, t=ticks * dt,
                    q_true=flat['truth/imu/orientation'][w, ticks].astype(np.float64), idx=idx))
  return out


def fusion(s, dt):
  import imufusion
  f = imufusion.Ahrs()
  f.set_settings(imufusion.AhrsSettings(sample_rate=1.0 / dt,
                                        convention=imufusion.CONVENTION_NWU))
  q = np.zeros((len(s['gyro']), 4))
  for k, (g, a, h) in enumerate(zip(s['gyro'], s['accel'], s['dts'])):
    f.set_sample_period(h if h > 0 else dt)
    f.update_no_magnetometer(np.degrees(g), a / 9.80665)
    q[k] = f.get_quaternion()
  return q


def ahrs_filter(name):
  """The `ahrs` package's filters. Their quaternions are body → world with the expected
  accelerometer direction `R(q)ᵀ [0, 0, 1]` (for the EKF that is its `frame='NED'` reference,
  `a_ref = [0, 0, 1]`), which matches a z-up specific force that reads +g when level."""
  def run(s, dt):
    from ahrs.common.orientation import acc2q
    from ahrs.filters import EKF, Madgwick, Mahony
    f = {'ahrs_ekf': lambda: EKF(frequency=1.0 / dt, frame='NED'),
         'mahony': lambda: Mahony(frequency=1.0 / dt),
         'madgwick': lambda: Madgwick(frequency=1.0 / dt)}[name]()
    step = f.update if name == 'ahrs_ekf' else f.updateIMU
    q = np.zeros((len(s['gyro']), 4))
    q[0] = acc2q(s['accel'][0])
    for k in range(1, len(q)):
      q[k] = step(q[k - 1], s['gyro'][k], s['accel'][k], dt=s['dts'][k])
    return q
  return run


PEERS = {'fusion': fusion, 'ahrs_ekf': ahrs_filter('ahrs_ekf'),
         'mahony': ahrs_filter('mahony'), 'madgwick': ahrs_filter('madgwick')}


def score(per_world, skip_s):
  rms = [np.sqrt(np.mean(tilt_deg(q, s['q_true'])[s['t'] >= skip_s] ** 2)) for q, s in per_world]
  return float(np.mean(rms))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('manifests', nargs='*', default=None, help='default: both cases')
  ap.add_argument('--worlds', type=int, default=None, help='default 16 (--quick 2)')
  ap.add_argument('--duration', type=float, default=None, help='default 10 s (--quick 2 s)')
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument('--skip-s', type=float, default=None, help='default 1 s (--quick 0.5 s)')
  ap.add_argument('--no-peers', action='store_true', help='only the EKF components')
  ap.add_argument('--quick', action='store_true',
                  help='smoke test: the first case, 2 worlds, 2 s, scored after 0.5 s')
  args = ap.parse_args(argv)
  q = args.quick
  args.manifests = args.manifests or list(CASES[:1] if q else CASES)
  args.worlds = args.worlds or (2 if q else 16)
  args.duration = args.duration or (2.0 if q else 10.0)
  args.skip_s = args.skip_s if args.skip_s is not None else (0.5 if q else 1.0)
  import fibril_mjx
  # before JAX computes: one XLA CPU device, the host's ISA, a scan over ticks as one kernel
  fibril_mjx.cpu_flags(1, bitwise=False)
  for manifest in args.manifests:
    t0 = time.perf_counter()
    flat, dt = rollout(manifest, args.worlds, args.duration, args.seed)
    per = samples(flat, dt)
    print(f'case={pathlib.Path(manifest).stem} worlds={args.worlds} duration_s={args.duration} '
          f'rollout_s={time.perf_counter() - t0:.1f}', flush=True)
    for cid, name in EKFS.items():
      q = flat[f'sensor/{cid}/orientation']
      rms = score([(q[w, s['idx']], s) for w, s in enumerate(per)], args.skip_s)
      print(f'tilt_rms_deg_{name}={rms:.3f}', flush=True)
    if args.no_peers:
      continue
    for name, run in PEERS.items():
      print(f'tilt_rms_deg_{name}={score([(run(s, dt), s) for s in per], args.skip_s):.3f}',
            flush=True)


if __name__ == '__main__':
  main()
