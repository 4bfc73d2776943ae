"""Pure logic (``pytest_enginedead/logic/``): milliseconds each."""
