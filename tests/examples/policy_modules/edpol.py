"""An attribute that is not a policy: ``--enginedead-policy=edpol:not_a_policy``."""

not_a_policy = 300
