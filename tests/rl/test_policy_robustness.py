"""`examples/policy_robustness.py` end to end at a tiny budget: two Brax PPO trainings of a few
hundred steps (nominal device vs device randomization), both checkpoints through ONE campaign
file of 64 worlds, and the failure rates with their Wilson intervals (against SciPy's). The
outputs of `train_ppo.train` on the way (seen through a spy on it) are checked too: no learning
curve without evaluation, finite parameters, and a deterministic policy of the right action
shape (the test of these in tests/rl/test_envs.py ran a third training of its own).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import jax
import numpy as np
import pytest
from scipy import stats

pytest.importorskip('brax')

from fibril_mjx.workflows import campaign  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location('policy_robustness',
                                              REPO / 'examples' / 'policy_robustness.py')
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

STEPS = 4 * 4 * 4 * 2 * 3   # 384 env steps: three PPO iterations of 4 envs x 4 unroll x 4 x 2
TINY = dict(hidden=(8,), unroll_length=4, batch_size=4, num_minibatches=2,
            num_updates_per_batch=1, num_eval_envs=4)


def test_two_policies_through_one_campaign(tmp_path, monkeypatch):
  trained = []
  train = example.train_ppo.train

  def spy(env, **kw):
    out = train(env, **kw)
    trained.append((env, kw, out))
    return out
  monkeypatch.setattr(example.train_ppo, 'train', spy)
  res = example.run(tmp_path, timesteps=STEPS, envs=4, episode_length=4,
                    worlds=64, duration_s=0.05, train_kw=TINY, log=lambda *_: None)
  assert set(res) == {'ideal', 'randomized'}
  # what `train` returned: without evaluation no curve; finite parameters; the deterministic
  # policy (the tanh-normal's mode) maps one observation to one finite action in [-1, 1]
  assert [(e.randomize is not None, e.randomization is not None) for e, _, _ in trained] == [
      (False, False), (True, True)]
  act = jax.jit(lambda mp, params, obs: mp(params, deterministic=True)(obs, None)[0],
                static_argnums=0)
  for env, kw, (make_policy, params, curve) in trained:
    assert kw['run_evals'] is False and curve == []
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(params))
    obs = np.linspace(-1.0, 1.0, env.observation_size, dtype=np.float32)[None]
    action = np.asarray(act(make_policy, params, obs))
    assert action.shape == (1, 1) and np.all(np.isfinite(action))
    assert np.all(np.abs(action) <= 1.0)
  rows = {}
  for name, r in res.items():
    c = r['campaign']
    rows[name] = campaign.read_rows(c['dir'])
    fail = ~rows[name]['pass'].astype(bool)
    assert c['worlds'] == 64 and c['failures'] == int(fail.sum())
    ci = stats.binomtest(c['failures'], 64).proportion_ci(confidence_level=0.95,
                                                          method='wilson')
    np.testing.assert_allclose(c['wilson95'], [ci.low, ci.high], rtol=1e-12, atol=1e-15)
    meta = json.loads(pathlib.Path(r['policy']).with_name('policy.json').read_text())
    assert meta['training']['timesteps'] == STEPS and meta['training']['envs'] == 4
    assert (meta['env']['device_randomization'] is None) == (name == 'ideal')
    done = json.loads((pathlib.Path(c['dir']) / 'campaign.json').read_text())
    assert done['options']['policy'] == r['policy']
  # one campaign file: the same worlds and draws for both policies, different policies
  a, b = rows['ideal'], rows['randomized']
  for col in ('world', 'controller.goal', 'hip.feedback_latency_s', 'joint:hip.damping'):
    np.testing.assert_array_equal(a[col], b[col])
  assert not np.array_equal(a['policy.episode_return'], b['policy.episode_return'])
  assert json.loads((tmp_path / 'results.json').read_text()) == res
