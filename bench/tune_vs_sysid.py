"""fibril_mjx tune vs `mujoco.sysid` (and SciPy): the same problems, recordings and start.

    .venv/bin/pip install 'mujoco[sysid]==3.17.0'      # keeps mujoco 3.17.0 / jax 0.10.2
    .venv/bin/python bench/tune_vs_sysid.py [--only a,b,c,d,e,f,g] [--quick]

Problems (recordings simulated with known values and the sensor noise on; both tools start
30 % off the truth, biases at 0):

  (a) dcmotor rig: an arm on a vertical hinge driven by a position-input `<dcmotor>` whose
      controller saturates its voltage; an IMU on the arm. Fit resistance, motor constant,
      joint damping, armature (2 s).
  (b) the turntable with the R6093U AHRS: three joint dampings, three gyro biases,
      accelerometer scale (3 axes) — 9 parameters (2 s).
  (c) the same rig with 15 parameters: dampings, armatures, gyro biases, accelerometer scale
      and bias (2 s).
  (d) a long recording: 60 s of the turntable, 20 parameters (dampings, armatures, two masses,
      gyro scale and bias, accelerometer scale and bias).
  (e) a fleet: 32 turntables, each with its own dampings and gyro biases (drawn ±20 % / ±0.01
      rad/s), 2 s each, fitted in one batch by fibril_mjx (`tune_fleet`); sysid runs 32 fits.
  (f) the device in the loop: the R6093U AHRS with a 20 ms latency (the profile says 6.8 ms),
      its 100 Hz schedule and output resolution; the log is host-stamped (each sample's stamp is
      its arrival). fibril_mjx fits dampings, gyro biases and the latency (a search over whole
      ticks, then the rest); sysid compares the physics sensor at the stamps.
  (g) recordings the project did not make: the double pendulum of
      `tests/workflows/test_tune_external.py` (MuJoCo C with `mj_forward` at each stamp, NumPy
      noise) recorded for 10 s, (g_short) for the test's own 0.6 s, (g_long) for 30 s;
      fibril_mjx against SciPy `least_squares` over `mujoco.rollout` of the same physics
      (finite-difference Jacobian, trust region).

`mujoco.sysid` (least squares, finite-difference Jacobians over batched `mujoco.rollout`, its
`mujoco` backend) sees the compiled MuJoCo model with the same control signal and the
recorded samples at their sample times; the device-model terms (gyro bias and scale,
accelerometer scale and bias) are measurement parameters applied in its `modify_residual`
hook, as its `apply_bias` / `apply_gain` do, followed by the output limits the device
documents (the R6093U's packet saturates the yaw rate at 5.72 rad/s, which the turntable's yaw
reaches: without the clip sysid's loss at the truth is 2.1 on (b) and 18 on (d)). It does not
model the AHRS latency, output resolution or the 100 Hz schedule (it compares the physics
sensor at the sample time).
sysid labels the `sensordata` of rollout step k — MuJoCo's forward of the state at t_k — with
the time after the step, t_{k+1} (its `_src/trajectory.py`: "sensordata times are shifted by
one time step"); the recordings here are stamped as MuJoCo computes them (the state at the
stamp), so the bench compares sysid's prediction at stamp + one tick, which is its value at
the stamp. Without that shift sysid stalls on (b) at a loss of ~150 (the one-tick skew).

fibril_mjx runs with `gradients: auto` (on this CPU: MuJoCo C rollouts, forward differences
for the physics, exact JAX derivatives for the device model). Its wall time includes loading
the manifest and the recordings, tracing and compiling: *cold* with an empty persistent
compilation cache (a user's first fit of a model), *warm* a second fit of the same tune file
in the same process (a new `Problem`: traced again, its compilations found in JAX's caches; the
median of `WARM_REPEATS` fits, and sysid's wall on (a)–(c) the median of as many), *new
process* the same fit in a fresh interpreter with the same persistent compilation cache (the
`tune.tune` call timed, imports excluded; the median over `WARM_REPEATS` processes).

sysid's wall is its `optimize` call; `tune_wall_s_sysid_setup_p=` (a)–(c) prints what it
leaves out (reading the recording, building its parameters, model sequences and residual
function; the controls, computed here by a JAX program, not counted).

Printed per problem p: `tune_time_ratio_p=` (sysid wall ÷ fibril_mjx wall: warm for (a)–(c)
and (g), cold for (d)–(f)), `tune_time_ratio_cold_p=` and `tune_time_ratio_new_process_p=` for
(a)–(c) and (g), `tune_param_error_fibril_p=` /
`tune_param_error_sysid_p=` (mean relative error vs the truth; for the biases relative to the
bias magnitude), both final losses, and for (g) the SciPy figures in place of sysid's (its
wall the median of `WARM_REPEATS` fits too) and whether every parameter is within fibril_mjx's
± 2σ of the truth.
"""

