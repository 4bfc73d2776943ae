"""A guard policy with a low cap, so that a busy step outlives it."""

from pytest_enginedead import Backend


class Cap:
    name = "cap-4s"

    def timeout_s(self, backend: Backend, max_num_seqs: int, tokens: int | None = None) -> float:
        return 4.0


cap = Cap()
