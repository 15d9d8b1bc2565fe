"""The tune file: its keys, its parsed form (`TuneSpec`), and its recordings."""

from __future__ import annotations

import dataclasses
import pathlib

from fibril_mjx.io import recording as rec_mod
from fibril_mjx.errors import ConfigError, FibrilError, did_you_mean

METHODS = ('gauss_newton', 'adam', 'lbfgs')


@dataclasses.dataclass(frozen=True)
class LossTerm:
  component: str
  field: str
  weight: tuple   # per axis


@dataclasses.dataclass
class TuneSpec:
  """A parsed tune file (`read_tune_file`); paths are absolute."""
  path: str
  manifest: str
  train: list
  heldout: list
  parameters: list     # raw dict entries
  loss: list
  window_s: float | None = None
  method: str = 'gauss_newton'
  iterations: int = 30
  learning_rate: float = 0.05
  starts: int = 1
  start_spread: float = 0.3
  seed: int = 0
  overlay_id: str = 'tuned'


_TOP = ('fibril_tune', 'manifest', 'train', 'heldout', 'parameters', 'loss', 'windows',
        'optimizer', 'overlay_id')
_OPT = ('method', 'iterations', 'learning_rate', 'starts', 'start_spread', 'seed')


def read_tune_file(path) -> TuneSpec:
  """Reads and checks a tune file; one-line `ConfigError`s naming the key."""
  from fibril_mjx.config.validation import load_yaml
  path = pathlib.Path(path)
  if not path.is_file():
    raise FibrilError(f'{path}: tune file not found')
  raw = load_yaml(path)
  return tune_spec_from_dict(raw, path)


def tune_spec_from_dict(raw: dict, path) -> TuneSpec:
  """A `TuneSpec` from the parsed YAML of a tune file at `path` (for relative paths)."""
  path = pathlib.Path(path)
  f = str(path)
  if not isinstance(raw, dict):
    raise ConfigError(f, '', 'a tune file is a mapping')
  for k in raw:
    if k not in _TOP:
      raise ConfigError(f, k, 'unknown key' + did_you_mean(k, _TOP))
  if raw.get('fibril_tune') != 1:
    raise ConfigError(f, 'fibril_tune', 'required: 1 (schema version)', raw.get('fibril_tune'))
  base = path.resolve().parent
  for k in ('manifest', 'train', 'parameters', 'loss'):
    if not raw.get(k):
      raise ConfigError(f, k, 'required')

  def recs(key):
    items = raw.get(key) or []
    if not isinstance(items, list):
      raise ConfigError(f, key, 'must be a list of recordings', items)
    out = []
    for i, it in enumerate(items):
      if isinstance(it, str):
        out.append(str(base / it))
      elif isinstance(it, dict) and 'csv' in it:
        out.append({'csv': str(base / it['csv']), 'mapping': it.get('mapping'),
                    'where': f'{key}[{i}]'})
      elif isinstance(it, dict) and 'bag' in it:
        unknown = set(it) - {'bag', 'topics'}
        if unknown:
          raise ConfigError(f, f'{key}[{i}].{sorted(unknown)[0]}', 'unknown key (a bag entry '
                            'has bag: PATH and topics: {ID: TOPIC})')
        if not it.get('topics'):
          raise ConfigError(f, f'{key}[{i}].topics', 'required for a bag: {ID: TOPIC}, e.g. '
                            '{imu: /imu/data}')
        from fibril_mjx.io import bags
        bags.parse_topics(it['topics'], f'{f}: {key}[{i}].topics')
        out.append({'bag': str(base / it['bag']), 'topics': it['topics'],
                    'where': f'{key}[{i}]'})
      else:
        raise ConfigError(f, f'{key}[{i}]', 'a recording path, {csv: FILE, mapping: {...}} or '
                          '{bag: PATH, topics: {ID: TOPIC}}', it)
    return out

  win = raw.get('windows') or {}
  opt = raw.get('optimizer') or {}
  for k in opt:
    if k not in _OPT:
      raise ConfigError(f, f'optimizer.{k}', 'unknown key' + did_you_mean(k, _OPT))
  method = opt.get('method', 'gauss_newton')
  if method not in METHODS:
    raise ConfigError(f, 'optimizer.method', f'one of {", ".join(METHODS)}', method)
  for i, p in enumerate(raw['parameters']):
    if not isinstance(p, dict) or ('mjcf' in p) == ('component' in p):
      raise ConfigError(f, f'parameters[{i}]', 'needs either mjcf: ELEMENT:NAME.ATTRIBUTE or '
                        'component: ID with field: FIELD', p)
    b = p.get('bounds')
    if not (isinstance(b, list) and len(b) == 2 and b[0] < b[1]):
      raise ConfigError(f, f'parameters[{i}].bounds', 'required: [lower, upper], lower < upper',
                        b)
    if p.get('log') and b[0] <= 0:
      raise ConfigError(f, f'parameters[{i}].bounds', 'log: true needs a positive lower bound',
                        b)
  loss = []
  for i, t in enumerate(raw['loss']):
    if not isinstance(t, dict) or 'component' not in t or 'field' not in t:
      raise ConfigError(f, f'loss[{i}]', 'needs component: ID and field: FIELD', t)
    w = t.get('weight', 1.0)
    loss.append(LossTerm(t['component'], t['field'],
                         tuple(float(x) for x in (w if isinstance(w, list) else [w]))))
  length = win.get('length_s')
  if length is not None and not (isinstance(length, (int, float)) and length > 0):
    raise ConfigError(f, 'windows.length_s', 'a positive number of seconds', length)
  return TuneSpec(
      path=f, manifest=str(base / raw['manifest']), train=recs('train'),
      heldout=recs('heldout'), parameters=list(raw['parameters']), loss=loss,
      window_s=length, method=method, iterations=int(opt.get('iterations', 30)),
      learning_rate=float(opt.get('learning_rate', 0.05)), starts=int(opt.get('starts', 1)),
      start_spread=float(opt.get('start_spread', 0.3)), seed=int(opt.get('seed', 0)),
      overlay_id=str(raw.get('overlay_id', 'tuned')))


def _load_recording(item, file, types=None):
  if isinstance(item, dict) and 'bag' in item:
    from fibril_mjx.io import bags
    return bags.read_bag(item['bag'], item['topics'], types=types,
                         origin=f'{file}: {item["where"]}.topics')
  if isinstance(item, dict):
    if not item.get('mapping'):
      raise ConfigError(file, f'{item["where"]}.mapping', 'required for a CSV recording')
    return rec_mod.read_csv(item['csv'], item['mapping'], mapping_file=file)
  return rec_mod.read_recording(item)
