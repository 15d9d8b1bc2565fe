"""Traced programs kept on disk (`fibril_mjx.batch.programs`): a second process (here: a second
`Simulation` of the same manifest after `programs.forget()`, which then shares nothing in
memory with the first) reads the programs the first wrote and computes bitwise the same; a
second owner in the same process runs the programs the process holds; what cannot be kept
stable runs as plain `jax.jit` and writes nothing."""

import io
import os
import pickle
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fibril_mjx
from conftest import ahrs_entry, write_rig
from fibril_mjx.batch import programs

NOISY = dict(period_s=0.006, latency_s=0.004, jitter_s=0.003, loss_probability=0.1,
             angular_velocity_noise_stddev=[0.01, 0.02, 0.03])


@pytest.fixture(scope='module')
def manifest(tmp_path_factory):
  return write_rig(tmp_path_factory.mktemp('rig'), [ahrs_entry(**NOISY)])


def verbs(sim, n=4):
  """reset, one step and a 5-tick run over `n` worlds; every leaf as NumPy."""
  p = sim.default_params(n)
  st = sim.reset(p, fibril_mjx.world_keys(7, n))
  st, out = sim.step(p, st)
  st, outs = sim.run(p, st, 5)
  return [np.asarray(x) for x in jax.tree.leaves((st, out, outs))]


def counts(sim):
  """`{verb: (traced, loaded)}` of the simulation's kept programs."""
  return {k[0]: (p.traced, p.loaded) for k, p in sim._programs.items()
          if isinstance(p, programs.Program)}


def kept(store):
  return sorted(store.glob('*' + programs.SUFFIX))


def assert_same(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)


def test_a_second_simulation_reads_the_programs_and_computes_bitwise_the_same(
    manifest, tmp_path, monkeypatch):
  store = tmp_path / 'programs'
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(store))
  first = fibril_mjx.load(manifest)
  r1 = verbs(first)
  assert counts(first) == {'reset': (1, 0), 'step': (1, 0), 'run': (1, 0)}
  files = kept(store)
  assert [f.name.split('-')[0] for f in files] == ['reset', 'run', 'step']
  assert [f.name.split('-')[0] for f in store.glob('*.json')] == ['sub_batch']

  same = fibril_mjx.load(manifest)          # another owner in this process: held, not read
  assert_same(r1, verbs(same))
  assert counts(same) == {'reset': (0, 0), 'step': (0, 0), 'run': (0, 0)}
  assert {k[0]: p.reused for k, p in same._programs.items()
          if isinstance(p, programs.Program)} == {'reset': 1, 'step': 1, 'run': 1}

  programs.forget()                         # as a new process: read from disk
  second = fibril_mjx.load(manifest)
  r2 = verbs(second)
  assert counts(second) == {'reset': (0, 1), 'step': (0, 1), 'run': (0, 1)}
  assert_same(r1, r2)
  assert second.sub_batch_cap() == first.sub_batch_cap()

  step_file = next(f for f in files if f.name.startswith('step-'))
  step_file.write_bytes(b'not a program')           # damaged: traced again and rewritten
  programs.forget()
  third = fibril_mjx.load(manifest)
  assert_same(r1, verbs(third))
  assert counts(third) == {'reset': (0, 1), 'step': (1, 0), 'run': (0, 1)}
  assert step_file.stat().st_size > 1000

  fourth = fibril_mjx.load(manifest)                  # another world count: other programs
  verbs(fourth, n=6)
  assert counts(fourth) == {'reset': (1, 0), 'step': (1, 0), 'run': (1, 0)}
  assert len(kept(store)) == 6

  monkeypatch.setenv('FIBRIL_MJX_NO_PROGRAM_CACHE', '1')   # nothing kept: plain jax.jit
  plain = fibril_mjx.load(manifest)
  assert_same(r1, verbs(plain))
  assert counts(plain) == {'reset': (0, 0), 'step': (0, 0), 'run': (0, 0)}
  assert all(p._plain._cache_size() == 1 for p in plain._programs.values())
  assert len(kept(store)) == 6


def test_the_same_files_in_another_folder_read_the_same_programs(manifest, tmp_path,
                                                                 monkeypatch):
  """Where a manifest lies is not part of the key (a field's source file is plan metadata):
  each test's temporary copy of a rig reads what an earlier copy wrote."""
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path / 'programs'))
  first = fibril_mjx.load(manifest)
  r1 = verbs(first)
  copy = shutil.copytree(manifest.parent, tmp_path / 'elsewhere') / manifest.name
  programs.forget()   # as a new process
  second = fibril_mjx.load(copy)
  assert second.built.components['ahrs'].fields != first.built.components['ahrs'].fields
  r2 = verbs(second)
  assert counts(second) == {'reset': (0, 1), 'step': (0, 1), 'run': (0, 1)}
  assert_same(r1, r2)


def test_the_device_pass_over_mujoco_c_is_kept(manifest, tmp_path, monkeypatch):
  """physics='c': the device pipeline over MuJoCo C's frames is read back, bitwise."""
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path / 'programs'))

  def run():
    sim = fibril_mjx.load(manifest, physics='c')
    _, trace = sim.rollout(sim.default_params(3), fibril_mjx.world_keys(0, 3), 20)
    return sim, [np.asarray(x) for x in jax.tree.leaves(trace)]
  first, a = run()
  assert [(p.traced, p.loaded) for p in first._c_programs.values()] == [(1, 0)]
  programs.forget()   # as a new process
  second, b = run()
  assert [(p.traced, p.loaded) for p in second._c_programs.values()] == [(0, 1)]
  assert_same(a, b)


