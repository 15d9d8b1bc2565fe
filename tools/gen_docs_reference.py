"""Generates the reference pages of the documentation site from the code, so they cannot rot.

- `reference/cli.md`: every `fibril-mjx` command with its options, read from the argparse
  parser that `fibril_mjx.cli.main` builds, and an example (`EXAMPLES` below).
- `reference/manifest.md`, `reference/campaign.md`, `reference/tune.md`: every field of the
  file formats, read from their JSON Schemas (`fibril_mjx.workflows.schema`, what
  `fibril-mjx schema` prints).
- `reference/components/<type>.md` and `reference/components/index.md`: every registered
  component type — its module docstring, every part the registry holds for it (`registry.PARTS`,
  with the module that registered it), every config field (type, default, constraints, unit
  read off the field name) from the type's schema, and the built-in profiles for it with their
  sources and the fields they set.
- `reference/profiles.md`: every shipped profile.

The site build generates them (`tools/mkdocs_hooks.py` adds them to the MkDocs build in
memory; nothing generated is committed). To look at them as files:

    .venv/bin/python tools/gen_docs_reference.py --out out/docs_reference
"""

from __future__ import annotations

import argparse
import inspect
import json
import pathlib
import re
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]

# One example per command (the test tests/examples/test_docs_reference.py requires one for
# every command the parser has, so a new command cannot land without one).
EXAMPLES = {
    'plan': 'fibril-mjx plan manifests/ahrs_turntable.yaml --set ahrs.period_s=0.02',
    'run': 'fibril-mjx run manifests/ahrs_turntable.yaml --worlds 256 --seed 0 --duration 10 '
           '--out out/demo',
    'export-mcap': 'fibril-mjx export-mcap out/survey_quad --worlds 0,3 --out '
                   'out/survey_quad.mcap',
    'schema': 'fibril-mjx schema --kind campaign --out fibril_campaign.schema.json',
    'profiles': 'fibril-mjx profiles show icm42688p_nominal',
    'export-mavlink': 'fibril-mjx export-mavlink out/hil_quad --world 1 --out '
                      'out/hil_quad.tlog',
    'campaign': 'fibril-mjx campaign manifests/campaigns/ahrs_robustness.yaml --out '
                'out/campaign --worlds 1024 --backend local',
    'replay': 'fibril-mjx replay out/campaign --world 12 --out out/replay-12',
    'validate': 'fibril-mjx validate manifests/imu_ekf.yaml --component imu --out '
                'out/validate',
    'fit-profile': 'fibril-mjx fit-profile --type fibril_sim/imu --component imu --static '
                   's1.csv s2.csv s3.csv --csv-map map.yaml --out my_imu_empirical.yaml',
    'tune': 'fibril-mjx tune manifests/tuning/tune.yaml --out out/tune',
}

# Units read off a field name's suffix (the SPEC's naming convention), longest first.
_SUFFIX_UNITS = (
    ('_rad_s2', 'rad/s²'), ('_rad_s', 'rad/s'), ('_m_s2', 'm/s²'), ('_m_s', 'm/s'),
    ('_rad', 'rad'), ('_deg', 'deg'), ('_hz', 'Hz'), ('_ms', 'ms'), ('_s', 's'), ('_m', 'm'),
    ('_c', '°C'), ('_pa', 'Pa'), ('_ut', 'µT'), ('_px', 'px'), ('_ohm', 'Ω'), ('_v', 'V'),
    ('_a', 'A'), ('_nm', 'N·m'), ('_kg', 'kg'),
)
# Inertial channels: `<channel>_<term>` without a unit suffix.
_CHANNEL_UNITS = {'angular_velocity': 'rad/s', 'linear_acceleration': 'm/s²'}
_TERM_UNITS = {'noise_density': '{u}/√Hz', 'random_walk': '{u}/√s', 'bias': '{u}',
               'limit': '{u}', 'resolution': '{u}', 'noise_stddev': '{u}',
               'bias_turn_on_stddev': '{u}', 'bias_instability_stddev': '{u}',
               'scale': '1', 'misalignment': 'rad', 'cross_axis': '1'}


