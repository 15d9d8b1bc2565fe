"""JSON Schemas of the file formats, generated from their pydantic models: the
SimulationManifest (SPEC §3.1), the campaign file and the tune file (`KINDS`).

`components[]` is a union discriminated by `type`: one entry schema per registered component
type, whose `config` is that type's pydantic config model plus `profiles`. Generated on demand
from the models in the installed package (nothing to go stale): `fibril-mjx schema`, or
`manifest_schema()` / `schema_json()` here.

A config field that a shipped profile for the type can supply (e.g. `period_s`) is not
required in the schema, since the profile layer may provide it; every other required field
of the config model stays required. Unknown keys are rejected at every level, as `load` does.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Annotated, Any, Literal, Optional, Union

import pydantic

from fibril_mjx import components
from fibril_mjx.config import paths
from fibril_mjx.config.campaign import CampaignModel
from fibril_mjx.config.manifest import LAYERS, Catalog, ManifestModel
from fibril_mjx.core import registry
from fibril_mjx.config.tune import TuneModel

SCHEMA_ID = 'https://fibril.dev/schemas/fibril_manifest-1.json'
DRAFT = 'https://json-schema.org/draft/2020-12/schema'
# kind -> (the model of a file of that kind, its schema id)
FORMATS = {
    'campaign': (CampaignModel, 'https://fibril.dev/schemas/fibril_campaign-1.json'),
    'tune': (TuneModel, 'https://fibril.dev/schemas/fibril_tune-1.json'),
}
KINDS = ('manifest', *FORMATS)


def component_config_models() -> dict[str, type[pydantic.BaseModel]]:
  """`{component type: pydantic config model}` of every type a manifest may name that has one
  (the registry's `config_model` part, once every built-in module has registered)."""
  registry.discover(components)
  models = {t: registry.get(t).config_model for t in registry.types('build')}
  return {t: m for t, m in models.items() if m is not None}


def _profile_fields(type_name: str) -> set[str]:
  """Fields that some shipped profile for `type_name` sets."""
  cat = Catalog([paths.profiles_dir()])
  return {f for p in cat.profiles.values() if type_name in p.component_types for f in p.fields}


def _def_name(type_name: str) -> str:
  return re.sub(r'[^A-Za-z0-9]+', '_', type_name).strip('_')


class _ProfilesModel(pydantic.BaseModel):
  """`config.profiles`: profile ids by layer (SPEC §3.2)."""
  model_config = pydantic.ConfigDict(extra='forbid', title='profiles')
  device: Optional[str] = None
  empirical: Optional[str] = None
  transport: Optional[str] = None


assert tuple(_ProfilesModel.model_fields) == LAYERS


@functools.lru_cache(maxsize=None)
def manifest_schema() -> dict[str, Any]:
  """The manifest JSON Schema (draft 2020-12) as a dict."""
  models = component_config_models()
  entries = []
  for type_name, cfg_model in models.items():
    name = _def_name(type_name)
    cfg = pydantic.create_model(f'{name}_config', __base__=cfg_model,
                                __doc__=cfg_model.__doc__ or f'config of {type_name}',
                                profiles=(Optional[_ProfilesModel], None))
    entry = pydantic.create_model(
        name, __doc__=f'A `{type_name}` component.',
        __config__=pydantic.ConfigDict(extra='forbid'),
        id=(str, pydantic.Field(min_length=1)),
        type=(Literal[type_name], ...),
        config=(cfg, {}))
    entries.append(entry)
  union = Union[tuple(entries)] if len(entries) > 1 else entries[0]
  component = pydantic.Field(discriminator='type') if len(entries) > 1 else pydantic.Field()

  schema_model = pydantic.create_model(
      'SimulationManifest', __base__=ManifestModel,
      __doc__='Fibril SimulationManifest (SPEC §3.1).',
      components=(list[Annotated[union, component]], pydantic.Field(default_factory=list)))
  schema = schema_model.model_json_schema(mode='validation')
  defs = schema.get('$defs', {})
  for type_name, cfg_model in models.items():
    cfg_def = defs.get(f'{_def_name(type_name)}_config')
    if cfg_def is None:
      continue
    optional = _profile_fields(type_name)
    req = [f for f in cfg_def.get('required', []) if f not in optional]
    if req:
      cfg_def['required'] = req
    else:
      cfg_def.pop('required', None)
  out = {'$schema': DRAFT, '$id': SCHEMA_ID}
  out.update(schema)
  return out


@functools.lru_cache(maxsize=None)
def file_schema(kind: str) -> dict[str, Any]:
  """The JSON Schema (draft 2020-12) of a file of `kind` (one of `KINDS`) as a dict."""
  if kind == 'manifest':
    return manifest_schema()
  if kind not in FORMATS:
    raise ValueError(f'unknown schema kind {kind!r}; kinds: {", ".join(KINDS)}')
  model, schema_id = FORMATS[kind]
  out = {'$schema': DRAFT, '$id': schema_id}
  out.update(model.model_json_schema(mode='validation'))
  return out


def schema_json(kind: str = 'manifest') -> str:
  """`file_schema(kind)` as indented JSON text (what `fibril-mjx schema [--kind KIND]`
  prints)."""
  return json.dumps(file_schema(kind), indent=2, sort_keys=False) + '\n'
