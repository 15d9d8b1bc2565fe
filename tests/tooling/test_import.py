"""Importing the package starts nothing: JAX's backend is initialized only when the user first
computes, so `fibril_mjx.cpu_flags` (the CLI, the benches, a user) can still ask XLA for one CPU
device per core and its loop option after `import fibril_mjx`; called after JAX computed, it
leaves the process's flags alone."""

import os
import subprocess
import sys

import conftest
from fibril_mjx.batch import worlds

CODE = """
import fibril_mjx
n = fibril_mjx.cpu_flags(3)
import jax
assert len(jax.devices()) == n == 3, jax.devices()
print('ok')
"""


def test_import_leaves_the_backend_uninitialized():
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  r = subprocess.run([sys.executable, '-c', CODE], env=env, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 0 and r.stdout.strip().endswith('ok'), r.stderr[-2000:]


# A scan over 300 ticks of two lanes whose body touches ~2.4 kB (XLA's default bound for a
# loop compiled as one kernel is 1 kB): `xla_cpu_small_call` marks a loop so compiled.
LOOP = """
import os, sys
import jax.numpy as jnp
if sys.argv[1] == 'jax-first':
  jnp.ones(1).block_until_ready()       # the backend starts with the flags it finds
import fibril_mjx
before = os.environ.get('XLA_FLAGS')
if sys.argv[1] != 'import-only':
  n = fibril_mjx.cpu_flags(1, bitwise=False)
  assert n == 1, n
import jax
f = jax.vmap(lambda x: jax.lax.scan(lambda c, _: (jnp.sin(c) * 0.5 + 1.0, c), x, None,
                                    length=300)[1])
text = jax.jit(f).lower(jnp.ones((2, 300))).compile().as_text()
print('option', 'xla_cpu_small_while_loop_byte_threshold' in os.environ.get('XLA_FLAGS', ''),
      'one_kernel', 'xla_cpu_small_call' in text,
      'environ_kept', os.environ.get('XLA_FLAGS') == before)
"""


def test_cpu_flags_ask_xla_for_one_kernel_per_loop_unless_jax_started_first():
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  out = {}
  for order in ('import-only', 'flags-first', 'jax-first'):
    r = subprocess.run([sys.executable, '-c', LOOP, order], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out[order] = r.stdout.split()
  # the import alone asks XLA for nothing: the loop is not one kernel
  assert out['import-only'] == ['option', 'False', 'one_kernel', 'False', 'environ_kept', 'True']
  assert out['flags-first'] == ['option', 'True', 'one_kernel', 'True', 'environ_kept', 'False']
  # a process that computed before asking keeps XLA's defaults, and its XLA_FLAGS untouched
  assert out['jax-first'] == ['option', 'False', 'one_kernel', 'False', 'environ_kept', 'True']


def test_the_suite_runs_with_the_loop_option_of_cpu_flags():
  """tests/conftest.py writes the loop option itself (it runs before anything imports JAX)."""
  env = {}
  worlds.loop_flags(env)
  assert env['XLA_FLAGS'] == f'--xla_backend_extra_options={conftest.LOOP_OPTION}'
  assert worlds.LOOP_OPTION in os.environ['XLA_FLAGS']   # ours, or a value of the user's


def test_the_suite_compiles_and_threads_as_cpu_flags_asks():
  """tests/conftest.py writes the CLI's emitter and Eigen flags itself, as `cpu_flags` does
  with a device per core (a test file per core under tools/run_tests.py)."""
  assert conftest.CPU_FLAGS == (worlds.EMITTER_FLAG, worlds.EIGEN_FLAG)
  for flag in conftest.CPU_FLAGS:
    assert flag.split('=')[0] in os.environ['XLA_FLAGS']   # ours, or a value of the user's


def test_only_the_suite_compiles_at_llvm_level_0():
  """tests/conftest.py compiles the suite at LLVM's level 0; `cpu_flags` (the CLI's, and the
  two-device subprocess of tests/batch/test_worlds.py that compares the two levels) leaves
  LLVM at its default."""
  assert conftest.TEST_FLAGS == ('--xla_backend_optimization_level=0',)
  assert 'xla_backend_optimization_level' in os.environ['XLA_FLAGS']
  env = {}
  worlds.cpu_flags(2, environ=env)
  assert 'optimization_level' not in env['XLA_FLAGS']
