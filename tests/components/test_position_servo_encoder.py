"""`fibril_sim/encoder` beside the position servo: its samples against a NumPy model of the
joint angle it reads (offset, resolution, schedule, latency), and its configuration errors."""

from __future__ import annotations

import pathlib

import jax.numpy as jnp
import numpy as np
import pytest
import yaml

import fibril_mjx
from fibril_mjx.components.actuators import position_servo as ps
from fibril_mjx.errors import FibrilError

ROOT = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = ROOT / 'manifests' / 'tuning' / 'servo_xl330.yaml'
XML = ROOT / 'assets' / 'examples' / 'servo_pendulum_xl330.xml'
RES = 2 * np.pi / 4096
ENC = {'joint': 'pendulum', 'period_s': 0.01, 'phase_s': 0.005, 'latency_s': 0.015,
       'offset_rad': 0.02, 'resolution_rad': RES}
T, W = 200, 2


def _manifest(tmp_path, **enc):
  m = yaml.safe_load(MANIFEST.read_text())
  m['model'] = str(XML)
  m['components'].append({'id': 'enc', 'type': 'fibril_sim/encoder', 'config': {**ENC, **enc}})
  path = tmp_path / 'servo_enc.yaml'
  path.write_text(yaml.safe_dump(m))
  return path


def test_encoder_samples_the_joint_angle_on_its_schedule(tmp_path):
  sim = fibril_mjx.load(_manifest(tmp_path))
  t = np.arange(T) * 0.005
  b = lambda x, dt: jnp.asarray(np.broadcast_to(np.asarray(x, dt)[:, None], (T, W)))  # noqa
  cmd = ps.ServoCommand(b(np.ones(T, bool), bool), b(np.ones(T, bool), bool),
                        b(0.6 * np.sin(2 * np.pi * t), np.float32),
                        b(np.full(T, 400.0), np.float32), b(np.zeros(T), np.float32))
  _, tr, _ = sim.rollout(sim.default_params(W), fibril_mjx.world_keys(0, W), T,
                         commands={'servo': cmd})
  q = np.asarray(tr['truth']['servo']['position'])[0].astype(np.float64)   # (T+1,) ticks 0..T
  out = tr['sensor']['enc']
  new = np.asarray(out.new_data)[0]
  st, at = np.asarray(out.sample_tick)[0][new], np.asarray(out.arrival_tick)[0][new]
  got = np.asarray(out.sample.position)[0][new]
  # acquisitions at 0.005 + k·0.01 s (ticks 1, 3, 5, ...), delivered 3 ticks later
  np.testing.assert_array_equal(st, np.arange(1, T + 1 - 3, 2)[:len(st)])
  np.testing.assert_array_equal(at - st, 3)
  assert len(st) == len(range(1, T + 1 - 3, 2))
  ref = RES * np.round((q[st] + ENC['offset_rad']) / RES)
  # on the count (float32 rounding of the product); a float32 angle within float32 rounding
  # of half a count may round to the neighbouring count
  assert np.mean(np.abs(got - ref) < 1e-6) > 0.97
  np.testing.assert_allclose(got, ref, atol=RES + 1e-6)
  assert np.ptp(got) > 0.5


def test_encoder_on_an_unknown_joint_is_refused(tmp_path):
  with pytest.raises(FibrilError) as e:
    fibril_mjx.load(_manifest(tmp_path, joint='nope'))
  assert ("components[1].config.joint = 'nope': no MuJoCo joint of that name in the compiled "
          'model') in str(e.value)
