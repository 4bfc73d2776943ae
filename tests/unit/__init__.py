"""Unit tests, one folder per package of ``pytest_enginedead`` (see each package's ``__init__.py``)."""
