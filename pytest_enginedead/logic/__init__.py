"""Pure logic: policies, invariants, planning, sharding, sizing, the report's data.

No pytest, vLLM, torch or psutil: everything here is unit-tested in milliseconds.
"""
