"""The package's layers (README "How it is built"): each imports only the layers below it.

Read from the source itself (every `import` statement, at any depth, of every module under
`fibril_mjx/`), so a new module or a new import is checked the day it is written. The layer of a
module is its first package under `fibril_mjx/`; `fibril_mjx/errors.py` is the floor every layer
may use, and `fibril_mjx/__init__.py` (the public API by name) may use any.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parents[2] / 'fibril_mjx'

# bottom → top; a module may import its own layer and those before it. The traced building
# blocks come first, below the file formats (mechanisms never import config: what both need,
# the errors and the `Strict` base model, is the floor); workflows sit above everything but the
# CLI (nothing else imports a workflow: the RL env builds on batch, not on campaigns).
LAYERS = ('errors', 'mechanisms', 'config', 'error_models', 'physics', 'core', 'components',
          'builder', 'batch', 'analysis', 'io', 'rl', 'workflows', 'cli')


def modules() -> dict[str, pathlib.Path]:
  out = {}
  for f in sorted(PKG.rglob('*.py')):
    parts = list(f.relative_to(PKG).with_suffix('').parts)
    if parts[-1] == '__init__':
      parts = parts[:-1]
    out['.'.join(['fibril_mjx'] + parts)] = f
  return out


def imports(path: pathlib.Path, known: dict) -> list[tuple[int, str]]:
  """`(line, imported fibril_mjx module)` of every import statement in a file."""
  out = []
  for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
    if isinstance(node, ast.Import):
      out += [(node.lineno, a.name) for a in node.names if a.name.startswith('fibril_mjx')]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
        node.module.split('.')[0] == 'fibril_mjx'):
      for a in node.names:
        sub = f'{node.module}.{a.name}'
        out.append((node.lineno, sub if sub in known else node.module))
  return out


def layer(module: str) -> str | None:
  parts = module.split('.')
  return parts[1] if len(parts) > 1 else None   # None: the root package itself


def violations(mods: dict) -> list[str]:
  bad = []
  for mod, path in mods.items():
    src = layer(mod)
    if src is None:
      continue
    for line, target in imports(path, mods):
      dst = layer(target)
      rel = f'{path.relative_to(PKG.parent)}:{line}'
      if dst is None:
        bad.append(f'{rel}: imports the root package `fibril_mjx` (import the module that '
                   'defines the name instead)')
      elif dst not in LAYERS or src not in LAYERS:
        bad.append(f'{rel}: {target} is in no layer of {LAYERS}')
      elif LAYERS.index(dst) > LAYERS.index(src):
        bad.append(f'{rel}: layer {src!r} imports {target} from the higher layer {dst!r}')
  return bad


def test_every_layer_imports_only_layers_below_it():
  bad = violations(modules())
  assert not bad, '\n'.join(bad)


def test_every_package_folder_is_a_layer():
  tops = {p.name for p in PKG.iterdir() if p.is_dir() and (p / '__init__.py').exists()}
  assert tops <= set(LAYERS), sorted(tops - set(LAYERS))
  assert {p.stem for p in PKG.glob('*.py')} <= {'__init__', 'errors'}


def test_the_check_catches_an_upward_import(tmp_path, monkeypatch):
  """The rule is not vacuous: a mechanism importing the batch layer is reported."""
  fake = tmp_path / 'fibril_mjx'
  (fake / 'mechanisms').mkdir(parents=True)
  (fake / 'batch').mkdir()
  (fake / '__init__.py').write_text('')
  (fake / 'mechanisms' / '__init__.py').write_text('')
  (fake / 'batch' / '__init__.py').write_text('')
  (fake / 'batch' / 'simulation.py').write_text('X = 1\n')
  (fake / 'mechanisms' / 'rng.py').write_text(
      'def f():\n  from fibril_mjx.batch.simulation import X\n  return X\n')
  monkeypatch.setattr(__import__(__name__), 'PKG', fake)
  bad = violations(modules())
  assert len(bad) == 1 and "layer 'mechanisms' imports fibril_mjx.batch.simulation" in bad[0], bad


@pytest.mark.parametrize('src, dst', [('mechanisms', 'config'), ('rl', 'workflows'),
                                      ('batch', 'workflows'), ('config', 'error_models')])
def test_the_check_forbids_the_edges_the_layers_exclude(tmp_path, monkeypatch, src, dst):
  """A mechanism may not import a file format, nor the RL env a workflow (nor anything but the
  CLI a workflow)."""
  fake = tmp_path / 'fibril_mjx'
  for layer_dir in (src, dst):
    (fake / layer_dir).mkdir(parents=True)
    (fake / layer_dir / '__init__.py').write_text('')
  (fake / '__init__.py').write_text('')
  (fake / dst / 'target.py').write_text('X = 1\n')
  (fake / src / 'user.py').write_text(f'from fibril_mjx.{dst}.target import X\n')
  monkeypatch.setattr(__import__(__name__), 'PKG', fake)
  bad = violations(modules())
  assert len(bad) == 1 and f"layer {src!r} imports fibril_mjx.{dst}.target" in bad[0], bad
  # and the way round is allowed
  (fake / src / 'user.py').write_text('X = 1\n')
  (fake / dst / 'target.py').write_text(f'from fibril_mjx.{src}.user import X\n')
  assert violations(modules()) == []


@pytest.mark.parametrize('module', ['fibril_mjx.mechanisms.rng', 'fibril_mjx.batch.simulation',
                                    'fibril_mjx.cli'])
def test_layer_of(module):
  assert layer(module) in LAYERS


def _graph(mods: dict) -> dict[str, set[str]]:
  return {m: {t for _, t in imports(p, mods) if t in mods and t != m} for m, p in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in graph.get(v, ()):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        out.append(sorted(comp))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def test_no_import_cycle():
  found = cycles(_graph(modules()))
  assert not found, found


def test_the_cycle_check_finds_one():
  assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]


def function_level_imports() -> list[str]:
  bad = []
  for mod, path in modules().items():
    tree = ast.parse(path.read_text(encoding='utf-8'))
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
      if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
        names = [node.module or ''] if isinstance(node, ast.ImportFrom) else [
            a.name for a in node.names]
        if any(n.split('.')[0] == 'fibril_mjx' for n in names) and not getattr(node, 'level', 0):
          bad.append(f'{path.relative_to(PKG.parent)}:{node.lineno}')
  return bad


def test_no_function_level_import_of_the_package():
  """Imports of the package's own modules sit at module top (optional dependencies such as
  matplotlib, pyarrow or Ray may be imported where they are needed)."""
  assert function_level_imports() == []


def test_the_function_level_check_finds_one(tmp_path, monkeypatch):
  fake = tmp_path / 'fibril_mjx'
  (fake / 'io').mkdir(parents=True)
  (fake / '__init__.py').write_text('')
  (fake / 'io' / '__init__.py').write_text('')
  (fake / 'io' / 'a.py').write_text('def f():\n  import fibril_mjx.io\n  return 1\n')
  monkeypatch.setattr(__import__(__name__), 'PKG', fake)
  assert function_level_imports() == ['fibril_mjx/io/a.py:2']


def test_no_module_over_500_lines():
  sizes = {str(p.relative_to(PKG.parent)): len(p.read_text(encoding='utf-8').splitlines())
           for p in modules().values()}
  assert {f: n for f, n in sizes.items() if n > 500} == {}
