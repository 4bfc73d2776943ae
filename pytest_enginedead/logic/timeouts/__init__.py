"""Timeout policies and the invariants a policy must keep.
"""
