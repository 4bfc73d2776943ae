"""Which model architectures the installed vLLM can build: its registry's source first, then the registry."""

from __future__ import annotations

import pytest

from pytest_enginedead.compat import registry

REGISTRY = '''
_TEXT_GENERATION_MODELS = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "Gemma4ForCausalLM": ("gemma4", "Gemma4ForCausalLM"),
}
_EMBEDDING_MODELS: dict[str, tuple[str, str]] = {"BertModel": ("bert", "BertModel")}
_PREVIOUSLY_SUPPORTED_MODELS = {"MotifForCausalLM": "0.10.2"}
_VLLM_MODELS = {
    **_TEXT_GENERATION_MODELS,
    **_EMBEDDING_MODELS,
}
'''


def test_the_registry_source_gives_the_architectures_its_union_unpacks() -> None:
    """The in-tree dicts the union unpacks count (an annotated one too); a retired one does not;
    a source without the union lists nothing, so every answer comes from the registry itself."""
    listed = registry.architectures_in_source(REGISTRY)
    assert listed == {"LlamaForCausalLM", "Gemma4ForCausalLM", "BertModel"}
    assert registry.architectures_in_source(REGISTRY.replace("_VLLM_MODELS", "_OTHER")) == frozenset()


def test_an_architecture_the_source_does_not_list_is_asked_of_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def ask_registry() -> frozenset[str]:
        asked.append("registry")
        return frozenset({"LlamaForCausalLM", "PluginForCausalLM"})

    monkeypatch.setattr(registry, "listed_architectures", lambda: frozenset({"LlamaForCausalLM"}))
    monkeypatch.setattr(registry, "known_architectures", ask_registry)
    assert registry.knows_architecture("LlamaForCausalLM") and asked == []
    assert registry.knows_architecture("PluginForCausalLM") and asked == ["registry"]
    assert not registry.knows_architecture("NoSuchModelForCausalLM")
