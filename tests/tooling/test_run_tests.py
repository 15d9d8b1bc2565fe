"""tools/run_tests.py itself: a hung file is stopped and reported with its stacks, a file that
runs no test fails unless a selection was asked for, xfail / xpass / skip are counted, and a
missing optional dependency fails. Runs the runner on a throw-away tests directory (no JAX)."""

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r'^(\d+) passed, (\d+) failed, (\d+) skipped, (\d+) xfailed, (\d+) xpassed'
                     r'(?:, (\d+) deselected)?$', re.M)

CONFTEST = textwrap.dedent(f"""\
    import importlib.util
    _spec = importlib.util.spec_from_file_location('fibril_tests_conftest',
                                                   {str(ROOT / 'tests' / 'conftest.py')!r})
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
    """)
FILES = {
    'test_hang.py': """\
        import time

        def deadlocked_here():
          time.sleep(600)

        def test_hangs():
          deadlocked_here()
        """,
    'test_empty.py': '"""no tests"""\n',
    'test_mixed.py': """\
        import pytest

        def test_passes():
          assert True

        @pytest.mark.xfail(reason='expected')
        def test_xfails():
          assert False

        @pytest.mark.xfail(reason='expected, but passes')
        def test_xpasses():
          assert True

        def test_skips():
          pytest.skip('not here')
        """,
    'test_optional.py': """\
        import pytest

        nope = pytest.importorskip('fibril_mjx_no_such_module')

        def test_needs_it():
          assert nope
        """,
}


@pytest.fixture(scope='module')
def suite(tmp_path_factory):
  d = tmp_path_factory.mktemp('suite')
  (d / 'conftest.py').write_text(CONFTEST)
  for name, text in FILES.items():
    (d / name).write_text(textwrap.dedent(text))
  return d


def _run(d, *args, fork='1'):
  # no shared JAX cache here and no fibril_mjx in the server: the throw-away files never
  # import jax or the package
  env = dict(os.environ, FIBRIL_MJX_TEST_CACHE='', FIBRIL_MJX_TEST_FORK=fork,
             FIBRIL_MJX_TEST_PRELOAD_PACKAGE='0')
  env.pop('FIBRIL_MJX_REQUIRE_OPTIONAL', None)
  return subprocess.run([sys.executable, str(ROOT / 'tools' / 'run_tests.py'), *args],
                        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


@pytest.mark.parametrize('fork', ['1', '0'], ids=['forked', 'fresh'])
def test_hang_empty_optional_fail_and_every_outcome_is_counted(suite, fork):
  """Files forked from the runner's server (the default) and run by fresh interpreters
  (FIBRIL_MJX_TEST_FORK=0) are reported alike."""
  r = _run(suite, '--jobs', '2', '--file-timeout', '6',
           *(str(suite / n) for n in sorted(FILES)), fork=fork)
  out = r.stdout
  assert r.returncode == 1, out
  assert ('each file forked from a server' if fork == '1' else
          'each file in a fresh interpreter') in out, out
  status = {name: s.strip() for s, name in re.findall(r'^(ok  |FAIL) (test_\w+\.py)', out, re.M)}
  assert status == {'test_hang.py': 'FAIL', 'test_empty.py': 'FAIL', 'test_mixed.py': 'ok',
                    'test_optional.py': 'FAIL'}, out
  assert re.search(r'^FAIL test_hang\.py .*timed out after 6 s', out, re.M), out
  assert re.search(r'^FAIL test_empty\.py .*no tests ran', out, re.M), out
  # the hung process's stack, dumped before the kill, names the function it hung in
  stacks = out[out.index('Python stacks of test_hang.py'):]
  assert 'deadlocked_here' in stacks and 'test_hangs' in stacks, out
  assert 'fibril_mjx_no_such_module' in out and 'FIBRIL_MJX_REQUIRE_OPTIONAL=1' in out, out
  # closing line: passed, failed (hang + empty uncounted: one each; optional: its error),
  # then skipped, xfailed, xpassed
  m = SUMMARY.findall(out)
  assert len(m) == 1 and out.rstrip().splitlines()[-1].startswith(f'{m[0][0]} passed'), out
  assert m[0][:5] == ('1', '3', '1', '1', '1'), out


def test_a_selection_that_matches_nothing_is_not_a_failure(suite):
  r = _run(suite, '-k', 'no_test_is_named_like_this', str(suite / 'test_mixed.py'),
           str(suite / 'test_empty.py'))
  assert r.returncode == 0, r.stdout
  assert SUMMARY.findall(r.stdout) == [('0', '0', '0', '0', '0', '4')], r.stdout


def test_a_file_whose_tests_are_all_deselected_by_the_full_marker_is_not_a_failure(tmp_path):
  """tests/conftest.py deselects the `full` tests outside `make test-full`: a file holding
  only such tests ran nothing on purpose (it is ok, its tests counted as deselected)."""
  (tmp_path / 'conftest.py').write_text(textwrap.dedent("""\
      def pytest_collection_modifyitems(config, items):
        drop = [it for it in items if it.get_closest_marker('full')]
        config.hook.pytest_deselected(items=drop)
        items[:] = [it for it in items if it not in drop]
      """))
  (tmp_path / 'test_full_only.py').write_text(textwrap.dedent("""\
      import pytest

      @pytest.mark.full
      def test_long():
        assert False
      """))
  r = _run(tmp_path, str(tmp_path / 'test_full_only.py'))
  assert r.returncode == 0, r.stdout
  assert SUMMARY.findall(r.stdout) == [('0', '0', '0', '0', '0', '1')], r.stdout


def test_without_the_runner_a_missing_optional_dependency_still_skips(suite):
  # the requirement is the runner's (the install is ours); plain pytest keeps importorskip
  env = dict(os.environ, FIBRIL_MJX_TEST_CACHE='')
  env.pop('FIBRIL_MJX_REQUIRE_OPTIONAL', None)
  r = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                      str(suite / 'test_optional.py')], capture_output=True, text=True,
                     env=env, cwd=suite, timeout=120)
  assert r.returncode in (0, 5) and '1 skipped' in r.stdout, r.stdout   # 5: none collected


