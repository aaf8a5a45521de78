"""Model presets (data/models.toml) and model files.

``get_model`` takes a preset name or alias (case-insensitive), a planner model file (TOML, YAML
or JSON with ModelSpec fields), or a Hugging Face ``config.json`` (or the folder holding one).
Every failure is a one-line ``PlannerInputError``.
"""

from __future__ import annotations

import functools
import json
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Union

from pydantic import ValidationError

from hardware_catalog.errors import PlannerInputError, unknown_name_error
from hardware_catalog.files import read_input_text, show
from hardware_catalog.match import compact, match_model_by_size, model_name_variants
from hardware_catalog.hf_config import (SUPPORTED_MODEL_TYPES, condense_validation_error, hf_config_to_model,
                                        is_hf_config)
from hardware_catalog.schema import ModelSpec

_PRESET_FILE = "data/models.toml"
_FILE_SUFFIXES = (".toml", ".yaml", ".yml", ".json")


def _key(name: str) -> str:
    """Lookup key: case-insensitive, '_' and spaces read as '-'."""
    return "-".join(name.strip().lower().replace("_", " ").split())


@functools.cache
def _presets() -> tuple[tuple[ModelSpec, ...], dict[str, ModelSpec]]:
    """(presets in file order, lookup key -> preset for every name and alias)."""
    text = resources.files("hardware_catalog").joinpath(_PRESET_FILE).read_text(encoding="utf-8")
    where = f"hardware_catalog/{_PRESET_FILE}"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise PlannerInputError(f"{where}: invalid TOML ({err})") from None
    templates = data.get("templates", {})
    models: list[ModelSpec] = []
    index: dict[str, ModelSpec] = {}
    for raw in data.get("models", []):
        entry = dict(raw)
        template = entry.pop("template", None)
        if template is not None:
            if template not in templates:
                raise PlannerInputError(f"{where}: {entry.get('name')}: unknown template '{template}'")
            entry = {**templates[template], **entry}
        try:
            spec = ModelSpec(**entry)
        except ValidationError as err:
            raise PlannerInputError(f"{where}: {entry.get('name')}: {condense_validation_error(err)}") from None
        for alias in (spec.name, *spec.aliases):
            key = _key(alias)
            if key in index:
                raise PlannerInputError(f"{where}: name '{alias}' used by both {index[key].name} and {spec.name}")
            index[key] = spec
        models.append(spec)
    return tuple(models), index


def list_models() -> list[ModelSpec]:
    """All presets, in catalog order."""
    return list(_presets()[0])


