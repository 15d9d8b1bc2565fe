#!/usr/bin/env python3
"""Runs the test suite one test file per process, two files at a time, then prints a summary.

Why not one `pytest` process for everything: after a few hundred XLA CPU compilations in one
process, a C++ exception thrown later (e.g. MuJoCo rejecting a model in a validation test)
crashed the interpreter in libgcc_s's unwinder (seen twice at the same point of the suite on
jaxlib 0.10.2), and global JAX settings changed by one file can leak into the next. One process
per file isolates both; a crashed file is reported as failed, never hidden.

  python tools/run_tests.py [--jobs N] [--file-timeout S] [pytest args ...]

  pytest args     applied to every file (-x, -k expr, -m expr); paths or node ids
                  (tests/test_x.py, tests/test_x.py::test_y) restrict the run to those files
  --jobs N        files run at once (default $FIBRIL_MJX_TEST_JOBS or 2); the longest files
                  (tools/test_durations.json, measured) start first
  FIBRIL_MJX_TEST_LOGS=DIR  keeps each file's whole output as DIR/<file>.log
  --file-timeout S  a file still running after S seconds (default $FIBRIL_MJX_TEST_TIMEOUT or
                  1500; test_worlds.py took ~15 minutes on a loaded 2-core machine) is reported
                  FAILED with the Python stacks of all its threads (faulthandler, dumped by
                  SIGUSR1 before the kill)

A file fails when pytest fails, crashes, times out, or runs no test although no selection
(-k, -m, node ids, --deselect) was asked for and none was deselected (the `full` tests of a
file with no other are deselected by tests/conftest.py outside `make test-full`). The closing line starts `N passed, N failed`
(parsed by CI), then `N skipped, N xfailed, N xpassed` (and deselected when there are any).
Each file's process is forked from one server process that has already imported numpy,
SciPy, JAX, MuJoCo, MJX, pydantic, YAML, pytest and every module of fibril_mjx (with what they
import: matplotlib, Brax, ...), never initializing a JAX backend (XLA reads its flags and the
cache settings when the forked file first uses it; `import fibril_mjx` sets none, as
tests/tooling/test_import.py checks), so a file does not pay those imports again (2.8 s of CPU
for the third-party ones alone; with fibril_mjx's, eleven component test files took 94 s of CPU
instead of 125 s; FIBRIL_MJX_TEST_PRELOAD_PACKAGE=0 leaves fibril_mjx out, for suites that never
import it);
FIBRIL_MJX_TEST_FORK=0, or a server that cannot start, runs every file as a fresh interpreter.
The tests run with FIBRIL_MJX_REQUIRE_OPTIONAL=1: a missing optional dependency
(`pytest.importorskip`) fails instead of skipping (tests/conftest.py), and with one persistent
JAX compilation cache shared by all the files (FIBRIL_MJX_TEST_CACHE, tests/conftest.py).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
DURATIONS = ROOT / 'tools' / 'test_durations.json'
COUNT = re.compile(r'(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)')
KINDS = ('passed', 'failed', 'skipped', 'xfailed', 'xpassed', 'error', 'deselected')
SELECTION = ('-k', '-m', '--deselect')
CACHE_BYTES = 2 * 2 ** 30     # the shared test compilation cache is trimmed to this

# The pytest process: stacks of every thread to `stack_file` on SIGUSR1 (faulthandler writes
# from its C signal handler, so a process deadlocked in native code still reports), and the
# terminal reporter's counts to `count_file` (the same numbers as pytest's closing line).
BOOT = r'''
import faulthandler, json, signal, sys
stack_file, count_file = sys.argv[1], sys.argv[2]
_stacks = open(stack_file, 'w')
faulthandler.register(signal.SIGUSR1, file=_stacks, all_threads=True)

class _Counts:
  def pytest_terminal_summary(self, terminalreporter):
    counts = {k: sum(1 for r in v if getattr(r, 'count_towards_summary', True))
              for k, v in terminalreporter.stats.items() if k and k != 'warnings'}
    with open(count_file, 'w') as f:
      json.dump(counts, f)

import pytest
sys.exit(int(pytest.main(sys.argv[3:], plugins=[_Counts()])))
'''

# What the server imports once; every forked file finds them in sys.modules.
PRELOAD = ('numpy', 'scipy.linalg', 'scipy.optimize', 'scipy.stats', 'jax', 'jax.numpy',
           'mujoco', 'mujoco.mjx', 'pydantic', 'yaml', 'pytest')

# The server: reads requests `{"id", "out", "cwd", "argv"}` (one JSON line each) on stdin, forks
# a child per request that runs BOOT with `argv` (its stdout and stderr to `out`, in a session
# of its own), answers `{"started": id, "pid": pid}`, and `{"exit": pid, "rc": rc}` when the
# child ends (rc < 0: killed by that signal). It forks from one thread, before any JAX backend
# exists; it ends when stdin closes.
SERVER = r'''
import gc, importlib, json, os, select, sys
proto = os.fdopen(os.dup(1), 'w')            # the answers; what the imports print goes nowhere
_null = os.open(os.devnull, os.O_WRONLY)
os.dup2(_null, 1)
os.close(_null)
sys.argv = ['pytest']
for name in __PRELOAD__:
  importlib.import_module(name)
if os.environ.get('FIBRIL_MJX_TEST_PRELOAD_PACKAGE', '1') == '1':
  import pkgutil
  import fibril_mjx
  for mod in pkgutil.walk_packages(fibril_mjx.__path__, 'fibril_mjx.'):
    if not mod.name.endswith('__main__'):
      try:
        importlib.import_module(mod.name)
      except Exception:       # the file that imports it reports the error
        pass
from jax._src import xla_bridge
gc.freeze()      # the imported objects: never scanned by a child's collector (no copy-on-write)


def answer(msg):
  proto.write(json.dumps(msg) + '\n')
  proto.flush()


if xla_bridge._backends:
  answer({'ready': False})
  sys.exit(3)
answer({'ready': True})
children, pending, boot = set(), b'', compile(__BOOT__, '<run_tests child>', 'exec')
while True:
  readable = select.select([0], [], [], 0.1)[0]
  while children:
    try:
      pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
      break
    if pid == 0:
      break
    children.discard(pid)
    answer({'exit': pid, 'rc': os.waitstatus_to_exitcode(status)})
  if not readable:
    continue
  chunk = os.read(0, 65536)
  if not chunk:
    break
  pending += chunk
  while b'\n' in pending:
    line, pending = pending.split(b'\n', 1)
    req = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:                      # the file's process
      os.setsid()
      proto.close()
      fd = os.open(req['out'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
      os.dup2(fd, 1)
      os.dup2(fd, 2)
      os.close(fd)
      fd = os.open(os.devnull, os.O_RDONLY)
      os.dup2(fd, 0)
      os.close(fd)
      os.chdir(req['cwd'])
      sys.argv = ['run_tests child'] + req['argv']
      exec(boot, {'__name__': '__main__'})     # ends with sys.exit: the usual shutdown
      sys.exit(0)
    children.add(pid)
    answer({'started': req['id'], 'pid': pid})
'''.replace('__PRELOAD__', repr(PRELOAD)).replace('__BOOT__', repr(BOOT))


class Server:
  """The runner's side of SERVER: `start(out, argv) -> pid`, `wait(pid, timeout) -> rc` (None
  on timeout), `close()`. `Server.open(env)` is None when it cannot start."""

  def __init__(self, proc):
    self.proc, self.lock = proc, threading.Lock()
    self.started: dict = {}
    self.exited: dict = {}
    self.changed = threading.Condition()
    self.ids = 0
    threading.Thread(target=self._read, daemon=True).start()

  @classmethod
  def open(cls, env: dict):
    if env.get('FIBRIL_MJX_TEST_FORK', '1') == '0':
      return None
    try:
      proc = subprocess.Popen([sys.executable, '-c', SERVER], cwd=ROOT, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
      return None
    try:
      if json.loads(proc.stdout.readline() or b'{}').get('ready'):
        return cls(proc)
    except ValueError:
      pass
    proc.kill()
    return None

  def _read(self):
    for line in self.proc.stdout:
      msg = json.loads(line)
      with self.changed:
        if 'started' in msg:
          self.started[msg['started']] = msg['pid']
        else:
          self.exited[msg['exit']] = msg['rc']
        self.changed.notify_all()
    with self.changed:                       # the server is gone: nothing more will exit
      self.proc.wait()
      self.exited[None] = True
      self.changed.notify_all()

  def start(self, out: str, argv: list[str]) -> int | None:
    with self.lock:
      self.ids += 1
      rid = self.ids
      try:
        self.proc.stdin.write(json.dumps({'id': rid, 'out': out, 'cwd': str(ROOT),
                                          'argv': argv}).encode() + b'\n')
        self.proc.stdin.flush()
      except OSError:
        return None
    with self.changed:
      self.changed.wait_for(lambda: rid in self.started or None in self.exited)
      return self.started.get(rid)

  def wait(self, pid: int, timeout: float | None) -> int | None:
    with self.changed:
      self.changed.wait_for(lambda: pid in self.exited or None in self.exited, timeout)
      if pid in self.exited:
        return self.exited.pop(pid)
      return -signal.SIGKILL if None in self.exited else None

  def close(self):
    try:
      self.proc.stdin.close()
      self.proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
      self.proc.kill()


SERVER_PROC: list = []     # the server's process, for _stop_all


def _has_selection(args: list[str]) -> bool:
  return any(a in SELECTION or any(a.startswith(s + '=') or (s != '--deselect' and
             a.startswith(s) and len(a) > 2) for s in SELECTION) or '::' in a for a in args)


def _split(argv: list[str]):
  """Own flags, the files to run (with their node ids), and the pytest args for every file."""
  jobs = int(os.environ.get('FIBRIL_MJX_TEST_JOBS', '2'))
  timeout = float(os.environ.get('FIBRIL_MJX_TEST_TIMEOUT', '1500'))
  rest, targets = [], {}
  it = iter(argv)
  takes_value = {'-k', '-m', '--deselect', '-p', '-o', '-c', '--rootdir', '--maxfail',
                 '--durations', '--tb', '-W', '--basetemp', '--junitxml'}
  for a in it:
    if a in ('--jobs', '-j') or a.startswith('--jobs='):
      jobs = int(a.split('=', 1)[1] if '=' in a else next(it))
    elif a == '--file-timeout' or a.startswith('--file-timeout='):
      timeout = float(a.split('=', 1)[1] if '=' in a else next(it))
    elif a in takes_value:
      rest += [a, next(it)]
    elif not a.startswith('-') and (ROOT / a.split('::')[0]).is_file():
      f = (ROOT / a.split('::')[0]).resolve()
      targets.setdefault(f, []).append(a)
    else:
      rest.append(a)
  if targets:
    files = {f: ids for f, ids in targets.items()}
  else:
    files = {f: [str(f.relative_to(ROOT))] for f in sorted((ROOT / 'tests').rglob('test_*.py'))}
  return max(1, jobs), timeout, files, rest


def _counts_from_tail(text: str) -> dict[str, int]:
  for line in reversed(text.strip().splitlines()):
    if re.search(r' in [\d.]+s', line):
      return {('error' if k.startswith('error') else k): int(n) for n, k in COUNT.findall(line)}
  return {}


LIVE: set[int] = set()     # process groups of the files running now


def _stop_all(signum, _frame):
  """The runner stopped (Ctrl-C, CI's kill): its files, each in its own session, go too."""
  for pid in list(LIVE) + [p.pid for p in SERVER_PROC]:
    try:
      os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  os._exit(128 + signum)


def _stop(pid: int) -> None:
  """Stacks of every thread of the file's process (faulthandler), then its whole session."""
  try:
    os.kill(pid, signal.SIGUSR1)
    time.sleep(3)
  except ProcessLookupError:
    pass
  try:
    os.killpg(pid, signal.SIGKILL)           # the file and whatever it started
  except ProcessLookupError:
    pass


def _run_forked(server: Server, argv: list[str], out_file: str, timeout: float):
  """`(rc, timed_out)` of the file run by a child of the server; None if it could not start."""
  pid = server.start(out_file, argv)
  if pid is None:
    return None
  LIVE.add(pid)
  rc = server.wait(pid, timeout)
  timed_out = rc is None
  if timed_out:
    _stop(pid)
    rc = server.wait(pid, 60)
    rc = -signal.SIGKILL if rc is None else rc
  LIVE.discard(pid)
  return rc, timed_out


def _run_file(f: pathlib.Path, ids: list[str], args: list[str], timeout: float, env: dict,
              server: Server | None = None):
  with tempfile.TemporaryDirectory(prefix='run_tests_') as tmp:
    stack_file, count_file = os.path.join(tmp, 'stacks'), os.path.join(tmp, 'counts.json')
    out_file = os.path.join(tmp, 'out')
    t = time.perf_counter()
    argv = [stack_file, count_file, '-q', '-p', 'no:cacheprovider', *ids, *args]
    forked = server and _run_forked(server, argv, out_file, timeout)
    if forked:
      rc, timed_out = forked
    else:
      rc, timed_out = _run_fresh(argv, out_file, timeout, env)
    seconds = time.perf_counter() - t
    output = pathlib.Path(out_file).read_text(errors='replace')
    if os.environ.get('FIBRIL_MJX_TEST_LOGS'):          # every file's whole output, kept
      logs = pathlib.Path(os.environ['FIBRIL_MJX_TEST_LOGS'])
      logs.mkdir(parents=True, exist_ok=True)
      (logs / f'{f.stem}.log').write_text(output)
    stacks = pathlib.Path(stack_file).read_text(errors='replace') if timed_out else ''
    try:
      counts = json.loads(pathlib.Path(count_file).read_text())
    except (OSError, ValueError):
      counts = _counts_from_tail(output)
  return f, rc, timed_out, seconds, output, stacks, counts


def _run_fresh(argv: list[str], out_file: str, timeout: float, env: dict):
  """`(rc, timed_out)` of the file run by a new interpreter."""
  with open(out_file, 'w') as out:
    p = subprocess.Popen([sys.executable, '-c', BOOT, *argv], cwd=ROOT, stdout=out,
                         stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    LIVE.add(p.pid)
    timed_out = False
    try:
      rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      timed_out = True
      _stop(p.pid)
      rc = p.wait()
    LIVE.discard(p.pid)
  return rc, timed_out


def _trim_cache(cache: pathlib.Path, keep_bytes: int = CACHE_BYTES) -> None:
  """The shared compilation cache, oldest entries first, down to `keep_bytes` (before any file
  runs: JAX's own LRU bound breaks when processes with and without it share a directory)."""
  try:
    entries = [(e.stat().st_mtime, e.stat().st_size, e) for e in cache.iterdir() if e.is_file()]
  except OSError:
    return
  size = sum(n for _, n, _ in entries)
  for _, n, e in sorted(entries, key=lambda x: x[0]):
    if size <= keep_bytes:
      break
    try:
      e.unlink()
      size -= n
    except OSError:
      pass


def main(argv: list[str]) -> int:
  jobs, timeout, files, args = _split(argv)
  selection = _has_selection(args) or any('::' in i for ids in files.values() for i in ids)
  try:
    known = json.loads(DURATIONS.read_text())
  except (OSError, ValueError):
    known = {}
  # longest first (an unmeasured file counts as 100 s): the pool ends with the short ones
  order = sorted(files, key=lambda f: (-known.get(f.name, 100.0), f.name))
  env = dict(os.environ, FIBRIL_MJX_REQUIRE_OPTIONAL='1', PYTHONFAULTHANDLER='1')
  env.setdefault('FIBRIL_MJX_TEST_CACHE', str(pathlib.Path.home() / '.cache' / 'fibril_mjx' /
                                               'jax-tests'))
  env['PYTHONPATH'] = os.pathsep.join(p for p in (str(ROOT), env.get('PYTHONPATH')) if p)
  _trim_cache(pathlib.Path(env['FIBRIL_MJX_TEST_CACHE']))

  totals = dict.fromkeys(KINDS, 0)
  bad, times = [], {}
  stop = threading.Event()
  lock = threading.Lock()
  t0 = time.perf_counter()

  def report(result):
    f, rc, timed_out, seconds, output, stacks, counts = result
    for k, n in counts.items():
      k = 'error' if k.startswith('error') else k
      if k in totals:
        totals[k] += n
    ran = sum(counts.get(k, 0) for k in KINDS if k != 'deselected')
    if timed_out:
      why = f'timed out after {timeout:.0f} s'
    elif rc < 0:
      why = f'crashed (signal {-rc})'
    elif rc in (0, 5) and not ran:            # pytest exits 5 when nothing was collected
      why = None if selection or counts.get('deselected') else 'no tests ran'
    elif rc == 5:                               # every test skipped at module level: counted
      why = None
    elif rc != 0:
      why = f'pytest exit status {rc}'
    else:
      why = None
    tail = (output.strip().splitlines() or [''])[-1]
    with lock:
      times[f.name] = round(seconds, 1)
      print(f'{"ok  " if why is None else "FAIL"} {f.name:<34} {seconds:6.1f} s  '
            f'{tail if why is None else why + ": " + tail}', flush=True)
      if why is not None:
        bad.append((f.name, why, counts))
        print(output[-6000:], flush=True)
        if stacks:
          print(f'--- Python stacks of {f.name} when it was stopped (faulthandler) ---\n'
                f'{stacks[-12000:]}', flush=True)
        if '-x' in args or '--exitfirst' in args:
          stop.set()

  signal.signal(signal.SIGTERM, _stop_all)
  signal.signal(signal.SIGINT, _stop_all)
  server = Server.open(env)
  if server is not None:
    SERVER_PROC.append(server.proc)
  package = ('fibril_mjx',) if env.get('FIBRIL_MJX_TEST_PRELOAD_PACKAGE', '1') == '1' else ()
  preloaded = ', '.join(PRELOAD + package)
  print('each file forked from a server that imported ' + preloaded if server else
        'each file in a fresh interpreter', flush=True)
  with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
    def one(f):
      if stop.is_set():
        return None
      r = _run_file(f, files[f], args, timeout, env, server)
      report(r)
      return r
    list(pool.map(one, order))
  if server is not None:
    server.close()

  print(f'\n{len(files)} test files in {time.perf_counter() - t0:.0f} s ({jobs} at a time); '
        f'failed files: {", ".join(n for n, _, _ in bad) or "none"}')
  # a file that failed without a failed/error count (crash, timeout, no tests): one failure
  uncounted = sum(1 for _, _, c in bad if not (c.get('failed') or c.get('error')))
  failed = totals['failed'] + totals['error'] + uncounted
  line = (f'{totals["passed"]} passed, {failed} failed, {totals["skipped"]} skipped, '
          f'{totals["xfailed"]} xfailed, {totals["xpassed"]} xpassed')
  if totals['deselected']:
    line += f', {totals["deselected"]} deselected'
  print(line)
  if os.environ.get('FIBRIL_MJX_TEST_DURATIONS_OUT'):
    pathlib.Path(os.environ['FIBRIL_MJX_TEST_DURATIONS_OUT']).write_text(
        json.dumps(dict(sorted(times.items())), indent=1) + '\n')
  return 1 if bad else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
