"""Manifest JSON Schema (`fibril-mjx schema`): a valid draft 2020-12 schema, generated from the
pydantic models with component configs discriminated by `type`; every example manifest
validates with `jsonschema`, and mutated manifests are rejected (as `load` rejects them)."""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys

import jsonschema
import pytest
import yaml

import fibril_mjx
from fibril_mjx import cli
from fibril_mjx.workflows import schema

pytestmark = pytest.mark.usefixtures('plain_messages')

REPO = pathlib.Path(__file__).resolve().parents[2]


def example_manifests() -> list[pathlib.Path]:
  """Every YAML file under manifests/ (recursively) that is a SimulationManifest."""
  out = []
  for p in sorted((REPO / 'manifests').rglob('*.y*ml')):
    doc = yaml.safe_load(p.read_text())
    if isinstance(doc, dict) and 'fibril_manifest' in doc:
      out.append(p)
  return out


MANIFESTS = example_manifests()


@pytest.fixture(scope='module')
def validator():
  s = schema.manifest_schema()
  jsonschema.Draft202012Validator.check_schema(s)
  return jsonschema.Draft202012Validator(s)


def test_schema_lists_every_registered_type(validator):
  mapping = validator.schema['properties']['components']['items']['discriminator']['mapping']
  assert set(mapping) == set(schema.component_config_models())
  assert len(mapping) >= 6


def test_cli_prints_the_schema(capsys, tmp_path):
  assert cli.main(['schema']) == 0
  assert json.loads(capsys.readouterr().out) == schema.manifest_schema()
  assert cli.main(['schema', '--out', str(tmp_path / 's.json')]) == 0
  assert json.loads((tmp_path / 's.json').read_text()) == schema.manifest_schema()


def test_found_from_another_directory(tmp_path):
  """Generated from the installed package: no file beside the sources is needed."""
  r = subprocess.run([sys.executable, '-c', 'from fibril_mjx.workflows import schema; '
                      'print(len(schema.schema_json()))'], cwd=tmp_path, capture_output=True,
                     text=True, check=True)
  assert int(r.stdout) > 1000


@pytest.mark.parametrize('path', MANIFESTS, ids=[str(p.relative_to(REPO)) for p in MANIFESTS])
def test_example_manifest_validates(path, validator):
  errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
  assert not errors, [e.message for e in errors]


def _constrained_field(validator, type_name):
  """A config field of `type_name` with a lower bound, and a value breaking it."""
  defs = validator.schema['$defs']
  ref = schema._def_name(type_name) + '_config'
  for name, prop in defs[ref]['properties'].items():
    for branch in [prop] + prop.get('anyOf', []):
      if 'exclusiveMinimum' in branch:
        return name, branch['exclusiveMinimum'] - 1
      if 'minimum' in branch:
        return name, branch['minimum'] - 1
  return None


def mutations(doc, validator):
  """`(description, mutated manifest)`: each must be rejected."""
  def mutate(fn):
    d = copy.deepcopy(doc)
    fn(d)
    return d
  c0 = doc['components'][0]
  yield 'unknown top-level key', mutate(lambda d: d.update(componets=[]))
  yield 'schema version', mutate(lambda d: d.update(fibril_manifest=2))
  yield 'model missing', mutate(lambda d: d.pop('model'))
  yield 'unknown component type', mutate(
      lambda d: d['components'][0].update(type='fibril_sim/nope'))
  yield 'empty component id', mutate(lambda d: d['components'][0].update(id=''))
  yield 'unknown component key', mutate(lambda d: d['components'][0].update(configs={}))
  yield 'unknown config field', mutate(
      lambda d: d['components'][0].setdefault('config', {}).update(bogus_field=1))
  yield 'unknown profile layer', mutate(
      lambda d: d['components'][0].setdefault('config', {}).update(profiles={'devise': 'x'}))
  yield 'config not a mapping', mutate(lambda d: d['components'][0].update(config=[1]))
  bound = _constrained_field(validator, c0['type'])
  if bound:
    yield f'{bound[0]} below its bound', mutate(
        lambda d: d['components'][0].setdefault('config', {}).update({bound[0]: bound[1]}))
  for i, c in enumerate(doc['components']):
    if c['type'] == 'fibril_sim/ahrs':
      yield 'vector of 2', mutate(
          lambda d: d['components'][i]['config'].update(angular_velocity_bias=[0, 0]))
  yield 'string where a number goes', mutate(lambda d: d.update(
      actuator_script=[{'actuator': 'a', 'amplitude': 'big'}]))


