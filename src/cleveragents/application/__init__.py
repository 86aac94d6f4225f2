"""application layer."""