def _descendants(pid: int) -> set[int]:
  """Every live process below `pid` (children, theirs, ...), from /proc/*/stat."""
  children: dict[int, list[int]] = {}
  for p in pathlib.Path('/proc').iterdir():
    try:
      if p.name.isdigit():
        stat = (p / 'stat').read_text()
        fields = stat[stat.rindex(')') + 2:].split()
        if fields[0] != 'Z':                      # a zombie is gone, only not yet reaped
          children.setdefault(int(fields[1]), []).append(int(p.name))
    except (OSError, ValueError):
      pass
  out, todo = set(), [pid]
  while todo:
    for c in children.get(todo.pop(), ()):
      out.add(c)
      todo.append(c)
  return out


def _alive(pids) -> set[int]:
  out = set()
  for pid in pids:
    try:
      stat = pathlib.Path(f'/proc/{pid}/stat').read_text()
      if stat[stat.rindex(')') + 2] != 'Z':
        out.add(pid)
    except OSError:
      pass
  return out


@pytest.mark.skipif(not pathlib.Path('/proc/self/stat').exists(), reason='needs /proc')
@pytest.mark.parametrize('fork', ['1', '0'], ids=['forked', 'fresh'])
def test_stopping_the_runner_stops_its_files(suite, fork):
  import signal
  import time
  hang = str(suite / 'test_hang.py')
  env = dict(os.environ, FIBRIL_MJX_TEST_CACHE='', FIBRIL_MJX_TEST_FORK=fork,
             FIBRIL_MJX_TEST_PRELOAD_PACKAGE='0')
  p = subprocess.Popen([sys.executable, str(ROOT / 'tools' / 'run_tests.py'), '--file-timeout',
                        '100', hang], env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
  # the file's process: with the server, its child (the server's other child is none)
  # (the server's imports may start short-lived helpers: the set counts once it holds still)
  want = 2 if fork == '1' else 1
  deadline = time.monotonic() + 60
  below, seen = set(), None
  while time.monotonic() < deadline:
    below = _descendants(p.pid)
    if len(below) >= want and below == seen:
      break
    seen = below
    time.sleep(0.5)
  assert len(below) >= want, below
  time.sleep(1.0)
  p.send_signal(signal.SIGTERM)
  assert p.wait(timeout=30) == 128 + signal.SIGTERM
  deadline = time.monotonic() + 10
  while _alive(below) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert not _alive(below)


def test_shared_cache_is_trimmed_oldest_first(tmp_path):
  """The runner bounds the shared compilation cache itself (JAX's LRU bound breaks when
  processes with and without it share a directory): oldest entries go until it fits."""
  import importlib.util
  spec = importlib.util.spec_from_file_location('run_tests', ROOT / 'tools' / 'run_tests.py')
  rt = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(rt)
  for i, name in enumerate(['old', 'mid', 'new']):
    f = tmp_path / f'jit_{name}-cache'
    f.write_bytes(b'x' * 100)
    os.utime(f, (1000 + i, 1000 + i))
  (tmp_path / 'a-folder').mkdir()      # a folder is left alone
  rt._trim_cache(tmp_path, keep_bytes=250)
  assert sorted(p.name for p in tmp_path.iterdir()) == ['a-folder', 'jit_mid-cache',
                                                        'jit_new-cache']
  rt._trim_cache(tmp_path, keep_bytes=1000)
  assert len(list(tmp_path.iterdir())) == 3
  rt._trim_cache(tmp_path / 'missing')          # no directory yet: nothing to do
