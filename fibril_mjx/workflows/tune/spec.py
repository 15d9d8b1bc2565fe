"""The tune file: read, validated by its pydantic model (`fibril_mjx.config.tune.TuneModel`),
and turned into a `TuneSpec`; its recordings loaded."""

from __future__ import annotations

import dataclasses
import pathlib

from fibril_mjx.config.tune import METHODS, CsvRecording, OptimizerModel, TuneModel
from fibril_mjx.config.validation import load_yaml, validate
from fibril_mjx.errors import ConfigError, ConfigErrors, FibrilError
from fibril_mjx.io import bags, recording as rec_mod

__all__ = ['METHODS', 'LossTerm', 'TuneSpec', 'read_tune_file', 'tune_spec_from_dict']


@dataclasses.dataclass(frozen=True)
class LossTerm:
  """One loss term; `time`: `'sample'` compares the model's acquisition at each recorded
  sample time, `'arrival'` what a consumer of the model holds at each recorded arrival time
  (the only match that sees a transport latency)."""
  component: str
  field: str
  weight: tuple   # per axis
  time: str = 'sample'


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
  gradients: str = 'auto'
  free_starts: bool = False
  norm: str = 'l2'


def read_tune_file(path) -> TuneSpec:
  """Reads and checks a tune file; one-line errors naming the key."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FibrilError(f'{path}: tune file not found')
  raw = load_yaml(path)
  return tune_spec_from_dict(raw, path)


def _recordings(f: str, base: pathlib.Path, key: str, items) -> list:
  """A tune file's recordings list (validated): paths made absolute, CSV and bag entries as
  dicts with `where` (their place in the file, for later messages)."""
  out = []
  for i, it in enumerate(items or []):
    if isinstance(it, str):
      out.append(str(base / it))
    elif isinstance(it, CsvRecording):
      out.append({'csv': str(base / it.csv), 'mapping': it.mapping, 'where': f'{key}[{i}]'})
    else:
      bags.parse_topics(it.topics, f'{f}: {key}[{i}].topics')
      out.append({'bag': str(base / it.bag), 'topics': it.topics, 'where': f'{key}[{i}]'})
  return out


def tune_spec_from_dict(raw: dict, path) -> TuneSpec:
  """A `TuneSpec` from the parsed YAML of a tune file at `path` (for relative paths).

  Raises:
    ConfigErrors: every problem of the file's structure (`fibril_mjx.config.tune.TuneModel`),
      one line each.
  """
  path = pathlib.Path(path)
  f = str(path)
  if not isinstance(raw, dict):
    raise ConfigErrors([ConfigError(f, '', 'a tune file is a mapping')])
  model = validate(TuneModel, raw, file=f)
  base = path.resolve().parent
  opt = model.optimizer or OptimizerModel()
  loss = [LossTerm(t.component, t.field,
                   tuple(float(x) for x in (t.weight if isinstance(t.weight, list)
                                            else [t.weight])), t.time)
          for t in model.loss]
  return TuneSpec(
      path=f, manifest=str(base / model.manifest), train=_recordings(f, base, 'train',
                                                                     model.train),
      heldout=_recordings(f, base, 'heldout', model.heldout),
      parameters=list(raw['parameters']), loss=loss,
      window_s=None if model.windows is None else model.windows.length_s, method=opt.method,
      iterations=int(opt.iterations), learning_rate=float(opt.learning_rate),
      starts=int(opt.starts), start_spread=float(opt.start_spread), seed=int(opt.seed),
      overlay_id=str(model.overlay_id), gradients=str(opt.gradients),
      free_starts=bool(model.windows is not None and model.windows.free_starts),
      norm=str(opt.norm))


def load_recording(item, file, types=None):
  """One `recordings` entry of the tune file `file` as a `Recording`: a bag (with its topic
  mapping; `types` the components' types), a CSV with its mapping, or a recording file."""
  if isinstance(item, dict) and 'bag' in item:
    return bags.read_bag(item['bag'], item['topics'], types=types,
                         origin=f'{file}: {item["where"]}.topics')
  if isinstance(item, dict):
    if not item.get('mapping'):
      raise ConfigError(file, f'{item["where"]}.mapping', 'required for a CSV recording')
    return rec_mod.read_csv(item['csv'], item['mapping'], mapping_file=file)
  return rec_mod.read_recording(item)