def unit_of(name: str) -> str:
  """The unit a field's name states (SPEC naming: `_s`, `_hz`, ...), or '' when it states none."""
  for ch, u in _CHANNEL_UNITS.items():
    if name.startswith(ch + '_'):
      term = name[len(ch) + 1:]
      if term in _TERM_UNITS:
        return _TERM_UNITS[term].format(u=u)
  for suffix, u in _SUFFIX_UNITS:
    if name.endswith(suffix):
      return u
  return ''


def _cell(text: Any) -> str:
  """Text safe inside a Markdown table cell."""
  s = str(text).replace('\n', ' ').replace('|', '\\|')
  return s.strip()


def _code(v: Any) -> str:
  return '`' + json.dumps(v, ensure_ascii=False) + '`'


# ------------------------------------------------------------------------------------ CLI


class _Captured(Exception):
  def __init__(self, parser):
    super().__init__('parser captured')
    self.parser = parser


def cli_parser() -> argparse.ArgumentParser:
  """The parser `fibril_mjx.cli.main` builds (captured at its `parse_args`, before it runs
  anything)."""
  from fibril_mjx import cli
  original = argparse.ArgumentParser.parse_args

  def capture(self, *a, **k):
    if self.prog == 'fibril-mjx' and self._subparsers is not None:
      raise _Captured(self)
    return original(self, *a, **k)

  argparse.ArgumentParser.parse_args = capture
  try:
    cli.main(['--help'])
  except _Captured as c:
    return c.parser
  finally:
    argparse.ArgumentParser.parse_args = original
  raise RuntimeError('fibril_mjx.cli.main did not build its parser')


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
  """`{command: its subparser}` in the parser's order."""
  for action in parser._actions:
    if isinstance(action, argparse._SubParsersAction):
      return dict(action.choices.items())
  return {}


def _command_help(parser) -> dict[str, str]:
  for action in parser._actions:
    if isinstance(action, argparse._SubParsersAction):
      return {a.dest: a.help or '' for a in action._choices_actions}
  return {}


def _option_rows(sub: argparse.ArgumentParser) -> list[str]:
  rows = ['| option | default | help |', '| --- | --- | --- |']
  for a in sub._actions:
    if isinstance(a, argparse._HelpAction):
      continue
    if a.option_strings:
      name = ', '.join(a.option_strings)
      if a.nargs != 0:
        meta = a.metavar or (a.dest.upper() if not a.choices else '{' + ','.join(a.choices) + '}')
        name += f' {meta}' + (' ...' if a.nargs in ('+', '*') else '')
    else:
      name = a.metavar or a.dest
    if a.required or (not a.option_strings and a.nargs not in ('?', '*')):
      default = 'required'
    elif not a.option_strings:
      default = 'optional'
    elif a.nargs == 0:
      default = ''
    elif a.default in (None, [], argparse.SUPPRESS):
      default = ''
    else:
      default = f'`{a.default}`'
    help_ = (a.help or '').replace('%%', '%')
    if a.choices and not a.option_strings:
      help_ = ('one of ' + ', '.join(f'`{c}`' for c in a.choices) + '. ' + help_).strip()
    rows.append(f'| `{_cell(name)}` | {default} | {_cell(help_)} |')
  return rows


def cli_page() -> str:
  parser = cli_parser()
  subs = subcommands(parser)
  helps = _command_help(parser)
  lines = ['# Command line', '',
           'Generated from the argparse parser of `fibril_mjx.cli` by '
           '`tools/gen_docs_reference.py`; `fibril-mjx COMMAND --help` prints the same.', '',
           'User errors (bad manifest, profile, MJCF, option) print one line each — '
           '`file: field.path = value: rule` — and exit with status 2, never a traceback.', '',
           '## Global option', '']
  for a in parser._actions:
    if a.option_strings and not isinstance(a, argparse._HelpAction):
      lines.append(f'- `{", ".join(a.option_strings)}` (default `{a.default}`): '
                   + (a.help or '').replace('%%', '%'))
  lines += ['', '| command | what |', '| --- | --- |']
  for name in subs:
    anchor = 'fibril-mjx-' + name
    lines.append(f'| [`{name}`](#{anchor}) | {_cell(helps.get(name, ""))} |')
  for name, sub in subs.items():
    sub.prog = f'fibril-mjx {name}'
    usage = sub.format_usage().replace('usage: ', '').strip()
    lines += ['', f'## fibril-mjx {name}', '', helps.get(name, '').rstrip('.') + '.', '',
              '```text', usage, '```', '']
    lines += _option_rows(sub)
    ex = EXAMPLES.get(name)
    lines += ['', 'Example:', '', '```sh', ex if ex else f'fibril-mjx {name} --help', '```']
  return '\n'.join(lines) + '\n'


