"""The console of the long-running commands: progress lines, repeated warnings once, third-party
INFO in the log file only, and the vLLM logger routed through the same handlers (with vLLM's own
logging configuration function, as an engine start runs it)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings

import pytest

from easyvideor1 import console
from easyvideor1.logging import attach_log_file, event, finish_console, get_logger, setup_console

CONSOLE_ENV = ("EVR1_CONSOLE", "EVR1_VERBOSE", "EVR1_RUN_LOG", "VLLM_LOGGING_CONFIG_PATH")


@pytest.fixture()
def console_mode(monkeypatch):
    for key in (*CONSOLE_ENV, "VLLM_CONFIGURE_LOGGING", "HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_MININTERVAL"):
        monkeypatch.delenv(key, raising=False)
    before = {k: os.environ.get(k) for k in CONSOLE_ENV}
    yield setup_console
    finish_console()
    assert {k: os.environ.get(k) for k in CONSOLE_ENV} == before  # console mode leaves no trace


def test_plain_progress_prints_a_tenth_at_a_time(capsys):
    with console.Progress("eval", total=1000, unit="sample", tty=False) as bar:
        for i in range(1000):
            bar.update(1, acc=i / 1000)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 10 == bar.lines  # 10%, 20%, ..., 100%: not one line per item
    assert lines[0].startswith("eval 100/1000 (10%)") and "ETA" in lines[0]
    assert lines[-1].startswith("eval 1000/1000 (100%)") and "acc=0.999" in lines[-1]
    assert re.search(r"[\d.]+ (sample/s|s/sample)", lines[-1])


def test_plain_progress_without_total_prints_on_time_and_at_close(capsys):
    bar = console.Progress("hash", unit="file", tty=False, every_s=0.0)
    bar.update(3)
    bar.close()
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hash 3 file |") and "ETA" not in lines[0]


def test_terminal_progress_is_a_bar_with_the_metrics(capsys):
    with console.Progress("train", total=4, unit="step", tty=True) as bar:
        assert console.job_active()
        console.write("a message above the bar")
        bar.update(2, reward=0.5)
    err = capsys.readouterr().err
    assert not console.job_active()
    assert "a message above the bar" in err and "train" in err and "2/4" in err and "reward=0.5" in err


def test_train_progress_shows_validation_once(capsys):
    progress = console.TrainProgress(total_steps=4)
    progress.log(0, {"val/accuracy": 0.25})
    for step in range(1, 5):
        progress.log(step, {"reward/overall": 0.1 * step, "reward/accuracy": 0.1, "time/step_s": 1.0})
        progress.log(step, {"val/accuracy": 0.25})  # the same result again: no second line
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("train 0/4 (0%)") and "val_acc=0.25" in lines[0]
    assert [line.split(" |")[0] for line in lines] == [
        "train 0/4 (0%)",
        "train 1/4 (25%)",
        "train 2/4 (50%)",
        "train 3/4 (75%)",
        "train 4/4 (100%)",
    ]
    assert "reward=0.4" in lines[-1]


def test_console_mode_dedups_warnings_and_logs_everything(console_mode, tmp_path, capsys):
    console_mode(verbose=False)
    project = get_logger("easyvideor1.test_console")
    vllm = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    event(project, "early_event", n=1)  # before the run's log file is known: kept, then written
    attach_log_file(tmp_path / "evr1.log")
    for i in range(300):
        vllm.warning("%s: Failed to load weights", f"Layer{i % 4}")
    logging.getLogger("urllib3.connectionpool").info("Starting new HTTP connection (1): 127.0.0.1")
    logging.getLogger("vllm.config.model").info("Using max model len 1044")
    event(project, "sample_filtered", logging.WARNING, sample="a", reason="too long")
    event(project, "sample_filtered", logging.WARNING, sample="b", reason="too long")
    event(project, "shown_event", value=2)
    warnings.warn("first python warning", UserWarning, stacklevel=1)
    warnings.warn("second python warning", FutureWarning, stacklevel=1)
    with console.Progress("train", total=2, tty=False):
        event(project, "per_step_event", step=1)  # the bar is the console now
    lines = finish_console()
    err = capsys.readouterr().err
    shown, summary = err.split("evr1: 2 warning(s)")
    assert shown.count("Failed to load weights") == 1 and "Layer0: Failed to load weights" in shown
    assert "Starting new HTTP connection" not in err and "Using max model len" not in err
    assert shown.count("sample_filtered") == 1 and "early_event" in shown and "shown_event" in shown
    assert "per_step_event" not in err
    assert "first python warning" in shown and "second python warning" in shown  # two messages, not one
    assert lines[0].startswith("evr1: 2 warning(s) were repeated 300 more time(s)")
    assert "299x more: Layer0: Failed to load weights" in summary and str(tmp_path / "evr1.log") in summary
    text = (tmp_path / "evr1.log").read_text()
    assert text.count("Failed to load weights") == 300 and text.index("early_event") < text.index("Layer0")
    for needle in ("Starting new HTTP connection", "Using max model len", "per_step_event", "sample=b"):
        assert needle in text


def test_verbose_puts_everything_on_the_console(console_mode, capsys):
    console_mode(verbose=True)
    for _ in range(3):
        logging.getLogger("vllm.v1.worker.cpu_worker").warning("the same warning")
    # Any logger outside easyvideor1 is third-party to the console; not "ray.serve" here, whose
    # handlers Ray replaces (propagate off) once a Ray test of the session has started Serve.
    logging.getLogger("some_library.worker").info("a third-party info line")
    get_logger("easyvideor1.test_console").debug("a debug line")
    assert finish_console() == []
    err = capsys.readouterr().err
    assert err.count("the same warning") == 3 and "a third-party info line" in err and "a debug line" in err


_VLLM_ROUTING = """
import logging, sys
from easyvideor1.logging import attach_log_file, finish_console, setup_console
setup_console(verbose=False)
attach_log_file(sys.argv[1])
from vllm.logger import _configure_vllm_root_logger
_configure_vllm_root_logger()  # what importing vLLM and starting an engine run: dictConfig
print([type(h).__name__ for h in logging.getLogger("vllm").handlers])
logging.getLogger("vllm.v1.worker.cpu_worker").info("an engine info line")
logging.getLogger("vllm.v1.worker.cpu_worker").warning("an engine warning")
finish_console()
"""


def test_vllm_logging_config_routes_its_records_here(tmp_path):
    # A fresh interpreter: vLLM's dictConfig shuts down every handler of the process, which in
    # a test session includes handlers earlier tests left on their (closed) capture streams.
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in (*CONSOLE_ENV, "VLLM_CONFIGURE_LOGGING", "TQDM_MININTERVAL")}
    done = subprocess.run([sys.executable, "-c", _VLLM_ROUTING, str(tmp_path / "evr1.log")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['_Forward']"  # vLLM's own stream handler is gone
    assert "an engine warning" in done.stderr and "an engine info line" not in done.stderr
    text = (tmp_path / "evr1.log").read_text()
    assert "an engine info line" in text and "an engine warning" in text


_TRANSFORMERS_REPEATS = """
import logging, sys
from transformers.utils import logging as hf_logging
from easyvideor1.logging import attach_log_file, finish_console, setup_console
setup_console()
attach_log_file(sys.argv[1])
warn = hf_logging.get_logger("transformers.processing_utils")
for _ in range(5):
    warn.warning("a processor warning on every prompt")
