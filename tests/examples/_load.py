"""Loads a script of examples/ as a module (the tutorials are scripts, not a package)."""

import importlib.util
import pathlib

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / 'examples'


def example(name: str):
  """The module `examples/<name>.py`, freshly imported."""
  spec = importlib.util.spec_from_file_location(f'example_{name}', EXAMPLES / f'{name}.py')
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def is_png(path) -> bool:
  """True when `path` starts with the PNG signature."""
  return pathlib.Path(path).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
