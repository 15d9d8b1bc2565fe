"""Where the built-in assets and profiles live, and `package://` resolution."""

from __future__ import annotations

import os
import pathlib
import re

from fibril_mjx.errors import FibrilError

_PKG_DIR = pathlib.Path(__file__).resolve().parents[1]   # the fibril_mjx package

PACKAGE_URI = re.compile(r'package://([A-Za-z0-9_.\-]+)/([^"\'\s<>]*)')


def _data_dir(name: str) -> pathlib.Path:
  # Installed wheel: fibril_mjx/_data/<name>; source checkout: <repo>/<name>.
  for candidate in (_PKG_DIR / '_data' / name, _PKG_DIR.parent / name):
    if candidate.is_dir():
      return candidate
  raise FibrilError(f'fibril_mjx installation is incomplete: no {name}/ directory found '
                    f'beside {_PKG_DIR}')


def assets_dir() -> pathlib.Path:
  """The built-in `assets/` directory (`package://fibril_sim_models/...` resolves into it)."""
  return _data_dir('assets')


def profiles_dir() -> pathlib.Path:
  """The built-in profile catalog."""
  return _data_dir('profiles')


def builtin_packages() -> dict[str, pathlib.Path]:
  return {'fibril_sim_models': assets_dir()}


def resolve_uri(uri: str, packages: dict[str, pathlib.Path], *, base: pathlib.Path,
                where: str) -> pathlib.Path:
  """Resolves a `package://NAME/PATH` URI or a path relative to `base`.

  Args:
    uri: the reference as written.
    packages: package roots by name.
    base: directory that relative paths are relative to.
    where: `file: field` text for error messages.

  Returns:
    The absolute path of an existing file.

  Raises:
    FibrilError: unknown package, a URI escaping its root, or a missing file.
  """
  match = PACKAGE_URI.fullmatch(uri)
  if match:
    name, rel = match.groups()
    if name not in packages:
      raise FibrilError(f'{where}: {uri!r}: unknown package {name!r}; known packages: '
                        f'{", ".join(sorted(packages))}')
    root = packages[name].resolve()
    path = (root / rel).resolve()
    if os.path.commonpath([root, path]) != str(root):
      raise FibrilError(f'{where}: {uri!r}: the URI escapes its package root {root}')
  else:
    path = (base / uri).resolve()
  if not path.is_file():
    raise FibrilError(f'{where}: {uri!r}: file not found ({path})')
  return path
