"""Neutrality check for refactors: every leaf of every example manifest's trace, hashed.

For each SimulationManifest under `manifests/` (fixed seed, a few worlds, a few hundred ticks)
this hashes every leaf of the state after `reset` (before the first step), of the final state
of a rollout, and of its whole trace, and writes `{manifest: {leaf path: sha256}}` as JSON.
A refactor that claims to be behaviour-neutral shows the file unchanged:

    python tools/trace_hashes.py --out /tmp/before.json          # on the old commit
    python tools/trace_hashes.py --check /tmp/before.json        # on the new one

`--check` exits 1 and names every leaf that differs (bitwise: the bytes of the float32 arrays,
not a tolerance).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def manifests() -> list[pathlib.Path]:
  out = []
  for p in sorted((ROOT / 'manifests').rglob('*.yaml')):
    if re.search(r'^fibril_manifest:', p.read_text(), re.M):
      out.append(p)
  return out


def leaf_hashes(tree, prefix: str) -> dict:
  import jax
  import numpy as np
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    a = np.asarray(leaf)
    h = hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()).hexdigest()
    out[prefix + jax.tree_util.keystr(path)] = h[:16]
  return out


def hashes(path: pathlib.Path, n_worlds: int, n_ticks: int, seed: int) -> dict:
  import fibril_mjx
  sim = fibril_mjx.load(path)
  params = sim.default_params(n_worlds)
  keys = fibril_mjx.world_keys(seed, n_worlds)
  per_id = lambda st: st._replace(components=sim.component_states(st))  # noqa: E731
  out = leaf_hashes(per_id(sim.reset(params, keys)), 'reset')
  final, trace, _ = sim.rollout(params, keys, n_ticks)
  out.update(leaf_hashes(per_id(final), 'final'))
  out.update(leaf_hashes(trace, 'trace'))
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--out', help='write the hashes here')
  ap.add_argument('--check', help='compare with this file; exit 1 on any difference')
  ap.add_argument('--worlds', type=int, default=3)
  ap.add_argument('--ticks', type=int, default=300)
  ap.add_argument('--seed', type=int, default=7)
  ap.add_argument('--only', nargs='+', metavar='TEXT',
                  help='only the manifests whose path contains one of these (a quick check; '
                       '--check then compares those alone)')
  args = ap.parse_args(argv)
  import fibril_mjx
  fibril_mjx.cpu_flags(1, bitwise=False)   # the loop flag alone, as `import fibril_mjx` set it before
  result = {}
  for p in manifests():
    if args.only and not any(t in str(p) for t in args.only):
      continue
    name = str(p.relative_to(ROOT))
    result[name] = hashes(p, args.worlds, args.ticks, args.seed)
    print(f'{name}: {len(result[name])} leaves', flush=True)
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + '\n')
  if args.check:
    ref = json.loads(pathlib.Path(args.check).read_text())
    bad = []
    for name in sorted(set(result) if args.only else set(ref) | set(result)):
      a, b = ref.get(name, {}), result.get(name, {})
      for leaf in sorted(set(a) | set(b)):
        if a.get(leaf) != b.get(leaf):
          bad.append(f'{name} {leaf}: {a.get(leaf)} -> {b.get(leaf)}')
    n = sum(len(v) for v in result.values())
    if bad:
      print(f'{len(bad)} of {n} leaves differ:\n  ' + '\n  '.join(bad[:200]))
      return 1
    print(f'all {n} leaves of {len(result)} manifests bitwise equal to {args.check}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
