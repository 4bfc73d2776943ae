"""The liveness probe (``enginedead probe``: ``probe``) and what operators' probe settings make
of a SLOW and a HUNG engine (``enginedead probe-settings``: ``trials``).
"""
