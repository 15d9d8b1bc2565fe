"""Which tune problem a tune file gets (`make_problem`): its `gradients` and windows."""

from __future__ import annotations

from fibril_mjx.batch import physics_c
from fibril_mjx.batch.simulation import Simulation
from fibril_mjx.builder.build import build
from fibril_mjx.config.manifest import read_manifest
from fibril_mjx.errors import ConfigError
from fibril_mjx.workflows.tune import shooting
from fibril_mjx.workflows.tune.problem import Problem
from fibril_mjx.workflows.tune.rollouts import RolloutProblem


def make_problem(spec, *, progress=None) -> Problem:
  """The problem of `spec.gradients`: `'fd'` (`RolloutProblem`), `'exact'` (`Problem`:
  forward-mode Jacobians through MJX), or `'auto'`: fd on a CPU host when MuJoCo C can run the
  manifest open loop (measured faster there: `bench/tune_vs_sysid.py`), else exact. The
  choice and its reason are `problem.gradients_why`."""
  how = spec.gradients
  why, nominal = 'as asked', None
  if how in ('auto', 'fd'):
    built = build(read_manifest(spec.manifest))   # the problem's own, built once
    problems = physics_c.open_loop_problems(built)
    if how == 'fd' and problems:
      raise ConfigError(spec.path, 'optimizer.gradients', 'fd runs the physics on MuJoCo C open '
                        f'loop (controls first), but {problems[0]}; use gradients: exact (or '
                        'auto)', how)
    if how == 'auto':   # the physics chooser of run and campaign: MuJoCo C is fd, MJX exact
      backend, why = physics_c.choose(built, 'auto')
      how = 'fd' if backend == 'c' else 'exact'
    nominal = Simulation(built, physics='c' if how == 'fd' else 'mjx')
  if spec.free_starts and how != 'fd':
    raise ConfigError(spec.path, 'windows.free_starts', 'free window starts need gradients fd '
                      f'(MuJoCo C rollouts); here gradients are {how} ({why})', True)
  if spec.free_starts:
    prob = shooting.ShootingProblem(spec, progress=progress, nominal=nominal)
  else:
    prob = (RolloutProblem if how == 'fd' else Problem)(spec, progress=progress,
                                                         nominal=nominal)
  prob.gradients_why = why
  return prob
