"""MuJoCo `dcmotor` actuators evaluated in JAX next to MJX (whose JAX backend rejects them).

MuJoCo 3.17 compiles `<dcmotor>` into an actuator with `dyntype/gaintype/biastype = dcmotor`;
`mjx.put_model` refuses those types. This package

1. builds, on the host, a *twin* `MjModel` in which every dcmotor is replaced by a unit-gain
   force actuator that MJX can step, keeping bodies, joints, other actuators and options
   untouched (`prepare`, module `twin`);
2. evaluates the dcmotor electrical / controller / thermal / friction model in JAX from the
   compiled parameters (`DcMotorParams` from `default_params`, differentiable, per world;
   module `model`);
3. steps the twin in place of `mjx.step`, writing the dcmotor force into the twin's control and
   advancing the dcmotor activations exactly as MuJoCo C does (`step`, module `mjx_step`, the
   one module that reaches into MJX internals).

Everything is single-world; batch with `jax.vmap` at the edge.
"""

from fibril_mjx.physics.dcmotor.mjx_step import Pending, forward, integrate, step
from fibril_mjx.physics.dcmotor.model import DcMotorParams, act_from_state, init
from fibril_mjx.physics.dcmotor.twin import UnsupportedDcMotor, default_params, describe, prepare

__all__ = ['DcMotorParams', 'Pending', 'UnsupportedDcMotor', 'act_from_state', 'default_params',
           'describe', 'forward', 'init', 'integrate', 'prepare', 'step']
