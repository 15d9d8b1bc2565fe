#!/usr/bin/env python3
"""Runs the test suite one test file per process, then prints one summary line.

Why not one `pytest` process for everything: after a few hundred XLA CPU compilations in one
process, a C++ exception thrown later (e.g. MuJoCo rejecting a model in a validation test)
crashed the interpreter in libgcc_s's unwinder (seen twice at the same point of the suite on
jaxlib 0.10.2), and global JAX settings changed by one file can leak into the next. One process
per file isolates both; a crashed file is reported as failed, never hidden.

  python tools/run_tests.py [pytest args ...]     # e.g. -x, -k expr (applied to every file)
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
COUNT = re.compile(r'(\d+) (passed|failed|skipped|error|errors|xfailed|xpassed|deselected)')


def main(argv: list[str]) -> int:
  files = sorted((ROOT / 'tests').glob('test_*.py'))
  totals: dict[str, int] = {}
  bad, failed_files = [], []
  t0 = time.perf_counter()
  for f in files:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                        str(f.relative_to(ROOT)), *argv], cwd=ROOT, capture_output=True,
                       text=True)
    tail = (r.stdout.strip().splitlines() or [''])[-1]
    counts = {k: int(n) for n, k in COUNT.findall(tail)}
    for k, n in counts.items():
      k = 'errors' if k == 'error' else k
      totals[k] = totals.get(k, 0) + n
    # pytest exits 5 when every test of a file is deselected (-k): not a failure
    ok = r.returncode == 0 or (r.returncode == 5 and not counts.get('failed'))
    print(f'{"ok  " if ok else "FAIL"} {f.name:<34} {time.perf_counter() - t:6.1f} s  {tail}',
          flush=True)
    if not ok:
      bad.append(f.name)
      if counts.get('failed') or counts.get('error') or counts.get('errors'):
        failed_files.append(f.name)
      if r.returncode < 0 or not counts:     # crashed: show why
        print(r.stdout[-3000:], r.stderr[-3000:], sep='\n', flush=True)
      else:
        print(r.stdout[-6000:], flush=True)
      if '-x' in argv:
        break
  print(f'\n{len(files)} test files in {time.perf_counter() - t0:.0f} s; failed files: '
        f'{", ".join(bad) or "none"}')
  crashed = len(bad) - len(failed_files)       # a crashed file reported no count: one failure
  failed = totals.get('failed', 0) + totals.get('errors', 0) + crashed
  line = f'{totals.get("passed", 0)} passed, {failed} failed'
  if totals.get('skipped'):
    line += f', {totals["skipped"]} skipped'
  print(line)
  return 1 if bad else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
