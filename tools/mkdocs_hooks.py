"""MkDocs hooks of the documentation site (mkdocs.yml `hooks:`).

`on_config` adds one nav entry per registered component type under Reference → Component
types; `on_files` adds every page of `tools/gen_docs_reference.py` to the build, generated in
memory from the installed package (nothing generated is committed, so nothing can be stale).
"""

from __future__ import annotations

import pathlib
import sys

from mkdocs.structure.files import File

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gen_docs_reference as gen  # noqa: E402


def _find(nav, title):
  for item in nav:
    if isinstance(item, dict) and title in item:
      return item[title]
  return None


def on_config(config):
  reference = _find(config['nav'], 'Reference')
  types = _find(reference, 'Component types') if reference is not None else None
  if types is not None:
    types[:] = [{'Overview': 'reference/components/index.md'}] + [
        {t: gen.component_file(t)} for t in gen.component_types()]
  return config


def on_files(files, config):
  for rel, text in gen.pages().items():
    files.append(File.generated(config, rel, content=text))
  return files
