"""The world axis (fibril_mjx.batch.worlds): chunking, devices, sub-batches, shared physics, per-world
models, divergence and the physics implementation choice — on the tiny rig, few ticks."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

import fibril_mjx
from fibril_mjx.workflows import run as runner
from fibril_mjx.batch import worlds
from fibril_mjx.batch import lapack
from fibril_mjx.errors import FibrilError
from ref_helpers import tree_equal
from conftest import ahrs_entry, write_rig
from fibril_mjx.batch.simulation import Controller, Options, Start

NOISY = dict(period_s=0.004, latency_s=0.002, jitter_s=0.002, loss_probability=0.1,
             angular_velocity_noise_stddev=[0.01, 0.02, 0.03],
             yaw_rate_bias_stddev_rad_s=0.01)
TICKS = 6
REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
  path = write_rig(tmp_path_factory.mktemp('worlds'), [ahrs_entry(**NOISY)])
  return path, fibril_mjx.load(path)


N = 9   # worlds of the shared runs below: 2 devices x 5 leaves one padding lane
# Per-world damping (nworld, nv) of the rig's yaw and tilt joints: the first three rows were
# the three worlds of the per-world-model test; the rest vary around the rig's 0.2.
DAMPING = np.array([[0.05, 0.2], [0.2, 0.2], [3.0, 0.01], [0.1, 0.4], [0.2, 0.3],
                    [0.25, 0.35], [0.3, 0.3], [0.35, 0.25], [0.4, 0.2]], np.float32)
DAMPED_TICKS = 30


# One run of each kind on the rig, made once and shared by the tests below (and, written to
# disk, compared by the two-device subprocess): each distinct world count, tick count and
# model structure is its own traced and compiled program.
@pytest.fixture(scope='module')
def base(rig):
  """N worlds, one physics rollout per world: `(params, keys, final state, trace)`."""
  _, sim = rig
  p, keys = sim.default_params(N), fibril_mjx.world_keys(0, N)
  st, tr, _ = sim.rollout(p, keys, TICKS, options=Options(share_physics=False))
  return p, keys, st, tr


@pytest.fixture(scope='module')
def shared(rig, base):
  """The same N worlds on one shared physics trajectory: `(final state, trace)`."""
  _, sim = rig
  p, keys, _, _ = base
  return sim.rollout(p, keys, TICKS)


@pytest.fixture(scope='module')
def damped(rig, base):
  """The N worlds with per-world joint damping (`DAMPING`), DAMPED_TICKS ticks:
  `(final state, trace)`."""
  _, sim = rig
  p, keys, _, _ = base
  return sim.rollout(p, keys, DAMPED_TICKS, model={'dof_damping': jnp.asarray(DAMPING)})


def pick(tree, i):
  return jax.tree.map(lambda x: np.asarray(x)[i], tree)


# ------------------------------------------------------------------ layout (pure)

def test_layout_pads_to_devices_times_sub_batches_and_never_runs_one_lane():
  lay = worlds.layout(1, 1, None)
  assert (lay.sub_batch, lay.n_sub, lay.padded) == (2, 1, 2)
  lay = worlds.layout(1025, 2, 600)
  assert lay.n_devices == 2 and lay.sub_batch <= 600 and lay.sub_batch >= 2
  assert lay.padded >= 1025 and lay.padded % 2 == 0
  assert lay.padded - 1025 < 2 * lay.n_sub   # least padding for that many sub-batches
  assert worlds.layout(3, 8, None).n_devices == 3
  assert worlds.chunks(1025, 1024) == [(0, 1024), (1024, 1025)]
  assert worlds.chunks(5, None) == [(0, 5)]


def test_lapack_safe_sub_batch_follows_the_jaxlib_split_rule():
  """A 10x10 Cholesky costs 10³/3 = 333 FLOP in jaxlib's estimate: 600 matrices stay below
  the 200 000-FLOP split, 601 do not."""
  a = jnp.eye(10, dtype=jnp.float32)
  k, why = lapack.lapack_safe_sub_batch(lambda m: jnp.linalg.cholesky(m), a)
  assert k == 600 and 'cholesky' in why
  k, _ = lapack.lapack_safe_sub_batch(lambda m: jnp.linalg.cholesky(m), jnp.stack([a] * 4))
  assert k == 150
  assert lapack.lapack_safe_sub_batch(lambda x: x * 2, a)[0] is None


def test_a_program_lays_itself_out_below_the_lapack_split(rig, base):
  """A controller factoring a 50x50 matrix per world (50³/3 = 41 666 FLOP): the run program
  reads from its own trace that 4 worlds per call stay below the 200 000-FLOP split, where the
  rig's step alone allows thousands, and runs the 9 worlds as 3 sub-batches of 3 (without the
  relayout: one call of 9)."""
  _, rig_sim = rig
  sim = fibril_mjx.Simulation(rig_sim.built)   # nothing laid out yet
  p, keys, _, _ = base
  a = jnp.eye(50)

  def controller(obs, carry):
    return {}, carry + jnp.linalg.cholesky(a * (2.0 + carry))[0, 0]
  _, tr, carry = sim.rollout(p, keys, 2, controller=Controller(controller, init=jnp.zeros(())),
                             options=Options(devices=1))
  assert sim.last_layout == worlds.layout(N, 1, 4)
  assert (sim.last_layout.sub_batch, sim.last_layout.n_sub) == (3, 3)
  assert sim.sub_batch_cap()[0] > 1000                 # the step alone: no binding cap
  once = np.sqrt(2.0)                                   # the controller's two calls, each world
  np.testing.assert_allclose(np.asarray(carry), np.full(N, once + np.sqrt(2.0 + once)),
                             rtol=1e-6)


def test_cpu_flags_set_devices_once_and_the_bitwise_isa(monkeypatch):
  monkeypatch.setattr(worlds.platform, 'machine', lambda: 'x86_64')
  monkeypatch.setattr(worlds, 'usable_cores', lambda: 3)
  env = {}
  assert worlds.cpu_flags(3, environ=env) == 3
  assert env['XLA_FLAGS'] == ('--xla_force_host_platform_device_count=3 '
                              '--xla_cpu_use_fusion_emitters=false '
                              '--xla_cpu_multi_thread_eigen=false --xla_cpu_max_isa=AVX '
                              '--xla_backend_extra_options='
                              'xla_cpu_small_while_loop_byte_threshold=1099511627776')
  assert worlds.cpu_isa(env) == 'AVX' and worlds.cpu_isa({}) == 'native'
  assert worlds.cpu_flags(None, environ=env) == 3           # already set: kept
  assert env['XLA_FLAGS'].count('max_isa') == 1
  env = {'XLA_FLAGS': '--foo --xla_force_host_platform_device_count=4 --xla_cpu_max_isa=AVX2'}
  assert worlds.cpu_flags(2, environ=env) == 2 and env['XLA_FLAGS'].count('device_count') == 1
  assert '--xla_cpu_max_isa=AVX2' in env['XLA_FLAGS'] and 'isa=AVX ' not in env['XLA_FLAGS']
  env = {}
  worlds.cpu_flags(2, bitwise=False, environ=env)
  assert 'max_isa' not in env['XLA_FLAGS']
  # fewer devices than cores: each device's Eigen calls keep XLA's threads
  assert 'multi_thread_eigen' not in env['XLA_FLAGS'] and worlds.EMITTER_FLAG in env['XLA_FLAGS']
  env = {'XLA_FLAGS': '--xla_cpu_use_fusion_emitters=true --xla_cpu_multi_thread_eigen=true'}
  worlds.cpu_flags(4, environ=env)                           # a user's own values are kept
  assert env['XLA_FLAGS'].count('fusion_emitters') == env['XLA_FLAGS'].count('eigen') == 1
  assert 'emitters=true' in env['XLA_FLAGS'] and 'eigen=true' in env['XLA_FLAGS']
  monkeypatch.setattr(worlds.platform, 'machine', lambda: 'aarch64')
  env = {}
  worlds.cpu_flags(2, environ=env)
  assert 'max_isa' not in env['XLA_FLAGS']                 # an x86 flag only
  assert worlds.cpu_flags(None, environ={}) >= 1


def test_loop_flags_add_the_loop_option_once_and_keep_a_users_own():
  """XLA takes its backend options from one comma-separated flag: ours joins a user's flag;
  a threshold the user set (0: XLA hoists no loop) is left as it is."""
  env = {}
  worlds.loop_flags(environ=env)
  assert env['XLA_FLAGS'] == ('--xla_backend_extra_options='
                              'xla_cpu_small_while_loop_byte_threshold=1099511627776')
  worlds.loop_flags(environ=env)
  assert env['XLA_FLAGS'].count('small_while') == 1 and env['XLA_FLAGS'].count('extra') == 1
  env = {'XLA_FLAGS': '--xla_cpu_max_isa=AVX --xla_backend_extra_options=xla_cpu_fold=1'}
  worlds.loop_flags(environ=env)
  assert env['XLA_FLAGS'] == ('--xla_cpu_max_isa=AVX --xla_backend_extra_options=xla_cpu_fold=1,'
                              'xla_cpu_small_while_loop_byte_threshold=1099511627776')
  own = '--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=0'
  env = {'XLA_FLAGS': own}
  worlds.loop_flags(environ=env)
  assert env['XLA_FLAGS'] == own


def test_remainder_chunk_of_one_world_is_bitwise_equal_cli(rig, tmp_path):
  """`fibril-mjx run --worlds 9` with `--chunk-worlds 4` (chunks of 4, 4 and a remainder of
  one world) and in one chunk of 9: every world's metrics are identical, the remainder world
  included (the bug of issue 9: a chunk of exactly one world compiled to different code)."""
  path, _ = rig
  rows = []
  for chunk in (4, None):
    runner.run(path, worlds=N, seed=0, duration_s=TICKS * 0.002, out=tmp_path / str(chunk),
               options=runner.RunOptions(trace_worlds=0, chunk_worlds=chunk, segments=1,
                                         share_physics=False))
    rows.append(np.loadtxt(tmp_path / str(chunk) / 'worlds.csv', delimiter=',', skiprows=1))
  np.testing.assert_array_equal(rows[0], rows[1])
  assert rows[0].shape[0] == N


def test_world_in_any_batch_and_sub_batch_is_bitwise_equal(rig, base):
  """World w of 9 gives the same bits in one batch of 9, in chunks of 4, 4 and 1 run in
  sub-batches of 2, and alone."""
  _, sim = rig
  p, keys, _, a = base
  _, b, _ = sim.rollout(p, keys, TICKS,
                        options=Options(share_physics=False, sub_batch=2, chunk_worlds=4))
  tree_equal(a, b)
  _, c, _ = sim.rollout(sim.default_params(1), fibril_mjx.world_keys(0, 1, 8), TICKS,
                        options=Options(share_physics=False))
  tree_equal(pick(c, 0), pick(a, 8))


# One Python with two XLA CPU devices and the CLI's code generation (`worlds.cpu_flags`: no
# FMA), both set before JAX initializes, runs both two-device checks (one interpreter start and
# import for the two). Each part prints its own OK line or its traceback.
TWO_DEVICES = """
import sys, traceback
import jax, numpy as np, fibril_mjx
from fibril_mjx.batch.simulation import Options
assert len(jax.devices()) == 2, jax.devices()
rig, rig_npz, ekf, ticks, damped_ticks = sys.argv[1:6]
ticks, damped_ticks = int(ticks), int(damped_ticks)

