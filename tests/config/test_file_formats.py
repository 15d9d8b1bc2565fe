"""fibril_mjx.config.campaign / config.tune: the campaign and tune files' pydantic models. Every
rule is broken once, alone, and its one line is asserted in full (file, path, value, rule);
a valid file of each kind passes and keeps its values; the JSON Schemas are valid and accept
the shipped examples."""

from __future__ import annotations

import copy
import pathlib

import jsonschema
import pytest
import yaml

from fibril_mjx.config.campaign import CampaignModel
from fibril_mjx.config.tune import TuneModel
from fibril_mjx.config.validation import validate
from fibril_mjx.errors import ConfigErrors

pytestmark = pytest.mark.usefixtures('plain_messages')

REPO = pathlib.Path(__file__).resolve().parents[2]
F = 'c.yaml'

CAMPAIGN = {
    'fibril_campaign': 1, 'manifest': 'manifest.yaml', 'worlds': 8, 'seed': 3,
    'duration_s': 0.06, 'chunk_worlds': 4,
    'scenario': {'actuator_script': [{'actuator': 'yaw_motor', 'amplitude': 0.0}]},
    'vary': {
        'a.noise': {'dist': 'lognormal', 'mu': -4.0, 'sigma': 0.5},
        'a.bias': {'dist': 'normal', 'mean': 0.0, 'std': [0.01, 0.01, 0.02]},
        'body:b.mass': {'dist': 'uniform', 'low': 0.5, 'high': 2.0, 'relative': True},
        'joint:j.damping': {'dist': 'truncated_normal', 'mean': 0.2, 'std': 0.1, 'low': 0.05,
                            'high': 0.5},
        'a.period_s': {'dist': 'choice', 'values': [0.004, 0.008], 'weights': [1, 3]}},
    'metrics': ['a.rms', {'name': 'twice', 'expr': '2 * a.rms'}],
    'criteria': {'ok': {'metric': 'a.rms', 'max': 0.5}, 'lo': {'metric': 'twice', 'min': 0}},
}


def _set(doc, path, value):
  """`doc` with `path` (a tuple of keys) set to `value`; `...` removes it."""
  doc = copy.deepcopy(doc)
  d = doc
  for k in path[:-1]:
    d = d[k]
  if value is ...:
    del d[path[-1]]
  else:
    d[path[-1]] = value
  return doc


def _lines(model, doc):
  try:
    validate(model, doc, file=F)
  except ConfigErrors as e:
    return [str(x) for x in e.errors]
  return []


