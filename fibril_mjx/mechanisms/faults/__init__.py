"""Fault injection and health states shared by every sensing component
(docs/guides/sensors.md, "Navigation sensors, faults and health").

A sensing component opts in with four small pieces (every shipped sensor does):

1. its config model inherits `FaultConfig` (fields `faults`, `health_invalid_after_missed`,
   `health_recovery_samples`);
2. `build` sets a static `fault_plan = build_plan(cfg, neutral_sample, fault_fields, ...)`;
3. its Params have a `faults` leaf, `default_params(cfg)` (`FaultParams` per entry: start, end
   and value are per-world arrays, so campaigns can sample them: a `vary:` path
   `ID.faults[i].start_s`, `.end_s`, or `.value` where the entry has one: `param_path`
   here, which `fibril_mjx/components/base.py` applies to every component, sensor or
   actuator);
4. its State has a `faults` field, `init_state(plan, neutral_sample)`.

The one sensing cycle, `fibril_mjx.mechanisms.sensing.sense`, then runs the fault stages below
at each acquisition (`reset_edges` before `acquire`, `packet` after it); without a fault plan
(None) none of them is in the graph. With a plan but no entries (and no degraded condition of
the component's own) what remains is the sample's `health` field set to the health (HEALTHY).

Fault types, each a time window `[start_s, end_s)` (`end_s` absent = to the end of the episode)
active at an acquisition whose tick falls inside it, bounds rounded up to ticks like a
schedule's `next_boundary`: `dropout`, `stale_new_timestamp`, `stale_old_timestamp`, `nan`,
`sentinel`, `invalid_status`, `bias_step`, `bias_ramp`, `stuck`, `reset`; they act on the
component's `fault_fields` (class attribute; by default the sample's first field) unless an
entry names `fields`. Actuator components have their own types (`actuator.py`, SPEC §6.5);
the feedback of a motor type takes the types above as its `feedback_faults:`, run by its own
sensing cycle (`fibril_mjx/components/actuators/motor_feedback.py`, SPEC §6.2).

**Health** (`HEALTHY` → `DEGRADED` → `INVALID` → `RECOVERING` → `HEALTHY`) is advanced once per
acquisition instant by its condition (`OK`, `WEAK`, `MISSED`, `BAD`), written into the sample's
`health` field when it has one and into `truth/<id>/health` at every tick. What each fault type
shows a consumer (docs/internals/faults.md, "Sensor fault types") and the transition table
(docs/internals/faults.md, "Health").
"""

from fibril_mjx.mechanisms.faults.spec import (  # noqa: F401
    BAD,
    DEGRADED,
    DeviceConfig,
    FaultConfig,
    FaultParams,
    FaultPlan,
    FaultSpec,
    FaultState,
    HEALTHY,
    HEALTH_NAMES,
    INVALID,
    MISSED,
    OK,
    RECOVERING,
    TYPES,
    WEAK,
    build_plan,
    default_params,
    init_state,
    is_path,
    param_path,
)
from fibril_mjx.mechanisms.faults.apply import (  # noqa: F401
    apply_data,
    packet,
    reset_edges,
    transition,
    window,
)
from fibril_mjx.mechanisms.faults.scaffold import (  # noqa: F401
    bind_site,
    build_timing,
    check_shared_stream,
    stream_keys,
)
