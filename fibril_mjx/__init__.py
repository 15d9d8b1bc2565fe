"""fibril_mjx: the Fibril device model (sensors, actuator adapters) over MuJoCo MJX, batched.

The public API by name; the layers behind it are described in README.md ("How it is built").
"""

from fibril_mjx.batch import worlds as _worlds

# before anything computes: XLA:CPU compiles a scan over ticks as one kernel (batch/worlds.py)
_worlds.import_flags()

from fibril_mjx.analysis import stats  # noqa: E402
from fibril_mjx.batch.simulation import SimState, Simulation, load
from fibril_mjx.config import compat
from fibril_mjx.config.version import __version__
from fibril_mjx.core import pipeline
from fibril_mjx.core.registry import register
from fibril_mjx.errors import ConfigError, FibrilError
from fibril_mjx.mechanisms import estimators
from fibril_mjx.mechanisms.rng import world_keys

compat.install()   # old module paths (fibril_mjx.simulator, ...) for a release

__all__ = ['estimators', 'stats', 'ConfigError', 'FibrilError', 'SimState', 'Simulation', 'load',
           'pipeline', 'register', 'world_keys', '__version__']
