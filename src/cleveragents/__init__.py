"""cleveragents layer."""