def get_model(name_or_path: Union[str, os.PathLike]) -> ModelSpec:
    """A preset by name/alias, or a model loaded from a planner model file or HF config.json."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise PlannerInputError(f"model must be a name or a file path, got {type(name_or_path).__name__}")
    text = os.fspath(name_or_path)
    if not isinstance(text, str):
        text = os.fsdecode(text)
    if not text.strip():
        raise PlannerInputError("empty model name (give a preset name or a model file path)")
    models, index = _presets()
    if not isinstance(name_or_path, os.PathLike):
        spec = index.get(_key(text))
        if spec is not None:
            return spec
    path = Path(text).expanduser()
    if not isinstance(name_or_path, os.PathLike) and not path.exists() and not text.lower().endswith(_FILE_SUFFIXES):
        spec = match_model(text)  # a hub id ("meta-llama/Meta-Llama-3-8B") is a name, not a path
        if spec is not None:
            return spec
    if isinstance(name_or_path, os.PathLike) or path.exists() or _looks_like_path(text):
        return _load_file(path)
    spec = match_model(text)
    if spec is None:
        raise unknown_name_error("model", text, [m.name for m in models])
    return spec


@functools.cache
def _compact_index() -> dict[str, ModelSpec]:
    """``match.compact`` of every preset name and alias -> preset (spellings two presets share dropped)."""
    index: dict[str, ModelSpec] = {}
    shared = set()
    for spec in _presets()[0]:
        for name in (spec.name, *spec.aliases):
            key = compact(name)
            if index.get(key, spec) is not spec:
                shared.add(key)
            index[key] = spec
    return {k: v for k, v in index.items() if k not in shared}


def match_model(text: str) -> ModelSpec | None:
    """A preset for a name as people write it: "Llama-3.1-70B", "Mixtral 8x7B", "llama 3 405b",
    "meta-llama/Meta-Llama-3-8B-Instruct", "Llama 405B" (family word + size, when one preset has
    both). None when nothing matches; ``PlannerInputError`` when several presets do."""
    _, index = _presets()
    for variant in model_name_variants(text):
        spec = index.get(_key(variant)) or _compact_index().get(compact(variant))
        if spec is not None:
            return spec
    sized = match_model_by_size(text, _presets()[0])
    if len(sized) > 1:
        raise PlannerInputError(f"model '{text}' matches several presets: {', '.join(s.name for s in sized)} (give one)")
    return sized[0] if sized else None


def _looks_like_path(text: str) -> bool:
    return os.sep in text or "/" in text or text.lower().endswith(_FILE_SUFFIXES)


def _load_file(path: Path) -> ModelSpec:
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise PlannerInputError(f"model folder {path}: no config.json in it")
        path = path / "config.json"
    if not path.exists():
        raise PlannerInputError(f"model file {path}: not found (and not a preset name)")
    try:
        text = read_input_text(path, f"model file {show(path)}")
    except UnicodeDecodeError as err:
        raise PlannerInputError(f"model file {path}: not UTF-8 text (byte {err.start:,}); save it as UTF-8") from None
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise PlannerInputError(f"model file {path}: cannot read ({reason})") from None
    data = _parse(path, text)
    if not isinstance(data, dict):
        raise PlannerInputError(f"model file {path}: expected a mapping of ModelSpec fields, got {type(data).__name__}")
    if is_hf_config(data):
        # Name from the hub id the config records ("meta-llama/Meta-Llama-3-8B" -> "meta-llama-3-8b"),
        # else from the folder (.../Meta-Llama-3-8B/config.json), else from the file name.
        hub_id = data.get("_name_or_path")
        if isinstance(hub_id, str) and hub_id.strip("/ "):
            stem = hub_id.rstrip("/").rsplit("/", 1)[-1]
        elif path.name == "config.json" and path.parent.name:
            stem = path.parent.name
        else:
            stem = path.stem
        return hf_config_to_model(data, _key(stem) or "hf-model", label=f"Hugging Face config {path}")
    # A planner model file: ModelSpec fields at the top level, or under a single [model] table.
    if set(data) == {"model"} and isinstance(data["model"], dict):
        data = data["model"]
    hf_keys = sorted(k for k in _HF_ONLY_KEYS if k in data)
    if hf_keys and "num_layers" not in data and "ffn_hidden_size" not in data:
        raise PlannerInputError(
            f"model file {path}: reads as a Hugging Face config.json (it has {', '.join(hf_keys[:3])}) but names no "
            f"model_type or architectures, which say how to read it: add \"model_type\" (supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)})")
    fields = {"name": _key(path.stem), **data}
    try:
        return ModelSpec(**fields)
    except ValidationError as err:
        raise PlannerInputError(f"model file {path}: {condense_validation_error(err)}") from None
    except TypeError as err:  # e.g. non-string keys
        raise PlannerInputError(f"model file {path}: {' '.join(str(err).split())}") from None


_HF_ONLY_KEYS = ("num_hidden_layers", "intermediate_size", "num_key_value_heads", "n_layer", "n_embd",
                 "tie_word_embeddings", "torch_dtype", "transformers_version")
"""Keys of a Hugging Face config.json that no planner model file has."""


def _parse(path: Path, text: str) -> Any:
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            return tomllib.loads(text)
        if suffix in (".yaml", ".yml"):
            import yaml  # only needed for YAML files

            return yaml.safe_load(text)
        if suffix == ".json" or not suffix:
            return json.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise PlannerInputError(f"model file {path}: invalid TOML ({' '.join(str(err).split())})") from None
    except json.JSONDecodeError as err:
        raise PlannerInputError(f"model file {path}: invalid JSON ({err.msg} at line {err.lineno})") from None
    except Exception as err:  # yaml.YAMLError and friends
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise PlannerInputError(f"model file {path}: invalid YAML ({problem}{at})") from None
    raise PlannerInputError(f"model file {path}: unsupported extension '{suffix}' (use .toml, .yaml, .yml or .json)")
