"""An engine test beside a plain one (without vLLM the first skips)."""


def test_engine(vllm_engine):
    raise AssertionError("must not run")


def test_plain():
    pass
