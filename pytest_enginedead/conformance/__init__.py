"""Your liveness probe's settings against a SLOW and a HUNG engine, as a pytest suite.

``ENGINEDEAD_PROBE_SETTINGS=mine=5/2/3 pytest -p enginedead --pyargs pytest_enginedead.conformance``
(see ``test_probe_settings.py``; ``enginedead probe-settings`` prints the whole table).
"""