V = ('vary',)
CAMPAIGN_RULES = [
    (('fibril_campaign',), 2, 'fibril_campaign = 2: must be 1 (the schema version)'),
    (('fibril_campaign',), ..., 'fibril_campaign: must be 1 (the schema version)'),
    (('manifest',), 3, 'manifest = 3: required: the manifest path, relative to the campaign '
     'file'),
    (('worlds',), 0, 'worlds = 0: must be a positive integer'),
    (('worlds',), True, 'worlds = True: must be a positive integer'),
    (('chunk_worlds',), 2.5, 'chunk_worlds = 2.5: must be a positive integer'),
    (('seed',), -1, 'seed = -1: must be an integer in [0, 2**31)'),
    (('duration_s',), 0, 'duration_s = 0: must be a number > 0 (seconds)'),
    (('wrolds',), 3, "wrolds = 3: unknown key (did you mean 'worlds'?)"),
    (('scenario',), {}, 'scenario = {}: must be a mapping with actuator_script: and/or '
     'command_script: (entry lists as in the manifest)'),
    (('scenario', 'actuator_scripts'), [], "scenario.actuator_scripts = []: unknown key; "
     "expected actuator_script or command_script (did you mean 'actuator_script'?)"),
    (('scenario', 'command_script'), 3, "scenario.command_script = 3: must be a list of "
     "entries as in the manifest's command_script"),
    (('scenario', 'actuator_script', 0, 'amplitude'), 'big',
     "scenario.actuator_script[0].amplitude = 'big': input should be a valid number, unable to "
     "parse string as a number"),
    (V, [1], 'vary = [1]: must be a mapping field path → distribution'),
    (V + ('x.y',), 3, 'vary.x.y = 3: must be a mapping with dist: and its parameters'),
    (V + ('a.bias', 'dist'), 'gaussian', "vary.a.bias.dist = 'gaussian': must be one of "
     "uniform, normal, truncated_normal, lognormal, choice"),
    (V + ('a.bias', 'dist'), ..., 'vary.a.bias.dist = None: must be one of uniform, normal, '
     'truncated_normal, lognormal, choice'),
    (V + ('a.noise', 'scale'), 2, 'vary.a.noise.scale = 2: unknown key for dist lognormal; '
     'expected mu, sigma'),
    (V + ('a.noise', 'weights'), [1], 'vary.a.noise.weights = [1]: only for dist choice'),
    (V + ('a.noise', 'sigma'), ..., 'vary.a.noise.sigma: required by dist lognormal'),
    (V + ('a.noise', 'sigma'), -1, 'vary.a.noise.sigma = -1: sigma must be >= 0'),
    (V + ('a.noise', 'relative'), 'yes', "vary.a.noise.relative = 'yes': must be true or false"),
    (V + ('a.bias', 'mean'), 'x', "vary.a.bias.mean = 'x': must be a finite number or a "
     "per-axis list of finite numbers"),
    (V + ('a.bias', 'mean'), [0, 1], "vary.a.bias = {'dist': 'normal', 'mean': [0, 1], 'std': "
     "[0.01, 0.01, 0.02]}: per-axis lists must have one length"),
    (V + ('a.bias', 'std'), [0.1, -1, 0.1], 'vary.a.bias.std = [0.1, -1, 0.1]: std must be '
     '>= 0'),
    (V + ('body:b.mass', 'high'), 0.1, 'vary.body:b.mass.high = 0.1: low must be <= high'),
    (V + ('joint:j.damping', 'std'), 0, 'vary.joint:j.damping.std = 0: std must be > 0'),
    (V + ('joint:j.damping', 'high'), 0.05, 'vary.joint:j.damping.high = 0.05: low must be < '
     'high'),
    (V + ('a.period_s', 'values'), [], 'vary.a.period_s.values = []: must be a non-empty list'),
    (V + ('a.period_s', 'weights'), [1], 'vary.a.period_s.weights = [1]: must be 2 numbers >= '
     '0 with a positive sum'),
    (('metrics',), 'a.rms', "metrics = 'a.rms': must be a list of metric names or {name: ..., "
     "expr: ...}"),
    (('metrics', 0), 3, 'metrics[0] = 3: must be a metric name or {name: NAME, expr: '
     'EXPRESSION}'),
    (('metrics', 1, 'expr'), '2 *', "metrics[1].expr = '2 *': not a valid expression"),
    (('metrics', 1, 'expr'), 'a[0]', "metrics[1].expr = 'a[0]': only numbers, metric names, "
     "+ - * / ** and abs/min/max/sqrt are allowed"),
    (('criteria',), [], 'criteria = []: must be a mapping name → {metric, max|min}'),
    (('criteria', 'ok'), {'max': 1}, "criteria.ok = {'max': 1}: must be {metric: NAME, max: X} "
     "and/or min: X"),
    (('criteria', 'ok', 'mix'), 1, "criteria.ok.mix = 1: unknown key (metric, min, max) (did "
     "you mean 'min'?)"),
    (('criteria', 'ok', 'max'), 'u', "criteria.ok.max = 'u': must be a finite number"),
    (('criteria', 'ok', 'max'), ..., "criteria.ok = {'metric': 'a.rms'}: needs max: and/or "
     "min:"),
]


