"""YAML and pydantic for the file formats (manifest, profiles, overlays), one-line errors, the
built-in asset and profile paths. Host only: no JAX."""
