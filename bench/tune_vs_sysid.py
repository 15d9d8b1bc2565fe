"""fibril_mjx tune vs `mujoco.sysid`: the same problems, the same recordings, the same start.

    .venv/bin/pip install 'mujoco[sysid]==3.17.0'      # keeps mujoco 3.17.0 / jax 0.10.2
    .venv/bin/python bench/tune_vs_sysid.py [--only a,b,c] [--duration 2.0] [--quick]

Problems (recordings simulated by fibril_mjx with known values and the sensor noise on; both
tools start 30 % off the truth, biases at 0):

  (a) dcmotor rig: an arm on a vertical hinge driven by a position-input `<dcmotor>` whose
      controller saturates its voltage; an IMU on the arm. Fit resistance, motor constant,
      joint damping, armature (2 s of motion).
  (b) the turntable with the R6093U AHRS: three joint dampings, three gyro biases,
      accelerometer scale (3 axes) — 9 parameters.
  (c) the same rig with 15 parameters: dampings, armatures, gyro biases, accelerometer scale
      and bias.

`mujoco.sysid` (least squares, finite-difference Jacobians over batched `mujoco.rollout`, its
`mujoco` backend) sees the compiled MuJoCo model with the same control signal and the
recorded samples at their sample times; the device-model terms (gyro bias, accelerometer
scale / bias) are measurement parameters applied in its `modify_residual` hook, as its
`apply_bias` / `apply_gain` do. It does not model the AHRS latency, output resolution or the
100 Hz schedule (it compares the physics sensor at the sample time).

Printed per problem p: `tune_time_ratio_p=` (sysid wall time ÷ fibril_mjx wall time, each to
its own converged residual; fibril_mjx's time includes its XLA compilation),
`tune_param_error_fibril_p=` / `tune_param_error_sysid_p=` (mean relative error vs the truth;
for the biases, relative to the bias magnitude), and both final losses.
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fibril_mjx  # noqa: E402
from fibril_mjx.io import recording  # noqa: E402
from fibril_mjx.workflows import tune  # noqa: E402

TURNTABLE = ROOT / 'manifests' / 'tuning' / 'turntable_ahrs.yaml'

DCMOTOR_XML = """\
<mujoco model="dcmotor_arm">
  <option timestep="0.002"/>
  <worldbody>
    <body name="arm">
      <joint name="hinge" type="hinge" axis="0 0 1" damping="0.02" armature="0.005"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="1" contype="0" conaffinity="0"/>
      <site name="imu" pos="0.2 0 0"/>
    </body>
  </worldbody>
  <actuator>
    <dcmotor name="motor" joint="hinge" resistance="2" motorconst="0.1" input="pos"
             controller="8 0 0.4 6"/>
  </actuator>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""


def dcmotor_manifest(tmp: pathlib.Path) -> pathlib.Path:
  (tmp / 'dcmotor_arm.xml').write_text(DCMOTOR_XML)
  m = {'fibril_manifest': 1, 'model': 'dcmotor_arm.xml',
       'actuator_script': [{'actuator': 'motor', 'waveform': 'sine', 'amplitude': 0.6,
                            'frequency_hz': 0.9}],
       'components': [{'id': 'imu', 'type': 'fibril_sim/imu', 'config': {
           'profiles': {'device': 'icm42688p_nominal'}, 'gyroscope_sensor': 'gyro',
           'accelerometer_sensor': 'accel', 'period_s': 0.004}}]}
  p = tmp / 'dcmotor_arm.yaml'
  p.write_text(yaml.safe_dump(m))
  return p


# problem: (manifest, truth {name: value}, params (tune entries), loss, sensor names)
def problems(tmp):
  a_truth = {'actuator:motor.resistance': 2.0, 'actuator:motor.motorconst': 0.1,
             'joint:hinge.damping': 0.02, 'joint:hinge.armature': 0.005}
  tt = {'joint:yaw.damping': 0.35, 'joint:tilt.damping': 0.6, 'joint:roll.damping': 0.45}
  bias = {'ahrs.angular_velocity_bias': [0.01, -0.008, 0.005]}
  scale = {'ahrs.linear_acceleration_scale': [1.02, 0.98, 1.01]}
  arm = {'joint:yaw.armature': 0.012, 'joint:tilt.armature': 0.008, 'joint:roll.armature': 0.01}
  abias = {'ahrs.linear_acceleration_bias': [0.05, -0.04, 0.03]}
  b_truth = {**tt, **bias, **scale}
  c_truth = {**tt, **arm, **bias, **scale, **abias}
  ahrs_loss = [{'component': 'ahrs', 'field': 'angular_velocity', 'weight': 588.0},
               {'component': 'ahrs', 'field': 'linear_acceleration', 'weight': 50.0}]
  imu_loss = [{'component': 'imu', 'field': 'angular_velocity', 'weight': 100.0},
              {'component': 'imu', 'field': 'linear_acceleration', 'weight': 10.0}]
  return {
      'a': (dcmotor_manifest(tmp), a_truth, imu_loss, ('imu', 'gyro', 'accel')),
      'b': (TURNTABLE, b_truth, ahrs_loss, ('ahrs', 'imu_sensor_gyro', 'imu_sensor_accel')),
      'c': (TURNTABLE, c_truth, ahrs_loss, ('ahrs', 'imu_sensor_gyro', 'imu_sensor_accel')),
  }


