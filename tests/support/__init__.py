"""What the tests share: a downstream repo and its runs, worker stand-ins, sizes from this
machine's steps, the bad-input conventions, the example suites by name.

Imported by package name everywhere (``from tests.support.downstream import Downstream``);
``tests/conftest.py`` has pytest rewrite their asserts, as it does the tests' own.
"""
