"""The package version (one place; read by the package root, the command line and benchmarks)."""

__version__ = "0.1.0"