# ------------------------------------------------------------------------------ schemas


def _type_str(p: dict, defs_anchor) -> str:
  if '$ref' in p:
    name = p['$ref'].split('/')[-1]
    return defs_anchor(name)
  if 'const' in p:
    return _code(p['const'])
  if 'enum' in p:
    return ' | '.join(_code(v) for v in p['enum'])
  if 'anyOf' in p or 'oneOf' in p:
    alts = p.get('anyOf') or p.get('oneOf')
    return ' or '.join(_type_str(a, defs_anchor) for a in alts)
  t = p.get('type')
  if t == 'array':
    if 'prefixItems' in p:
      inner = ', '.join(_type_str(i, defs_anchor) for i in p['prefixItems'])
      return f'[{inner}]'
    items = p.get('items') or {}
    return f'list of {_type_str(items, defs_anchor)}' if items else 'list'
  if t == 'object':
    add = p.get('additionalProperties')
    if isinstance(add, dict) and add:
      return f'mapping to {_type_str(add, defs_anchor)}'
    return 'mapping'
  if isinstance(t, list):
    return ' or '.join(t)
  return t or 'any'


def _constraints(p: dict) -> str:
  out = []
  for k, sym in (('minimum', '≥'), ('exclusiveMinimum', '>'), ('maximum', '≤'),
                 ('exclusiveMaximum', '<'), ('minItems', 'items ≥'), ('maxItems', 'items ≤'),
                 ('minLength', 'length ≥')):
    if k in p:
      out.append(f'{sym} {p[k]}')
  for alt in p.get('anyOf', []):
    c = _constraints(alt)
    if c:
      out.append(c)
  return ', '.join(out)


def _field_table(props: dict, required: set, defs_anchor, units: bool = False) -> list[str]:
  head = '| field | type | default | constraints |' + (' unit |' if units else '')
  rows = [head, '| --- | --- | --- | --- |' + (' --- |' if units else '')]
  for name, p in props.items():
    default = 'required' if name in required else (_code(p['default']) if 'default' in p
                                                    else '')
    row = (f'| `{name}` | {_cell(_type_str(p, defs_anchor))} | {_cell(default)} | '
           f'{_cell(_constraints(p))} |')
    if units:
      row += f' {unit_of(name)} |'
    rows.append(row)
  return rows


def _slug(name: str) -> str:
  return re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')


def schema_page(kind: str, title: str, intro: str, skip_defs=()) -> str:
  from fibril_mjx.workflows import schema
  s = schema.manifest_schema() if kind == 'manifest' else schema.file_schema(kind)
  defs = s.get('$defs', {})
  shown = [d for d in defs if not any(re.match(p, d) for p in skip_defs)]

  def anchor(name):
    if name in shown:
      return f'[{name}](#{_slug(name)})'
    return f'`{name}`'

  lines = [f'# {title}', '', intro, '',
           f'Generated from the JSON Schema that `fibril-mjx schema --kind {kind}` prints '
           '(draft 2020-12, from the pydantic models of the installed package) by '
           '`tools/gen_docs_reference.py`. Unknown keys are rejected at every level.', '',
           '## Top level', '']
  if s.get('description'):
    lines += [s['description'], '']
  lines += _field_table(s.get('properties', {}), set(s.get('required', [])), anchor)
  for name in shown:
    d = defs[name]
    lines += ['', f'## {name}', '']
    if d.get('description'):
      lines += [d['description'], '']
    if d.get('properties'):
      lines += _field_table(d['properties'], set(d.get('required', [])), anchor)
    elif 'enum' in d:
      lines += ['One of ' + ', '.join(_code(v) for v in d['enum']) + '.']
  return '\n'.join(lines) + '\n'


# --------------------------------------------------------------------------- components


