"""Orchestration of the commands: run, plan, profiles, campaign, tune, validate, fit-profile,
replay, schema. Each composes the layers below; none is imported by them."""

from fibril_mjx import analysis
from fibril_mjx.core import registry

# The host-side metrics and plots of the built-in types, which run, campaigns and replay look
# up by component type: each module under analysis/ registers its type's when imported.
registry.discover(analysis)