from __future__ import annotations

import argparse
import copy
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path[:0] = [str(ROOT / 'tests'), str(ROOT / 'tests' / 'workflows')]
import test_tune_fd  # noqa: E402  (the dcmotor rig)
import fibril_mjx  # noqa: E402
from fibril_mjx.io import recording  # noqa: E402
from fibril_mjx.workflows import tune  # noqa: E402

TURNTABLE = ROOT / 'manifests' / 'tuning' / 'turntable_ahrs.yaml'

# the rig of tests/workflows/test_tune_fd.py: the controller's 6 V limit binds in the swing
DCMOTOR_XML = test_tune_fd.DCMOTOR.format(dt=0.002, damping=0.02, r=2, k=0.1)


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


TT = {'joint:yaw.damping': 0.35, 'joint:tilt.damping': 0.6, 'joint:roll.damping': 0.45}
GYRO_BIAS = {'ahrs.angular_velocity_bias': [0.01, -0.008, 0.005]}
AHRS_LOSS = [{'component': 'ahrs', 'field': 'angular_velocity', 'weight': 588.0},
             {'component': 'ahrs', 'field': 'linear_acceleration', 'weight': 50.0}]
AHRS_SENSORS = ('ahrs', 'imu_sensor_gyro', 'imu_sensor_accel')


def problems(tmp):
  """`{key: dict(manifest, truth {name: value}, loss, sensors, duration_s, ...)}`."""
  a_truth = {'actuator:motor.resistance': 2.0, 'actuator:motor.motorconst': 0.1,
             'joint:hinge.damping': 0.02, 'joint:hinge.armature': 0.005}
  scale = {'ahrs.linear_acceleration_scale': [1.02, 0.98, 1.01]}
  arm = {'joint:yaw.armature': 0.012, 'joint:tilt.armature': 0.008, 'joint:roll.armature': 0.01}
  abias = {'ahrs.linear_acceleration_bias': [0.05, -0.04, 0.03]}
  masses = {'body:roll_cradle.mass': 0.4, 'body:imu_r6093u.mass': 0.02}
  gscale = {'ahrs.angular_velocity_scale': [1.01, 0.99, 1.015]}
  imu_loss = [{'component': 'imu', 'field': 'angular_velocity', 'weight': 100.0},
              {'component': 'imu', 'field': 'linear_acceleration', 'weight': 10.0}]
  arrival = [dict(t, time='arrival') for t in AHRS_LOSS]
  return {
      'a': dict(manifest=dcmotor_manifest(tmp), truth=a_truth, loss=imu_loss,
                sensors=('imu', 'gyro', 'accel'), duration_s=2.0),
      'b': dict(manifest=TURNTABLE, truth={**TT, **GYRO_BIAS, **scale}, loss=AHRS_LOSS,
                sensors=AHRS_SENSORS, duration_s=2.0),
      'c': dict(manifest=TURNTABLE, truth={**TT, **arm, **GYRO_BIAS, **scale, **abias},
                loss=AHRS_LOSS, sensors=AHRS_SENSORS, duration_s=2.0),
      'd': dict(manifest=TURNTABLE, truth={**TT, **arm, **masses, **gscale, **GYRO_BIAS,
                                           **scale, **abias},
                loss=AHRS_LOSS, sensors=AHRS_SENSORS, duration_s=60.0, physics='c'),
      'f': dict(manifest=TURNTABLE, truth={**TT, **GYRO_BIAS}, loss=arrival,
                sensors=AHRS_SENSORS, duration_s=4.0, latency_s=0.02),
  }


