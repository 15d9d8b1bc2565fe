"""The campaign file (`fibril_campaign: 1`): read, validated by its pydantic model
(`fibril_mjx.config.campaign.CampaignModel`), and turned into a `Campaign`.

Field paths, metric names and criteria are checked against the built manifest later
(`fibril_mjx.builder.vary.resolve`, `engine.Plan`); here every key, type and distribution
parameter is checked, with one `file: path = value: rule` line per error.

A paired campaign (`designs:`) is read once per design (`read(path, design=NAME)`): the design's
manifest replaces the campaign's, and each of its `set:` values becomes a `vary:` entry with
one choice — so a fixed value goes wherever a varied one could (component field, profile, MJCF
attribute), and every other field keeps its stream (draws depend on seed, world and path only).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
from typing import NamedTuple

from fibril_mjx.builder.vary import Distribution, distribution
from fibril_mjx.config.campaign import (DISTRIBUTIONS, OPTIONAL, SCENARIO_KEYS, TOP_KEYS,
                                        CampaignModel, ChoiceDist, UserMetric)
from fibril_mjx.config.campaign import ControllerModel
from fibril_mjx.config.validation import load_yaml, validate
from fibril_mjx.errors import ConfigError, ConfigErrors, did_you_mean

__all__ = ['DISTRIBUTIONS', 'OPTIONAL', 'SCENARIO_KEYS', 'TOP_KEYS', 'Campaign', 'Controller',
           'Criterion', 'Design', 'Distribution', 'Metric', 'Overrides', 'read']


@dataclasses.dataclass(frozen=True)
class Metric:
  """A user-named metric: `name = expr` over other metrics (`+ - * / **`, abs, min, max, sqrt)."""
  name: str
  expr: str


@dataclasses.dataclass(frozen=True)
class Criterion:
  """Pass when `min <= metric <= max` (either bound optional); NaN fails."""
  name: str
  metric: str
  min: float | None
  max: float | None

  def describe(self) -> str:
    parts = []
    if self.min is not None:
      parts.append(f'{self.metric} >= {self.min:g}')
    if self.max is not None:
      parts.append(f'{self.metric} <= {self.max:g}')
    return ' and '.join(parts)


@dataclasses.dataclass(frozen=True)
class Controller:
  """A validated `controller:` (a trained policy and its env config).

  Attributes:
    policy: the checkpoint path (resolved; `policy.json` beside it).
    task: task name (`policy.TASKS`); observe: `((component id, fields or None), ...)`.
    actions: `((component id, mode, scale), ...)` in action order.
    control_period_s: seconds per policy step; goal: the per-world goal `Distribution`
      (path `controller.goal`) or None (the task's default goal).
  """
  policy: pathlib.Path
  task: str
  observe: tuple
  actions: tuple
  control_period_s: float
  goal: Distribution | None


@dataclasses.dataclass(frozen=True)
class Design:
  """One design of a paired campaign.

  Attributes:
    name: its name (a directory name of the output).
    manifest: the manifest it runs (resolved).
    set: `((field path, value), ...)` it fixes (each a one-choice `vary:` entry).
  """
  name: str
  manifest: pathlib.Path
  set: tuple = ()


@dataclasses.dataclass(frozen=True)
class Campaign:
  """A validated campaign file (manifest path resolved relative to it)."""
  file: pathlib.Path
  sha256: str
  manifest: pathlib.Path
  worlds: int
  seed: int
  duration_s: float
  chunk_worlds: int
  vary: tuple[Distribution, ...]
  metrics: tuple | None        # names kept (None: every component metric)
  scenario: dict | None        # {'actuator_script' | 'command_script': (validated entries)}
  user_metrics: tuple[Metric, ...]
  criteria: tuple[Criterion, ...]
  physics: str = 'auto'        # the physics backend asked for (`physics_c.choose`)
  controller: Controller | None = None   # a policy closing the loop (None: open loop)
  designs: tuple[Design, ...] = ()       # a paired campaign's designs, in file order
  design: str | None = None              # the design this campaign runs (None: not one)
  unpaired: bool = True                  # rerun designs on independent keys (paired only)


class Overrides(NamedTuple):
  """Values that replace a campaign file's when it is read (`read`'s options; None: the
  file's), e.g. the command line's `--worlds`.

  Attributes:
    worlds, duration_s, chunk_worlds, seed: replace the file's fields of these names.
    policy: the checkpoint of `controller.policy` (relative to the working directory).
    design: one design of a paired campaign (module docstring).
  """

  worlds: int | None = None
  duration_s: float | None = None
  chunk_worlds: int | None = None
  policy: str | os.PathLike | None = None
  design: str | None = None
  seed: int | None = None


def _controller(c: ControllerModel, policy: pathlib.Path) -> Controller:
  return Controller(policy, c.task, tuple((cid, None if f is None else tuple(f))
                                          for cid, f in c.observe.items()),
                    tuple((a.component, a.mode, float(a.scale)) for a in c.actions),
                    float(c.control_period_s),
                    None if c.goal is None else distribution('controller.goal', c.goal))


def read(path, *, worlds: int | None = None, duration_s: float | None = None,
         chunk_worlds: int | None = None, policy=None, design: str | None = None,
         seed: int | None = None) -> Campaign:
  """Reads and validates a campaign file; command-line values replace the file's (`policy`:
  the checkpoint of `controller.policy`, relative to the working directory). `design`: the
  campaign of that design of a paired campaign (module docstring); `seed`: replaces the file's
  (a paired campaign's unpaired reruns).

  Raises:
    ConfigErrors: every structural error, one line each.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise ConfigErrors([ConfigError(str(path), '', 'campaign file not found')])
  file = str(path)
  data = load_yaml(path)
  if not isinstance(data, dict):
    raise ConfigErrors([ConfigError(file, '', 'must be a mapping')])
  given = {'worlds': worlds, 'duration_s': duration_s, 'chunk_worlds': chunk_worlds,
           'seed': seed}
  data = {**data, **{k: v for k, v in given.items() if v is not None}}
  errors: list[ConfigError] = []
  model = None
  try:
    model = validate(CampaignModel, data, file=file)
  except ConfigErrors as e:
    errors.extend(e.errors)
  man = data.get('manifest')
  manifest = (path.resolve().parent / man).resolve() if isinstance(man, str) else None
  if manifest is not None and not manifest.is_file():
    errors.append(ConfigError(file, 'manifest', f'file not found ({manifest})', man))
  ctl = data.get('controller')
  pol = ctl.get('policy') if isinstance(ctl, dict) else None
  policy_path = None
  if policy is not None:
    policy_path = pathlib.Path(policy).resolve()
    if model is not None and model.controller is None:
      errors.append(ConfigError(file, 'controller', '--policy needs a controller: section '
                                '(the env config of the policy)', str(policy)))
  elif isinstance(pol, str):
    policy_path = (path.resolve().parent / pol).resolve()
  if policy_path is not None and not policy_path.is_file():
    errors.append(ConfigError(file, 'controller.policy', f'file not found ({policy_path})',
                              str(policy) if policy is not None else pol))
  designs = _designs(model, path, manifest, errors) if model is not None else ()
  if design is not None and model is not None and design not in [d.name for d in designs]:
    errors.append(ConfigError(file, 'designs', f'no design {design!r}' + did_you_mean(
        design, [d.name for d in designs]), design))
  if errors:
    raise ConfigErrors(errors)
  scenario = None
  if model.scenario is not None:
    scenario = {k: tuple(getattr(model.scenario, k)) for k in SCENARIO_KEYS
                if k in model.scenario.model_fields_set}
  names, user = None, []
  if model.metrics is not None:
    names = [m for m in model.metrics if isinstance(m, str)]
    user = [Metric(m.name, m.expr) for m in model.metrics if isinstance(m, UserMetric)]
  criteria = [Criterion(str(name), c.metric, c.min, c.max) for name, c in model.criteria.items()]
  vary = tuple(distribution(str(fp), d) for fp, d in model.vary.items())
  if design is not None:
    chosen = next(d for d in designs if d.name == design)
    manifest = chosen.manifest
    vary += tuple(distribution(fp, ChoiceDist(dist='choice', values=[v]))
                  for fp, v in chosen.set)
  return Campaign(path, hashlib.sha256(path.read_bytes()).hexdigest(), manifest, model.worlds,
                  int(model.seed), float(model.duration_s), model.chunk_worlds, vary,
                  tuple(names) if names is not None else None, scenario, tuple(user),
                  tuple(criteria), model.physics,
                  None if model.controller is None else _controller(model.controller,
                                                                    policy_path),
                  designs, design, bool(model.unpaired))


def _designs(model: CampaignModel, path: pathlib.Path, manifest, errors: list) -> tuple:
  """The validated `designs:` (manifests resolved and found; `set:` paths not in `vary:`)."""
  file, out = str(path), []
  for name, d in model.designs.items():
    man = manifest
    if d.manifest is not None:
      man = (path.resolve().parent / d.manifest).resolve()
      if not man.is_file():
        errors.append(ConfigError(file, f'designs.{name}.manifest', f'file not found ({man})',
                                  d.manifest))
    for fp in d.set:
      if fp in model.vary:
        errors.append(ConfigError(file, f'designs.{name}.set.{fp}', 'also in vary: (a design '
                                  'fixes a field the worlds do not vary)', d.set[fp]))
    out.append(Design(name, man, tuple(d.set.items())))
  if model.unpaired is False and not out:
    errors.append(ConfigError(file, 'unpaired', 'only for a paired campaign (designs:)', False))
  return tuple(out)
