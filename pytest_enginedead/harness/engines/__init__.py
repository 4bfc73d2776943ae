"""An engine's life: its environment, its start, its processes, sharing, and its stop by pid.

Offline engines (``offline``) and API servers (``server``) share one start sequence and one
stop (``base``); ``nodes`` adds the headless nodes of an engine spread over several; ``pool``
shares them between tests; ``cleanup`` ends what they leave, never by name.
"""
