"""The tune file (`fibril_tune: 1`) as pydantic models: its keys, recordings, fitted parameters,
loss terms, windows and optimizer (`TuneModel`, whose JSON Schema `fibril-mjx schema --kind
tune` prints).

Each rule words its own message, one line naming its path (`parameters[2].bounds = [1, 0]:
required: [lower, upper], lower < upper`). What needs the built manifest or the recordings
(component ids, fields, MJCF names, bag topics) is checked later, by the tune workflow.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Optional, Union

import pydantic
from pydantic import Discriminator, Tag

from fibril_mjx.config.validation import Strict, check, is_number
from fibril_mjx.errors import did_you_mean

METHODS = ('gauss_newton', 'adam', 'lbfgs')
GRADIENTS = ('auto', 'fd', 'exact')
TOP_KEYS = ('fibril_tune', 'manifest', 'train', 'heldout', 'parameters', 'loss', 'windows',
            'optimizer', 'overlay_id')
OPTIMIZER_KEYS = ('method', 'iterations', 'learning_rate', 'starts', 'start_spread', 'seed',
                  'gradients', 'norm')
NORMS = ('l2', 'l1')
RECORDING_RULE = ('a recording path, {csv: FILE, mapping: {...}} or {bag: PATH, topics: '
                  '{ID: TOPIC}}')


class _UnknownKey:
  """`unknown key` (with a did-you-mean over the model's keys) for a key a model lacks."""

  @classmethod
  def unknown_key_rule(cls, key: str) -> str:
    return 'unknown key' + did_you_mean(key, list(cls.model_fields))


# ------------------------------------------------------------------------------- recordings


class CsvRecording(Strict):
  """A CSV log with its column mapping (`fibril_mjx.io.recording.read_csv`)."""
  model_config = pydantic.ConfigDict(extra='allow')
  csv: str
  mapping: Optional[dict[str, Any]] = None


class BagRecording(Strict):
  """A ROS bag (rosbag2 directory or ROS 1 `.bag`) and its topics by component id."""
  bag: str
  topics: Annotated[Union[str, dict[str, Any]], check(
      bool, 'required for a bag: {ID: TOPIC}, e.g. {imu: /imu/data}')]

  @classmethod
  def unknown_key_rule(cls, key: str) -> str:
    return 'unknown key (a bag entry has bag: PATH and topics: {ID: TOPIC})'

  @classmethod
  def missing_rule(cls, key: str) -> str:
    return 'required for a bag: {ID: TOPIC}, e.g. {imu: /imu/data}'


def _recording_kind(v) -> str:
  if isinstance(v, str):
    return 'path'
  return 'csv' if 'csv' in v else 'bag'


Recording = Annotated[
    Union[Annotated[str, Tag('path')], Annotated[CsvRecording, Tag('csv')],
          Annotated[BagRecording, Tag('bag')]],
    Discriminator(_recording_kind),
    check(lambda v: isinstance(v, str) or isinstance(v, dict) and ('csv' in v or 'bag' in v),
           RECORDING_RULE)]
Recordings = Annotated[list[Recording], check(lambda v: isinstance(v, list),
                                               'must be a list of recordings')]


# ------------------------------------------------------------------------------- parameters


def _bounds_ok(b) -> bool:
  return isinstance(b, list) and len(b) == 2 and all(is_number(x) for x in b) and b[0] < b[1]


class ParameterModel(_UnknownKey, Strict):
  """One fitted quantity: a MJCF attribute (`mjcf: ELEMENT:NAME.ATTRIBUTE`) or a component
  field (`component: ID`, `field: FIELD`, optional `index`), with its bounds."""
  mjcf: Optional[str] = None
  component: Optional[str] = None
  field: Optional[str] = None
  index: Optional[Union[int, list[int]]] = None
  log: bool = False
  bounds: Annotated[tuple[float, float], check(_bounds_ok, 'required: [lower, upper], '
                                                'lower < upper')]
  init: Optional[Union[float, list[float]]] = None

  @classmethod
  def missing_rule(cls, key: str) -> str:
    return 'required: [lower, upper], lower < upper' if key == 'bounds' else 'required'

  @pydantic.model_validator(mode='before')
  @classmethod
  def _one_target(cls, v):
    if not isinstance(v, dict) or ('mjcf' in v) == ('component' in v):
      raise ValueError('needs either mjcf: ELEMENT:NAME.ATTRIBUTE or component: ID with '
                       'field: FIELD')
    return v

  @pydantic.field_validator('bounds')
  @classmethod
  def _log_positive(cls, b, info: pydantic.ValidationInfo):
    if info.data.get('log') and b[0] <= 0:
      raise ValueError('log: true needs a positive lower bound')
    return b


class LossModel(_UnknownKey, Strict):
  """One loss term: a component's delivered field against the recorded one, `weight` × the
  residual (one weight, or one per axis)."""
  component: str
  field: str
  weight: Union[float, list[float]] = 1.0
  time: Annotated[Literal['sample', 'arrival'], check(
      lambda v: v in ('sample', 'arrival'), 'one of sample (the model\'s acquisition at the '
      'recorded sample time), arrival (what a consumer holds at the recorded arrival time)')
  ] = 'sample'

  @pydantic.model_validator(mode='before')
  @classmethod
  def _target(cls, v):
    if not isinstance(v, dict) or 'component' not in v or 'field' not in v:
      raise ValueError('needs component: ID and field: FIELD')
    return v


class WindowsModel(_UnknownKey, Strict):
  """Multiple shooting: recordings cut into windows of `length_s` (default: one window);
  `free_starts`: each later window's start state is a free variable with a continuity
  residual (true multiple shooting, `gradients: fd`)."""
  length_s: Optional[Annotated[float, check(lambda v: is_number(v) and v > 0,
                                             'a positive number of seconds')]] = None
  free_starts: bool = False

  @pydantic.model_validator(mode='after')
  def _free_needs_length(self):
    if self.free_starts and self.length_s is None:
      raise ValueError('free_starts: true needs length_s (the window length)')
    return self


class OptimizerModel(_UnknownKey, Strict):
  """The optimizer and its settings."""
  method: Annotated[Literal[METHODS], check(lambda v: v in METHODS,
                                             f'one of {", ".join(METHODS)}')] = 'gauss_newton'
  iterations: int = 30
  learning_rate: float = 0.05
  starts: int = 1
  start_spread: float = 0.3
  seed: int = 0
  gradients: Annotated[Literal[GRADIENTS], check(lambda v: v in GRADIENTS,
                                                 f'one of {", ".join(GRADIENTS)}')] = 'auto'
  norm: Annotated[Literal[NORMS], check(lambda v: v in NORMS,
                                         f'one of {", ".join(NORMS)}')] = 'l2'


def _nonempty(v) -> bool:
  return bool(v)


class TuneModel(_UnknownKey, Strict):
  """A tune file: the manifest, the recordings, what is fitted and against what."""
  fibril_tune: Annotated[Literal[1], check(lambda v: v == 1 and not isinstance(v, bool),
                                            'required: 1 (schema version)')]
  manifest: Annotated[str, check(_nonempty, 'required')]
  train: Annotated[Recordings, check(_nonempty, 'required')]
  heldout: Optional[Recordings] = None
  parameters: Annotated[list[ParameterModel], check(_nonempty, 'required')]
  loss: Annotated[list[LossModel], check(_nonempty, 'required')]
  windows: Optional[WindowsModel] = None
  optimizer: Optional[OptimizerModel] = None
  overlay_id: str = 'tuned'

  _MISSING: ClassVar[dict] = {'fibril_tune': 'required: 1 (schema version)'}

  @classmethod
  def missing_rule(cls, key: str) -> str:
    return cls._MISSING.get(key, 'required')


assert tuple(TuneModel.model_fields) == TOP_KEYS
assert tuple(OptimizerModel.model_fields) == OPTIMIZER_KEYS
