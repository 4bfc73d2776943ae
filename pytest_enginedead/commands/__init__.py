"""The ``enginedead`` commands, one module each; only ``command.py`` imports them."""
