"""The MuJoCo side: the MJX shim, MJCF load and compile, assemblies and overlays on the MjSpec,
dcmotor actuators in JAX."""
