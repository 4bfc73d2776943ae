"""Unit tests, one folder per room of ``pytest_enginedead`` (see each room's ``__init__.py``)."""
