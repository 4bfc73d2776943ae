"""Which engine each test needs, which tests share one, how the suite is sharded, how
large a batch an engine can run, and how ranks split the cores.
"""
