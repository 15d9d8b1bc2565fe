"""Composable error models: small error terms and `chain`, in the style of optax transformations.

A sensor writes its error model once, as a chain of terms in application order:

    BIAS = em.chain(em.turn_on_bias('bias_turn_on_stddev_pa'), em.constant_bias('bias_pa'),
                    em.gauss_markov('bias_instability_stddev_pa', 'bias_correlation_time_s',
                                    'bias_instability', 'gm'))
    NOISE = em.chain(em.white_noise('noise_stddev_pa'), em.quantization('resolution_pa'))
    ERRORS = em.chain(BIAS, NOISE)

and reads everything else off `ERRORS`: its config fields
(`em.with_errors`), Params (`em.params_type`), State (`em.state_type`; a Sample ends with
`em.SAMPLE_TAIL`, `em.sample_type`), stream names
(`ERRORS.streams`, `em.stream_keys`), the plan lines (`ERRORS.plan(on)`), the variance of a
sample (`ERRORS.variance`), the build-time rules (`ERRORS.check`), the fields `tune` holds at
zero (`ERRORS.stochastic_fields()`) and those a static `validate` rig sets to zero
(`ERRORS.drift_fields()`). In the traced step it calls `BIAS.apply(p, st, x, ctx)`
where the bias enters the signal and `NOISE.apply(...)` where the noise does; a term whose
switch fields are all at their default (and not in `vary`) is skipped in Python, so it is absent
from the graph. A sensor with several signal paths, each with its own State (the IMU's
angular-velocity and linear-acceleration channels), writes one chain per path and declares them
together with `em.partition(angular_velocity=..., linear_acceleration=...)`: everything above but
the State and the traced calls is read off the partition.

Adding an error term is one factory in `terms.py` (or a new module here), exported below, and
its test against a float64 NumPy model: docs/howto/new-error-term.md walks through it.
"""

from fibril_mjx.error_models.core import (DETERMINISTIC, KINDS, SAMPLE_TAIL, SLOW, STOCHASTIC,
                                          Chain, ConfigField, Ctx, Partition, Term, chain,
                                          extended, partition, sample_type, stream_keys,
                                          with_errors)
from fibril_mjx.error_models.terms import (ar1_noise, bounds, common_mode, constant_bias,
                                           first_order_lag, gain, gauss_markov, lowpass,
                                           narrowband, quantization, random_walk, saturation,
                                           sinusoids, turn_on_bias, white_noise)

__all__ = ['DETERMINISTIC', 'KINDS', 'SAMPLE_TAIL', 'SLOW', 'STOCHASTIC', 'Chain', 'ConfigField',
           'Ctx', 'Partition', 'Term', 'ar1_noise', 'bounds', 'chain', 'common_mode',
           'constant_bias', 'extended', 'first_order_lag', 'gain', 'gauss_markov', 'lowpass',
           'narrowband', 'partition', 'quantization', 'random_walk', 'sample_type', 'saturation',
           'sinusoids', 'stream_keys', 'turn_on_bias', 'white_noise', 'with_errors']
