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

Fault types (each entry is a time window `[start_s, end_s)`, `end_s` absent = to the end of the
episode; a window is active at an acquisition whose tick falls inside it, its bounds rounded up
to ticks like a schedule's `next_boundary`):

| type | what a consumer sees |
| --- | --- |
| `dropout` | no packet: the acquisition is not sent (sequence gap), nothing counted as lost |
| `stale_new_timestamp` | the last sent packet again, with this acquisition's sequence and tick |
| `stale_old_timestamp` | the last sent packet again, with its own (old) sequence and tick |
| `nan` | the data fields are NaN; the status is untouched (a driver must check) |
| `sentinel` | the data fields hold `value` (e.g. 0, −1, 65535); status untouched |
| `invalid_status` | numeric data as usual, the health says `INVALID` |
| `bias_step` | `value` added to the data fields |
| `bias_ramp` | `value·(t − start_s)` added to the data fields (`value` per second) |
| `stuck` | the data fields hold `value`, or (no `value`) stay frozen at the last sent value |
| `reset` | the device is off the bus during the window (no packets); at its start the component re-initializes its random per-episode terms (`on_reset`); for `warmup_s` after the window the data come with status `INVALID` (warming up), then the health recovers |

Actuator components have their own fault types with the same windows and per-world
`FaultParams`: `actuator.py` in this package.

Data fields are the component's `fault_fields` (class attribute; by default the sample's first
field, its measurement) unless an entry names `fields`. Bias, stuck and sentinel values are a scalar or one value per element of the field.

**Health** (`HEALTHY` → `DEGRADED` → `INVALID` → `RECOVERING` → `HEALTHY`): a driver-side state
machine advanced once per acquisition instant by the instant's condition — `MISSED` (no
packet: dropout, reset), `BAD` (status invalid, warm-up), `WEAK` (the component's own degraded
condition, e.g. a GNSS receiver without a fix) or `OK`:

| from \\ condition | OK | WEAK | MISSED | BAD |
| --- | --- | --- | --- | --- |
| HEALTHY | HEALTHY | DEGRADED | DEGRADED (misses = 1) | INVALID |
| DEGRADED | HEALTHY | DEGRADED | DEGRADED, INVALID at `health_invalid_after_missed` misses in a row | INVALID |
| INVALID | RECOVERING (1 good), HEALTHY if `health_recovery_samples` ≤ 1 | INVALID | INVALID | INVALID |
| RECOVERING | RECOVERING, HEALTHY after `health_recovery_samples` good ones in a row | INVALID | INVALID | INVALID |

With `health_recovery_samples: 0`, INVALID returns to HEALTHY on the first good sample. The
health of an instant is written into the sample's `health` field when the sample type has one;
the state of every tick is in `truth/<id>/health`. Silent faults (stale, stuck, bias, NaN,
sentinel) leave the health as the device reports it: detecting them is the consumer's job.
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
