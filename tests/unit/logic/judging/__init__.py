"""The one judge of liveness (``pytest_enginedead/logic/judging/``)."""
