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
