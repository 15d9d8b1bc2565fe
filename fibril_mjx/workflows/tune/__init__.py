"""Differentiable tuning against recordings (SPEC §11): fit continuous component fields, MJCF
physical fields and transport latencies to measured samples.

Two ways to the Jacobian (`optimizer.gradients`, `make_problem`): `fd` (`rollouts.py`,
`RolloutProblem`) runs the physics on MuJoCo C — threaded rollouts, a float64 forward difference
per physical parameter — and differentiates the device model exactly in forward mode on the
recorded frames; `exact` (`problem.py`, `Problem`) is forward mode through MJX (its constraint
solver's `while_loop` has no reverse mode), optionally over windows of the recording with each
window's start state held; `auto` picks `fd` on a CPU host when nothing closes a loop on
physics. A fitted transport latency is searched over whole ticks (`timing.py`); a continuous
actuator latency (`latency_mode: continuous`, SPEC §6.1.1) is an ordinary continuous parameter;
near-collinear groups get the combinations the data fixes (`identifiability.py`); `tune_fleet`
fits many units in one batch (`fleet.py`); the fit itself (`optimise.py`, `lsq.py`) is shared.

The contract of a fit — stochastic terms at zero, straight-through quantization, the residual
and loss (`norm: l2 | l1`), starts, bounds, the ± (2σ of `σ̂²·c·(JᵀJ)⁻¹`, `σ̂² = rᵀr/(N−P)`,
`c = (1+ρ)/(1−ρ)`, ρ the residuals' lag-1 autocorrelation) and the not-moved check
(`TuneResult.moved`, exit 1) — is
written out with the tune file in docs/guides/tuning.md (every field of the tune file:
`spec.py`).
"""

from __future__ import annotations

from fibril_mjx.workflows.tune.spec import (METHODS, LossTerm, TuneSpec, read_tune_file,
                                            tune_spec_from_dict)
from fibril_mjx.workflows.tune.params import Param
from fibril_mjx.workflows.tune.problem import DataSet, Problem
from fibril_mjx.workflows.tune.optimise import TuneResult, tune
from fibril_mjx.workflows.tune.report import overlay_dict, render_report, run_cli, write_outputs
from fibril_mjx.workflows.tune.rollouts import RolloutProblem
from fibril_mjx.workflows.tune.shooting import ShootingProblem
from fibril_mjx.workflows.tune.choose import make_problem
from fibril_mjx.workflows.tune.fleet import FleetResult, render_fleet, tune_fleet, write_fleet
from fibril_mjx.workflows.tune.simulate import simulate_recording, simulate_recordings

__all__ = ['METHODS', 'DataSet', 'FleetResult', 'LossTerm', 'Param', 'Problem',
           'RolloutProblem', 'ShootingProblem', 'TuneResult', 'TuneSpec', 'make_problem', 'overlay_dict',
           'read_tune_file', 'render_fleet', 'render_report', 'run_cli', 'simulate_recording',
           'simulate_recordings', 'tune', 'tune_fleet', 'tune_spec_from_dict', 'write_fleet',
           'write_outputs']
