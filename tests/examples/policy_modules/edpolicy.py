"""Policies and non-policies for ``load_policy("edpolicy:...")``."""


class Doubling:
    name = "doubling"

    def timeout_s(self, backend, max_num_seqs, max_num_batched_tokens=None):
        return 300.0 * 2 * max_num_seqs


class Holder:
    inner = Doubling()


good = Doubling()
not_a_policy = "300"
no_callable = type("NoCallable", (), {"timeout_s": 300.0})()
