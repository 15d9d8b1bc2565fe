"""Shared fixtures: a tiny rig model and manifest writers (keeps MJX compiles short)."""

import os
import pathlib
import sys
from typing import Any, NamedTuple
import textwrap

import pytest

# The test files live in tests/<layer>/ (mirroring fibril_mjx/); their shared helpers (imu_rig,
# finite_diff, ...) stay in tests/ and are imported by name from any of them.
_TESTS = str(pathlib.Path(__file__).resolve().parent)
if _TESTS not in sys.path:
  sys.path.insert(0, _TESTS)

# The tests run with the CLI's code generation (no FMA: `fibril_mjx.cpu_flags`) and its loop
# option (a scan over ticks is one kernel, several times faster on a few worlds:
# `fibril_mjx.batch.worlds.loop_flags`, whose value tests/tooling/test_import.py compares with
# LOOP_OPTION), one device unless a test asks for more. XLA reads the flags when JAX first
# initializes, and every subprocess a test starts inherits them; `import fibril_mjx` sets none.
# Written here, not imported: this file is loaded before anything imports JAX or fibril_mjx.
LOOP_OPTION = 'xla_cpu_small_while_loop_byte_threshold=1099511627776'
if 'xla_cpu_max_isa' not in os.environ.get('XLA_FLAGS', '') and os.uname().machine == 'x86_64':
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_cpu_max_isa=AVX').strip()
_flags = os.environ.get('XLA_FLAGS', '').split()
if not any(LOOP_OPTION.split('=')[0] in f for f in _flags):   # a value of the user's is kept
  _extra = [i for i, f in enumerate(_flags) if f.startswith('--xla_backend_extra_options=')]
  if _extra:   # one flag holds every extra option
    _flags[_extra[0]] += ',' + LOOP_OPTION
  else:
    _flags.append('--xla_backend_extra_options=' + LOOP_OPTION)
  os.environ['XLA_FLAGS'] = ' '.join(_flags)
# ... and its classic fusion emitters and single-threaded Eigen calls
# (`fibril_mjx.batch.worlds.EMITTER_FLAG`, `EIGEN_FLAG`: two test files run at once on a
# 2-core machine, a core each, as two devices would).
CPU_FLAGS = ('--xla_cpu_use_fusion_emitters=false', '--xla_cpu_multi_thread_eigen=false')
# The suite only, not the CLI: LLVM's optimization level 0 for XLA's generated CPU code. The
# suite's time is mostly XLA compiling hundreds of small programs once each, and at level 0 a
# compile takes about half as long (tests/batch/test_simulator.py + test_attitude_ekf.py from an
# empty cache: 32.3 s of XLA compile instead of 64.6 s) while the compiled code runs about 1.5x
# slower. The HLO program, its fusion and its operation order are XLA's, before LLVM, and
# without FMA (max ISA AVX) LLVM may not reorder floating-point work at any level, so the
# results are the same bits: the two-device subprocess of tests/batch/test_worlds.py runs at
# the default level and compares with this process bitwise, and tools/trace_hashes.py --check
# gives every shipped manifest's traces unchanged under the flag
# (docs/internals/performance.md). A level of the user's in XLA_FLAGS is kept.
TEST_FLAGS = ('--xla_backend_optimization_level=0',)
for _flag in CPU_FLAGS + TEST_FLAGS:
  if _flag.split('=')[0] not in os.environ.get('XLA_FLAGS', ''):
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + _flag).strip()

