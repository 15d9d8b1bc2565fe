"""`fibril-mjx` command line: `plan` and `run`."""

from __future__ import annotations

import argparse
import os
import sys


def _setup_jax():
  import jax
  cache = os.environ.get('FIBRIL_MJX_CACHE',
                         os.path.join(os.path.expanduser('~'), '.cache', 'fibril_mjx', 'jax'))
  jax.config.update('jax_compilation_cache_dir', cache)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)
  jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)


def _cmd_plan(args) -> int:
  from fibril_mjx import load, plan
  sim = load(args.manifest)
  print(plan.render(sim))
  return 0


def _cmd_run(args) -> int:
  from fibril_mjx import runner
  runner.run(args.manifest, worlds=args.worlds, seed=args.seed, duration_s=args.duration,
             out=args.out, trace_worlds=args.trace_worlds, chunk_worlds=args.chunk_worlds,
             overwrite=args.overwrite)
  return 0


def _positive_int(text):
  v = int(text)
  if v <= 0:
    raise argparse.ArgumentTypeError(f'must be a positive integer, got {text}')
  return v


def _positive_float(text):
  v = float(text)
  if not v > 0:
    raise argparse.ArgumentTypeError(f'must be > 0, got {text}')
  return v


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='fibril-mjx', description=__doc__)
  sub = parser.add_subparsers(dest='command', required=True)
  p = sub.add_parser('plan', help='print the resolved plan of a manifest')
  p.add_argument('manifest')
  p.set_defaults(func=_cmd_plan)
  r = sub.add_parser('run', help='run a batch of worlds and write traces, summary and plots')
  r.add_argument('manifest')
  r.add_argument('--worlds', type=_positive_int, default=256)
  r.add_argument('--seed', type=int, default=0)
  r.add_argument('--duration', type=_positive_float, default=10.0, help='seconds')
  r.add_argument('--out', required=True, help='output directory (must not exist)')
  r.add_argument('--trace-worlds', type=int, default=16,
                 help='worlds whose full per-tick traces are written (default 16)')
  r.add_argument('--chunk-worlds', type=_positive_int, default=1024)
  r.add_argument('--overwrite', action='store_true', help='replace an existing --out')
  r.set_defaults(func=_cmd_run)
  args = parser.parse_args(argv)
  _setup_jax()
  from fibril_mjx.errors import FibrilError
  try:
    return args.func(args)
  except FibrilError as e:
    for line in str(e).splitlines():
      print(f'error: {line}', file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print('interrupted; no output written', file=sys.stderr)
    return 130


if __name__ == '__main__':
  sys.exit(main())
