"""Small-matrix algebra whose result for one world does not depend on the batch around it.

XLA's CPU backend lowers a batched `dot_general` (`@`, `einsum`) and `jnp.linalg.solve` to
library kernels (Eigen, LAPACK) that pick a vector or scalar path per matrix from its memory
alignment, so the same 6×6 product can round differently depending on which lane of the
batch, which batch size or which device a world runs in (docs/internals/performance.md,
"Determinism"). These helpers spell the products out as elementwise multiplies
and adds in a fixed order, which XLA emits as plain loops: every lane computes the same
operations, so a world's result is bitwise the same in any batch (SPEC §1.4 determinism).
They act on the last two axes and broadcast over leading axes; meant for n ≤ ~8.
"""

from __future__ import annotations

import jax.numpy as jnp


def matmul(a, b):
  """`a @ b` for `(..., n, k) × (..., k, m)`, summed over k in index order."""
  out = a[..., :, 0, None] * b[..., None, 0, :]
  for i in range(1, a.shape[-1]):
    out = out + a[..., :, i, None] * b[..., None, i, :]
  return out


def matvec(a, v):
  """`a @ v` for `(..., n, k) × (..., k)`, summed over k in index order."""
  out = a[..., :, 0] * v[..., None, 0]
  for i in range(1, a.shape[-1]):
    out = out + a[..., :, i] * v[..., None, i]
  return out


def transpose(a):
  """`aᵀ` over the last two axes."""
  return jnp.swapaxes(a, -1, -2)


def inv3(s):
  """Inverse of `(..., 3, 3)` by the adjugate (cofactors over the determinant).

  Exact in the same operations for every lane; accurate for the well-conditioned
  innovation covariances it serves (`S = H P Hᵀ + R` with `R` > 0).
  """
  a, b, c = s[..., 0, 0], s[..., 0, 1], s[..., 0, 2]
  d, e, f = s[..., 1, 0], s[..., 1, 1], s[..., 1, 2]
  g, h, i = s[..., 2, 0], s[..., 2, 1], s[..., 2, 2]
  c00, c01, c02 = e * i - f * h, f * g - d * i, d * h - e * g
  det = a * c00 + b * c01 + c * c02
  adj = jnp.stack([
      jnp.stack([c00, c * h - b * i, b * f - c * e], -1),
      jnp.stack([c01, a * i - c * g, c * d - a * f], -1),
      jnp.stack([c02, b * g - a * h, a * e - b * d], -1),
  ], -2)
  return adj / det[..., None, None]
