"""Every citation in the package's docstrings and comments resolves inside the repository.

Read from the source text of every module under `fibril_mjx/`:

- `SPEC §a.b…` names a section of docs/SPEC.md: a heading numbered `a.b…`, or item `b` of the
  numbered list of section `a` (the principles of §1 are cited as `§1.4`);
- `docs/<page>.md` names a page that exists, and a quoted title after it (`docs/x.md, "Title"`)
  starts one of that page's headings;
- no section title of a document outside the repository is quoted (the sensor-modelling guide's
  Polish titles, e.g. "Barometr i airspeed").
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PKG = ROOT / 'fibril_mjx'
SPEC_REF = re.compile(r'SPEC §(\d+(?:\.\d+)*)((?:(?:,| and) §\d+(?:\.\d+)*)*)')
DOCS_REF = re.compile(r'(docs/[\w./-]+\.md)(?:,\s+"([^"]+)")?')
# Polish words of the guide's section titles; none of them is an English word.
POLISH = re.compile(r'\b(i kamera|Barometr|Magnetometr|raportowana|jakość|emulacja|rejestrów|'
                    r'Rozdział|przewodnik|Model błędu|Minimalny zestaw|Walidacja modelu)\b'
                    r'|[ąęłńśźżć]')


def sources() -> dict[str, str]:
  return {str(f.relative_to(ROOT)): f.read_text(encoding='utf-8')
          for f in sorted(PKG.rglob('*.py'))}


def spec_sections(text: str) -> set[str]:
  """Section numbers of docs/SPEC.md: its numbered headings and `n.k` for item k of the
  numbered list directly under heading `n`."""
  out, current = set(), None
  for line in text.splitlines():
    m = re.match(r'#+ (\d+(?:\.\d+)*)\.? ', line)
    if m:
      current = m.group(1)
      out.add(current)
      continue
    m = re.match(r'(\d+)\. ', line)
    if m and current is not None and '.' not in current:
      out.add(f'{current}.{m.group(1)}')
  return out


def headings(page: pathlib.Path) -> list[str]:
  return [' '.join(re.sub(r'[`*]', '', line.lstrip('#')).split())
          for line in page.read_text(encoding='utf-8').splitlines() if line.startswith('#')]


def line_of(text: str, pos: int) -> int:
  return text.count('\n', 0, pos) + 1


def unresolved(files: dict[str, str]) -> list[str]:
  """`file:line: what` for every citation that does not resolve."""
  sections = spec_sections((ROOT / 'docs' / 'SPEC.md').read_text(encoding='utf-8'))
  bad = []
  for rel, text in files.items():
    for m in SPEC_REF.finditer(text):
      for num in [m.group(1)] + re.findall(r'§(\d+(?:\.\d+)*)', m.group(2)):
        if num not in sections:
          bad.append(f'{rel}:{line_of(text, m.start())}: SPEC §{num} is no section of '
                     'docs/SPEC.md')
    for m in DOCS_REF.finditer(text):
      page = ROOT / m.group(1)
      if not page.is_file():
        bad.append(f'{rel}:{line_of(text, m.start())}: {m.group(1)} is not in the repository')
      elif m.group(2):
        title = ' '.join(m.group(2).split())
        if not any(h.startswith(title) for h in headings(page)):
          bad.append(f'{rel}:{line_of(text, m.start())}: {m.group(1)} has no heading '
                     f'"{title}"')
    for m in POLISH.finditer(text):
      bad.append(f'{rel}:{line_of(text, m.start())}: quotes a title outside the repository: '
                 f'{text[max(0, m.start() - 20):m.end() + 20]!r}')
  return bad


def test_every_citation_in_the_package_resolves():
  assert unresolved(sources()) == []


@pytest.mark.parametrize('text, problem', [
    ('"""(SPEC §5.9)."""', 'SPEC §5.9 is no section'),
    ('"""(SPEC §5, §13)."""', 'SPEC §13 is no section'),
    ('"""See docs/guides/nowhere.md."""', 'docs/guides/nowhere.md is not in the repository'),
    ('"""(docs/guides/sensors.md, "Model GNSS")."""', 'has no heading "Model GNSS"'),
    ('"""(the guide, "Barometr i airspeed")."""', 'quotes a title outside the repository'),
])
def test_an_unresolvable_citation_is_named(text, problem):
  (found,) = unresolved({'fibril_mjx/x.py': text})
  assert found.startswith('fibril_mjx/x.py:1: ') and problem in found


def test_spec_sections_include_headings_and_principles():
  got = spec_sections('## 1. Principles\n\n1. **MJCF**\n2. **Every layer**\n\n## 6. Actuators\n'
                      '### 6.1 `x`\n#### 6.1.1 Continuous\n1. not a principle\n')
  assert got == {'1', '1.1', '1.2', '6', '6.1', '6.1.1'}
