"""Which model architectures the installed vLLM can build: its registry's source first, then the registry.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import importlib.util
import os


@functools.lru_cache(maxsize=1)
def known_architectures() -> frozenset[str]:
    """Model architectures the installed vLLM can build (asked once per process)."""
    registry = importlib.import_module("vllm.model_executor.models.registry")
    return frozenset(registry.ModelRegistry.get_supported_archs())


def knows_architecture(arch: str) -> bool:
    """Whether the installed vLLM can build ``arch``: its registry's source first, then the registry.

    Importing the registry costs ~9 s of CPU (torch, transformers, vLLM's config) in a
    process that may start no engine itself (a server suite's pytest, xdist's controller,
    ``enginedead check``).  An architecture its source lists is in the registry; any other
    (one a plugin registers, or none) is asked of the registry itself, which has the last word.
    """
    return arch in listed_architectures() or arch in known_architectures()


#: where the registry's source is, under the vllm package (0.27.1-0.32.0)
REGISTRY_SOURCE = os.path.join("model_executor", "models", "registry.py")

#: the dict of every in-tree architecture, built by unpacking the per-task dicts (0.27.1-0.32.0)
REGISTRY_UNION = "_VLLM_MODELS"


@functools.lru_cache(maxsize=1)
def listed_architectures() -> frozenset[str]:
    """The architectures vLLM's registry source lists, read without importing vLLM (or none)."""
    spec = importlib.util.find_spec("vllm")  # a top-level name: finds, imports nothing
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    path = os.path.join(next(iter(spec.submodule_search_locations)), REGISTRY_SOURCE)
    try:
        with open(path, encoding="utf-8") as f:
            return architectures_in_source(f.read())
    except (OSError, ValueError):
        return frozenset()


def architectures_in_source(source: str) -> frozenset[str]:
    """The string keys of the dict literals that ``REGISTRY_UNION`` unpacks; none if it is not there."""
    dicts: dict[str, set[str]] = {}
    union: list[str] = []
    for node in ast.parse(source).body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict):
            continue
        pairs = list(zip(value.keys, value.values, strict=True))
        if target.id == REGISTRY_UNION:
            union = [v.id for k, v in pairs if k is None and isinstance(v, ast.Name)]
        else:
            dicts[target.id] = {k.value for k, _ in pairs
                                if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return frozenset(arch for name in union for arch in dicts.get(name, ()))
