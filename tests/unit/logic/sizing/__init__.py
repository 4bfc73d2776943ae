"""Sizing (``pytest_enginedead/logic/sizing/``): pure maths over measured steps."""