warn.info("a transformers info line")
finish_console()
print(type(hf_logging._default_handler).__name__, hf_logging._get_library_root_logger().propagate)
"""


def test_transformers_warnings_join_the_dedup_outside_ci(tmp_path):
    # Without CI in the environment transformers keeps its records on its own stderr handler:
    # the test suite runs with CI set, where it propagates anyway, so a fresh interpreter without it.
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in (*CONSOLE_ENV, "CI")}
    done = subprocess.run([sys.executable, "-c", _TRANSFORMERS_REPEATS, str(tmp_path / "evr1.log")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("a processor warning on every prompt") == 2  # once, and in the summary
    assert "[transformers]" not in done.stderr and "a transformers info line" not in done.stderr
    assert "1 warning(s) were repeated 4 more time(s)" in done.stderr
    assert done.stdout.split() == ["StreamHandler", "False"]  # its own handler and setting are back
    text = (tmp_path / "evr1.log").read_text()
    assert text.count("a processor warning on every prompt") == 5


def test_a_user_logging_choice_for_vllm_is_kept(console_mode, monkeypatch):
    monkeypatch.setenv("VLLM_CONFIGURE_LOGGING", "0")  # vLLM refuses a config file then
    console_mode(verbose=False)
    assert "VLLM_LOGGING_CONFIG_PATH" not in os.environ


def test_cache_build_in_console_mode_logs_to_the_given_file(tmp_path, capsys, monkeypatch):
    from easyvideor1.cli.main import main
    from easyvideor1.data.synth import generate_synthetic

    for key in (*CONSOLE_ENV, "TQDM_MININTERVAL"):
        monkeypatch.delenv(key, raising=False)
    generate_synthetic(tmp_path / "data", 2, seed=0, types=["demo_colour"], progress=False)
    log = tmp_path / "logs" / "build.log"
    argv = [
        "--log-file",
        str(log),
        "cache",
        "build",
        str(tmp_path / "data" / "train.jsonl"),
        "--store",
        str(tmp_path / "store"),
        "--workers",
        "1",
        "--max-frames",
        "4",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "cache_build_done" in err  # the project's summary event, outside any bar
    assert "cache_build_done" in log.read_text()
    assert "EVR1_CONSOLE" not in os.environ  # console mode ended with the command


_PROCESSES = """
import logging, os, subprocess, sys
from easyvideor1.logging import ENV_SEEN, finish_console, setup_console
if sys.argv[1] == "parent":
    setup_console(verbose=False)
    folder = os.environ[ENV_SEEN]
    logging.getLogger("vllm.platforms.cpu").warning("warning A")
    # An engine process: it inherits the environment and sets up console mode from it.
    subprocess.run([sys.executable, __file__, "child"], check=True)
    logging.getLogger("vllm.platforms.cpu").warning("warning B")
    logging.getLogger("vllm.config.vllm").warning("Enforce eager set, disabling torch.compile")
    finish_console()
    print("folder left:", os.path.exists(folder))
