"""fibril_mjx: the Fibril device model (sensors, actuator adapters) over MuJoCo MJX, batched.

The public API by name; the layers behind it are described in README.md ("How it is built").
Importing the package changes nothing in the process (no environment variable, no import hook,
no thread, no JAX setting): XLA's CPU flags are the caller's choice, `cpu_flags()` before JAX
computes anything (the `fibril-mjx` command line calls it).
"""

from fibril_mjx.analysis import stats
from fibril_mjx.batch.simulation import Controller, Options, SimState, Simulation, Start, load
from fibril_mjx.batch.worlds import cpu_flags
from fibril_mjx.config.version import __version__
from fibril_mjx.core import pipeline
from fibril_mjx.core.registry import register
from fibril_mjx import errors
from fibril_mjx.errors import ConfigError, FibrilError
from fibril_mjx.mechanisms import estimators
from fibril_mjx.mechanisms.rng import world_keys

__all__ = ['estimators', 'stats', 'ConfigError', 'FibrilError', 'SimState', 'Simulation', 'load',
           'Options', 'Start', 'Controller',
           'cpu_flags', 'pipeline', 'register', 'world_keys', '__version__']


def __getattr__(name):   # PEP 562: modules moved off the root, with a warning (errors.MOVED)
  return errors.moved_attribute(__name__, name)