def same(a, b):
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(la) == len(lb), (len(la), len(lb))
  for x, y in zip(la, lb):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

def devices_check():
  ref = np.load(rig_npz)
  sim = fibril_mjx.load(rig)
  n = int(ref['n'])
  keys, p = fibril_mjx.world_keys(0, n), sim.default_params(n)
  # on 2 devices vs this test process's 1 device: per-world and shared physics
  for share in (False, True):
    out = sim.rollout(p, keys, ticks, options=Options(devices=2, share_physics=share))[1]
    same(out, [ref[f'{"shared" if share else "base"}_{i}']
               for i in range(int(ref[f'{"shared" if share else "base"}_n']))])
  # a per-world field pinned to device 0, on 2 devices
  model = {'dof_damping': jax.device_put(ref['damping'], jax.devices()[0])}
  damped = [ref[f'damped_{i}'] for i in range(int(ref['damped_n']))]
  two = Options(devices=2, share_physics=False)
  out = sim.rollout(p, keys, damped_ticks, model=model, options=two)[1]
  same(out, damped)
  # a second simulation (its own programs, read from the compilation cache) gives them too
  again = fibril_mjx.load(rig)
  out = again.rollout(p, keys, damped_ticks, model=model, options=two)[1]
  same(out, damped)
  print('DEVICES_OK', sim.layout(n, devices=2).describe(), flush=True)

