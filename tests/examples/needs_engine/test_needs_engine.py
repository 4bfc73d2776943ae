"""One test that asks for an engine (and never gets past its setup when the model is bad)."""


def test_e(vllm_engine):
    pass
