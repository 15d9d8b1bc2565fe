"""Traced programs kept on disk (`fibril_mjx.batch.programs`): a second process (here: a second
`Simulation` of the same manifest after `programs.forget()`, which then shares nothing in
memory with the first) reads the programs the first wrote and computes bitwise the same; a
second owner in the same process runs the programs the process holds; what cannot be kept
stable runs as plain `jax.jit` and writes nothing."""

import hashlib
import io
import json
import os
import pathlib
import pickle
import shutil
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fibril_mjx
from conftest import ahrs_entry, write_rig
from fibril_mjx.batch import executables, program_files, programs

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
    program_files.Unpickler(io.BytesIO(pickle.dumps(os.system))).load()
  with pytest.raises(pickle.UnpicklingError, match='numpy.load is not a class'):
    program_files.Unpickler(io.BytesIO(pickle.dumps(np.load))).load()
  # a program file whose structure would call os.system is refused: traced again, not run
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path))
  fn, _ = _fresh_fn()   # compiled here: its executable is kept too, with its own structure
  prog = programs.Program(fn, 'plus', b'identity')
  want = np.asarray(prog(jnp.zeros(2))['y'])
  evil = pickle.dumps(os.system)
  for f, magic in ((_xla(tmp_path)[0], executables.MAGIC), (kept(tmp_path)[0], programs._MAGIC)):
    blob = f.read_bytes()
    n = int.from_bytes(blob[len(magic):len(magic) + 8], 'little')
    rest = blob[len(magic) + 8 + n:]
    f.write_bytes(magic + len(evil).to_bytes(8, 'little') + evil + rest)
  programs.forget()   # as a new process
  again = programs.Program(fn, 'plus', b'identity')
  np.testing.assert_array_equal(again(jnp.zeros(2))['y'], want)
  assert (again.traced, again.loaded, again.executables) == (1, 0, 0)


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


# --------------------------------------------------------------- compiled executables

def _fresh_fn():
  """A function no earlier run compiled (its constant is new): XLA compiles it here, so its
  executable may be kept (`fibril_mjx.batch.executables`)."""
  c = float(np.random.default_rng().uniform(1.0, 2.0))
  return lambda x: {'y': jnp.sin(x) * c + jnp.cumsum(x)}, c


def _xla(store):
  return sorted(store.glob('*' + executables.SUFFIX))


def test_an_executable_compiled_here_is_kept_and_read_back_bitwise_without_lowering(
    tmp_path, monkeypatch):
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path))
  fn, c = _fresh_fn()
  x = jnp.linspace(0.0, 3.0, 7)
  first = programs.Program(fn, 'fresh', b'owner')
  y1 = np.asarray(first(x)['y'])
  np.testing.assert_allclose(y1, np.sin(np.linspace(0.0, 3.0, 7)) * c
                             + np.cumsum(np.linspace(0.0, 3.0, 7)), rtol=1e-6)
  assert (first.traced, first.loaded, first.executables) == (1, 0, 0)
  (xla,) = _xla(tmp_path)
  assert len(kept(tmp_path)) == 1
  index = json.loads(next(tmp_path.glob('executables-*.json')).read_text())
  assert index == [[kept(tmp_path)[0].name, xla.name]]

  programs.forget()   # as a new process: the executable is read, nothing lowered or compiled
  monkeypatch.setattr(executables, 'compile_for', lambda *a: pytest.fail('compiled again'))
  monkeypatch.setattr(jax.export, 'deserialize', lambda *a: pytest.fail('program read'))
  second = programs.Program(fn, 'fresh', b'owner')
  y2 = np.asarray(second(x)['y'])
  assert (second.traced, second.loaded, second.executables) == (0, 1, 1)
  assert y2.tobytes() == y1.tobytes()
  np.testing.assert_array_equal(second(x + 1.0)['y'], first(x + 1.0)['y'])


