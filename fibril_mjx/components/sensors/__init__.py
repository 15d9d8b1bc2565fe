"""Sensors (SPEC §5): one module per device type."""
