"""The public API: `fibril_mjx.__all__`, what docs/reference/api.md documents and every
`fibril_mjx.<dotted name>` the docs and README mention import; a moved name keeps working for
a release (`fibril_mjx.errors.MOVED`) with a DeprecationWarning that names its new place, and
the docs' "Deprecations" table lists every one."""

import contextlib
import importlib
import pathlib
import re
import subprocess
import sys
import warnings

import pytest

import fibril_mjx
from fibril_mjx.errors import MOVED, REMOVAL, resolve

REPO = pathlib.Path(__file__).resolve().parents[2]
API = REPO / 'docs' / 'reference' / 'api.md'
DOTTED = re.compile(r'fibril_mjx(?:\.[A-Za-z_][A-Za-z0-9_]*)+')


def documented() -> list[str]:
  """The targets of docs/reference/api.md (`::: fibril_mjx...`)."""
  return re.findall(r'^::: (fibril_mjx[\w.]*)\s*$', API.read_text(), re.M)


def mentioned() -> list[str]:
  """Every dotted fibril_mjx name in the docs and the README, but the old names in MOVED."""
  text = '\n'.join(p.read_text() for p in [REPO / 'README.md', *(REPO / 'docs').rglob('*.md')])
  # the Deprecations table names the old paths on purpose
  text = text.replace(deprecations_table(), '')
  return sorted(set(DOTTED.findall(text)))


@contextlib.contextmanager
def no_old_names():
  """Raises the warning of an old name (`fibril_mjx.errors.moved`) as an error."""
  with warnings.catch_warnings():
    warnings.filterwarnings('error', '.* moved to fibril_mjx', DeprecationWarning)
    yield


def deprecations_table() -> str:
  m = re.search(r'^## Deprecations\n.*?(?=^## |\Z)', API.read_text(), re.S | re.M)
  assert m, 'docs/reference/api.md has no "## Deprecations" section'
  return m.group(0)


@pytest.mark.parametrize('name', fibril_mjx.__all__)
def test_every_name_in_all_imports(name):
  assert not name.startswith('_') or name == '__version__'
  assert getattr(fibril_mjx, name) is not None


def test_the_public_names_are_listed():
  """The numbers below change only with the API: a new public name is a decision."""
  # 15: Options, Start and Controller (Simulation's records) joined in this round
  assert len(fibril_mjx.__all__) == len(set(fibril_mjx.__all__)) == 15
  # 24: + the three and Simulation.rollout's Rollout, then campaign.execute.run's Overrides
  assert len(documented()) == 24, documented()


@pytest.mark.parametrize('target', documented())
def test_every_documented_name_imports(target):
  with no_old_names():   # documented names are not the old ones
    assert resolve(target) is not None


def test_every_dotted_name_in_the_docs_imports():
  bad = []
  for name in mentioned():
    try:
      with no_old_names():
        resolve(name)
    except (ImportError, AttributeError, DeprecationWarning) as e:
      bad.append(f'{name}: {type(e).__name__}: {e}')
  assert not bad, '\n'.join(bad)


def shim_file(old: str) -> pathlib.Path:
  return REPO / (old.replace('.', '/') + '.py')


@pytest.mark.parametrize('old', sorted(MOVED))
def test_a_moved_name_warns_naming_its_new_place_and_is_the_same_object(old):
  new = MOVED[old]
  with no_old_names():
    want = resolve(new)                                  # the new place warns nothing
  parent, name = old.rsplit('.', 1)
  if shim_file(old).exists():          # an old module path: `import` it as user code does
    sys.modules.pop(old, None)
    vars(importlib.import_module(parent)).pop(name, None)
    code, ns = compile(f'import {old}\ngot = {old}', __file__, 'exec'), {}
  else:                                # a name of a module (or of the package root)
    code, ns = compile(f'from {parent} import {name} as got', __file__, 'exec'), {}
  with pytest.warns(DeprecationWarning) as record:
    exec(code, ns)
  assert ns['got'] is want
  msgs = [w for w in record if issubclass(w.category, DeprecationWarning)]
  assert msgs and all(f'{old} moved to {new}' in str(w.message) and REMOVAL in str(w.message)
                      for w in msgs), [str(w.message) for w in msgs]
  assert {w.filename for w in msgs} == {__file__}        # the warning points at the user's line


def test_an_unknown_name_is_still_an_attribute_error():
  from fibril_mjx.components import base
  with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
    base.NoSuchName  # noqa: B018
  with pytest.raises(ImportError, match='NoSuchName'):
    exec('from fibril_mjx import NoSuchName')


def test_every_moved_module_below_the_root_has_its_shim():
  """An old module path inside a package is a file (so `import old.path` works); the root
  keeps only `__init__` and `errors` (tests/tooling/test_layers.py), so an old root module is
  an attribute of the package (`from fibril_mjx import worlds`)."""
  for old, new in MOVED.items():
    if shim_file(old).exists():
      assert 'sys.modules[__name__] = moved_module(__name__)' in shim_file(old).read_text()
      assert isinstance(resolve(new), type(sys))
    elif old.count('.') > 1 and isinstance(resolve(new), type(sys)):
      pytest.fail(f'{old} moved to the module {new} and has no shim at {shim_file(old)}')


def test_the_docs_list_every_deprecation():
  rows = re.findall(r'^\| `([\w.]+)` \| `([\w.]+)` \|', deprecations_table(), re.M)
  assert dict(rows) == MOVED


def test_nothing_in_the_package_uses_an_old_name():
  """Importing the package, every module the builder and workflows discover, and the CLI
  warns nothing: only a user's old name does (a new process: the suite's has them all)."""
  code = ('import warnings\nwarnings.filterwarnings("error", ".* moved to fibril_mjx", '
          'DeprecationWarning)\n'
          'import fibril_mjx, fibril_mjx.builder.build, fibril_mjx.workflows, fibril_mjx.cli\n'
          'import fibril_mjx.workflows.schema, fibril_mjx.workflows.validate\n'
          'fibril_mjx.workflows.schema.registry.discover(fibril_mjx.components)\nprint("ok")\n')
  r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0 and r.stdout.strip() == 'ok', r.stderr[-3000:]
