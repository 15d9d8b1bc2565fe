"""Deprecated: moved to `fibril_mjx.components.actuators.motion_motor` (fibril_mjx.errors.MOVED); importing this path
warns and gives that module, until fibril_mjx 0.3."""

import sys

from fibril_mjx.errors import moved_module

sys.modules[__name__] = moved_module(__name__)
