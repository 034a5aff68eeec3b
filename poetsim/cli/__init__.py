"""The poetsim command-line interface."""
