"""Every `bench/` script runs here in its `--quick` form (a smoke test: the same code path at
tiny sizes; the figures it prints are not checked, only that it finishes and prints its
figure line) and reaches fibril_mjx only through public names.

The six cheapest run in `make test`; the `HEAVY` ones (up to a minute of CPU each, compiling)
in `make test-full`. Each script runs as a user runs it: `python bench/<script> --quick ...` in
a new process from the repository root, with the suite's XLA flags and compilation cache
(tests/conftest.py).
Where `--quick` alone still compiles more than a smoke test needs, the extra arguments below
narrow it to the cheapest path that runs the script's own code (one manifest, one problem,
a few worlds); bench/README.md gives each script's full command.
"""

import ast
import importlib
import os
import pathlib
import re
import resource
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BENCH = REPO / 'bench'

# script: (arguments after --quick, the figure line it prints last)
QUICK = {
    'overhead.py': (['--manifest', 'manifests/ahrs_turntable.yaml', '--worlds', '16',
                     '--ticks', '5', '--repeats', '1'], r'overhead_ratio_16='),
    'kernels.py': ([], r'component_kernels_per_tick_ahrs_turntable='),
    'dcmotor.py': (['--worlds', '16', '--ticks', '5', '--repeats', '1'], r'dcmotor_ratio_16='),
    'extero_cost.py': ([], r'imu_increment_s_per_world_tick='),
    'campaign.py': ([], r'campaign_overhead_16='),
    'rl.py': ([], r'env_steps_ratio='),
    'rl_kernels.py': ([], r'rl_device_kernels_per_step='),
    # the outside filters (imufusion, ahrs) are not project dependencies
    'ekf_vs_peers.py': (['--no-peers'], r'tilt_rms_deg_quaternion_ekf='),
    # problem (f): one cold fit each side (the warm problems also time new processes)
    'tune_vs_sysid.py': (['--only', 'f', '--iterations', '1'], r'tune_time_ratio_f='),
    # the physics='c' ratios: the MJX part compiles the turntable five times over
    'scaling.py': (['--only', 'c'], r'c_ratio_wheeled_base_128_physics_c='),
    # --quick is the CI-time variant (1024 and 4096 worlds of two models): one model, 64
    'no_hang.py': (['--models', 'turntable', '--worlds', '64'], r'no_hang_ok='),
    'servo_real.py': (['--no-published'], r'servo_heldout_mae_deg='),
    'lapack_hang_repro.py': ([], r'repro_finished_s='),
    'physics_sub_batch.py': ([], r'physics_sub_batch_ratio='),
}
# Too costly for `make test` (the suite's budget is ~12 minutes cold on 2 cores): CPU seconds of
# the --quick run above from an empty compilation cache (2026-12-07, a loaded 2-core VM), nearly
# all of it XLA compiling the script's two to six programs; `make test-full` runs them. The
# others take 14-28 s each (129 s together).
HEAVY = {'dcmotor.py': 64, 'rl.py': 64, 'rl_kernels.py': 90, 'servo_real.py': 50,
         'extero_cost.py': 38, 'overhead.py': 33, 'tune_vs_sysid.py': 28,
         'physics_sub_batch.py': 35}
# script: (module, name) of the peer it compares with, from an extra that is not a test
# dependency (`mujoco.sysid` is an empty package without the `sysid` extra)
PEERS = {'tune_vs_sysid.py': ('mujoco.sysid', 'ParameterDict', "pip install -e '.[sysid]'")}
# scripts whose --quick form another test runs
ELSEWHERE = {
    'gpu_bench.py': 'tests/batch/test_worlds.py::test_gpu_check_runs_on_the_cpu_with_quick'}
FIGURE = r'^{}[-+0-9.eE/]+\s*$'


def scripts():
  return sorted(p.name for p in BENCH.glob('*.py'))


def test_every_bench_script_is_run_here_or_elsewhere():
  assert scripts() == sorted([*QUICK, *ELSEWHERE])


@pytest.mark.parametrize('name', scripts())
def test_bench_script_has_a_quick_flag(name):
  tree = ast.parse((BENCH / name).read_text())
  flags = {a.value for n in ast.walk(tree) if isinstance(n, ast.Call)
           and getattr(n.func, 'attr', None) == 'add_argument'
           for a in n.args if isinstance(a, ast.Constant)}
  assert '--quick' in flags, f'bench/{name} has no --quick flag'


def private_uses(source: str) -> list[str]:
  """What a script reaches that is private: an import of a fibril_mjx module or name whose
  path has a `_name` part, an attribute `x._name` of anything but the script's own `self` /
  `cls`, and `getattr(x, '_name')` (dunders are public)."""
  private = lambda s: s.startswith('_') and not s.startswith('__')   # noqa: E731
  out = []
  for n in ast.walk(ast.parse(source)):
    if isinstance(n, ast.ImportFrom) and (n.module or '').split('.')[0] == 'fibril_mjx':
      out += [f'line {n.lineno}: from {n.module} import {a.name}' for a in n.names
              if private(a.name) or any(map(private, n.module.split('.')))]
    elif isinstance(n, ast.Import):
      out += [f'line {n.lineno}: import {a.name}' for a in n.names
              if a.name.split('.')[0] == 'fibril_mjx' and any(map(private, a.name.split('.')))]
    elif isinstance(n, ast.Attribute) and private(n.attr):
      if not (isinstance(n.value, ast.Name) and n.value.id in ('self', 'cls')):
        out.append(f'line {n.lineno}: {ast.unparse(n)}')
    elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == 'getattr'
          and len(n.args) > 1 and isinstance(n.args[1], ast.Constant)
          and isinstance(n.args[1].value, str) and private(n.args[1].value)):
      out.append(f'line {n.lineno}: {ast.unparse(n)}')
  return out


@pytest.mark.parametrize('name', scripts())
def test_bench_script_uses_only_public_names(name):
  assert private_uses((BENCH / name).read_text()) == [], f'bench/{name}'


def test_private_uses_finds_each_kind():
  src = ('import fibril_mjx.batch._x\nfrom fibril_mjx._deprecated import y\n'
         'from fibril_mjx.batch import _z\nfrom jax._src import ok\nplan._group_sim(1)\n'
         "getattr(m, '_devices')\nself._jax\nx.__version__\n")
  assert sorted(u.split(':')[0] for u in private_uses(src)) == [
      'line 1', 'line 2', 'line 3', 'line 5', 'line 6']


@pytest.mark.parametrize('name', [pytest.param(n, marks=pytest.mark.full) if n in HEAVY else n
                                  for n in sorted(QUICK)])
def test_bench_script_runs_quick(name):
  extra, figure = QUICK[name]
  if name in PEERS:
    module, attr, how = PEERS[name]
    if not hasattr(importlib.import_module(module), attr):
      pytest.skip(f'bench/{name} compares with {module}.{attr}, not installed ({how})')
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(REPO), *filter(None, [os.environ.get('PYTHONPATH')])]))
  t0, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
  r = subprocess.run([sys.executable, str(BENCH / name), '--quick', *extra], cwd=REPO, env=env,
                     capture_output=True, text=True, timeout=900)
  wall, cpu1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
  lines = [ln for ln in r.stdout.splitlines() if re.match(FIGURE.format(figure), ln)]
  print(f'bench/{name} --quick {" ".join(extra)}: {wall:.1f} s wall, {cpu:.1f} s CPU; {lines}')
  assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
  assert lines, (figure, r.stdout[-3000:])
