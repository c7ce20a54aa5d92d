"""The environment the demo tests run `evr1 demo` in: the Makefile's, offline, no vLLM/Ray extras."""

from __future__ import annotations

import os
import sys
from pathlib import Path

DEMO_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "TOKENIZERS_PARALLELISM": "false",
}


def demo_env() -> dict[str, str]:
    """This process's environment without the project's and vLLM's logging knobs, plus DEMO_ENV."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("EVR1_", "VLLM_LOGGING"))} | DEMO_ENV


def plain_env() -> dict[str, str]:
    """A user's plain shell: the venv's ``bin/`` on PATH and HOME, none of the Makefile's variables."""
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
