"""The package version (one place; :mod:`simfuse` and the calibration profile's ``generator`` line read it)."""

__version__ = "0.2.0"
