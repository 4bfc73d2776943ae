"""The regression suite ``enginedead check`` runs against the installed vLLM.

``pytest -p enginedead --pyargs pytest_enginedead.regression``
"""