def truth_overrides(truth, latency_s=None):
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
  if latency_s is not None:
    comps.append({'component': 'ahrs', 'field': 'latency_s', 'value': latency_s})
  return {'mjcf': mjcf, 'components': comps}


def param_entries(truth):
  """Tune-file parameters starting 30 % off (biases at 0, scales at 1), and the flat truth."""
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
  return float(np.mean(np.abs(np.asarray(est) - truth) / np.abs(truth)))


def host_stamped(rec):
  """The log a host keeps: each sample stamped at its arrival (acquisition time unknown)."""
  for s in rec.sensors.values():
    s['sample_time_s'] = np.asarray(s['arrival_time_s']).copy()
  return rec


def cache_cold():
  """An empty persistent compilation cache and no in-memory compilations: a first fit."""
  from jax._src import compilation_cache
  d = tempfile.mkdtemp(prefix='fibril_tune_bench_cache_')
  jax.clear_caches()
  jax.config.update('jax_compilation_cache_dir', d)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)
  compilation_cache.reset_cache()


# ------------------------------------------------------------------------------ fibril_mjx


FREE_STARTS_S = 0.0   # --free-starts: true multiple shooting windows (s) for fibril_mjx


def write_tune_file(tmp, key, manifest, params, loss, train, heldout, iterations,
                    gradients='auto'):
  spec = {'fibril_tune': 1, 'manifest': str(manifest), 'train': train, 'heldout': heldout,
          'parameters': params, 'loss': loss,
          'optimizer': {'method': 'gauss_newton', 'iterations': iterations, 'starts': 1,
                        'gradients': gradients}}
  if FREE_STARTS_S and key != 'e':
    spec['windows'] = {'length_s': FREE_STARTS_S, 'free_starts': True}
  path = tmp / f'{key}_tune.yaml'
  path.write_text(yaml.safe_dump(spec))
  return path


def recordings(tmp, key, pr, duration):
  recs = tune.simulate_recordings(
      pr['manifest'], overrides=truth_overrides(pr['truth'], pr.get('latency_s')), seed=1,
      duration_s=duration, worlds=(0, 1), physics=pr.get('physics', 'mjx'))
  out = []
  for i, rec in enumerate(recs):
    if pr.get('latency_s') is not None:
      rec = host_stamped(rec)
    out.append(str(recording.write_recording(tmp / f'{key}_{i}.npz', rec)))
  return out


WARM_REPEATS = 3   # (a)–(c), (g): both tools' warm walls are the median of this many fits
# (g): the recording's length: the test's own (g_short), and two a user would record
G_SECONDS = {'g_short': 0.6, 'g': 10.0, 'g_long': 30.0}


def run_fibril(path, *, warm: bool):
  """`(result, cold wall, warm wall or None, new-process wall or None)`: the fit in an empty
  cache, then again in this process, then in a new process with the same caches (the wall
  of its `tune.tune` call, imports excluded; the median over `WARM_REPEATS` processes)."""
  cache_cold()
  t0 = time.perf_counter()
  res = tune.tune(path, progress=False)
  cold = time.perf_counter() - t0
  again = fresh = None
  if warm:   # the median of WARM_REPEATS fits (a fit of a few tenths of a second is noisy)
    walls = []
    for _ in range(WARM_REPEATS):
      t0 = time.perf_counter()
      res = tune.tune(path, progress=False)
      walls.append(time.perf_counter() - t0)
    again = float(np.median(walls))
    code = (f'import sys, time; sys.path.insert(0, {str(ROOT)!r}); '
            'from fibril_mjx.workflows import tune; t0 = time.perf_counter(); '
            f'tune.tune({str(path)!r}, progress=False); print("WALL", time.perf_counter() - t0)')
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=jax.config.jax_compilation_cache_dir,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')
    fresh = float(np.median([float(subprocess.run(
        [sys.executable, '-c', code], capture_output=True, text=True, env=env,
        check=True).stdout.split('WALL')[-1]) for _ in range(WARM_REPEATS)]))
  return res, cold, again, fresh


# ------------------------------------------------------------------------------ mujoco.sysid


# sysid's set-up before its `optimize` call (reading the recording, its parameters, model
# sequences and residual function; not the controls), which its timed wall leaves out
SYSID_SETUP: list = []


