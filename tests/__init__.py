"""pytest-enginedead's own tests, a package: every module is imported by its full name.

``support/`` holds what the tests share (``from tests.support.downstream import Downstream``);
``unit/`` mirrors the package folder by folder; ``engine/`` starts real engines; ``examples/``
holds downstream suites, copied into ``pytester`` directories and never collected here.
"""