def test_an_executable_from_jaxs_cache_is_not_kept(tmp_path, monkeypatch):
  """One JAX's persistent cache handed back serializes without its code (module docstring
  of `executables.py`): the program is lowered and its compilation read from the cache, and
  no executable is written."""
  if not jax.config.jax_compilation_cache_dir:
    pytest.skip('needs JAX\'s persistent cache (tools/run_tests.py sets one)')
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path))
  fn, _ = _fresh_fn()
  x = jnp.arange(5.0)
  y1 = np.asarray(programs.Program(fn, 'fresh', b'owner')(x)['y'])
  (xla,) = _xla(tmp_path)
  xla.unlink()
  programs.forget()
  second = programs.Program(fn, 'fresh', b'owner')
  assert np.asarray(second(x)['y']).tobytes() == y1.tobytes()
  assert (second.traced, second.loaded, second.executables) == (0, 1, 0)
  assert _xla(tmp_path) == []


def test_an_executable_that_fails_its_first_call_is_dropped_for_the_program(tmp_path,
                                                                             monkeypatch):
  """An executable that cannot run here (here: another program's, for other shapes, in the
  file) is removed at its first call and the traced program runs instead; one that cannot be
  read at all is passed over the same way."""
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path))
  fn, _ = _fresh_fn()
  x = jnp.arange(5.0)
  y1 = np.asarray(programs.Program(fn, 'fresh', b'owner')(x)['y'])
  other = programs.Program(fn, 'fresh', b'owner')
  other(jnp.arange(4.0))   # the same function for 4 elements: an executable of its own
  (a, b) = sorted(_xla(tmp_path), key=lambda f: f.stat().st_mtime_ns)
  a.write_bytes(b.read_bytes())   # the 5-element program's file holds the 4-element code
  programs.forget()
  again = programs.Program(fn, 'fresh', b'owner')
  assert np.asarray(again(x)['y']).tobytes() == y1.tobytes()
  assert again.executables == 1 and not a.exists()
  assert np.asarray(again(x)['y']).tobytes() == y1.tobytes()

  # a later call the executable refuses (e.g. inputs placed on another device) runs the
  # program under jax.jit from then on; the file of an executable that ran stays
  programs.forget()
  later = programs.Program(fn, 'fresh', b'owner')
  y4 = np.asarray(later(jnp.arange(4.0))['y'])
  (run,) = later._calls.values()

  def refuse(*leaves):
    raise ValueError('compiled for other devices')
  run._compiled = refuse
  np.testing.assert_array_equal(later(jnp.arange(4.0))['y'], y4)
  assert later.executables == 1 and b.exists()

  b.write_bytes(b'not an executable')
  programs.forget()
  third = programs.Program(fn, 'fresh', b'owner')
  np.testing.assert_array_equal(third(jnp.arange(4.0))['y'], other(jnp.arange(4.0))['y'])
  assert (third.traced, third.loaded, third.executables) == (0, 1, 0)


def test_an_executable_is_not_read_on_another_processor(tmp_path, monkeypatch):
  """XLA compiles for the host's instruction set: a cache folder shared with a machine of
  another processor does not hand it this machine's executables."""
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path))
  fn, _ = _fresh_fn()
  x = jnp.arange(3.0)
  programs.Program(fn, 'fresh', b'owner')(x)
  programs.forget()
  monkeypatch.setattr(executables, '_MACHINE', [b'another processor'])
  other = programs.Program(fn, 'fresh', b'owner')
  other(x)
  assert (other.loaded, other.executables) == (1, 0)
  flags = pathlib.Path('/proc/cpuinfo')
  if flags.is_file():   # the real key names the processor's features
    monkeypatch.setattr(executables, '_MACHINE', [])
    assert b'flags' in executables.machine() or b'Features' in executables.machine()


