"""The package version (one place: `fibril_mjx.__version__`, run metadata, plans)."""

__version__ = '0.1.0'
