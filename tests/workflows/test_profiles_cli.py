"""`fibril-mjx profiles list|show NAME` (SPEC §9): every shipped profile listed with kind and
component types; `show` gives every field's value and the provenance that applies to it."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from fibril_mjx import cli
from fibril_mjx.workflows import profiles as profiles_cli
from fibril_mjx.errors import FibrilError
from fibril_mjx.config.manifest import Catalog

REPO = pathlib.Path(__file__).resolve().parents[2]
SHIPPED = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((REPO / 'profiles').glob('*.yaml'))}


def test_list_names_every_shipped_profile(capsys):
  assert cli.main(['profiles', 'list']) == 0
  rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
  assert set(rows) == {d['id'] for d in SHIPPED.values()}
  for d in SHIPPED.values():
    assert rows[d['id']][1] == d['kind']
    assert rows[d['id']][-1].endswith(f'{d["id"]}.yaml')


@pytest.mark.parametrize('name', sorted(d['id'] for d in SHIPPED.values()))
def test_show_every_field_with_provenance(name, capsys):
  doc = next(d for d in SHIPPED.values() if d['id'] == name)
  assert cli.main(['profiles', 'show', name]) == 0
  out = capsys.readouterr().out
  assert f'  kind: {doc["kind"]}' in out
  assert f'  component types: {", ".join(doc["component_types"])}' in out
  lines = out.splitlines()
  start = lines.index('  fields (value, then where it came from):')
  body = lines[start + 1:]
  for fname, value in doc['fields'].items():
    i = body.index(f'    {fname} = {value!r}')
    prov = []
    for line in body[i + 1:]:
      if not line.startswith('      <- '):
        break
      prov.append(line)
    assert prov, f'{name}.{fname}: no provenance line'
    per_field = (doc['provenance'].get('fields') or {})
    if fname in per_field:
      assert f'      <- provenance.fields.{fname}: {per_field[fname]}' in prov


def test_provenance_from_notes_naming_the_field(tmp_path):
  (tmp_path / 'p.yaml').write_text(yaml.safe_dump({
      'id': 'synthetic', 'kind': 'transport', 'component_types': ['fibril_sim/motor'],
      'provenance': {
          'source': 'bench',
          'fields': {'feedback_period_s': 'datasheet p.3'},
          'notes': ['command_latency_s = 1e-4: one CAN frame', 'unrelated note',
                    'see command_latency_s_extra'],
          'assumptions': ['command_latency_s excludes queueing']},
      'fields': {'command_latency_s': 1e-4, 'feedback_period_s': 0.001,
                 'application_period_s': 0.001}}, sort_keys=False))
  p = Catalog([tmp_path]).profiles['synthetic']
  assert profiles_cli.field_provenance(p, 'command_latency_s') == [
      ('provenance.notes[0]', 'command_latency_s = 1e-4: one CAN frame'),
      ('provenance.assumptions[0]', 'command_latency_s excludes queueing')]
  assert profiles_cli.field_provenance(p, 'feedback_period_s') == [
      ('provenance.fields.feedback_period_s', 'datasheet p.3')]
  # a field named by no statement falls back to the profile-wide source
  assert profiles_cli.field_provenance(p, 'application_period_s') == [
      ('provenance.source (profile-wide)', 'bench')]


def test_manifest_profile_paths(tmp_path, capsys):
  (tmp_path / 'profiles').mkdir()
  (tmp_path / 'profiles' / 'mine.yaml').write_text(yaml.safe_dump({
      'id': 'my_unit', 'kind': 'empirical', 'component_types': ['fibril_sim/ahrs'],
      'provenance': {'source': 'bench recording 2024-01'}, 'fields': {'latency_s': 0.01}}))
  m = yaml.safe_load((REPO / 'manifests' / 'ahrs_turntable.yaml').read_text())
  m['profile_paths'] = ['./profiles']
  (tmp_path / 'm.yaml').write_text(yaml.safe_dump(m))
  assert cli.main(['profiles', 'show', 'my_unit', '--manifest', str(tmp_path / 'm.yaml')]) == 0
  assert ('    latency_s = 0.01\n      <- provenance.source (profile-wide): bench recording '
          '2024-01') in capsys.readouterr().out


def test_errors(capsys):
  with pytest.raises(FibrilError) as e:
    profiles_cli.render('show', 'r6093u_nominl')
  assert str(e.value).startswith("profiles: 'r6093u_nominl': unknown profile (did you mean "
                                 "'r6093u_nominal'?); profiles: bmi088_nominal, ")
  with pytest.raises(FibrilError) as e:
    profiles_cli.render('show', None)
  assert str(e.value).startswith('profiles show: a profile id is required; profiles: ')
  with pytest.raises(FibrilError) as e:
    profiles_cli.render('list', 'x')
  assert str(e.value) == "profiles list: 'x': list takes no profile id (use show)"
  assert cli.main(['profiles', 'show', 'nope']) == 2
  assert capsys.readouterr().err.startswith("error: profiles: 'nope': unknown profile")
