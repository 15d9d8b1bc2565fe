"""The Playground tutorial (examples/playground_devices.py, docs/tutorials/playground.md) at its
`--small` size: both policies trained through `wrap_for_brax_training`, each evaluated on the
ideal env and on the device env with faults; the table's rows and Wilson intervals (against
SciPy's)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from _load import example


# `full` (make test-full): about 30 s of CPU warm (50 s wall on the shared 2-core machine), most
# of it importing Playground and tracing two Brax PPO trainings and four evaluations; the
# Playground wrapper itself is tested in tests/rl/test_playground.py
@pytest.mark.full
def test_playground_devices_small():
  pytest.importorskip('mujoco_playground')
  pytest.importorskip('brax')
  rows = example('playground_devices').main(['--small'])
  assert [(r['trained_on'], r['evaluated_on']) for r in rows] == [
      ('ideal', 'ideal'), ('ideal', 'devices+faults'),
      ('devices', 'ideal'), ('devices', 'devices+faults')]
  for r in rows:
    assert r['episodes'] == 8 and 0 <= r['failures'] <= 8
    # CartpoleBalance's reward is a product of four factors in [0, 1]: 8 steps give [0, 8]
    assert 0.0 <= r['mean_return'] <= 8.0
    ci = stats.binomtest(r['failures'], 8).proportion_ci(confidence_level=0.95,
                                                          method='wilson')
    np.testing.assert_allclose(r['wilson95'], [ci.low, ci.high], rtol=1e-12, atol=1e-15)