def layouts_check():
  sim = fibril_mjx.load(ekf)
  n, ekf_ticks = 9, 120
  keys, p = fibril_mjx.world_keys(0, n), sim.default_params(n)
  def run(idx, **kw):
    pick = lambda x: x[np.asarray(idx)]
    _, tr, _ = sim.rollout(jax.tree.map(pick, p), keys[np.asarray(idx)], ekf_ticks,
                           options=Options(share_physics=False, **kw))
    return jax.tree.map(np.asarray, tr)
  base = run(range(n), devices=1)
  rev = jax.tree.map(lambda x: x[::-1], run(range(n)[::-1], devices=1))
  two = run(range(n), devices=2, sub_batch=2)
  alone = run([8], devices=1)
  for other in (rev, two):
    same(base, other)
  for x, y in zip(jax.tree.leaves(base), jax.tree.leaves(alone)):
    np.testing.assert_array_equal(x[8], y[0])
  q = base['sensor']['ekf_quat'].sample.orientation
  assert np.all(np.isfinite(q)) and np.ptp(q[:, -1], axis=0).max() > 0   # worlds differ
  print('LAYOUTS_OK', sim.layout(n, devices=2, sub_batch=2).describe(), flush=True)

for check in (devices_check, layouts_check):
  try:
    check()
  except Exception:
    print(check.__name__, 'FAILED', flush=True)
    traceback.print_exc()