def run_sysid(prob, rec_path, sensors, iterations, weights):
  """`(estimate (P,), wall s, loss)` of `mujoco.sysid` on one recording, the fitted quantities
  of `prob` (its MJCF ones in the model, its device ones as measurement parameters)."""
  from mujoco import sysid
  sim = prob.sim
  m0 = sim.mj_model
  t_setup = time.perf_counter()
  rec = recording.read_recording(rec_path)
  cid, gyro_name, accel_name = sensors
  s = rec.sensor(cid)
  t_meas = np.asarray(s['sample_time_s'])
  y_meas = np.concatenate([np.asarray(s['angular_velocity']),
                           np.asarray(s['linear_acceleration'])], axis=1)
  w = np.concatenate([np.full(3, weights[0]), np.full(3, weights[1])])
  dt = float(m0.opt.timestep)
  n = int(round(t_meas[-1] / dt)) + 2
  t_ctrl = np.arange(n) * dt
  setup = time.perf_counter() - t_setup   # the controls (a JAX program here) are not counted
  ctrl = np.asarray(jax.vmap(lambda k: sim.actuator_script.ctrl(jnp.zeros(m0.nu), k, dt))(
      jnp.arange(n)), np.float64)
  t_setup = time.perf_counter()
  dcfg = sim.components[cid].cfg
  g_lim = float(getattr(dcfg, 'angular_velocity_limit_rad_s', 0.0) or 0.0)
  a_lim = float(getattr(dcfg, 'linear_acceleration_limit_m_s2', 0.0) or 0.0)
  gadr = int(m0.sensor_adr[m0.sensor(gyro_name).id])
  aadr = int(m0.sensor_adr[m0.sensor(accel_name).id])

  params = sysid.ParameterDict()
  measurement = {}
  for q in prob.params:
    nm = q.name.replace(':', '_').replace('.', '_').replace('[', '_').replace(']', '')
    params.add(sysid.Parameter(nm, nominal=q.init, min_value=q.lower, max_value=q.upper))
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
        getattr(m, fld)[idx] = v
      elif q.kind == 'dcmotor':
        aid = int(sim.dcmotor.actuator_id[q.target[1]])
        m.actuator_gainprm[aid, 0 if q.target[0] == 'resistance_ohm' else 1] = v
    return m

  def modify_residual(p, pred, measured, model, return_pred_all, state=None):
    del measured, model, return_pred_all, state
    y = pred.resample(t_meas + dt).data   # sysid stamps step k's sensors t_{k+1}: see main doc
    g = y[:, gadr:gadr + 3].copy()
    a = y[:, aadr:aadr + 3].copy()
    for nm, (field, k) in measurement.items():   # gains first, then biases: s·x + b
      v = float(p[nm].value[0])
      if field == 'angular_velocity_scale':
        g[:, k] *= v
      elif field == 'linear_acceleration_scale':
        a[:, k] *= v
    for nm, (field, k) in measurement.items():
      v = float(p[nm].value[0])
      if field == 'angular_velocity_bias':
        g[:, k] += v
      elif field == 'linear_acceleration_bias':
        a[:, k] += v
    if g_lim > 0:   # the output limits the device documents (its packet format)
      g = np.clip(g, -g_lim, g_lim)
    if a_lim > 0:
      a = np.clip(a, -a_lim, a_lim)
    r = (np.concatenate([g, a], axis=1) - y_meas) * w
    return r.reshape(-1), pred, pred

  class _Spec:   # ModelSequences compiles its spec once; hand it the compiled model
    def compile(self):
      return m0
  data = mujoco.MjData(m0)
  if rec.initial:
    data.qpos[:] = rec.initial['qpos']
    data.qvel[:] = rec.initial.get('qvel', np.zeros(m0.nv))
  init = sysid.create_initial_state(m0, data.qpos, data.qvel, data.act)
  control_ts = sysid.TimeSeries(t_ctrl, ctrl)
  sensor_ts = sysid.TimeSeries.from_names(t_ctrl, np.zeros((n, m0.nsensordata)), m0)
  ms = sysid.ModelSequences('bench', _Spec(), 'rec', init, control_ts, sensor_ts)
  residual_fn = sysid.build_residual_fn(models_sequences=[ms], build_model=build_model,
                                        modify_residual=modify_residual)
  t0 = time.perf_counter()
  SYSID_SETUP.append(setup + t0 - t_setup)
  opt, _ = sysid.optimize(initial_params=params, residual_fn=residual_fn, optimizer='mujoco',
                          verbose=False, max_iters=iterations)
  wall = time.perf_counter() - t0
  est = np.array([float(opt[nm].value[0]) for nm in names])
  r, _, _ = residual_fn(est, opt)
  loss = float(np.mean(np.concatenate(r) ** 2))
  return est, wall, loss


