"""`fibril-mjx profiles list|show NAME` (SPEC §9): the profile catalog with provenance.

A profile's provenance (SPEC §3.2) states where its values came from, either per field
(`provenance.fields.<name>`) or in `notes` / `assumptions` sentences that name the field; `show`
lists, for every value, each of those that applies, and the profile's `source` when none does.
"""

from __future__ import annotations

import pathlib
import re

from fibril_mjx.config import paths
from fibril_mjx.errors import FibrilError, did_you_mean
from fibril_mjx.config.manifest import Catalog, Profile, read_manifest


def catalog(manifest: str | None = None) -> Catalog:
  """The built-in catalog, plus the `profile_paths` catalogs of `manifest` when given."""
  if manifest is not None:
    return read_manifest(manifest).catalog
  return Catalog([paths.profiles_dir()])


def _as_lines(value) -> list[str]:
  if isinstance(value, (list, tuple)):
    return [str(v) for v in value]
  return [str(value)]


def field_provenance(profile: Profile, field: str) -> list[tuple[str, str]]:
  """`[(where, text), ...]`: the provenance statements that apply to one field's value.

  `where` is the provenance key (`provenance.fields.period_s`, `provenance.notes[1]`, ...);
  when no statement names the field, the profile's `source` stands for it
  (`provenance.source (profile-wide)`).
  """
  prov = profile.provenance or {}
  out = []
  per_field = prov.get('fields')
  if isinstance(per_field, dict) and field in per_field:
    out.extend((f'provenance.fields.{field}', t) for t in _as_lines(per_field[field]))
  word = re.compile(rf'(?<![A-Za-z0-9_]){re.escape(field)}(?![A-Za-z0-9_])')
  for key, value in prov.items():
    if key == 'fields' or not isinstance(value, (list, tuple)):
      continue
    for i, text in enumerate(value):
      if isinstance(text, str) and word.search(text):
        out.append((f'provenance.{key}[{i}]', text))
  if not out and 'source' in prov:
    out.append(('provenance.source (profile-wide)', str(prov['source'])))
  if not out:
    out.append(('(none)', 'no provenance stated: treat as an ASSUMPTION'))
  return out


def _rel(profile: Profile) -> str:
  file = pathlib.Path(profile.file)
  try:
    return str(file.relative_to(paths.profiles_dir().parent))
  except ValueError:
    return str(file)


def render_list(cat: Catalog) -> str:
  """One line per profile: id, kind, component types, file."""
  rows = [(p.id, p.kind, ', '.join(p.component_types), _rel(p))
          for p in sorted(cat.profiles.values(), key=lambda p: (p.kind, p.id))]
  head = ('id', 'kind', 'component types', 'file')
  widths = [max(len(r[i]) for r in rows + [head]) for i in range(3)]
  fmt = lambda r: '  '.join(c.ljust(w) for c, w in zip(r[:3], widths)) + '  ' + r[3]
  return '\n'.join([fmt(head)] + [fmt(r) for r in rows])


def render_show(cat: Catalog, name: str) -> str:
  """A profile: kind, component types, provenance, and every field with its provenance."""
  p = cat.profiles.get(name)
  if p is None:
    raise FibrilError(f'profiles: {name!r}: unknown profile' + did_you_mean(name, cat.profiles)
                      + f'; profiles: {", ".join(sorted(cat.profiles))}')
  prov = p.provenance or {}
  out = [f'profile {p.id}', f'  kind: {p.kind}',
         f'  component types: {", ".join(p.component_types)}', f'  file: {p.file}',
         '  provenance:']
  for key, value in prov.items():
    if key == 'fields':
      continue
    if isinstance(value, (list, tuple)):
      out.append(f'    {key}:')
      out.extend(f'      - {t}' for t in _as_lines(value))
    else:
      out.append(f'    {key}: {value}')
  out.append('  fields (value, then where it came from):')
  for field, value in p.fields.items():
    out.append(f'    {field} = {value!r}')
    out.extend(f'      <- {where}: {text}' for where, text in field_provenance(p, field))
  return '\n'.join(out)


def render(action: str, name: str | None = None, *, manifest: str | None = None) -> str:
  """`list` or `show NAME` as text (the `fibril-mjx profiles` command)."""
  cat = catalog(manifest)
  if action == 'list':
    if name is not None:
      raise FibrilError(f'profiles list: {name!r}: list takes no profile id (use show)')
    return render_list(cat)
  if action == 'show':
    if name is None:
      raise FibrilError('profiles show: a profile id is required; profiles: '
                        + ', '.join(sorted(cat.profiles)))
    return render_show(cat, name)
  raise FibrilError(f'profiles: {action!r}: unknown action (list or show)')