def truth_overrides(truth):
  mjcf, comps = [], []
  for k, v in truth.items():
    if k.startswith('actuator:'):
      continue   # the dcmotor's true R, K are the MJCF values themselves
    if ':' in k:
      el, rest = k.split(':', 1)
      name, attr = rest.rsplit('.', 1)
      mjcf.append({'element': el, 'name': name, 'attribute': attr, 'value': v})
    else:
      cid, field = k.split('.', 1)
      comps.append({'component': cid, 'field': field, 'value': v})
  return {'mjcf': mjcf, 'components': comps}


def param_entries(truth):
  """Tune-file parameters starting 30 % off (biases at 0), and the flat truth vector."""
  out, flat = [], []
  for k, v in truth.items():
    if ':' in k:
      out.append({'mjcf': k, 'bounds': [v * 0.2, v * 5.0], 'log': True, 'init': v * 1.3})
      flat.append(v)
    else:
      cid, field = k.split('.', 1)
      v = np.asarray(v, float)
      if 'scale' in field:
        out.append({'component': cid, 'field': field, 'bounds': [0.5, 1.5], 'init': 1.0})
      else:
        out.append({'component': cid, 'field': field, 'bounds': [-0.5, 0.5], 'init': 0.0})
      flat.extend(v.tolist())
  return out, np.asarray(flat)


def rel_error(est, truth):
  return float(np.mean(np.abs(est - truth) / np.abs(truth)))


# ------------------------------------------------------------------------------ fibril_mjx


def run_fibril(tmp, key, manifest, truth, loss, duration, iterations, window_s):
  recs = []
  # train and held-out: two worlds (independent noise) of one batched run
  for i, rec in enumerate(tune.simulate_recordings(manifest, overrides=truth_overrides(truth),
                                                   seed=1, duration_s=duration,
                                                   worlds=(0, 1))):
    recs.append(str(recording.write_recording(tmp / f'{key}_{i}.npz', rec)))
  params, flat = param_entries(truth)
  spec = {'fibril_tune': 1, 'manifest': str(manifest), 'train': [recs[0]], 'heldout': [recs[1]],
          'parameters': params, 'loss': loss,
          'optimizer': {'method': 'gauss_newton', 'iterations': iterations, 'starts': 1}}
  if window_s:
    spec['windows'] = {'length_s': window_s}
  path = tmp / f'{key}_tune.yaml'
  path.write_text(yaml.safe_dump(spec))
  t0 = time.perf_counter()
  res = tune.tune(path, progress=False)
  wall = time.perf_counter() - t0
  return res, flat, wall, recs[0]


# ------------------------------------------------------------------------------ mujoco.sysid


