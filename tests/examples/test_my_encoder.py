"""The user-written sensor of docs/howto/new-sensor.md, `examples/my_encoder/my_encoder.py`: the
exact file, shown whole in the how-to, through the command line — `plan`, `run`, `export-mcap`
and `schema` in process (`cli.main` after importing the file, what `python my_encoder.py ...`
does) and `schema` as a script. What they write is checked against the manifest and the
encoder's equation, `Q(q + offset + σ·w)`, evaluated here in float64 from the trace's truth.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import pathlib
import subprocess
import sys
from typing import NamedTuple

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory

import fibril_mjx
from fibril_mjx import cli
from fibril_mjx.core import registry
from fibril_mjx.mechanisms import faults

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = ROOT / 'examples' / 'my_encoder'
FILE, MANIFEST = HERE / 'my_encoder.py', HERE / 'my_encoder.yaml'
OFFSET, SIGMA, Q = 0.01, 0.001, 0.0015     # my_encoder.yaml
TICK = 0.002                                # my_encoder.xml


@pytest.fixture(scope='module')
def enc():
  """The user's module, imported from its file (which registers `acme/encoder`)."""
  spec = importlib.util.spec_from_file_location('my_encoder', FILE)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  yield mod
  registry.unregister(mod.TYPE)


def test_the_file_is_one_screen_and_shown_whole_in_the_howto():
  code = FILE.read_text()
  assert len(code.splitlines()) <= 80
  assert f'```python\n{code}```' in (ROOT / 'docs' / 'howto' / 'new-sensor.md').read_text()


def test_plan_run_and_export_mcap(enc, tmp_path, capsys, monkeypatch):
  monkeypatch.setenv('FIBRIL_MJX_NO_PROGRESS', '1')
  assert cli.main(['plan', str(MANIFEST)]) == 0
  text = capsys.readouterr().out
  assert 'encoder (acme/encoder)' in text
  assert 'terms on: offset_rad, noise_stddev_rad, resolution_rad' in text

  run = tmp_path / 'run'
  assert cli.main(['run', str(MANIFEST), '--worlds', '2', '--duration', '0.4',
                   '--trace-worlds', '2', '--out', str(run)]) == 0
  with np.load(run / 'trace.npz') as z:
    tr = {k: z[k] for k in z.files}
  new = tr['sensor/encoder/new_data'].astype(bool)
  st, pos = tr['sensor/encoder/sample_tick'], tr['sensor/encoder/position'].astype(np.float64)
  truth = tr['truth/encoder/position'].astype(np.float64)
  assert np.ptp(truth) > 0.5                                    # the pendulum swings
  assert (tr['sensor/encoder/arrival_tick'] - st)[new].tolist() == [1] * new.sum()  # 2 ms
  assert np.all(np.diff(np.flatnonzero(new[0])) == 2)          # period 4 ms = 2 ticks
  # Q(q + offset + σw): a whole number of counts, within q/2 + 5σ of q + offset
  q = np.take_along_axis(truth, np.clip(st, 0, None), axis=1)[new]
  got = pos[new]
  counts = got / Q
  np.testing.assert_allclose(counts, np.round(counts), atol=1e-3)
  assert np.all(np.abs(got - (q + OFFSET)) <= Q / 2 + 5 * SIGMA + 1e-6)
  err = got - (q + OFFSET)                                      # noise + rounding, zero mean
  assert abs(err.mean()) <= 4 * math.sqrt(SIGMA ** 2 + Q ** 2 / 12) / math.sqrt(err.size)
  assert 0.5 * SIGMA < err.std() < 2 * math.sqrt(SIGMA ** 2 + Q ** 2 / 12)   # noise is on

  out = tmp_path / 'run.mcap'
  assert cli.main(['export-mcap', str(run), '--out', str(out)]) == 0
  assert 'warning' not in capsys.readouterr().err               # mapped by its `ros` part
  with open(out, 'rb') as f:
    reader = make_reader(f, decoder_factories=[DecoderFactory()])
    msgs = [(ch.topic, msg.log_time, m)
            for _, ch, msg, m in reader.iter_decoded_messages(log_time_order=True)]
  for w in range(2):
    mine = [(log, m) for topic, log, m in msgs if topic == f'/world_{w:04d}/encoder/joint_states']
    ticks = np.flatnonzero(new[w] & tr['sensor/encoder/valid'][w])
    assert len(mine) == len(ticks) > 0
    for t, (log, m) in zip(ticks, mine):
      assert list(m.name) == ['encoder'] and m.position[0] == np.float64(pos[w, t])
      assert log == round(int(tr['sensor/encoder/arrival_tick'][w, t]) * TICK * 1e9)


def test_schema_lists_its_config(enc, tmp_path):
  assert cli.main(['schema', '--out', str(tmp_path / 's.json')]) == 0
  text = (tmp_path / 's.json').read_text()
  assert 'acme/encoder' in text and '"noise_stddev_rad"' in text


def test_the_file_is_its_own_command_line(tmp_path):
  r = subprocess.run([sys.executable, str(FILE), 'schema', '--out', str(tmp_path / 's.json')],
                     capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  schema = json.loads((tmp_path / 's.json').read_text())
  assert 'acme/encoder' in json.dumps(schema)


# ------------------------------------------------- declarations checked against the chain

@pytest.fixture(scope='module')
def built(enc):
  return fibril_mjx.load(MANIFEST).components['encoder']


def _remake(sensor, cls, **change):
  return cls(**{**{f.name: getattr(sensor, f.name) for f in dataclasses.fields(sensor)},
                **change})


def test_a_state_without_a_field_of_the_chain_is_a_one_line_error(enc, built):
  class NoQueue(NamedTuple):
    streams: dict
    held: object
    faults: object

  @dataclasses.dataclass(frozen=True)
  class Bad(enc.Encoder):
    state_type = NoQueue
  with pytest.raises(TypeError, match=rf'^{__name__}\.Bad: state_type NoQueue lacks field\(s\) '
                     r'queue \(its error model.s; fields: streams, held, faults\)$'):
    _remake(built, Bad)


def test_params_without_a_field_of_the_chain_is_a_one_line_error(enc, built):
  class NoResolution(NamedTuple):
    offset_rad: object
    noise_stddev_rad: object
    faults: tuple

  @dataclasses.dataclass(frozen=True)
  class Bad(enc.Encoder):
    params_type = NoResolution
  with pytest.raises(TypeError, match=rf'^{__name__}\.Bad: params_type NoResolution lacks '
                     r'field\(s\) resolution_rad '):
    _remake(built, Bad)


def test_a_config_without_a_field_of_the_chain_is_a_one_line_error(enc, built):
  class NoNoise(faults.DeviceConfig):
    joint: str
    offset_rad: float = 0.0
    resolution_rad: float = 0.0
  with pytest.raises(TypeError, match=r'^my_encoder\.Encoder: config model NoNoise lacks '
                     r'`noise_stddev_rad: float Ge\(ge=0\) = 0\.0` \(a field of its error '
                     r'model\)$'):
    _remake(built, enc.Encoder, cfg=NoNoise(joint='hinge', period_s=0.004))