else:
    setup_console(verbose=False)
    for text in ("warning A", "warning A", "warning B"):
        logging.getLogger("vllm.platforms.cpu").warning(text)
"""


def test_each_warning_once_across_the_commands_processes(tmp_path):
    """vLLM logs the same start-up warnings in the command's process and in each engine process:
    the console shows each once, whichever process logged it first, and counts the repeats of
    them all; warnings that ask nothing of the user stay off the console."""
    script = tmp_path / "processes.py"
    script.write_text(_PROCESSES)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVR1_", "VLLM_LOGGING"))}
    done = subprocess.run([sys.executable, str(script), "parent"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    shown, summary = done.stderr.split("evr1: 2 warning(s) were repeated 3 more time(s)")
    assert shown.count("warning A") == 1 and shown.count("warning B") == 1, done.stderr
    assert "2x more: warning A" in summary and "1x more: warning B" in summary
    assert "Enforce eager set" not in done.stderr  # EXPECTED_WARNINGS: the log file only
    assert "folder left: False" in done.stdout


def test_outages_are_said_every_time_even_under_a_progress_bar(console_mode, tmp_path, capsys):
    """outages.py: each outage and its end is one line on the console, every time (not folded
    into the warnings shown once) and while a progress bar owns the console; counters count them."""
    from easyvideor1.outages import outage_over, outage_started

    console_mode(verbose=False)
    attach_log_file(tmp_path / "evr1.log")
    counters: dict[str, float] = {}
    with console.Progress("train", total=2, tty=False):
        for _ in range(2):
            began = outage_started("work queue (Redis)", "waiting up to 120s")
            outage_over("work queue (Redis)", began, counters, tasks_put_again=3)
    finish_console()
    err = capsys.readouterr().err
    assert err.count("outage_started part=") == 2 and err.count("outage_over part=") == 2, err
    assert "tasks_put_again=3" in err and "lasted_s=" in err
    assert counters["outages"] == 2 and counters["outage_s"] >= 0


def test_a_call_past_its_budget_is_said_and_so_is_its_end(caplog):
    """outages.watch: a block that outlasts ``after_s`` gets an outage line while it runs and an
    end line after; one that finishes in time gets none."""
    import threading

    from easyvideor1.outages import watch

    caplog.set_level(logging.WARNING, logger="easyvideor1.outages")
    counters: dict[str, float] = {}
    with watch("weights store", "waiting for the push of version 3", after_s=3600):
        pass
    assert not [r for r in caplog.records if "outage" in r.getMessage()]
    started = threading.Event()
    handler = logging.Handler()
    handler.emit = lambda record: started.set() if "outage_started" in record.getMessage() else None
    get_logger("outages").addHandler(handler)
    try:
        with watch("weights store", "waiting for the push of version 3", after_s=0.01, counters=counters):
            assert started.wait(120), "the outage line came while the block ran"  # a budget, not a timing
    finally:
        get_logger("outages").removeHandler(handler)
    messages = [r.getMessage() for r in caplog.records]
    assert [m.split(" ", 1)[0] for m in messages if m.startswith("outage")] == ["outage_started", "outage_over"]
    assert "part=\"weights store\"" in messages[0] and counters["outages"] == 1
