"""fibril_mjx: the Fibril device model (sensors, actuator adapters) over MuJoCo MJX, batched."""

from fibril_mjx.config.version import __version__  # noqa: E402,F401

from fibril_mjx.mechanisms import estimators  # noqa: E402,F401
from fibril_mjx.analysis import stats  # noqa: E402,F401
from fibril_mjx.errors import ConfigError, FibrilError  # noqa: E402
from fibril_mjx.mechanisms.rng import world_keys  # noqa: E402
from fibril_mjx.core import pipeline  # noqa: E402,F401
from fibril_mjx.batch.simulation import SimState, Simulation, load  # noqa: E402

__all__ = ['estimators', 'stats', 'ConfigError', 'FibrilError', 'SimState', 'Simulation', 'load', 'pipeline',
           'world_keys', '__version__']