def test_a_program_with_a_controller_is_never_kept(manifest, tmp_path, monkeypatch):
  """A controller is a Python function: no text of it is the same in the next process."""
  store = tmp_path / 'programs'
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(store))
  sim = fibril_mjx.load(manifest)
  p = sim.default_params(2)
  st = sim.reset(p, fibril_mjx.world_keys(0, 2))
  (_, carry), _ = sim.run(p, st, 3, controller=lambda obs, c: ({}, c + 1),
                          controller_state=jnp.zeros(2))
  np.testing.assert_array_equal(carry, [3.0, 3.0])
  assert [f.name.split('-')[0] for f in kept(store)] == ['reset']
  assert not any(isinstance(v, programs.Program) for k, v in sim._programs.items()
                 if k[0] == 'run')


def test_the_key_follows_jax_settings_but_not_its_cache_settings():
  before = programs._environment()
  dump = jax.config.jax_compilation_cache_dir
  try:
    jax.config.update('jax_debug_nans', True)
    assert programs._environment() != before
  finally:
    jax.config.update('jax_debug_nans', False)
  assert programs._environment() == before
  try:
    jax.config.update('jax_compilation_cache_dir', '/elsewhere')
    assert programs._environment() == before
  finally:
    jax.config.update('jax_compilation_cache_dir', dump)


def test_a_program_jax_export_refuses_runs_plain_and_writes_nothing(tmp_path, monkeypatch):
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path))
  host = lambda x: np.asarray(x) * 2.0                       # noqa: E731
  fn = lambda x: jax.pure_callback(host, jax.ShapeDtypeStruct((3,), jnp.float32), x) + 1.0  # noqa: E731
  prog = programs.Program(fn, 'callback', b'identity')
  np.testing.assert_array_equal(prog(jnp.arange(3.0)), [1.0, 3.0, 5.0])
  np.testing.assert_array_equal(prog(jnp.ones(3)), [3.0, 3.0, 3.0])
  assert prog.traced == 1 and prog.loaded == 0
  assert list(tmp_path.iterdir()) == []


def test_the_structure_reader_builds_only_classes_of_trusted_modules(tmp_path, monkeypatch):
  with pytest.raises(pickle.UnpicklingError, match='posix.system is not of a trusted module'):
    programs._Unpickler(io.BytesIO(pickle.dumps(os.system))).load()
  with pytest.raises(pickle.UnpicklingError, match='numpy.load is not a class'):
    programs._Unpickler(io.BytesIO(pickle.dumps(np.load))).load()
  # a program file whose structure would call os.system is refused: traced again, not run
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path))
  prog = programs.Program(lambda x: {'y': x + 1.0}, 'plus', b'identity')
  np.testing.assert_array_equal(prog(jnp.zeros(2))['y'], [1.0, 1.0])
  (f,) = tmp_path.iterdir()
  evil = pickle.dumps(os.system)
  blob = f.read_bytes()
  n = int.from_bytes(blob[len(programs._MAGIC):len(programs._MAGIC) + 8], 'little')
  rest = blob[len(programs._MAGIC) + 8 + n:]
  f.write_bytes(programs._MAGIC + len(evil).to_bytes(8, 'little') + evil + rest)
  programs.forget()   # as a new process
  again = programs.Program(lambda x: {'y': x + 1.0}, 'plus', b'identity')
  np.testing.assert_array_equal(again(jnp.zeros(2))['y'], [1.0, 1.0])
  assert (again.traced, again.loaded) == (1, 0)


def test_a_traced_value_is_computed_once_and_read_back(tmp_path, monkeypatch):
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path))
  calls = []

  def compute():
    calls.append(1)
    return [None, 'why']

  assert programs.cached_value(b'id', 'cap', compute) == [None, 'why']
  assert programs.cached_value(b'id', 'cap', compute) == [None, 'why']
  assert len(calls) == 1
  (f,) = tmp_path.iterdir()
  f.write_text('{damaged')
  assert programs.cached_value(b'id', 'cap', compute) == [None, 'why'] and len(calls) == 2
  assert programs.cached_value(b'other', 'cap', compute) == [None, 'why'] and len(calls) == 3
  assert programs.cached_value(None, 'cap', compute) == [None, 'why'] and len(calls) == 4


def test_a_computed_array_is_kept_bitwise_and_computed_again_when_damaged(tmp_path,
                                                                          monkeypatch):
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path))
  want = np.array([[0.1, np.pi], [np.nextafter(1.0, 2.0), -0.0]], np.float32)
  calls = []

  def compute():
    calls.append(1)
    return want
  for _ in range(2):
    got = programs.cached_array(b'id', 'ctrl', compute)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
  assert len(calls) == 1
  (f,) = tmp_path.iterdir()
  f.write_bytes(f.read_bytes()[:20])   # cut short: read fails, computed and written again
  assert programs.cached_array(b'id', 'ctrl', compute).tobytes() == want.tobytes()
  assert len(calls) == 2
  programs.cached_array(None, 'ctrl', compute)
  assert len(calls) == 3
