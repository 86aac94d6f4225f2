"""infrastructure layer."""
