"""The pytest plugin: options, markers, fixtures, handles, assertions, the summary, xdist.

What a test author meets; ``plugin.py`` wires it into pytest.
"""
