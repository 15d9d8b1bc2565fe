"""Differentiable tuning against recordings (SPEC §11): fit continuous component fields, MJCF
physical fields and transport latencies to measured samples.

Two ways to the Jacobian (`optimizer.gradients`, `make_problem`): `fd` (`rollouts.py`,
`RolloutProblem`) runs the physics on MuJoCo C — threaded rollouts, a float64 forward
difference per physical parameter — and differentiates the device model exactly in forward mode
on the recorded frames; `exact` (`problem.py`, `Problem`) is forward mode through MJX, described
below; `auto` picks `fd` on a CPU host when nothing closes a loop on physics. A fitted transport
latency is searched over whole ticks (`timing.py`); a continuous actuator latency
(`latency_mode: continuous`, SPEC §6.1.1) is an ordinary continuous parameter;
near-collinear groups get the combinations the data fixes (`identifiability.py`);
`tune_fleet` fits many units in one batch (`fleet.py`). What follows describes the `exact`
path; the fit itself (`optimise.py`) is shared.

The tune file (YAML):

```yaml
fibril_tune: 1
manifest: ../ahrs_turntable.yaml        # relative to this file
train: [recordings/train_0.npz]          # .npz / .parquet, {csv: log.csv, mapping: {...}},
                                         # or a ROS bag {bag: run_0/, topics: {ahrs: /imu/data}}
heldout: [recordings/heldout_0.npz]
parameters:
  - {mjcf: joint:yaw.damping, bounds: [0.01, 1.0], log: true}
  - {component: ahrs, field: angular_velocity_bias, bounds: [-0.05, 0.05]}      # all 3 axes
  - {component: ahrs, field: linear_acceleration_scale, index: 2, bounds: [0.8, 1.2]}
  - {mjcf: actuator:motor.resistance, bounds: [0.1, 10], log: true}           # dcmotor R
loss:
  - {component: ahrs, field: angular_velocity, weight: 100.0}     # residual × weight (per axis list ok)
windows: {length_s: 1.0}                 # exact only (default: the whole recording)
optimizer: {method: gauss_newton, iterations: 30, starts: 4, start_spread: 0.3, seed: 0,
            gradients: auto,             # auto | fd | exact
            norm: l2}                    # l2 (least squares) | l1 (mean absolute residual)
```

How the fit works:

- **Fitted model.** The manifest is loaded with every stochastic term held at zero (fields
  each component declares in `stochastic_fields()`, read off its error model, are set to
  0 as overrides: noise statistics belong to `validate`, not to the fit) and with the fitted
  component fields named in `vary`, so a field at its default still has a gradient. A static
  field (schedules, latency, names — anything not in Params) is rejected with the reason.
- **Straight-through derivatives.** Quantization and saturation are traced inside
  `fibril_mjx.mechanisms.signal.straight_through()`: same forward values, derivative 1 (rounding has
  zero derivative almost everywhere, so without this a quantized output would report a zero
  gradient, silently).
- **Forward-mode Jacobians.** MJX's constraint solver (joint limits, contacts) runs a
  `lax.while_loop`, which reverse mode cannot differentiate; forward mode (`jax.jacfwd`) can,
  exactly, at a cost of one tangent per parameter (the tangents are batched). Every optimizer
  gets its gradient `2 Jᵀr / N` from that Jacobian.
- **Multiple shooting.** Recordings are cut into windows of `length_s`. Window 0 starts from
  the recording's `initial/qpos|qvel` (or the model's), every later window from the full
  simulator state reached by the current estimate at its start (state estimated by
  simulation, refreshed every iteration). Residuals are therefore exactly the single-shooting
  residuals; derivatives are taken per window (all windows in one vmapped batch, bounded
  length) with the window's start state held fixed — a truncated derivative: the parameters'
  effect carried in from earlier windows is dropped, so with windows the Jacobian and the ±
  are approximations (the default, one window, is exact).
- **Loss.** For each `loss` entry, the component's delivered samples are compared with the
  recorded ones at their sample times (`sample_time_s` → the model's acquisition at that tick);
  residual = weight × (model − recorded); loss = mean squared residual over the recorded
  samples (window padding excluded).
- **Sensitivity check** at the start: a parameter whose Jacobian column is zero is reported
  by name as unidentifiable (error); near-collinear combinations are listed in the report.
- **Norm**: `l2` minimises the mean squared weighted residual (SciPy `loss='linear'`); `l1`
  the mean absolute one (SciPy `loss='soft_l1'`, scale ε = 0.05 weighted units: |r| beyond ε,
  smooth within it; `lsq`) — for closed loops with stick–slip friction, where a few stretches
  far off would dominate a squared loss (`manifests/tuning/servo_xl330_tune.yaml`). The
  reported loss is then the mean of |r| + ε, and the ± come from the residuals transformed to
  sign(r)·√(|r| + ε) (`lsq.transform`; approximate).
- **Joint zero**: `mjcf: joint:NAME.ref` fits a hinge or slide's `ref` (`qpos0`: the body is at
  qpos − ref), the offset between a measured angle and the physical one.
- **Multi-start**: `starts` initial guesses (the first is the given start, the others drawn
  uniformly within ±`start_spread` of it in the fitted coordinate), each its own
  `least_squares` run, their evaluations in one vmapped batch;
  the best is reported with the spread of the others.
- **Uncertainty**: Gauss–Newton covariance `σ̂²·c·(JᵀJ)⁻¹` at the optimum, `σ̂² = rᵀr/(N−P)`,
  `c = (1+ρ)/(1−ρ)` with ρ the lag-1 autocorrelation of the residuals (correlated sensor noise
  would otherwise make the ± too small). The report's ± is 2σ.

Optimizers: `gauss_newton` (default: SciPy's `least_squares`, trust-region reflective with the
bounds, `x_scale='jac'`, on the exact forward-mode Jacobians — one run per start, their
evaluations batched, `lsq`), `adam` (optax), `lbfgs` (optax L-BFGS direction with a
backtracking step; both keep the bounds by projection). `log: true` fits `log(x)` (positive
quantities); a parameter starting at its bound moves off it. A fit whose best start ends where
it started says so with SciPy's reason and what to try (`TuneResult.moved`, `stop`, `advice`),
and `fibril-mjx tune` exits 1.
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