def component_types() -> list[str]:
  """Every registered component type with a config model (what a manifest may name)."""
  from fibril_mjx.workflows import schema
  return sorted(schema.component_config_models())


def _registry():
  """The one registry (`fibril_mjx.core.registry`) with every part of every layer registered:
  the command line imports every workflow and exporter, whose modules register their parts."""
  import fibril_mjx.cli  # noqa: F401
  from fibril_mjx.core import registry
  return registry


def _registered_by(value) -> str:
  """What a registry part is: the module that provides it (a function or a record), the value
  itself (a name, a tuple of field names), or the keys of a mapping (`bag`: ROS types)."""
  if isinstance(value, (str, tuple)):
    return _code(list(value) if isinstance(value, tuple) else value)
  if isinstance(value, dict):
    return 'for ' + ', '.join(f'`{k}`' for k in value)
  mod = inspect.getmodule(value if callable(value) or isinstance(value, type) else type(value))
  return f'`{mod.__name__}`' if mod is not None else '?'


def _parts_rows(entry) -> list[str]:
  """The table of every part the registry holds for `entry`'s type (`registry.PARTS` order)."""
  registry = _registry()
  rows = ['| part | registered |', '| --- | --- |']
  for part in ('build',) + tuple(p for p in registry.PARTS if p != 'build'):
    value = getattr(entry, part)
    rows.append(f'| `{part}` | {"—" if value is None else _registered_by(value)} |')
  return rows


def component_file(type_name: str) -> str:
  return 'reference/components/' + _slug(type_name.replace('/', '-')) + '.md'


def _catalog():
  from fibril_mjx.config import paths
  from fibril_mjx.config.manifest import Catalog
  return Catalog([paths.profiles_dir()])


def _source(p) -> tuple[str, str]:
  prov = p.provenance or {}
  return str(prov.get('source', '')), str(prov.get('evidence', ''))


def component_page(type_name: str) -> str:
  from fibril_mjx.core import registry
  from fibril_mjx.workflows import schema
  s = schema.manifest_schema()
  defs = s['$defs']
  cfg = defs.get(f'{schema._def_name(type_name)}_config', {})
  entry = _registry().get(type_name)
  mod = sys.modules.get(entry.build.__module__)
  doc = (mod.__doc__ or '').strip() if mod else ''
  lines = [f'# `{type_name}`', '', f'Module `{entry.build.__module__}`.', '']
  if doc:
    lines += ['## What it models', '', doc, '']
  lines += ['## Registered parts', '',
            'Every part the registry (`fibril_mjx.register`) holds for this type, with the module '
            'that registered it (the value, for a part that is data); — : the type has none, '
            'and the workflow that reads that part skips it.', '']
  lines += _parts_rows(entry) + ['']
  lines += ['## Config fields', '',
            'Every field of the `config:` mapping of a `components[]` entry with '
            f'`type: {type_name}`, from the type\'s JSON Schema. "required" fields may come '
            'from a profile layer instead (device → empirical → transport → instance config); '
            'fields a shipped profile can supply are not required here. Units are read off '
            'the field name (SPEC naming: `_s` seconds, `_hz` hertz, `_rad`, `_m_s2`, ...; '
            'inertial `<channel>_noise_density` in unit/√Hz, `_random_walk` in unit/√s).', '']
  if cfg.get('description'):
    lines += ['> ' + cfg['description'].replace('\n', '\n> '), '']

  def anchor(name):
    return f'`{name}`'
  props = dict(cfg.get('properties', {}))
  lines += _field_table(props, set(cfg.get('required', [])), anchor, units=True)
  cat = _catalog()
  profs = [p for p in sorted(cat.profiles.values(), key=lambda p: p.id)
           if type_name in p.component_types]
  lines += ['', '## Built-in profiles', '']
  if not profs:
    lines += ['None ship for this type: every field comes from the defaults above or the '
              'manifest.']
  for p in profs:
    src, ev = _source(p)
    lines += [f'### `{p.id}` ({p.kind})', '',
              f'File `profiles/{p.file.name}`' + (f'; evidence `profiles/{ev}`' if ev else '')
              + '.', '']
    if src:
      lines += [f'Source: {src}', '']
    fields_prov = (p.provenance or {}).get('fields', {}) or {}
    lines += ['| field | value | provenance |', '| --- | --- | --- |']
    for f, v in p.fields.items():
      lines.append(f'| `{f}` | {_cell(_code(v))} | {_cell(fields_prov.get(f, ""))} |')
    lines.append('')
  return '\n'.join(lines) + '\n'


