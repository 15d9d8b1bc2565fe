"""Central finite differences for gradient checks, shared by the component tests."""

import jax.numpy as jnp
import numpy as np


def central_differences(loss, v0, rel_step=1e-2, dtype=jnp.float32) -> np.ndarray:
  """d loss / d v at `v0` by central differences, one element at a time.

  Args:
    loss: scalar function of an array shaped like `v0`.
    v0: the point (scalar or array).
    rel_step: step `h = rel_step · max(1, |v_i|)`.

  Returns:
    `(v0.size,)` float64.
  """
  flat = np.asarray(v0, np.float64).ravel()
  shape = np.shape(v0)
  fd = []
  for i in range(flat.size):
    h = rel_step * max(1.0, abs(flat[i]))
    up, dn = flat.copy(), flat.copy()
    up[i] += h
    dn[i] -= h
    fd.append((float(loss(jnp.asarray(up.reshape(shape), dtype))) -
               float(loss(jnp.asarray(dn.reshape(shape), dtype)))) / (2 * h))
  return np.array(fd)