# One persistent compilation cache for every test process of a run (tools/run_tests.py sets
# FIBRIL_MJX_TEST_CACHE): a program compiled by one file (the tiny rig's step, a component's
# acquire) is loaded, not recompiled, by the next. Every entry is kept, however quick its
# compile: most of the suite's programs compile in well under a second, many times over. The
# CLI, called in process or as a subprocess, uses the same directory (FIBRIL_MJX_CACHE).
if os.environ.get('FIBRIL_MJX_TEST_CACHE'):
  import jax

  jax.config.update('jax_compilation_cache_dir', os.environ['FIBRIL_MJX_TEST_CACHE'])
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  jax.config.update('jax_persistent_cache_min_entry_size_bytes', -1)
  # No LRU bound here (`jax_compilation_cache_max_size` stays -1): with a bound, JAX's cache
  # reads an `-atime` file beside every entry before each write, and entries written by a
  # process without the bound (a subprocess, the CLI) have none, so from the first such entry
  # on every write failed ("Error writing persistent compilation cache entry") and most of the
  # suite compiled from scratch on every run. tools/run_tests.py trims the directory instead.
  os.environ.setdefault('FIBRIL_MJX_CACHE', os.environ['FIBRIL_MJX_TEST_CACHE'])
  # ... and every Python process a test starts (`python -c` with two XLA devices, bench/
  # scripts, the CLI): JAX reads these settings from the environment when it starts, so a
  # subprocess compiled once is loaded from the cache on the next run instead of recompiled
  # cold (three such subprocesses took 400 s of test_worlds.py without it).
  os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', os.environ['FIBRIL_MJX_TEST_CACHE'])
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '-1')

# FIBRIL_MJX_TEST_COMPILE_STATS=1: each file's closing lines add what JAX did — programs traced,
# lowered and compiled, persistent-cache hits and misses, and the seconds each took (with the
# ten slowest compiles). These counts do not depend on the machine's load, unlike wall time.
_COMPILE = {'trace': [0, 0.0], 'lower': [0, 0.0], 'compile': [0, 0.0], 'hit': 0, 'miss': 0}
_SLOW: list = []
if os.environ.get('FIBRIL_MJX_TEST_COMPILE_STATS') == '1':
  from jax._src import monitoring as _monitoring

  _EVENTS = {'/jax/core/compile/jaxpr_trace_duration': 'trace',
             '/jax/core/compile/jaxpr_to_mlir_module_duration': 'lower',
             '/jax/core/compile/backend_compile_duration': 'compile'}

  def _on_duration(event, secs, fun_name=None, **_):
    kind = _EVENTS.get(event)
    if kind:
      _COMPILE[kind][0] += 1
      _COMPILE[kind][1] += secs
      if kind == 'compile':
        _SLOW.append((secs, fun_name))

  def _on_event(event, **_):
    if event == '/jax/compilation_cache/cache_hits':
      _COMPILE['hit'] += 1
    elif event == '/jax/compilation_cache/cache_misses':
      _COMPILE['miss'] += 1

  _monitoring.register_event_duration_secs_listener(_on_duration)
  _monitoring.register_event_listener(_on_event)


def pytest_terminal_summary(terminalreporter):
  if os.environ.get('FIBRIL_MJX_TEST_COMPILE_STATS') != '1':
    return
  c = _COMPILE
  terminalreporter.write_line(
      f"compile stats: traced {c['trace'][0]} ({c['trace'][1]:.1f} s), lowered "
      f"{c['lower'][0]} ({c['lower'][1]:.1f} s), compiled {c['compile'][0]} "
      f"({c['compile'][1]:.1f} s; persistent cache {c['hit']} hits, {c['miss']} misses)")
  for secs, name in sorted(_SLOW, key=lambda x: -x[0])[:10]:
    terminalreporter.write_line(f'  compile {secs:6.2f} s  {name}')


# The install is ours (`make test` installs the `test` extra): under tools/run_tests.py
# (FIBRIL_MJX_REQUIRE_OPTIONAL=1) a missing optional dependency fails the test that needs it
# instead of skipping it quietly.
_importorskip = pytest.importorskip


def _require_import(modname, *args, **kwargs):
  try:
    return _importorskip(modname, *args, **kwargs)
  except pytest.skip.Exception as e:
    pytest.fail(f'{e.msg} (FIBRIL_MJX_REQUIRE_OPTIONAL=1: the test extras are required; '
                "pip install -e '.[test,ray]')", pytrace=False)


if os.environ.get('FIBRIL_MJX_REQUIRE_OPTIONAL') == '1':
  pytest.importorskip = _require_import


