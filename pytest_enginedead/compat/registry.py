"""Which model architectures the installed vLLM can build, and which config ``model_type`` it reads:
its registries' sources first (read with ``ast``), then the registries themselves.
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


def _assigned(node: ast.stmt) -> tuple[str, ast.Dict] | None:
    """(name, dict literal) for a module-level ``name = {...}`` or ``name: T = {...}``; else None."""
    target: ast.expr | None = None
    value: ast.expr | None = None
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, value = node.targets[0], node.value
    elif isinstance(node, ast.AnnAssign):
        target, value = node.target, node.value
    if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict):
        return None
    return target.id, value


def _literal_keys(node: ast.Dict) -> set[str]:
    """A dict literal's own string keys (no ``**other``)."""
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def architectures_in_source(source: str) -> frozenset[str]:
    """The string keys of the dict literals that ``REGISTRY_UNION`` unpacks; none if it is not there."""
    dicts: dict[str, set[str]] = {}
    union: list[str] = []
    for node in ast.parse(source).body:
        found = _assigned(node)
        if found is None:
            continue
        name, value = found
        if name == REGISTRY_UNION:
            union = [v.id for k, v in zip(value.keys, value.values, strict=True)
                     if k is None and isinstance(v, ast.Name)]
        else:
            dicts[name] = _literal_keys(value)
    return frozenset(arch for name in union for arch in dicts.get(name, ()))


# --- model types: vLLM's config registry and transformers' ------------------------------------

#: where vLLM's own config classes are registered by ``model_type`` (``_CONFIG_REGISTRY``)
CONFIG_REGISTRY_SOURCE = os.path.join("transformers_utils", "config.py")
CONFIG_REGISTRY = "_CONFIG_REGISTRY"
#: where transformers maps every ``model_type`` it knows to its config class (``CONFIG_MAPPING_NAMES``):
#: built in ``auto_mappings.py`` and extended in ``configuration_auto.py`` (5.x), or all in the latter (4.x)
CONFIG_MAPPING_SOURCES = (os.path.join("models", "auto", "auto_mappings.py"),
                          os.path.join("models", "auto", "configuration_auto.py"))
CONFIG_MAPPING = "CONFIG_MAPPING_NAMES"
#: fewer model types than this read from transformers' source means its layout changed: not read
FEWEST_TRANSFORMERS_TYPES = 100


def knows_model_type(model_type: str) -> bool:
    """Whether vLLM can read a config of this ``model_type``: its own config registry, else
    transformers'.  Their sources say (no import, ~0.1 s); the registries are imported (~10 s)
    only where a source cannot be read.  Unlike architectures, importing them would add nothing
    the sources do not list: the sets are equal (760 types, vLLM 0.32.0 with transformers 5.19),
    and a ``vllm.general_plugins`` entry that registers a config does so inside vLLM's processes
    only, where no import here would see it."""
    listed = listed_model_types()
    return model_type in listed if listed else model_type in known_model_types()


@functools.lru_cache(maxsize=1)
def known_model_types() -> frozenset[str]:
    """The model types vLLM's and transformers' config registries hold (imported once per process)."""
    config = importlib.import_module("vllm.transformers_utils.config")
    auto = importlib.import_module("transformers.models.auto.configuration_auto")
    return frozenset(getattr(config, CONFIG_REGISTRY)) | frozenset(auto.CONFIG_MAPPING)


@functools.lru_cache(maxsize=1)
def listed_model_types() -> frozenset[str]:
    """The model types vLLM's config registry and transformers' mapping list in their sources, read
    without importing either; empty where a source cannot be read (the registries are then asked)."""
    vllm_types = _read_keys("vllm", [CONFIG_REGISTRY_SOURCE], CONFIG_REGISTRY)
    hf_types = _read_keys("transformers", CONFIG_MAPPING_SOURCES, CONFIG_MAPPING)
    if not vllm_types or len(hf_types) < FEWEST_TRANSFORMERS_TYPES:
        return frozenset()
    return vllm_types | hf_types


def _read_keys(package: str, sources: tuple[str, ...] | list[str], name: str) -> frozenset[str]:
    """The string keys ``name`` gets in these source files of ``package``, in order; none if unreadable."""
    spec = importlib.util.find_spec(package)  # a top-level name: finds, imports nothing
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    root = next(iter(spec.submodule_search_locations))
    keys: dict[str, set[str]] = {}
    for source in sources:
        try:
            with open(os.path.join(root, source), encoding="utf-8") as f:
                mapping_keys_in_source(f.read(), name, keys)
        except FileNotFoundError:
            continue
        except (OSError, ValueError, SyntaxError):
            return frozenset()
    return frozenset(keys.get(name, ()))


def mapping_keys_in_source(source: str, name: str, keys: dict[str, set[str]] | None = None) -> set[str]:
    """The string keys a module-level mapping ``name`` holds, as its source builds it: assigned a
    dict, ``dict(...)``, ``OrderedDict([(k, v), ...])`` or a call like ``LazyConfigDict(k=v, **{...})``,
    then ``name.update({...})``; ``**name`` inside keeps what it had.  ``keys`` carries them across files."""
    keys = {} if keys is None else keys
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            if node.value is not None and _assigns(node, name):
                keys[name] = _mapping_keys(node.value, keys)
        elif (update := _update_of(node, name)) is not None:
            keys.setdefault(name, set()).update(_mapping_keys(update, keys))
    return keys.get(name, set())


def _assigns(node: ast.Assign | ast.AnnAssign, name: str) -> bool:
    """Whether this assignment binds the module-level ``name``."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def _update_of(node: ast.stmt, name: str) -> ast.expr | None:
    """The argument of a statement ``name.update(arg, ...)``; None for any other statement."""
    if not (isinstance(node, ast.Expr) and isinstance(call := node.value, ast.Call)):
        return None
    func = call.func
    if (isinstance(func, ast.Attribute) and func.attr == "update" and isinstance(func.value, ast.Name)
            and func.value.id == name and call.args):
        return call.args[0]
    return None


def _mapping_keys(node: ast.expr, known: dict[str, set[str]]) -> set[str]:
    """The string keys the expression builds: a dict literal, a call (``dict``, ``OrderedDict``, ...)
    or a name whose keys are ``known``."""
    if isinstance(node, ast.Dict):
        return _dict_keys(node, known)
    if isinstance(node, ast.Call):
        return _call_keys(node, known)
    if isinstance(node, ast.Name):
        return set(known.get(node.id, set()))
    return set()


def _dict_keys(node: ast.Dict, known: dict[str, set[str]]) -> set[str]:
    """A dict literal's string keys, those of each ``**other`` in it included."""
    found: set[str] = set()
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None:
            found |= _mapping_keys(value, known)
        elif isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.add(key.value)
    return found


def _call_keys(node: ast.Call, known: dict[str, set[str]]) -> set[str]:
    """A call's keys: of each positional list of pairs or mapping, and each keyword (``**`` unpacked)."""
    found: set[str] = set()
    for arg in node.args:
        found |= _pair_keys(arg) if isinstance(arg, (ast.List, ast.Tuple)) else _mapping_keys(arg, known)
    for kw in node.keywords:
        found |= {kw.arg} if kw.arg is not None else _mapping_keys(kw.value, known)
    return found


def _pair_keys(node: ast.List | ast.Tuple) -> set[str]:
    """The string keys of a literal list of ``(key, value)`` pairs (``OrderedDict([...])``)."""
    return {e.elts[0].value for e in node.elts if isinstance(e, ast.Tuple) and e.elts
            and isinstance(e.elts[0], ast.Constant) and isinstance(e.elts[0].value, str)}