def test_valid_campaign_keeps_its_values():
  m = validate(CampaignModel, CAMPAIGN, file=F)
  assert m.worlds == 8 and m.seed == 3 and m.chunk_worlds == 4 and m.duration_s == 0.06
  assert m.vary['a.bias'].std == [0.01, 0.01, 0.02] and m.vary['body:b.mass'].relative is True
  assert m.vary['a.period_s'].values == [0.004, 0.008] and m.vary['a.period_s'].weights == [1, 3]
  assert m.metrics[0] == 'a.rms' and m.metrics[1].expr == '2 * a.rms'
  assert m.criteria['lo'].min == 0 and m.criteria['lo'].max is None
  defaults = validate(CampaignModel, {k: CAMPAIGN[k] for k in ('fibril_campaign', 'manifest',
                                                               'worlds', 'duration_s')}, file=F)
  assert defaults.seed == 0 and defaults.chunk_worlds == 1024 and defaults.vary == {}


@pytest.mark.parametrize('path, value, line', CAMPAIGN_RULES,
                         ids=[r[2].split(':')[-1].strip()[:40] + f'-{i}'
                              for i, r in enumerate(CAMPAIGN_RULES)])
def test_campaign_rule(path, value, line):
  assert _lines(CampaignModel, _set(CAMPAIGN, path, value)) == [f'{F}: {line}']


TUNE = {
    'fibril_tune': 1, 'manifest': 'm.yaml',
    'train': ['train.npz', {'csv': 'log.csv', 'mapping': {'component': 'imu'}},
              {'bag': 'run_0', 'topics': {'imu': '/imu/data'}}],
    'heldout': ['heldout.npz'],
    'parameters': [{'mjcf': 'joint:yaw.damping', 'bounds': [0.01, 1.0], 'log': True},
                   {'component': 'imu', 'field': 'bias', 'index': 2, 'bounds': [-1, 1],
                    'init': 0.1}],
    'loss': [{'component': 'imu', 'field': 'angular_velocity', 'weight': [1, 2, 3]}],
    'windows': {'length_s': 1.0},
    'optimizer': {'method': 'adam', 'iterations': 5, 'starts': 2},
    'overlay_id': 'unit_7',
}
P = ('parameters',)
TUNE_RULES = [
    (('fibril_tune',), 2, 'fibril_tune = 2: required: 1 (schema version)'),
    (('fibril_tune',), ..., 'fibril_tune: required: 1 (schema version)'),
    (('manifest',), '', "manifest = '': required"),
    (('loss',), ..., 'loss: required'),
    (('train',), [], 'train = []: required'),
    (('train',), 'a.npz', "train = 'a.npz': must be a list of recordings"),
    (('manifset',), 1, "manifset = 1: unknown key (did you mean 'manifest'?)"),
    (('heldout', 0), 3, 'heldout[0] = 3: a recording path, {csv: FILE, mapping: {...}} or '
     '{bag: PATH, topics: {ID: TOPIC}}'),
    (('train', 2, 'topic'), 1, 'train[2].topic = 1: unknown key (a bag entry has bag: PATH and '
     'topics: {ID: TOPIC})'),
    (('train', 2, 'topics'), ..., 'train[2].topics: required for a bag: {ID: TOPIC}, e.g. '
     '{imu: /imu/data}'),
    (('train', 2, 'topics'), {}, 'train[2].topics = {}: required for a bag: {ID: TOPIC}, e.g. '
     '{imu: /imu/data}'),
    (P + (1,), {'bounds': [0, 1]}, "parameters[1] = {'bounds': [0, 1]}: needs either mjcf: "
     "ELEMENT:NAME.ATTRIBUTE or component: ID with field: FIELD"),
    (P + (0, 'component'), 'imu', "parameters[0] = {'mjcf': 'joint:yaw.damping', 'bounds': "
     "[0.01, 1.0], 'log': True, 'component'...: needs either mjcf: ELEMENT:NAME.ATTRIBUTE or "
     "component: ID with field: FIELD"),
    (P + (0, 'bounds'), [1, 0], 'parameters[0].bounds = [1, 0]: required: [lower, upper], '
     'lower < upper'),
    (P + (0, 'bounds'), ..., 'parameters[0].bounds: required: [lower, upper], lower < upper'),
    (P + (0, 'bounds'), [0, 1], 'parameters[0].bounds = [0, 1]: log: true needs a positive '
     'lower bound'),
    (P + (1, 'fields'), 'x', "parameters[1].fields = 'x': unknown key (did you mean 'field'?)"),
    (('loss', 0, 'field'), ..., "loss[0] = {'component': 'imu', 'weight': [1, 2, 3]}: needs "
     "component: ID and field: FIELD"),
    (('windows', 'length_s'), -1, 'windows.length_s = -1: a positive number of seconds'),
    (('optimizer', 'method'), 'newton', "optimizer.method = 'newton': one of gauss_newton, "
     "adam, lbfgs"),
    (('optimizer', 'iteration'), 3, "optimizer.iteration = 3: unknown key (did you mean "
     "'iterations'?)"),
    (('optimizer', 'gradients'), 'jvp', "optimizer.gradients = 'jvp': one of auto, fd, exact"),
    (('loss', 0, 'time'), 'receipt', "loss[0].time = 'receipt': one of sample (the model's "
     "acquisition at the recorded sample time), arrival (what a consumer holds at the "
     "recorded arrival time)"),
]