@pytest.mark.parametrize('path', MANIFESTS, ids=[str(p.relative_to(REPO)) for p in MANIFESTS])
def test_mutated_manifests_are_rejected(path, validator):
  doc = yaml.safe_load(path.read_text())
  n = 0
  for what, bad in mutations(doc, validator):
    assert list(validator.iter_errors(bad)), f'{path.name}: {what} accepted'
    n += 1
  assert n >= 9


def test_required_fields(validator):
  """A required config field no shipped profile supplies stays required; one a profile of the
  type supplies (so the profile layer may provide it) does not."""
  defs = validator.schema['$defs']
  enc = defs['fibril_sim_encoder_config']
  assert 'joint' in enc['required']
  assert 'period_s' not in defs['fibril_sim_ahrs_config'].get('required', [])
  bad = {'fibril_manifest': 1, 'model': 'm.xml',
         'components': [{'id': 'a', 'type': 'fibril_sim/encoder', 'config': {}}]}
  assert "'joint' is a required property" in all_messages(validator.iter_errors(bad))
  # an AHRS names its MuJoCo sensors or a site: neither is required alone
  assert 'orientation_sensor' not in defs['fibril_sim_ahrs_config'].get('required', [])
  assert 'site' in defs['fibril_sim_ahrs_config']['properties']


def all_messages(errors) -> list[str]:
  """Messages of the errors and of their `oneOf` branches (jsonschema nests those)."""
  out = []
  for e in errors:
    out.append(e.message)
    out.extend(all_messages(e.context or ()))
  return out


@pytest.mark.parametrize('mutation, rule', [
    (lambda d: d['components'][0].update(type='fibril_sim/ahrz'), 'unknown component type'),
    (lambda d: d['components'][0]['config'].update(bogus_field=1), 'unknown field'),
])
def test_load_rejects_what_the_schema_rejects(tmp_path, validator, mutation, rule):
  doc = yaml.safe_load((REPO / 'manifests' / 'ahrs_turntable.yaml').read_text())
  mutation(doc)
  assert list(validator.iter_errors(doc))
  (tmp_path / 'm.yaml').write_text(yaml.safe_dump(doc))
  with pytest.raises(fibril_mjx.FibrilError, match=rule):
    fibril_mjx.load(tmp_path / 'm.yaml')


@pytest.mark.parametrize('kind, marker', [('campaign', 'fibril_campaign'),
                                          ('tune', 'fibril_tune')])
def test_campaign_and_tune_schemas(kind, marker, capsys, tmp_path):
  """`fibril-mjx schema --kind campaign|tune`: valid draft 2020-12 schemas of those files, from
  their pydantic models; the shipped files validate, an unknown key and a wrong version do
  not."""
  s = schema.file_schema(kind)
  jsonschema.Draft202012Validator.check_schema(s)
  assert s['$id'].endswith(f'{marker}-1.json') and s['$schema'] == schema.DRAFT
  assert cli.main(['schema', '--kind', kind]) == 0
  assert json.loads(capsys.readouterr().out) == s
  assert cli.main(['schema', '--kind', kind, '--out', str(tmp_path / 's.json')]) == 0
  assert json.loads((tmp_path / 's.json').read_text()) == s
  v = jsonschema.Draft202012Validator(s)
  docs = [yaml.safe_load(p.read_text()) for p in sorted((REPO / 'manifests').rglob('*.y*ml'))]
  docs = [d for d in docs if isinstance(d, dict) and marker in d]
  assert docs
  for doc in docs:
    assert not [e.message for e in v.iter_errors(doc)]
    assert list(v.iter_errors({**doc, 'unknown_key': 1}))
    assert list(v.iter_errors({**doc, marker: 2}))


def test_schema_kinds():
  assert schema.KINDS == ('manifest', 'campaign', 'tune')
  assert schema.file_schema('manifest') == schema.manifest_schema()
  assert schema.schema_json() == schema.schema_json('manifest')
  with pytest.raises(ValueError, match='unknown schema kind'):
    schema.file_schema('overlay')
