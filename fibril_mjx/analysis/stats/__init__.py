"""Statistics for validating sensor models against their profiles (SPEC §12).

Host-side NumPy tools, float64 throughout: Allan deviation, autocorrelation, power spectral
density, frequency response and a first-order bandwidth fit. They take plain 1-D sample
sequences of one channel, uniformly sampled at `rate_hz`, and are meant for long logs from
the simulator or from a device (the `validate` command builds on them).

Noise-density convention (IEEE-952 / Kalibr, the one SPEC §5.2 uses): a white rate noise of
density `N` (e.g. rad/s/√Hz) is simulated with per-sample σ = `N·√(rate_hz)`; its Allan
deviation is `N/√τ` (`allan_white_level`) and its one-sided PSD is `2·N²`
(`white_psd_level`, i.e. `N²` two-sided). A rate random walk `K` (units/√s, `b += K√Δ·ξ`)
has Allan deviation `K·√(τ/3)` (`allan_random_walk_level`).
"""

from fibril_mjx.analysis.stats.allan import (  # noqa: F401
    allan_cluster_sizes,
    allan_deviation,
    allan_edf,
    allan_random_walk_level,
    allan_white_level,
)
from fibril_mjx.analysis.stats.spectra import (  # noqa: F401
    autocorrelation,
    first_order_gain,
    first_order_response,
    fit_first_order_bandwidth,
    welch_psd,
    white_psd_level,
)
from fibril_mjx.analysis.stats.allan_model import (  # noqa: F401
    BIAS_INSTABILITY_FACTOR,
    allan_deviation_pooled,
    allan_nbk,
    allan_relative_sigma,
    allan_variance_model,
    ar1_fit,
    ar1_residual_var_factor,
    ar1_var_of_mean,
)
from fibril_mjx.analysis.stats.proportion import Z95, wilson  # noqa: F401
