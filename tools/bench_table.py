#!/usr/bin/env python3
"""Rewrites the table of current bench figures in bench/README.md (between the markers
`<!-- bench-table:begin -->` and `<!-- bench-table:end -->`) from the benches' printed
`name=value` lines, with the date and the machine of each figure.

  python tools/bench_table.py                    # runs the FAST benches at small sizes
  python tools/bench_table.py --run overhead dcmotor     # runs these (their FAST command)
  python tools/bench_table.py --from rl=out.txt  # reads a saved output of a bench instead
                                                 # (of its full command: the rows' source)
  python tools/bench_table.py --list             # the benches and their commands

A bench's rows are replaced by the `name=value` lines of its new output (every line matching
`^name=value` where value is a number or `n/m`; other lines are ignored); the rows of the
benches not run are kept as they are, with their own date and machine. A row whose source is
`carried` is a figure copied from the bench's last full run before this table existed (its
date is that run's; the log of those runs is in the git history of bench/README.md) — rerun
the bench at full size (its command in `--list`) and pass its output with `--from` to replace
it. `make bench-table` runs this script with no arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import pathlib
import platform
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / 'bench' / 'README.md'
BEGIN, END = '<!-- bench-table:begin -->', '<!-- bench-table:end -->'
LINE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)=([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?'
                  r'(?:/\d+)?)\s*$')
HEADER = ('| bench | figure | value | measured (UTC) | machine | source |\n'
          '| --- | --- | ---: | --- | --- | --- |')


@dataclasses.dataclass(frozen=True)
class Bench:
  """A bench: its `name` in the table, the `full` command of its figures of record, and the
  `fast` command `make bench-table` runs (None: too long for that; rerun by hand)."""
  name: str
  full: str
  fast: str | None = None


BENCHES = (
    Bench('overhead', 'bench/overhead.py', 'bench/overhead.py --quick --watchdog-s 3600'),
    Bench('kernels', 'bench/kernels.py', 'bench/kernels.py'),
    Bench('dcmotor', 'bench/dcmotor.py', 'bench/dcmotor.py --quick'),
    Bench('extero_cost', 'bench/extero_cost.py --worlds 1024 --ticks 30 --repeats 3',
          'bench/extero_cost.py --worlds 64 --ticks 10 --repeats 1'),
    Bench('campaign', 'bench/campaign.py'),
    Bench('rl', 'bench/rl.py'),
    Bench('ekf_vs_peers', 'bench/ekf_vs_peers.py'),
    Bench('tune_vs_sysid', 'bench/tune_vs_sysid.py'),
    Bench('scaling', 'bench/scaling.py'),
    Bench('no_hang', 'bench/no_hang.py --models humanoid turntable'),
    Bench('physics_sub_batch', 'bench/physics_sub_batch.py'),
)
FAST = ('overhead',)     # what the default run does: the benches that take seconds at --quick


def machine() -> str:
  """`<cpu model>, <n> cores, load <1-min load average>` of this host."""
  model = platform.processor() or platform.machine()
  try:
    for line in pathlib.Path('/proc/cpuinfo').read_text().splitlines():
      if line.startswith('model name'):
        model = line.split(':', 1)[1].strip()
        break
  except OSError:
    pass
  load = f', load {os.getloadavg()[0]:.1f}' if hasattr(os, 'getloadavg') else ''
  return f'{model}, {os.cpu_count()} cores{load}'


def parse(text: str) -> list[tuple[str, str]]:
  """The `(name, value)` of every `name=value` line of a bench's output, in order (a name
  printed twice keeps its last value, at its first place)."""
  out: dict[str, str] = {}
  for line in text.splitlines():
    m = LINE.match(line.strip())
    if m:
      out[m.group(1)] = m.group(2)
  return list(out.items())


def read_rows(text: str) -> list[list[str]]:
  """The rows of the table block of `text` (`[bench, figure, value, date, machine, source]`)."""
  if BEGIN not in text or END not in text:
    raise SystemExit(f'{README}: no table block ({BEGIN} … {END})')
  block = text.split(BEGIN, 1)[1].split(END, 1)[0]
  rows = []
  for line in block.strip().splitlines()[2:]:
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) == 6:
      if re.fullmatch(r'`\w+`', cells[1]):
        cells[1] = cells[1][1:-1]
      rows.append(cells)
  return rows


def _code(figure: str) -> str:
  """A figure's name in backticks (a name with a note, e.g. "`x` (case)", as written)."""
  return f'`{figure}`' if re.fullmatch(r'\w+', figure) else figure


def render(rows: list[list[str]]) -> str:
  order = {b.name: i for i, b in enumerate(BENCHES)}
  rows = sorted(rows, key=lambda r: order.get(r[0], len(order)))   # stable within a bench
  body = '\n'.join(f'| {b} | {_code(f)} | {v} | {d} | {m} | {s} |' for b, f, v, d, m, s in rows)
  return f'{BEGIN}\n{HEADER}\n{body}\n{END}'


def update(rows, bench: str, output: str, source: str, when: str, where: str):
  """`rows` with `bench`'s rows replaced by the figures of `output`."""
  figures = parse(output)
  if not figures:
    raise SystemExit(f'{bench}: no name=value line in its output')
  kept = [r for r in rows if r[0] != bench]
  return kept + [[bench, k, v, when, where, source] for k, v in figures]


def run_bench(b: Bench) -> str:
  cmd = [sys.executable] + b.fast.split()
  print(f'$ {" ".join(cmd)}', flush=True)
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
  sys.stdout.write(p.stdout[-2000:])
  if p.returncode != 0:
    raise SystemExit(f'{b.name}: exit {p.returncode}\n{p.stderr[-2000:]}')
  return p.stdout


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--run', nargs='*', metavar='BENCH', help=f'benches to run (default {FAST})')
  ap.add_argument('--from', dest='saved', nargs='*', default=[], metavar='BENCH=FILE',
                  help='a saved output of a bench')
  ap.add_argument('--list', action='store_true')
  args = ap.parse_args(argv)
  by_name = {b.name: b for b in BENCHES}
  if args.list:
    for b in BENCHES:
      print(f'{b.name:14s} full: {b.full}\n{"":14s} fast: {b.fast or "(none: rerun in full)"}')
    return 0
  text = README.read_text()
  rows = read_rows(text)
  when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M')
  where = machine()
  runs = args.run if args.run is not None else ([] if args.saved else list(FAST))
  for name in runs:
    b = by_name.get(name)
    if b is None or b.fast is None:
      raise SystemExit(f'{name}: not a bench with a fast command (--list)')
    rows = update(rows, name, run_bench(b), f'`{b.fast}`', when, where)
  for item in args.saved:
    name, _, path = item.partition('=')
    if name not in by_name or not path:
      raise SystemExit(f'--from {item}: expected BENCH=FILE, BENCH one of {sorted(by_name)}')
    # the bench's full command, not the file: a saved output is usually a temporary file
    rows = update(rows, name, pathlib.Path(path).read_text(), f'`{by_name[name].full}`', when,
                  where)
  head, rest = text.split(BEGIN, 1)
  README.write_text(head + render(rows) + rest.split(END, 1)[1])
  print(f'wrote {README.relative_to(ROOT)}: {len(rows)} figures')
  return 0


if __name__ == '__main__':
  sys.exit(main())
