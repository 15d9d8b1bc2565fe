"""`mujoco.mjx`, imported without the "Failed to import warp" lines it prints on CPU hosts."""

import contextlib
import io

with contextlib.redirect_stdout(io.StringIO()):
  from mujoco import mjx  # noqa: F401
