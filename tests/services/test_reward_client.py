"""Reward clients (in-process and HTTP) and the veRL/TRL adapters, against a live service."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

import pytest
from evr1_test_scorers import MODULE, SLEEPY

from easyvideor1.config.schema import RewardConfig
from easyvideor1.errors import ConfigError
from easyvideor1.rewards import adapters
from easyvideor1.rewards.client import (
    HttpRewardClient,
    InProcessRewardClient,
    RewardServiceError,
    ScoreItem,
    jsonable,
    open_reward_client,
    prepare_item,
    scoring_config,
)
from easyvideor1.rewards.types import RewardResult
from services.reward.examples import CHEAP, CODE_OK, TEXT, mixed_batch
from services.reward.launch import RewardServer, free_port, reward_server


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EVR1_REWARD_TOKEN", "EVR1_REWARD_URL")}
    # The service imports the test scorer module (worker.reward.extra_scorer_modules) from here.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def server():
    args = ["--workers", "2", "--timeout-s", "20", f"worker.reward.extra_scorer_modules=[{MODULE}]"]
    with reward_server(args, env=_env()) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _no_reward_env(monkeypatch):
    monkeypatch.delenv("EVR1_REWARD_URL", raising=False)
    monkeypatch.delenv("EVR1_REWARD_TOKEN", raising=False)


def _mixed_with_bad_items() -> list:
    items: list = mixed_batch(40)
    items[3] = ScoreItem(response="<answer>A</answer>", ground_truth="A", problem_type="mcq",
                         options=("A. cat", "B. dog"), id="dataclass")
    items[7] = {"id": "unknown", "problem_type": "telepathy", "response": "x", "ground_truth": "y"}
    items[11] = {"id": "missing", "problem_type": "ocr", "response": "x"}
    items[13] = {"id": "huge", "problem_type": "math", "response": "1" * 300_000, "ground_truth": "1"}
    items[17] = "not an object"
    items.append({**CODE_OK, "id": "code"})
    return items


def test_http_and_in_process_give_identical_results(server):
    items = _mixed_with_bad_items()
    local = InProcessRewardClient().score(items)
    with HttpRewardClient(server.url) as remote_client:
        remote = remote_client.score(items)
        assert remote_client.score(items[:9], problem_type=None) == local[:9]
    # The code item's details carry sandbox wall times: compare it without them.
    assert remote[:-1] == local[:-1]
    untimed = [(r.overall, r.accuracy, r.format, r.error, r.problem_type, r.details["passed"]) for r in
               (remote[-1], local[-1])]
    assert untimed[0] == untimed[1]
    assert all(isinstance(r, RewardResult) for r in remote)
    assert remote[3].accuracy == 1.0 and remote[3].problem_type == "multiple choice"
    assert "unknown problem_type 'telepathy'" in remote[7].error
    assert remote[11].error == "missing field 'ground_truth'"
    assert "too long" in remote[13].error
    assert remote[17].error == "item must be a JSON object, got string"
    assert remote[-1].error is None and remote[-1].accuracy == 1.0  # code, in the sandbox
    assert sum(r.error is None for r in remote) == len(items) - 4


def test_per_type_scoring_and_client_side_batches(server):
    items = [{"response": f"<answer>{n}</answer>", "ground_truth": "3"} for n in range(20)]
    local = InProcessRewardClient().score(items, problem_type="count")
    with HttpRewardClient(server.url, batch_size=7) as client:  # 3 requests
        assert client.score(items, problem_type="count") == local
        assert [r.accuracy for r in local].count(1.0) == 1
        types = {t["name"] for t in client.problem_types()}
    assert {"numerical", "math", "code"} <= types


def test_open_reward_client(server):
    assert isinstance(open_reward_client(None), InProcessRewardClient)
    assert isinstance(open_reward_client("inprocess"), InProcessRewardClient)
    config = RewardConfig(accuracy_weight=1.0, format_weight=0.0)
    assert open_reward_client("", config).config is config
    with open_reward_client(server.url) as client:
        assert isinstance(client, HttpRewardClient)
        assert client.score(mixed_batch(5)) == InProcessRewardClient().score(mixed_batch(5))
    with open_reward_client(server.url, config) as client:  # the service scores with the caller's config
        assert client.config is config
        assert client.score(mixed_batch(5)) == InProcessRewardClient(config).score(mixed_batch(5))
    with pytest.raises(ConfigError, match="expected 'inprocess' or an http"):
        open_reward_client("redis://localhost")


def test_4xx_is_raised_at_once_with_the_reason(server):
    with HttpRewardClient(server.url, retries=5, backoff_s=30) as client:  # a retry would hang the test
        with pytest.raises(RewardServiceError, match=r"refused the request: HTTP 404: unknown problem_type"):
            client.score(mixed_batch(2), problem_type="telepathy")


def test_retry_gives_up_with_the_url():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with HttpRewardClient(url, retries=2, backoff_s=0.01) as client:
        with pytest.raises(RewardServiceError) as err:
            client.score(mixed_batch(1))
    assert f"reward service at {url}/v1/score failed after 3 attempts" in str(err.value)
    assert "ConnectError" in str(err.value)


def test_client_retries_across_a_service_restart():
    srv = RewardServer(["--workers", "1"], env=_env())
    try:
        srv.start(ready_timeout=300)
        items = mixed_batch(30)
        expected = InProcessRewardClient().score(items)
        # A retry budget of about two minutes (a retry a second): a budget for a hang, not for how
        # fast a restart is (a few seconds when quiet, well over ten at a load of 20).
        with HttpRewardClient(srv.url, retries=120, backoff_s=0.2, max_backoff_s=1.0) as client:
            assert client.score(items) == expected
            srv.kill()  # SIGKILL by pid: connections refused until the restart
            # The second down is the outage the client must ride out, not a wait on anything.
            restarter = threading.Thread(target=lambda: (time.sleep(1.0), srv.start(ready_timeout=300)))
            restarter.start()
            try:
                assert client.score(items) == expected  # retried until the new process answered
            finally:
                restarter.join()
            assert srv.proc.poll() is None
    finally:
        srv.close()


def _verl_cases():
    mc, _ = CHEAP["multiple choice"][0]
    tg, _ = CHEAP["temporal grounding"][0]
    math_item, _ = TEXT["math"][0]
    return [
        # problem type from extra_info
        ("some/dataset", mc["response"], "B", {"problem_type": "multiple choice", "options": mc["options"]}),
        # problem type from data_source; structured ground truth given as a list
        ("temporal grounding", tg["response"], [1.5, 3.0], None),
        ("math", math_item["response"], "0.5", {"index": 3, "question": "1/2 = ?"}),
        ("numerical", "<answer>7</answer>", 7, {}),
        ("telepathy", "x", "y", None),  # unknown type: scores 0, does not raise
    ]


def test_verl_adapter_in_process_and_over_http(server, monkeypatch):
    cases = _verl_cases()
    local = [adapters.compute_score(*case) for case in cases]
    assert [d["score"] for d in local[:4]] == [1.0, 1.0, 1.0, 1.0]
    assert local[4] == {"score": 0.0, "accuracy": 0.0, "format": 0.0, "reward/errors": 1.0}
    assert adapters.compute_score(*cases[0], return_dict=False) == 1.0
    monkeypatch.setenv("EVR1_REWARD_URL", server.url)
    remote = [adapters.compute_score(data_source=c[0], solution_str=c[1], ground_truth=c[2], extra_info=c[3],
                                     sandbox_fusion_url=None) for c in cases]
    assert remote == local
    batch = adapters.compute_score_batch(*zip(*cases))
    assert batch == local
    assert adapters._shared_client(None).base_url == server.url  # really went over HTTP


def test_trl_adapter_in_process_and_over_http(server):
    completions = [
        [{"role": "assistant", "content": "<answer>B</answer>"}],
        [{"role": "user", "content": "hi"},
         {"role": "assistant", "content": [{"type": "text", "text": "<answer>"}, {"type": "text", "text": "3</answer>"}]}],
        "<answer>no</answer>",
        "<answer>[1.5, 3.0]</answer>",
    ]
    columns = {"problem_type": ["multiple choice", "numerical", "boolean", "temporal grounding"],
               "answer": ["B", 3, "yes", [1.5, 3.0]],
               "options": [["A. x", "B. y"], None, None, None],
               "problem": ["which?", "how many?", "is it?", "when?"]}
    local = adapters.make_trl_reward_func()(prompts=["p"] * 4, completions=completions, **columns)
    remote_func = adapters.make_trl_reward_func(url=server.url)
    assert remote_func.__name__ == "evr1_reward"
    remote = remote_func(prompts=["p"] * 4, completions=completions, **columns)
    assert remote == local
    assert local == [1.0, 1.0, 0.1, 1.0]  # the wrong boolean keeps its format reward
    renamed = adapters.make_trl_reward_func(url=server.url, problem_type_key="task", answer_key="solution")
    assert renamed(["p"], ["<answer>yes</answer>"], task=["boolean"], solution=["yes"]) == [1.0]
    with pytest.raises(ValueError, match="dataset column 'answer' is missing; columns passed: problem_type"):
        remote_func(["p"], ["x"], problem_type=["boolean"])


def test_prepare_item_reports_every_problem():
    config = RewardConfig()
    bad = prepare_item({"id": 1.5, "problem_type": 3, "options": [1], "extra": [], "data_type": 9}, config)
    assert bad.request is None and bad.id is None
    assert bad.error == ("field 'id' must be a string or an integer, got number; "
                         "field 'problem_type' must be a string, got integer; missing field 'response'; "
                         "missing field 'ground_truth'; field 'data_type' must be a string, got integer; "
                         "field 'options' must be a list of strings or null; "
                         "field 'extra' must be an object or null, got array")
    routed = prepare_item({"response": "x", "ground_truth": "y"}, RewardConfig(default_problem_type="ocr"))
    assert routed.error is None and routed.request.problem_type == "ocr"
    default = prepare_item({"problem_type": "telepathy", "response": "x", "ground_truth": "y"},
                           RewardConfig(default_problem_type="open-ended"))
    assert default.request.problem_type == "open-ended"


def test_jsonable_details():
    class Flag(int):
        pass

    value = {"nan": math.nan, "inf": -math.inf, 3: (1, 2.5), "set": {7}, "flag": Flag(1), "obj": object,
             "nested": {"ok": [None, True, "s"]}}
    out = jsonable(value)
    assert out["nan"] == "nan" and out["inf"] == "-inf" and out["3"] == [1, 2.5] and out["set"] == [7]
    assert type(out["flag"]) is int and out["obj"] == str(object) and out["nested"] == {"ok": [None, True, "s"]}


def test_request_config_over_the_service_config():
    base = RewardConfig(format_weight=0.5, scorer_options={"numerical": {"rel_tol": 0.1}})
    config = scoring_config({"accuracy_weight": 1, "scorer_options": {"mc": {"x": 1}},
                             "default_problem_type": "Open Ended"}, base, {MODULE})
    assert config.accuracy_weight == 1.0 and config.scorer_options == {"multiple choice": {"x": 1}}
    assert config.default_problem_type == "open-ended" and config.format_weight == 0.5  # kept from base
    for bad, message in [({"acuracy_weight": 1}, "acuracy_weight: Extra inputs are not permitted"),
                         ({"answer_tag_policy": "middle"}, "answer_tag_policy: Input should be"),
                         ({"timeout_s": 0}, "timeout_s: Input should be greater than 0"),
                         ({"scorer_options": {"telepathy": {}}}, "unknown problem_type 'telepathy'"),
                         ({"workers": 4, "url": None}, "'url', 'workers' cannot be set per request"),
                         ({"extra_scorer_modules": [MODULE, "not.loaded"]}, "'not.loaded': not loaded"),
                         ([1], "'config' must be an object")]:
        with pytest.raises(ConfigError, match=message):
            scoring_config(bad, base, {MODULE})


def _slow_items() -> list[dict]:
    return [{"id": "slow", "problem_type": SLEEPY, "response": "yes", "ground_truth": "yes", "extra": {"sleep_s": 60}},
            {"id": "quick", "problem_type": SLEEPY, "response": "yes", "ground_truth": "yes"},
            *mixed_batch(6)]


def test_a_slow_scorer_times_out_alike_in_process_and_over_http(server):
    # The limit is a budget the quick items must never reach (they take milliseconds), under load too.
    config = RewardConfig(timeout_s=5.0, workers=2, extra_scorer_modules=[MODULE])
    with InProcessRewardClient(config) as local_client:
        local = local_client.score(_slow_items())
    with HttpRewardClient(server.url, config=config) as remote_client:
        remote = remote_client.score(_slow_items())
    assert remote == local
    assert local[0] == RewardResult(0.0, 0.0, 0.0, {}, "timeout after 5s", SLEEPY)
    assert local[1].accuracy == 1.0 and local[1].error is None  # the next item of its job still scored
    assert all(r.error is None for r in local[1:])


def test_in_process_workers_start_on_first_use_and_stop_on_close():
    client = InProcessRewardClient(RewardConfig(workers=2))
    assert client._pool is None  # nothing started yet
    assert client.score(mixed_batch(3)) == InProcessRewardClient().score(mixed_batch(3))
    pids = client._pool.pids()
    assert len(pids) == 2 and all(Path(f"/proc/{pid}").exists() for pid in pids)
    client.close()
    assert client._pool is None
    for pid in pids:
        assert not _running(pid), f"worker {pid} outlived close()"


def _running(pid: int) -> bool:
    try:  # a zombie waiting to be reaped is not running
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_a_service_without_the_callers_scorer_module_refuses_at_once():
    config = RewardConfig(extra_scorer_modules=[MODULE])
    srv = RewardServer(["--workers", "1"], env=_env())
    try:
        srv.start()
        with HttpRewardClient(srv.url, config=config, retries=3, backoff_s=30) as client:
            with pytest.raises(RewardServiceError, match=rf"HTTP 422: extra_scorer_modules '{MODULE}': not loaded"):
                client.score(mixed_batch(2))
    finally:
        srv.close()