"""


@pytest.fixture(scope='module')
def two_devices(rig, base, shared, damped, tmp_path_factory):
  """The TWO_DEVICES subprocess, run once for both tests below: `(stdout, stderr)`."""
  path, _ = rig
  tmp = tmp_path_factory.mktemp('two_devices')
  ref = {'n': N, 'damping': DAMPING}
  for name, tree in (('base', base[3]), ('shared', shared[1]), ('damped', damped[1])):
    leaves = jax.tree.leaves(tree)
    ref[f'{name}_n'] = len(leaves)
    ref.update({f'{name}_{i}': np.asarray(x) for i, x in enumerate(leaves)})
  np.savez(tmp / 'rig.npz', **ref)
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)
  # 2 devices, this process's ISA cap and loops, but LLVM's default optimization level (this
  # process compiles at level 0, tests/conftest.py): the first test below, comparing with this
  # process's traces, also checks that the level changes no bit
  worlds.cpu_flags(2, environ=env)
  if 'xla_cpu_max_isa' not in env['XLA_FLAGS']:
    # no ISA cap (not x86): where LLVM contracts FMAs depends on its level, so the subprocess
    # compiles at this process's level and the comparison is of layouts only
    env['XLA_FLAGS'] += ''.join(' ' + f for f in os.environ.get('XLA_FLAGS', '').split()
                                if 'optimization_level' in f)
  r = subprocess.run([sys.executable, '-c', TWO_DEVICES, str(path), str(tmp / 'rig.npz'),
                      str(REPO / 'manifests' / 'imu_ekf.yaml'), str(TICKS), str(DAMPED_TICKS)],
                     capture_output=True, text=True, env=env, timeout=900, cwd=str(tmp))
  return r.stdout, r.stderr


def test_one_and_two_devices_are_bitwise_equal(two_devices):
  """Two XLA CPU devices (set before JAX initializes, so in a subprocess): the 9 worlds of
  `base`, `shared` and `damped` (per-world physics, shared physics, a per-world model pinned
  to device 0) on 2 devices give the traces this process computed on 1, bitwise; a second
  simulation reads the two-device programs from disk and gives them too."""
  out, err = two_devices
  assert 'DEVICES_OK' in out, out + err[-3000:]
  assert '9 worlds on 2 device(s) x 1 sub-batch(es) of 5 (+1 padding)' in out


def test_estimator_world_is_bitwise_equal_in_any_layout(two_devices):
  """The IMU + attitude-EKF example (matrix products, a 3×3 solve, trig): world `w` gives the
  same bits in a batch of 9 on one device, in lanes reversed, on 2 devices in sub-batches of 2
  (with padding), and alone. Needs the CLI's XLA CPU flags (`worlds.cpu_flags`: no FMA), set
  before JAX initializes, so it runs in the two-device subprocess."""
  out, err = two_devices
  assert 'LAYOUTS_OK' in out, out + err[-3000:]
  assert '2 device(s) x 3 sub-batch(es) of 2 (+3 padding)' in out


# ------------------------------------------------------------------ shared physics

def test_shared_physics_matches_per_world_physics(rig, base, shared):
  """Sensor-only Monte Carlo: the shared trajectory's sensor outputs equal the per-world
  path to float rounding (tolerance 1e-5 relative + 1e-6 absolute: the physics is compiled
  unbatched, so XLA may round differently), and are bitwise reproducible."""
  _, sim = rig
  share, why = sim.physics_sharing()
  assert share, why
  p, keys, _, per_world = base
  st, tr, _ = shared
  assert st.data.qpos.ndim == 1          # one trajectory, no world axis
  for x, y in zip(jax.tree.leaves(tr), jax.tree.leaves(per_world)):
    x, y = np.asarray(x), np.asarray(y)
    if np.issubdtype(x.dtype, np.floating):
      np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    else:
      np.testing.assert_array_equal(x, y)
  tree_equal(tr, sim.rollout(p, keys, TICKS)[1])
  assert not sim.physics_sharing(share_physics=False)[0]
  assert 'switched off' in sim.physics_sharing(share_physics=False)[1]


def test_physics_sharing_reasons(rig):
  _, sim = rig
  assert 'controller' in sim.physics_sharing(controller=lambda o, c: ({}, c))[1]
  assert 'MJCF' in sim.physics_sharing(model_fields=('dof_damping',))[1]
  assert 'initial state' in sim.physics_sharing(qpos_offset=np.zeros((2, 2)))[1]


# ------------------------------------------------------------------ per-world model and state

def test_per_world_damping_equals_separate_runs(rig, base, damped):
  """Each world of a batch with per-world `dof_damping` equals that world run alone with its
  damping in the model (to float rounding: the model is batched in one, not the other)."""
  _, sim = rig
  p, keys, _, _ = base
  st, tr, _ = damped
  for w in range(N):
    mw = sim.mx.replace(dof_damping=jnp.asarray(DAMPING[w]))
    st1, tr1, _ = sim.rollout(sim.default_params(1), fibril_mjx.world_keys(0, 1, w), DAMPED_TICKS,
                              model=mw, options=Options(share_physics=False))
    np.testing.assert_allclose(np.asarray(st.data.qvel)[w], np.asarray(st1.data.qvel)[0],
                               rtol=1e-6, atol=1e-7)
    for x, y in zip(jax.tree.leaves(pick(tr, w)), jax.tree.leaves(pick(tr1, 0))):
      np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
  qv = np.abs(np.asarray(st.data.qvel))
  assert qv[2, 0] < qv[0, 0]                # more yaw damping, slower yaw
  with pytest.raises(FibrilError, match='leading world axis'):
    sim.rollout(p, keys, 2, model={'dof_damping': sim.mx.dof_damping})


def test_initial_state_offsets(rig, base):
  """Per-world initial qpos / qvel offsets: world 1's start from its offsets, world 0 (no
  offset) equals its run without offsets."""
  _, sim = rig
  p, keys, _, tr = base
  q = np.zeros((N, 2), np.float32)
  q[1] = [0.3, -0.2]
  v = np.zeros((N, 2), np.float32)
  v[1] = [1.0, 0.0]
  st = sim.reset(p, keys, start=Start(qpos_offset=q, qvel_offset=v))
  np.testing.assert_allclose(np.asarray(st.data.qpos), q + np.asarray(sim.mx.qpos0), atol=1e-7)
  base0 = sim.reset(p, keys)
  tree_equal(pick(st.components, 0), pick(base0.components, 0))
  st2, tr2, _ = sim.rollout(p, keys, TICKS, start=Start(qpos_offset=q, qvel_offset=v))
  assert abs(float(st2.data.qvel[1, 0])) > abs(float(st2.data.qvel[0, 0]))
  tree_equal(pick(tr2, 0), pick(tr, 0))


# ------------------------------------------------------------------ divergence

SERVO_XML = """\
<mujoco model="turntable_kp8e6">
  <option timestep="0.002" integrator="implicitfast"/>
  <worldbody>
    <body name="plate">
      <joint name="yaw" type="hinge" axis="0 0 1"/>
      <geom type="cylinder" size="0.1 0.01" mass="0.05" contype="0" conaffinity="0"/>
      <site name="imu" pos="0.05 0 0.02"/>
    </body>
  </worldbody>
  <actuator><position name="yaw_servo" joint="yaw" kp="8e6" kv="0"/></actuator>
  <sensor>
    <framequat name="quat" objtype="site" objname="imu"/>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accel" site="imu"/>
  </sensor>
