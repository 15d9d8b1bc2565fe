"""Actuator adapters (SPEC §6): commands onto MuJoCo actuators."""
