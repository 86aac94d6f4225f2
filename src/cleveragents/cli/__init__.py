"""Command-line entry points: argument parsing and output only."""