def components_index() -> str:
  registry = _registry()
  lines = ['# Component types', '',
           'Every component type a manifest may name (`components[].type`), generated from the '
           'registry and the JSON Schemas by `tools/gen_docs_reference.py`. Each page lists '
           'every part the registry holds for the type, every config field with its type, '
           'default and unit, and the built-in profiles with their sources. The parts '
           f'({", ".join(f"`{p}`" for p in registry.PARTS)}) are described in '
           '`fibril_mjx/core/registry.py`.', '',
           '| type | module | parts besides `build`, `config_model` | built-in profiles |',
           '| --- | --- | --- | --- |']
  cat = _catalog()
  for t in component_types():
    profs = sorted(p.id for p in cat.profiles.values() if t in p.component_types)
    page = component_file(t).split('/')[-1]
    entry = registry.get(t)
    parts = [p for p in registry.PARTS if p not in ('build', 'config_model')
             and getattr(entry, p) is not None]
    lines.append(f'| [`{t}`]({page}) | `{entry.build.__module__}` | '
                 + (', '.join(f'`{p}`' for p in parts) or '—') + ' | '
                 + (', '.join(f'`{p}`' for p in profs) or '—') + ' |')
  return '\n'.join(lines) + '\n'


def profiles_page() -> str:
  cat = _catalog()
  lines = ['# Built-in profiles', '',
           'Every profile shipped in `profiles/` (generated by `tools/gen_docs_reference.py`). '
           '`fibril-mjx profiles show NAME` prints one with the provenance of every field; '
           'evidence documents are in `profiles/evidence/`. A manifest selects them by layer: '
           '`profiles: {device: ..., empirical: ..., transport: ...}`.', '',
           '| profile | kind | component types | source | evidence |',
           '| --- | --- | --- | --- | --- |']
  for p in sorted(cat.profiles.values(), key=lambda p: p.id):
    src, ev = _source(p)
    types = ', '.join(f'[`{t}`](components/{component_file(t).split("/")[-1]})'
                      for t in p.component_types)
    lines.append(f'| `{p.id}` | {p.kind} | {types} | {_cell(src)} | '
                 + (f'`profiles/{ev}`' if ev else '') + ' |')
  return '\n'.join(lines) + '\n'


# --------------------------------------------------------------------------------- all


def pages() -> dict[str, str]:
  """`{path under docs/: Markdown}` of every generated page."""
  out = {
      'reference/cli.md': cli_page(),
      'reference/manifest.md': schema_page(
          'manifest', 'Manifest fields',
          'A SimulationManifest (`fibril_manifest: 1`, SPEC §3.1): the MJCF model, extra '
          'packages and profile catalogs, assemblies, overlays, open-loop scripts and the '
          'components. Each component type\'s `config:` fields are on its own page under '
          '[component types](components/index.md).',
          skip_defs=(r'^fibril_(sim|mjx)_',)),
      'reference/campaign.md': schema_page(
          'campaign', 'Campaign file fields',
          'A Monte Carlo campaign file (`fibril_campaign: 1`, SPEC §10): the manifest, '
          'per-world distributions (`vary:`), metrics, criteria, an optional scenario and '
          'controller. See the [campaign tutorial](../tutorials/campaign.md).'),
      'reference/tune.md': schema_page(
          'tune', 'Tune file fields',
          'A tune file (`fibril_tune: 1`, SPEC §11): the manifest, recordings, parameters, '
          'loss terms, windows and optimizer. See the [tuning tutorial](../tutorials/tune.md) '
          'and the [tuning guide](../guides/tuning.md).'),
      'reference/components/index.md': components_index(),
      'reference/profiles.md': profiles_page(),
  }
  for t in component_types():
    out[component_file(t)] = component_page(t)
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', required=True, help='directory to write the pages into')
  args = ap.parse_args(argv)
  out = pathlib.Path(args.out)
  for rel, text in pages().items():
    p = out / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    print(f'wrote {p}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
