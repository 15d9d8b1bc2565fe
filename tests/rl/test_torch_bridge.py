"""The device pipeline on torch tensors (`fibril_mjx.rl.torch_bridge.TorchPipeline`).

A torch-driven loop over MuJoCo C physics (`mj_step`, then `mj_forward` for the `sensordata` of
the new state, on the compiled model) against the JAX path: `pipeline.init` /
`pipeline.step` with the frames given, called in JAX on the same frames, one world at a time (no vmap). DLPack must not
copy: the JAX array a CPU tensor becomes reads the tensor's buffer, and back.
"""

from __future__ import annotations

import pathlib

import jax
import mujoco
import numpy as np
import pytest

torch = pytest.importorskip('torch')
import fibril_mjx   # noqa: E402
from fibril_mjx.core import pipeline   # noqa: E402
from fibril_mjx.rl import torch_bridge as tb   # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
N, TICKS = 3, 12


def c_frames(m, n_ticks, ctrl):
  """MuJoCo C frames `[{qpos, qvel, act, sensordata, ctrl} (float32)]` of one world."""
  d = mujoco.MjData(m)
  d.ctrl[:] = ctrl
  mujoco.mj_forward(m, d)
  out = []
  for _ in range(n_ticks):
    out.append({k: np.asarray(getattr(d, k), np.float32).copy() for k in tb.FRAME})
    mujoco.mj_step(m, d)
    mujoco.mj_forward(m, d)
  return out


def test_torch_loop_over_mujoco_c_equals_the_jax_path():
  sim = fibril_mjx.load(REPO / 'manifests' / 'rl' / 'leg_hold.yaml')
  m = sim.mj_model
  frames = [c_frames(m, TICKS, 0.3 * (w + 1)) for w in range(N)]
  keys = np.array(fibril_mjx.world_keys(7, N))
  bridge = tb.TorchPipeline(sim)
  batch = [{k: torch.from_numpy(np.stack([frames[w][t][k] for w in range(N)]))
            for k in tb.FRAME} for t in range(TICKS)]
  outs = []
  state, out = bridge.init(torch.from_numpy(keys), batch[0])
  outs.append(out)
  for t in range(1, TICKS):
    state, out = bridge.step(state, batch[t])
    outs.append(out)
  assert isinstance(out['sensor']['imu'].sample.angular_velocity, torch.Tensor)
  # the JAX path, one world at a time
  params = sim.default_params()
  init = jax.jit(lambda k, f: pipeline.init(sim.built, params, k, pipeline.WorldStart(frame=f)))
  step = jax.jit(lambda s, f: pipeline.step(sim.built, params, s, frame=f))
  for w in range(N):
    fr = [pipeline.Frame(*(frames[w][t][k] for k in tb.FRAME)) for t in range(TICKS)]
    st = init(keys[w], fr[0])
    ref = [pipeline.outputs(sim.built, st)]
    for t in range(1, TICKS):
      st, o = step(st, fr[t])
      ref.append(o)
    for t in range(TICKS):
      got = jax.tree.map(lambda x: x[w].numpy(), outs[t])
      jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
                   got, jax.tree.map(np.asarray, ref[t]))
  # something was delivered and differs between worlds (noise per world key)
  gyro = np.stack([o['sensor']['imu'].sample.angular_velocity.numpy() for o in outs])
  assert np.abs(gyro).max() > 0 and not np.allclose(gyro[:, 0], gyro[:, 1])


def test_dlpack_does_not_copy():
  t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
  x = tb.to_jax(t)
  assert x.unsafe_buffer_pointer() == t.data_ptr()
  back = tb.to_torch(x)
  assert back.data_ptr() == t.data_ptr()


def test_frame_needs_every_field():
  bridge = tb.TorchPipeline(fibril_mjx.load(REPO / 'manifests' / 'rl' / 'leg_hold.yaml'))
  with pytest.raises(ValueError, match="TorchPipeline: the frame has no 'ctrl'"):
    bridge.frame({k: torch.zeros(1, 1) for k in tb.FRAME[:-1]})


def tutorial_block() -> str:
  """The python block of docs/tutorials/playground.md after its test marker."""
  text = (REPO / 'docs' / 'tutorials' / 'playground.md').read_text()
  marker = text.index('(test_the_tutorial_playground_torch_loop) -->')
  start = text.index('```python\n', marker) + len('```python\n')
  return text[start:text.index('```', start)]


def test_the_tutorial_playground_torch_loop():
  """The tutorial's PyTorch loop from a Playground env, as written: the delivered cart
  position is MuJoCo C's true one of 3 ticks before (feedback latency 30 ms at 10 ms ticks),
  the devices' model is the env's MJCF with the probes appended, the commands reach the cart."""
  pytest.importorskip('mujoco_playground')
  ns = {}
  exec(compile(tutorial_block(), 'docs/tutorials/playground.md', 'exec'), ns)   # noqa: S102
  seen, truth = np.stack(ns['seen']), np.stack(ns['truth'])   # (ticks, worlds)
  np.testing.assert_allclose(seen[3:], truth[:-3], rtol=0, atol=1e-6)
  assert np.abs(seen[3:] - truth[3:]).max() > 1e-4            # it did lag
  dev, m = ns['dev'], ns['m']
  assert m is dev.mj_model and m.nsensordata >= dev.playground.mj_model.nsensordata
  assert np.abs(truth[-1] - truth[0]).max() > 1e-3            # the policy moved the carts