def pytest_collection_modifyitems(config, items):
  """Tests marked `full` (long extra runs) are deselected unless FIBRIL_MJX_TEST_FULL=1
  (`make test-full`); `make test` (CI) runs the rest."""
  if os.environ.get('FIBRIL_MJX_TEST_FULL') == '1':
    return
  drop = [it for it in items if it.get_closest_marker('full')]
  if drop:
    config.hook.pytest_deselected(items=drop)
    items[:] = [it for it in items if not it.get_closest_marker('full')]

RIG_XML = textwrap.dedent("""\
    <mujoco model="rig">
      <option timestep="0.002" integrator="implicitfast"/>
      <worldbody>
        <body name="yaw_stage">
          <joint name="yaw" type="hinge" axis="0 0 1" damping="0.2"/>
          <geom type="box" size="0.1 0.1 0.01" mass="1" contype="0" conaffinity="0"/>
          <body name="tilt_stage" pos="0 0 0.05">
            <joint name="tilt" type="hinge" axis="0 1 0" damping="0.2"/>
            <geom type="box" size="0.05 0.05 0.01" mass="0.5" contype="0" conaffinity="0"/>
            <site name="imu" pos="0.03 0.01 0.02"/>
            <site name="imu2" pos="-0.02 0.0 0.02"/>
          </body>
        </body>
      </worldbody>
      <actuator>
        <velocity name="yaw_motor" joint="yaw" kv="5"/>
        <velocity name="tilt_motor" joint="tilt" kv="5"/>
      </actuator>
      <sensor>
        <framequat name="quat" objtype="site" objname="imu"/>
        <gyro name="gyro" site="imu"/>
        <accelerometer name="accel" site="imu"/>
        <framequat name="quat2" objtype="site" objname="imu2"/>
        <gyro name="gyro2" site="imu2"/>
        <accelerometer name="accel2" site="imu2"/>
      </sensor>
    </mujoco>
    """)

SENSORS = {'orientation_sensor': 'quat', 'gyroscope_sensor': 'gyro',
           'accelerometer_sensor': 'accel'}
SENSORS2 = {'orientation_sensor': 'quat2', 'gyroscope_sensor': 'gyro2',
            'accelerometer_sensor': 'accel2'}
SCRIPT = [{'actuator': 'yaw_motor', 'amplitude': 1.5, 'frequency_hz': 0.5},
          {'actuator': 'tilt_motor', 'amplitude': 1.0, 'frequency_hz': 0.7}]


def write_rig(tmp: pathlib.Path, components, *, script=SCRIPT, extra=None) -> pathlib.Path:
  """Writes rig.xml and manifest.yaml into `tmp`; returns the manifest path."""
  from ref_helpers import write_manifest
  return write_manifest(tmp, RIG_XML, components, model='rig.xml', actuator_script=script,
                        **(extra or {}))


def ahrs_entry(cid='ahrs', sensors=SENSORS, **config):
  return {'id': cid, 'type': 'fibril_sim/ahrs', 'config': {**sensors, **config}}


@pytest.fixture(scope='session')
def rig_dir(tmp_path_factory):
  return tmp_path_factory.mktemp('rig')


class SensorData(NamedTuple):
  """Stands in for `mjx.Data` where a sensor's `acquire` is driven with synthetic
  `sensordata` (no physics)."""
  sensordata: Any


@pytest.fixture
def plain_messages(monkeypatch):
  """Fails the test when a `FibrilError` raised during it (caught or not) prints a NumPy or JAX
  repr (`np.float64(0.51)`, `array([1, 2])`) instead of plain numbers. Bad-input test modules
  use it for all their tests: `pytestmark = pytest.mark.usefixtures('plain_messages')`."""
  from fibril_mjx.errors import FibrilError
  seen = []
  init = FibrilError.__init__

  def record(self, *args):
    seen.append(' '.join(str(a) for a in args))
    init(self, *args)

  monkeypatch.setattr(FibrilError, '__init__', record)
  yield seen
  bad = [m for m in seen if 'np.' in m or 'array(' in m]
  assert not bad, f'a message prints a NumPy repr instead of plain numbers: {bad[0]!r}'
