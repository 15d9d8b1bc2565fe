"""Orchestration of the commands: run, plan, profiles, campaign, tune, validate, fit-profile,
replay, schema. Each composes the layers below; none is imported by them."""
