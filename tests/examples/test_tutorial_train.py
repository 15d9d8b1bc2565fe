"""The training tutorial (examples/train_ppo.py with --device-randomization) at a tiny size:
the checkpoint a campaign's `controller:` reads, and the learning curve the page shows."""

from __future__ import annotations

import json

import pytest

from _load import example, is_png


def test_train_with_device_randomization(tmp_path):
  pytest.importorskip('brax')
  mod = example('train_ppo')
  # a tiny budget (384 steps, 4 envs, 4-step episodes), without evaluation episodes (their
  # compile would cost more than the training); the network and unroll are train_ppo's
  # defaults, so these programs are this test's own (none shared with test_policy_robustness)
  mod.main(['--timesteps', '384', '--envs', '4', '--episode-length', '4', '--no-evals',
            '--device-randomization', '--out', str(tmp_path)])
  assert is_png(tmp_path / 'learning_curve.png')
  meta = json.loads((tmp_path / 'policy.json').read_text())
  assert meta['training']['timesteps'] == 384 and meta['training']['envs'] == 4
  # the checkpoint carries the per-episode device randomization it was trained with
  assert meta['env']['device_randomization'] == mod.DEVICE_VARY
  assert (tmp_path / 'policy.msgpack').stat().st_size > 0