</mujoco>
"""


def test_diverged_worlds_are_results_not_crashes(tmp_path):
  """A turntable servo with kp=8e6, kv=0 goes non-finite: the run still writes everything,
  reports the diverged worlds with their first tick and excludes them from the statistics."""
  (tmp_path / 'servo.xml').write_text(SERVO_XML)
  doc = {'fibril_manifest': 1, 'model': 'servo.xml',
         'actuator_script': [{'actuator': 'yaw_servo', 'amplitude': 2.5, 'frequency_hz': 5}],
         'components': [ahrs_entry(period_s=0.004)]}
  path = tmp_path / 'm.yaml'
  path.write_text(yaml.safe_dump(doc))
  out = tmp_path / 'out'
  summary = runner.run(path, worlds=4, seed=0, duration_s=0.2, out=out,
                       options=runner.RunOptions(trace_worlds=2, segments=2))
  d = summary['diverged']
  assert d['count'] == 4 and all(t > 0 for t in d['first_tick'])
  for f in ('summary.txt', 'summary.json', 'meta.json', 'worlds.csv', 'trace.npz'):
    assert (out / f).exists(), f
  text = (out / 'summary.txt').read_text()
  assert '4 of 4 worlds diverged' in text
  rows = np.loadtxt(out / 'worlds.csv', delimiter=',', skiprows=1)
  np.testing.assert_array_equal(rows[:, 1], d['first_tick'])
  assert json.loads((out / 'summary.json').read_text())['diverged']['count'] == 4


def test_divergence_flag_in_the_state(base):
  _, _, st, _ = base
  np.testing.assert_array_equal(np.asarray(st.diverged), [-1] * N)


# ------------------------------------------------------------------ physics implementation

def test_warp_is_refused_without_an_nvidia_gpu(rig):
  path, _ = rig
  if any(d.platform == 'gpu' for d in jax.devices()):
    pytest.skip('a GPU is visible')
  with pytest.raises(FibrilError, match='NVIDIA'):
    fibril_mjx.load(path, impl='warp')
  with pytest.raises(FibrilError, match='unknown'):
    fibril_mjx.load(path, impl='cuda')
  with pytest.raises(FibrilError, match='not differentiable'):
    worlds.check_impl('warp', gradients=True)


def test_plan_shows_impl_sharing_and_sub_batch(rig):
  from fibril_mjx.workflows import plan
  _, sim = rig
  text = plan.render(sim)
  assert 'physics: MJX-JAX' in text and 'physics sharing: shared' in text
  assert 'sub-batch' in text
  isa = worlds.cpu_isa()     # the tests run with the CLI's code generation (conftest, x86)
  want = 'native ISA (FMA)' if isa == 'native' else f'{isa} (no FMA)'
  assert f'CPU code generation: {want}' in text, text


@pytest.mark.slow
def test_gpu_check_runs_on_the_cpu_with_quick():
  """`bench/gpu.sh --quick` (the prepared GPU check) runs here: MJX-Warp is refused with its
  reason, the bare MJX-JAX and fibril_mjx rows, their ratio and the C ratio print, and nothing
  failed. The turntable only (`--models`, passed on to bench/gpu_bench.py): the humanoid's
  rows run the same code on a second, larger model (its own programs to compile)."""
  r = subprocess.run(['bash', str(REPO / 'bench' / 'gpu.sh'), '--quick', '--models',
                      'ahrs_turntable'], capture_output=True, text=True, timeout=1500,
                     cwd=str(REPO), env=dict(os.environ, PY=sys.executable))
  assert r.returncode == 0, r.stdout + r.stderr
  assert 'impl warp: skipped' in r.stdout and 'NVIDIA' in r.stdout
  for line in ('jax  ahrs_turntable', 'wsps_jax_bare_ahrs_turntable_64=',
               'wsps_jax_fibril_ahrs_turntable_64=', 'overhead_ratio_ahrs_turntable_64=',
               'c_ratio_turntable_64='):
    assert line in r.stdout, (line, r.stdout)
  assert 'failed' not in r.stdout, r.stdout
