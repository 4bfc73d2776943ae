"""Two policies a downstream repo might write: one that holds, one flat across backends."""

from pytest_enginedead import Backend, TimeoutPolicy
from pytest_enginedead.logic.timeouts.policies import Rule

good = TimeoutPolicy(
    "mygood",
    {
        b: Rule(900.0, 5.0, cap_s=7200.0) if b is Backend.CPU else Rule(300.0, 1.0, cap_s=1800.0)
        for b in Backend
    },
)


class SameEverywhere:
    name = "mysame"

    def timeout_s(self, backend, max_num_seqs, max_num_batched_tokens=None):
        return min(3000.0, 300.0 + max_num_seqs)

    def ceiling_s(self, backend):  # flat at 3000 s is its cap, not a plateau
        return 3000.0


same = SameEverywhere()
