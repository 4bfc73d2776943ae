"""A guard policy on pytest's sys.path only while the suite's conftest imports it."""

from pytest_enginedead import Backend


class Cap:
    name = "hidden"

    def timeout_s(self, backend: Backend, max_num_seqs: int, tokens: int | None = None) -> float:
        return 900.0


cap = Cap()