def weights(loss):
  return loss[0]['weight'], loss[1]['weight']


# ------------------------------------------------------------------------------ (e) a fleet


def fleet_recordings(tmp, K, seed=7):
  """K turntables with their own dampings (±20 %) and gyro biases (5–10 mrad/s, random
  sign), 2 s each, from one batched MuJoCo C run: `(paths, truths (K, 6))`."""
  rng = np.random.default_rng(seed)
  damp = np.array(list(TT.values())) * rng.uniform(0.8, 1.2, (K, 3))
  bias = rng.uniform(0.005, 0.01, (K, 3)) * rng.choice([-1, 1], (K, 3))
  sim = fibril_mjx.load(TURNTABLE, vary={'ahrs': ['angular_velocity_bias']}, physics='c')
  m = sim.mj_model
  dof = np.tile(m.dof_damping, (K, 1))
  for j, name in enumerate(('yaw', 'tilt', 'roll')):
    dof[:, m.jnt_dofadr[m.joint(name).id]] = damp[:, j]
  params = sim.default_params(K)
  c = sim.components['ahrs']
  params['ahrs'] = c.set_param(params['ahrs'], 'angular_velocity_bias',
                               jnp.asarray(bias, jnp.float32))
  n = int(round(2.0 / sim.dt))
  _, trace, _ = sim.rollout(params, fibril_mjx.world_keys(3, K), n, model={'dof_damping': dof})
  trace = jax.tree.map(np.asarray, trace)
  paths = []
  for k in range(K):
    rec = recording.recording_from_trace(trace, k, sim=sim)
    paths.append(str(recording.write_recording(tmp / f'e_{k}.npz', rec)))
  return paths, np.concatenate([damp, bias], axis=1)


def run_fleet(tmp, K, iterations):
  paths, truth = fleet_recordings(tmp, K)
  params, _ = param_entries({**TT, **GYRO_BIAS})
  path = write_tune_file(tmp, 'e', TURNTABLE, params, AHRS_LOSS, paths, [], iterations)
  cache_cold()
  t0 = time.perf_counter()
  res = tune.tune_fleet(path, progress=False)
  wall_f = time.perf_counter() - t0
  ef = rel_error(res.estimate, truth)
  wall_s, es = 0.0, []
  for k, p in enumerate(paths):
    est, w, _ = run_sysid(res.problem, p, AHRS_SENSORS, iterations, weights(AHRS_LOSS))
    wall_s += w
    es.append(rel_error(est, truth[k]))
  return dict(params=truth.shape[1] * K, wall_f=wall_f, wall_s=wall_s,
              loss_f=float(np.mean(res.losses)), loss_s=float('nan'), ef=ef,
              es=float(np.mean(es)), collinear=res.collinear)


# ------------------------------------------------------------------------------ (g) SciPy