def run_sysid(res, rec_path, truth, sensors, iterations):
  from mujoco import sysid
  prob = res.problem
  sim = prob.sim
  m0 = sim.mj_model
  rec = recording.read_recording(rec_path)
  cid, gyro_name, accel_name = sensors
  s = rec.sensor(cid)
  t_meas = np.asarray(s['sample_time_s'])
  y_meas = np.concatenate([np.asarray(s['angular_velocity']),
                           np.asarray(s['linear_acceleration'])], axis=1)
  w = np.concatenate([np.full(3, prob.spec.loss[0].weight[0]),
                      np.full(3, prob.spec.loss[1].weight[0])])
  dt = float(m0.opt.timestep)
  n = int(round(t_meas[-1] / dt)) + 2
  t_ctrl = np.arange(n) * dt
  ctrl = np.asarray(jax.vmap(lambda t: sim.actuator_script.ctrl(jnp.zeros(m0.nu), t))(
      jnp.asarray(t_ctrl, jnp.float32)), np.float64)
  gadr = int(m0.sensor_adr[m0.sensor(gyro_name).id])
  aadr = int(m0.sensor_adr[m0.sensor(accel_name).id])

  params = sysid.ParameterDict()
  measurement = {}
  for q in prob.params:
    lo, hi = q.lower, q.upper
    nm = q.name.replace(':', '_').replace('.', '_').replace('[', '_').replace(']', '')
    params.add(sysid.Parameter(nm, nominal=q.init, min_value=lo, max_value=hi))
    params[nm].value[:] = q.init
    if q.kind == 'component':
      measurement[nm] = (q.target[1], q.index[0] if q.index else 0)
  names = list(params.keys())

  def build_model(p, _spec):
    m = copy.deepcopy(m0)
    for q, nm in zip(prob.params, names):
      v = float(p[nm].value[0])
      if q.kind == 'mjx':
        fld, idx = q.target
        arr = getattr(m, fld)
        if fld == 'geom_friction' or fld.startswith('actuator_'):
          arr[idx] = v
        else:
          arr[list(idx)] = v
      elif q.kind == 'dcmotor':
        aid = int(sim.dcmotor.actuator_id[q.target[1]])
        m.actuator_gainprm[aid, 0 if q.target[0] == 'resistance_ohm' else 1] = v
    return m

  def modify_residual(p, pred, measured, model, return_pred_all, state=None):
    del measured, model, return_pred_all, state
    y = pred.resample(t_meas).data
    g = y[:, gadr:gadr + 3].copy()
    a = y[:, aadr:aadr + 3].copy()
    for nm, (field, k) in measurement.items():
      v = float(p[nm].value[0])
      if field == 'angular_velocity_bias':
        g[:, k] += v
      elif field == 'linear_acceleration_scale':
        a[:, k] *= v
      elif field == 'linear_acceleration_bias':
        a[:, k] += v
    r = (np.concatenate([g, a], axis=1) - y_meas) * w
    return r.reshape(-1), pred, pred

  class _Spec:   # ModelSequences compiles its spec once; hand it the compiled model
    def compile(self):
      return m0
  spec = _Spec()
  data = __import__('mujoco').MjData(m0)
  init = sysid.create_initial_state(m0, data.qpos, data.qvel, data.act)
  control_ts = sysid.TimeSeries(t_ctrl, ctrl)
  sensor_ts = sysid.TimeSeries.from_names(t_ctrl, np.zeros((n, m0.nsensordata)), m0)
  ms = sysid.ModelSequences('bench', spec, 'rec', init, control_ts, sensor_ts)
  residual_fn = sysid.build_residual_fn(models_sequences=[ms], build_model=build_model,
                                        modify_residual=modify_residual)
  t0 = time.perf_counter()
  opt, _ = sysid.optimize(initial_params=params, residual_fn=residual_fn, optimizer='mujoco',
                          verbose=False, max_iters=iterations)
  wall = time.perf_counter() - t0
  est = np.array([float(opt[nm].value[0]) for nm in names])
  r, _, _ = residual_fn(est, opt)
  loss = float(np.mean(np.concatenate(r) ** 2))
  return est, wall, loss


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--only', default='a,b,c')
  ap.add_argument('--duration', type=float, default=2.0)
  ap.add_argument('--iterations', type=int, default=20)
  ap.add_argument('--window', type=float, default=0.0,
                  help='multiple-shooting window in s (default: the whole recording)')
  ap.add_argument('--quick', action='store_true',
                  help='1 s recordings, 10 iterations (a few minutes per problem on 2 cores)')
  a = ap.parse_args(argv)
  if a.quick:
    a.duration, a.iterations = min(a.duration, 1.0), min(a.iterations, 10)
  rows = []
  with tempfile.TemporaryDirectory() as d:
    tmp = pathlib.Path(d)
    probs = problems(tmp)
    for key in a.only.split(','):
      manifest, truth, loss, sensors = probs[key]
      res, flat, wall_f, rec = run_fibril(tmp, key, manifest, truth, loss, a.duration,
                                          a.iterations, a.window)
      est_s, wall_s, loss_s = run_sysid(res, rec, truth, sensors, a.iterations)
      ef, es = rel_error(res.estimate, flat), rel_error(est_s, flat)
      rows.append((key, len(flat), wall_f, wall_s, res.train_loss, loss_s, ef, es))
      print(f'tune_params_{key}={len(flat)}')
      print(f'tune_wall_s_fibril_{key}={wall_f:.1f}')
      print(f'tune_wall_s_sysid_{key}={wall_s:.1f}')
      print(f'tune_loss_fibril_{key}={res.train_loss:.4g}')
      print(f'tune_loss_sysid_{key}={loss_s:.4g}')
      print(f'tune_param_error_fibril_{key}={ef:.4g}')
      print(f'tune_param_error_sysid_{key}={es:.4g}')
      print(f'tune_time_ratio_{key}={wall_s / wall_f:.3g}')
      print(f'tune_poorly_identifiable_{key}=' + ('; '.join(res.collinear) or 'none'),
            flush=True)
  print('\n| problem | params | fibril_mjx s | sysid s | loss fibril | loss sysid | '
        'rel. error fibril | rel. error sysid |')
  print('| --- | --- | --- | --- | --- | --- | --- | --- |')
  for r in rows:
    print(f'| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.4g} | {r[5]:.4g} | '
          f'{r[6]:.3g} | {r[7]:.3g} |')


if __name__ == '__main__':
  main()
