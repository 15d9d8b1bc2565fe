"""fibril_mjx: the Fibril device model (sensors, actuator adapters) over MuJoCo MJX, batched."""

__version__ = '0.1.0'

from fibril_mjx import estimators, stats  # noqa: E402,F401
from fibril_mjx.errors import ConfigError, FibrilError  # noqa: E402
from fibril_mjx.rng import world_keys  # noqa: E402
from fibril_mjx.simulator import SimState, Simulation, load  # noqa: E402

__all__ = ['estimators', 'stats', 'ConfigError', 'FibrilError', 'SimState', 'Simulation', 'load', 'world_keys',
           '__version__']
