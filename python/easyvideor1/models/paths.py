"""The one check of a model folder, run by every command that loads a model before any work.

Loading reads ``config.json`` (the family, ``models/families.detect_family``), the weights and
the processor (tokenizer + image/video processor) from a local folder. Given a path that is
not such a folder, transformers takes it for a Hugging Face hub id and retries the hub for
minutes before a long traceback that never names the folder; this check says what is wrong
in one line, from the file system alone (the hub is never contacted).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from easyvideor1.errors import ConfigError

# What a loadable model folder holds, each as alternatives (any one will do).
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
_TOKENIZER = ("tokenizer.json", "tokenizer_config.json")
_PROCESSOR = ("preprocessor_config.json", "processor_config.json")
# ``org/name``: how a hub id looks (the hint for someone who gave one).
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _has_any(folder: Path, patterns: tuple[str, ...]) -> bool:
    return any(next(folder.glob(pattern), None) is not None for pattern in patterns)


def model_dir_problem(path: str | Path) -> str | None:
    """None when ``path`` is a loadable model folder, else why not (without the path)."""
    text = str(path)
    if not text.strip():
        return "empty (give a model folder)"
    folder = Path(text).expanduser()
    if not folder.exists():
        if _HUB_ID.match(text) and not Path(text.split("/")[0]).exists():
            return ("no such folder (a local model folder is needed; a Hugging Face hub id is not downloaded: "
                    f"`hf download {text} --local-dir DIR`, then give DIR)")
        return "no such folder"
    if not folder.is_dir():
        return "not a folder (give the model's folder)"
    config = folder / "config.json"
    if not config.is_file():
        return "not a model folder: no config.json"
    try:
        loaded = json.loads(config.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"config.json does not parse: {exc}"
    if not isinstance(loaded, dict):
        return "config.json is not a JSON object"
    if not _has_any(folder, _WEIGHTS):
        return "no weights (*.safetensors or pytorch_model*.bin)"
    if not _has_any(folder, _TOKENIZER):
        return "no tokenizer (tokenizer.json or tokenizer_config.json)"
    if not _has_any(folder, _PROCESSOR):
        return "no image/video processor (preprocessor_config.json or processor_config.json)"
    return None


def check_model_dir(path: str | Path, name: str) -> None:
    """Raise :class:`ConfigError` (one line: ``NAME PATH: why``) unless ``path`` is a loadable
    model folder; ``name`` is the flag or config field that gave it (``--model``,
    ``worker.actor.model_path``)."""
    problem = model_dir_problem(path)
    if problem is not None:
        raise ConfigError(f"{name} {path}: {problem}")
