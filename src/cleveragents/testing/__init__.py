"""Test support shipped with the package: the backend contract suite."""