def test_valid_tune_keeps_its_values():
  m = validate(TuneModel, TUNE, file=F)
  assert m.train[0] == 'train.npz' and m.train[1].csv == 'log.csv'
  assert m.train[2].topics == {'imu': '/imu/data'} and m.parameters[0].bounds == (0.01, 1.0)
  assert m.parameters[1].index == 2 and m.loss[0].weight == [1, 2, 3]
  assert m.windows.length_s == 1.0 and m.optimizer.method == 'adam' and m.optimizer.seed == 0
  assert m.overlay_id == 'unit_7'
  assert m.optimizer.gradients == 'auto' and m.loss[0].time == 'sample'   # the defaults


@pytest.mark.parametrize('path, value, line', TUNE_RULES,
                         ids=[r[2].split(':')[-1].strip()[:40] + f'-{i}'
                              for i, r in enumerate(TUNE_RULES)])
def test_tune_rule(path, value, line):
  assert _lines(TuneModel, _set(TUNE, path, value)) == [f'{F}: {line}']


def test_errors_are_collected_one_line_each():
  doc = _set(_set(CAMPAIGN, ('worlds',), 0), ('vary', 'a.noise', 'sigma'), -1)
  assert _lines(CampaignModel, doc) == [
      f'{F}: worlds = 0: must be a positive integer',
      f'{F}: vary.a.noise.sigma = -1: sigma must be >= 0']


@pytest.mark.parametrize('model, marker', [(CampaignModel, 'fibril_campaign'),
                                           (TuneModel, 'fibril_tune')])
def test_json_schema_accepts_the_shipped_files(model, marker):
  schema = model.model_json_schema(mode='validation')
  jsonschema.Draft202012Validator.check_schema(schema)
  v = jsonschema.Draft202012Validator(schema)
  files = [p for p in sorted((REPO / 'manifests').rglob('*.y*ml'))
           if marker in (yaml.safe_load(p.read_text()) or {})]
  assert files
  for p in files:
    doc = yaml.safe_load(p.read_text())
    assert not [e.message for e in v.iter_errors(doc)], p
    validate(model, doc, file=str(p))
  base = CAMPAIGN if model is CampaignModel else TUNE
  assert list(v.iter_errors(base)) == []
  assert list(v.iter_errors({**base, 'unknown_key': 1}))       # unknown keys refused
