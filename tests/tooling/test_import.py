"""Importing the package starts nothing: JAX's backend is initialized only when the user first
computes, so `fibril_mjx.batch.worlds.cpu_flags` (the CLI, the benches) can still ask XLA for one
CPU device per core after `import fibril_mjx`."""

import os
import subprocess
import sys

CODE = """
import fibril_mjx
from fibril_mjx.batch.worlds import cpu_flags
n = cpu_flags(3)
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
if sys.argv[1] == 'jax-first':
  import jax.numpy as jnp
  jnp.ones(1).block_until_ready()       # the backend starts with the flags it finds
import fibril_mjx
import jax, jax.numpy as jnp
f = jax.vmap(lambda x: jax.lax.scan(lambda c, _: (jnp.sin(c) * 0.5 + 1.0, c), x, None,
                                    length=300)[1])
text = jax.jit(f).lower(jnp.ones((2, 300))).compile().as_text()
print('option', 'xla_cpu_small_while_loop_byte_threshold' in os.environ.get('XLA_FLAGS', ''),
      'one_kernel', 'xla_cpu_small_call' in text)
"""


def test_import_asks_xla_for_one_kernel_per_loop_unless_jax_started_first():
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  out = {}
  for order in ('import-first', 'jax-first'):
    r = subprocess.run([sys.executable, '-c', LOOP, order], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out[order] = r.stdout.split()
  assert out['import-first'] == ['option', 'True', 'one_kernel', 'True']
  # a process that computed before importing keeps XLA's defaults: the loop is not one kernel
  assert out['jax-first'] == ['option', 'False', 'one_kernel', 'False']
