"""`import fibril_mjx` changes nothing in the process beyond loading modules: no environment
variable (XLA_FLAGS is the caller's, `fibril_mjx.cpu_flags`), no import hook on
`sys.meta_path`, no thread, no JAX monitoring listener, no JAX setting.

Checked in a fresh interpreter that imports what the package depends on first (what those
change is theirs), without XLA_FLAGS (a flag the test process set would hide one the import
sets)."""

import json
import os
import subprocess
import sys

PROBE = """
import json, os, sys, threading
import jax, jax.numpy, mujoco, numpy
from jax._src import monitoring

def listeners():   # every listener list JAX keeps, by its getter: ids of the listeners
  getters = sorted(n for n in dir(monitoring) if n.startswith('get_') and n.endswith('listeners'))
  return {n: [id(f) for f in getattr(monitoring, n)()] for n in getters}

def snapshot():
  return {'environ': dict(os.environ), 'meta_path': [id(f) for f in sys.meta_path],
          'threads': sorted(t.ident for t in threading.enumerate()),
          'listeners': listeners(),
          'jax_config': {k: repr(v) for k, v in jax.config.values.items()}}

before = snapshot()
import fibril_mjx
after = snapshot()
print(json.dumps({'before': before, 'after': after, 'n_getters': len(before['listeners']),
                  'threads': [t.name for t in threading.enumerate()],
                  'finders': [type(f).__name__ for f in sys.meta_path]}))
"""


def _run() -> dict:
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  r = subprocess.run([sys.executable, '-c', PROBE], env=env, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


def _changed(a: dict, b: dict) -> dict:
  return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def test_import_changes_no_environment_hook_thread_or_listener():
  out = _run()
  before, after = out['before'], out['after']
  assert out['n_getters'] >= 1, 'jax._src.monitoring has no listener getter: update the probe'
  assert _changed(before['environ'], after['environ']) == {}
  assert before['meta_path'] == after['meta_path'], out['finders']
  assert before['threads'] == after['threads'], out['threads']
  assert before['listeners'] == after['listeners'], _changed(before['listeners'],
                                                             after['listeners'])
  assert _changed(before['jax_config'], after['jax_config']) == {}