def test_an_owners_executables_load_on_background_threads_before_its_first_call(
    tmp_path, monkeypatch):
  """`prefetch` (by the owner's identity) and `prefetch_hint` (by what `link` recorded) start
  reading the executables; the owner's first call takes what was read (here: with the file
  gone by then)."""
  monkeypatch.setenv('FIBRIL_MJX_PROGRAM_CACHE', str(tmp_path))
  fn, _ = _fresh_fn()
  x = jnp.arange(6.0)
  y1 = np.asarray(programs.Program(fn, 'fresh', b'owner')(x)['y'])
  (xla,) = _xla(tmp_path)
  for start in (lambda: programs.prefetch(b'owner'),
                lambda: (programs.link('tune here.yaml', b'owner'),
                         programs.prefetch_hint('tune here.yaml'))):
    programs.forget()
    start()
    assert executables._reads.started(xla)
    executables._reads._running[xla][0].result()   # read by now
    blob = xla.read_bytes()
    xla.unlink()
    second = programs.Program(fn, 'fresh', b'owner')
    assert np.asarray(second(x)['y']).tobytes() == y1.tobytes()
    assert (second.traced, second.executables) == (0, 1)
    assert not executables._reads.started(xla)
    xla.write_bytes(blob)
  programs.forget()
  programs.prefetch_hint('an unknown fit')           # nothing recorded: nothing started
  programs.prefetch(b'another owner')
  assert not executables._reads._running
  index = next(tmp_path.glob('executables-*.json'))
  for damaged in ('[1, ["a"], null, "x"]', '{"not": "a list"}', '[[', ''):
    index.write_text(damaged)
    programs.prefetch(b'owner')                      # an index not of this format: ignored
    assert not executables._reads._running


def test_a_read_not_started_yet_is_done_by_the_caller_not_waited_for():
  """`executables.Prefetch`: with its one thread busy, a queued read that the caller needs
  now runs on the caller's thread (it does not wait behind the busy one); a running read is
  waited for; an error is raised to the caller."""
  pool = executables.Prefetch(1)
  gate = threading.Event()
  pool.start('busy', lambda: (gate.wait(30), threading.current_thread().name)[1])
  pool.start('queued', lambda: threading.current_thread().name)
  pool.start('fails', lambda: 1 / 0)
  assert pool.take('queued') == threading.current_thread().name
  with pytest.raises(ZeroDivisionError):
    pool.take('fails')
  gate.set()
  assert pool.take('busy').startswith('fibril-prefetch')
  assert pool.take('busy') is None and not pool.started('queued')


def _content_digest(root):
  """The reference: SHA-256 of the files' names and bytes, in sorted path order."""
  h = hashlib.sha256()
  for dirpath, dirs, names in os.walk(root):
    dirs[:] = sorted(x for x in dirs if x != '__pycache__')
    for n in sorted(names):
      if not n.endswith('.pyc'):
        f = pathlib.Path(dirpath, n)
        with open(f, 'rb') as fh:
          h.update(str(f.relative_to(root)).encode() + b'\0' + fh.read() + b'\0')
  return h.hexdigest()


def test_the_package_digest_is_read_back_until_a_file_changes_or_is_touched(tmp_path,
                                                                            monkeypatch):
  """The digest of a package's files is kept under their names, sizes and times: read back
  without reading the files; hashed again where a file is touched (the same digest), edited
  (a new one) or the kept digest is damaged; bytecode is not part of it."""
  root, d = tmp_path / 'pkg', tmp_path / 'programs'
  (root / 'sub' / '__pycache__').mkdir(parents=True)
  (root / 'a.py').write_text('x = 1\n')
  (root / 'sub' / 'b.yaml').write_text('k: v\n')
  (root / 'sub' / '__pycache__' / 'b.cpython-311.pyc').write_bytes(b'\0' * 8)
  first = programs.package_digest(root, d)
  assert first == _content_digest(root)
  assert programs.package_digest(root, None) == first
  kept, = d.glob('package-*.txt')
  assert kept.read_text() == first

  real = pathlib.Path.read_bytes
  reads = []
  monkeypatch.setattr(pathlib.Path, 'read_bytes', lambda self: reads.append(self) or real(self))
  (root / 'sub' / '__pycache__' / 'b.cpython-311.pyc').write_bytes(b'\1' * 8)   # bytecode
  assert programs.package_digest(root, d) == first and reads == []

  os.utime(root / 'a.py', ns=(1, 1))                                               # touched
  assert programs.package_digest(root, d) == first and len(reads) == 2
  reads.clear()
  (root / 'a.py').write_text('x = 2\n')                                            # edited
  assert programs.package_digest(root, d) == _content_digest(root) != first and len(reads) == 2
  reads.clear()
  for f in d.glob('package-*.txt'):
    f.write_text('not a digest')                                                   # damaged
  assert programs.package_digest(root, d) == _content_digest(root) and len(reads) == 2
