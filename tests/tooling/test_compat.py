"""The old module paths (before the layers) still import, as the new modules themselves."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from fibril_mjx.config import compat


@pytest.mark.parametrize('old, new', sorted(compat.MOVED.items()))
def test_old_path_is_the_new_module(old, new):
  fresh = old not in sys.modules
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always', DeprecationWarning)
    mod = importlib.import_module(old)
  assert mod is importlib.import_module(new)
  if fresh:   # the warning comes with the first import of the old path in a process
    assert any(f'{old} moved to {new}' in str(w.message) for w in caught), caught


def test_from_import_of_an_old_name_in_a_fresh_process():
  code = ('import warnings; warnings.simplefilter("error", DeprecationWarning)\n'
          'try:\n  from fibril_mjx.simulator import Simulation\nexcept DeprecationWarning as e:'
          '\n  print("warned:", e)\n'
          'import warnings; warnings.simplefilter("ignore")\n'
          'from fibril_mjx.simulator import Simulation\n'
          'from fibril_mjx.batch.simulation import Simulation as S2\nprint(Simulation is S2)\n')
  r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  assert 'warned: fibril_mjx.simulator moved to fibril_mjx.batch.simulation' in r.stdout
  assert r.stdout.strip().endswith('True')


def test_every_new_path_exists():
  for new in compat.MOVED.values():
    importlib.import_module(new)
