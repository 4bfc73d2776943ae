"""A module whose own import fails: it needs a module that does not exist."""

import edpolicy_nowhere  # noqa: F401