def run_outside(tmp, iterations, duration_s):
  """(g): the external double pendulum recorded for `duration_s`, fibril_mjx vs SciPy
  least_squares over MuJoCo C; both walls warm (medians of `WARM_REPEATS`) beside fibril_mjx's
  cold and new-process ones."""
  import mujoco.rollout as mj_rollout
  from scipy.optimize import least_squares
  import test_tune_external as ext   # the recordings' generator (MuJoCo C + NumPy noise)
  (tmp / 'g_model.xml').write_text(ext.MODEL.format(dt=ext.DT, **ext.START))
  man = {'fibril_manifest': 1, 'model': 'g_model.xml', 'components': [
      {'id': 'imu', 'type': 'fibril_sim/imu',
       'config': {'gyroscope_sensor': 'gyro', 'accelerometer_sensor': 'accel',
                  'period_s': ext.PERIOD}}]}
  (tmp / 'g.yaml').write_text(yaml.safe_dump(man))
  train = recording.write_recording(tmp / f'g_train_{duration_s:g}.npz',
                                    ext.c_recording(1, duration_s))
  names = [('joint:shoulder.damping', 'damping'), ('joint:elbow.stiffness', 'stiffness'),
           ('body:lower.mass', 'mass')]
  params = [{'mjcf': k, 'bounds': [ext.START[n] * 0.1, ext.START[n] * 10], 'log': True,
             'init': ext.START[n]} for k, n in names]
  loss = [{'component': 'imu', 'field': 'angular_velocity', 'weight': 1 / ext.GYRO_SIGMA},
          {'component': 'imu', 'field': 'linear_acceleration', 'weight': 1 / ext.ACCEL_SIGMA}]
  path = write_tune_file(tmp, f'g_{duration_s:g}', tmp / 'g.yaml', params, loss, [str(train)],
                         [], iterations)
  truth = np.array([ext.TRUTH[n] for _, n in names])
  res, cold, again, fresh = run_fibril(path, warm=True)

  rec = recording.read_recording(train)
  s = rec.sensor('imu')
  y = np.concatenate([s['angular_velocity'], s['linear_acceleration']], axis=1)
  w = np.concatenate([np.full(3, 1 / ext.GYRO_SIGMA), np.full(3, 1 / ext.ACCEL_SIGMA)])
  m0 = mujoco.MjModel.from_xml_string(ext.MODEL.format(dt=ext.DT, **ext.START))
  every = int(round(ext.PERIOD / ext.DT))
  T = int(round(s['sample_time_s'][-1] / ext.DT)) + 1
  d = mujoco.MjData(m0)
  d.qpos[:] = ext.Q0
  mujoco.mj_forward(m0, d)
  s0 = np.zeros(mujoco.mj_stateSize(m0, mujoco.mjtState.mjSTATE_FULLPHYSICS))
  mujoco.mj_getState(m0, d, s0, mujoco.mjtState.mjSTATE_FULLPHYSICS)
  datas = [mujoco.MjData(m0)]
  lower = m0.body('lower').id

  def resid(logx):
    x = np.exp(logx)
    m = copy.copy(m0)
    m.dof_damping[0], m.jnt_stiffness[1], m.body_mass[lower] = x
    _, sd = mj_rollout.rollout(m, datas, s0[None], np.zeros((1, T, 0)))
    return ((sd[0, ::every][:len(y)] - y) * w).reshape(-1)
  walls = []
  for _ in range(WARM_REPEATS):
    t0 = time.perf_counter()
    fit = least_squares(resid, np.log([ext.START[n] for _, n in names]), method='trf',
                        jac='2-point', max_nfev=50 * (iterations + 1))
    walls.append(time.perf_counter() - t0)
  print(f'tune_scipy_evaluations_g={fit.nfev} (Jacobians {fit.njev})')
  return dict(params=3, wall_f=again, wall_s=float(np.median(walls)), cold=cold, fresh=fresh,
              loss_f=res.train_loss,
              loss_s=float(np.mean(fit.fun ** 2)), ef=rel_error(res.estimate, truth),
              es=rel_error(np.exp(fit.x), truth), collinear=res.collinear,
              within=bool(np.all(np.abs(res.estimate - truth) <= 2 * res.sigma)))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--only', default='a,b,c,d,e,f,g_short,g,g_long')
  ap.add_argument('--iterations', type=int, default=20)
  ap.add_argument('--fleet', type=int, default=32, help='units of problem (e)')
  ap.add_argument('--quick', action='store_true',
                  help='(d) 10 s instead of 60 s, (e) 8 units')
  ap.add_argument('--free-starts', type=float, default=0.0, metavar='S',
                  help='fibril_mjx with true multiple shooting: windows of S s with free starts '
                       '(default: single shooting; not for the fleet)')
  a = ap.parse_args(argv)
  # before JAX computes: one XLA CPU device, the host's ISA, a scan over ticks as one kernel
  # (inherited by the new-process fits below)
  fibril_mjx.cpu_flags(1, bitwise=False)
  global FREE_STARTS_S
  FREE_STARTS_S = a.free_starts
  rows = []
  with tempfile.TemporaryDirectory() as d:
    tmp = pathlib.Path(d)
    probs = problems(tmp)
    for key in a.only.split(','):
      if key == 'e':
        row = run_fleet(tmp, 8 if a.quick else a.fleet, a.iterations)
      elif key.startswith('g'):
        row = run_outside(tmp, a.iterations, G_SECONDS[key])
      else:
        pr = probs[key]
        duration = 10.0 if a.quick and key == 'd' else pr['duration_s']
        recs = recordings(tmp, key, pr, duration)
        params, flat = param_entries(pr['truth'])
        if pr.get('latency_s') is not None:
          params.append({'component': 'ahrs', 'field': 'latency_s', 'bounds': [0.0, 0.04]})
        path = write_tune_file(tmp, key, pr['manifest'], params, pr['loss'], [recs[0]],
                               [recs[1]], a.iterations)
        warm = key in 'abc'
        res, cold, again, fresh = run_fibril(path, warm=warm)
        SYSID_SETUP.clear()
        runs = [run_sysid(res.problem, recs[0], pr['sensors'], a.iterations,
                          weights(pr['loss'])) for _ in range(WARM_REPEATS if warm else 1)]
        if warm:
          print(f'tune_wall_s_sysid_setup_{key}={np.median(SYSID_SETUP):.3f}')
        est_s, _, loss_s = runs[-1]
        wall_s = float(np.median([r[1] for r in runs]))
        row = dict(params=len(flat) + (pr.get('latency_s') is not None), wall_f=again or cold,
                   wall_s=wall_s, loss_f=res.train_loss, loss_s=loss_s,
                   ef=rel_error(res.estimate, flat), es=rel_error(est_s, flat),
                   collinear=res.collinear)
        if warm:
          row['cold'], row['fresh'] = cold, fresh
        if res.timing:
          row['latency'] = res.timing[0]['best_s']
          print(f'tune_latency_s_fibril_{key}={res.timing[0]["best_s"]:.4g} '
                f'(truth {pr["latency_s"]:g})')
      rows.append((key, row))
      peer = 'scipy' if key.startswith('g') else 'sysid'
      if 'cold' in row:
        print(f'tune_time_ratio_cold_{key}={row["wall_s"] / row["cold"]:.3g}')
        print(f'tune_wall_s_fibril_cold_{key}={row["cold"]:.1f}')
        print(f'tune_time_ratio_new_process_{key}={row["wall_s"] / row["fresh"]:.3g}')
        print(f'tune_wall_s_fibril_new_process_{key}={row["fresh"]:.2f}')
      print(f'tune_params_{key}={row["params"]}')
      print(f'tune_wall_s_fibril_{key}={row["wall_f"]:.2f}')
      print(f'tune_wall_s_{peer}_{key}={row["wall_s"]:.2f}')
      print(f'tune_loss_fibril_{key}={row["loss_f"]:.4g}')
      print(f'tune_loss_{peer}_{key}={row["loss_s"]:.4g}')
      print(f'tune_param_error_fibril_{key}={row["ef"]:.4g}')
      print(f'tune_param_error_{peer}_{key}={row["es"]:.4g}')
      print(f'tune_time_ratio_{key}={row["wall_s"] / row["wall_f"]:.3g}')
      if 'within' in row:
        print(f'tune_within_2sigma_fibril_{key}={row["within"]}')
      print(f'tune_poorly_identifiable_{key}=' + ('; '.join(row['collinear']) or 'none'),
            flush=True)
  print('\n| problem | params | fibril_mjx s | peer s | ratio (peer / fibril) | loss fibril | '
        'loss peer | rel. error fibril | rel. error peer |')
  print('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
  for key, r in rows:
    fw = f'{r["wall_f"]:.2f}' + (f' (new process {r["fresh"]:.2f}, cold {r["cold"]:.1f})'
                                 if 'cold' in r else '')
    print(f'| {key} | {r["params"]} | {fw} | {r["wall_s"]:.2f} | {r["wall_s"] / r["wall_f"]:.3g} '
          f'| {r["loss_f"]:.4g} | {r["loss_s"]:.4g} | {r["ef"]:.3g} | {r["es"]:.3g} |')


if __name__ == '__main__':
  main()
