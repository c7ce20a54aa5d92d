"""The VideoRLJob operator without a cluster: the reconcile state machine as plain
functions, and the kopf handlers' glue over an in-memory cluster."""

from __future__ import annotations

import copy

import kopf
import pytest
from k8s_corpus import NOW, OPERATOR_DEFAULTS, REPO, config_source_for, example_vrj
from k8s_support import kuberay_errors, vrj_errors

from operators.videorljob import API_VERSION, GROUP, KIND, PLURAL
from operators.videorljob.handlers import cleanup_once, reconcile_once
from operators.videorljob.manifests import CACHE_PERMANENT_EXIT_CODES, OperatorDefaults
from operators.videorljob.reconcile import (
    CONDITION_TYPES,
    Observed,
    job_state,
    plan,
    plan_cleanup,
    should_reconcile,
)

INLINE = REPO / "examples" / "k8s" / "videorljob.yaml"
FROM_CONFIGMAP = REPO / "examples" / "k8s" / "videorljob-configmap.yaml"
LATER = "2025-06-01T12:05:00Z"


def vrj(path=INLINE, **kwargs):
    return example_vrj(path, **kwargs)


def conditions(status):
    return {c["type"]: c for c in status["conditions"]}


def finished_job(kind="Complete", message=""):
    return {"metadata": {"name": "x"}, "status": {"conditions": [{"type": kind, "status": "True",
                                                                   "message": message}]}}


def ray_job(body, **status):
    return {**copy.deepcopy(body), "status": status}


def assert_status_valid(obj, status):
    assert vrj_errors({**obj, "status": status}) == []


def test_first_pass_creates_everything_and_holds_the_rayjob():
    obj = vrj()
    result = plan(obj, Observed(), OPERATOR_DEFAULTS, NOW)
    assert [(a.verb, a.kind, a.name) for a in result.actions] == [
        ("create", "ConfigMap", "qwen25vl-7b-video-grpo-config"), ("create", "Job", "qwen25vl-7b-video-grpo-cache"),
        ("create", "RayJob", "qwen25vl-7b-video-grpo")]
    ray = result.actions[2].body
    assert ray["spec"]["suspend"] is True and kuberay_errors(ray) == []
    for action in result.actions:
        owner = action.body["metadata"]["ownerReferences"][0]
        assert owner == {"apiVersion": API_VERSION, "kind": KIND, "name": obj["metadata"]["name"],
                         "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        assert action.body["metadata"]["namespace"] == "ml-team"
    status = result.status
    assert status["phase"] == "CacheWarming"
    state = conditions(status)
    assert [c["type"] for c in status["conditions"]] == list(CONDITION_TYPES)
    assert state["CacheWarming"]["status"] == "True" and state["CacheReady"]["status"] == "False"
    assert state["Training"]["reason"] == "WaitingForCache"
    assert_status_valid(obj, status)


def test_cache_job_builds_what_the_trainer_will_read():
    result = plan(vrj(), Observed(), OPERATOR_DEFAULTS, NOW)
    config_map, job, ray = (a.body for a in result.actions)
    container = job["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[:3] == ["cache", "build", "/data/video-r1/train.jsonl"]
    option = {args[i]: args[i + 1] for i in range(3, len(args) - 1) if args[i].startswith("--")}
    assert option["--store"] == "s3://easyvideor1/frames" and option["--family"] == "qwen2.5-vl"
    assert option["--max-frames"] == "32" and option["--fps"] == "2.0" and option["--workers"] == "8"
    assert option["--media-root"] == "/data/video-r1"
    assert container["resources"]["limits"] == {"cpu": "8", "memory": "16Gi"}
    env = {e["name"]: e for e in container["env"]}
    assert env["EVR1_S3_ENDPOINT"]["value"] == OPERATOR_DEFAULTS.s3_endpoint
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == OPERATOR_DEFAULTS.s3_secret
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJob" and rules[0]["onExitCodes"]["values"] == list(CACHE_PERMANENT_EXIT_CODES)
    # The dataset claim is mounted in the Job and every Ray pod, the data path is the train file.
    mount = {"name": "dataset", "mountPath": "/data", "readOnly": True}
    assert mount in container["volumeMounts"]
    cluster = ray["spec"]["rayClusterSpec"]
    for template in [cluster["headGroupSpec"]["template"], cluster["workerGroupSpecs"][0]["template"]]:
        assert mount in template["spec"]["containers"][0]["volumeMounts"]
    run = config_map["data"]["run.yaml"]
    assert "train_files: /data/video-r1/train.jsonl" in run and "total_steps: 200" in run
    assert cluster["workerGroupSpecs"][0]["replicas"] == 2


def _walk(obj, observed, now=LATER):
    result = plan(obj, observed, OPERATOR_DEFAULTS, now)
    obj["status"] = result.status
    return result


def test_lifecycle_to_success():
    obj = vrj()
    first = _walk(obj, Observed(), NOW)
    created = {a.kind: a.body for a in first.actions}
    running = _walk(obj, Observed(config_map=created["ConfigMap"], cache_job={"metadata": {}, "status": {"active": 1}},
                                  ray_job=created["RayJob"]))
    assert running.actions == [] and obj["status"]["phase"] == "CacheWarming"
    assert conditions(obj["status"])["CacheWarming"]["lastTransitionTime"] == NOW  # unchanged since the first pass

    ready = _walk(obj, Observed(config_map=created["ConfigMap"], cache_job=finished_job(),
                                ray_job=created["RayJob"]))
    assert [(a.verb, a.kind, a.body) for a in ready.actions] == [("patch", "RayJob", {"spec": {"suspend": False}})]
    state = conditions(obj["status"])
    assert state["CacheReady"]["status"] == "True" and state["Training"]["status"] == "True"
    assert state["CacheWarming"]["lastTransitionTime"] == LATER
    assert obj["status"]["phase"] == "Training" and obj["status"]["startTime"] == LATER

    released = {**created["RayJob"], "spec": {**created["RayJob"]["spec"], "suspend": False}}
    training = _walk(obj, Observed(config_map=created["ConfigMap"], cache_job=finished_job(),
                                   ray_job=ray_job(released, jobDeploymentStatus="Running", jobStatus="RUNNING")))
    assert training.actions == [] and obj["status"]["rayJob"] == {"jobDeploymentStatus": "Running",
                                                                   "jobStatus": "RUNNING"}
    done = _walk(obj, Observed(config_map=created["ConfigMap"], cache_job=finished_job(),
                               ray_job=ray_job(released, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")))
    assert done.actions == [] and obj["status"]["phase"] == "Succeeded"
    state = conditions(obj["status"])
    assert state["Succeeded"]["status"] == "True" and state["Failed"]["status"] == "False"
    assert state["Training"]["status"] == "False"
    assert_status_valid(obj, obj["status"])
    assert not should_reconcile(obj["status"], obj["metadata"]["generation"])
    assert plan(obj, Observed(), OPERATOR_DEFAULTS, LATER).actions == []  # finished runs never restart


@pytest.mark.parametrize("deployment, job_status, message", [
    ("Complete", "FAILED", "boom"), ("Failed", None, "the submitter failed"), ("Complete", "STOPPED", ""),
])
def test_training_failure_is_reported(deployment, job_status, message):
    obj = vrj()
    created = {a.kind: a.body for a in plan(obj, Observed(), OPERATOR_DEFAULTS, NOW).actions}
    failed = ray_job({**created["RayJob"], "spec": {**created["RayJob"]["spec"], "suspend": False}},
                     jobDeploymentStatus=deployment, jobStatus=job_status, message=message)
    result = plan(obj, Observed(config_map=created["ConfigMap"], cache_job=finished_job(), ray_job=failed),
                  OPERATOR_DEFAULTS, LATER)
    assert result.status["phase"] == "Failed"
    assert conditions(result.status)["Failed"]["reason"] == "RayJobFailed"
    assert_status_valid(obj, result.status)


def test_failed_cache_build_never_releases_the_rayjob():
    obj = vrj()
    created = {a.kind: a.body for a in plan(obj, Observed(), OPERATOR_DEFAULTS, NOW).actions}
    result = plan(obj, Observed(config_map=created["ConfigMap"], cache_job=finished_job("Failed", "exit code 3"),
                                ray_job=created["RayJob"]), OPERATOR_DEFAULTS, LATER)
    assert result.actions == []
    state = conditions(result.status)
    assert result.status["phase"] == "Failed" and state["Failed"]["reason"] == "CacheJobFailed"
    assert "exit code 3" in state["Failed"]["message"] and state["Training"]["status"] == "False"
    assert_status_valid(obj, result.status)


def test_configmap_source_and_no_warmup():
    obj = vrj(FROM_CONFIGMAP)
    waiting = plan(obj, Observed(), OPERATOR_DEFAULTS, NOW)
    assert waiting.actions == [] and waiting.status["phase"] == "Pending"
    assert "dapo-run" in waiting.status["message"]
    result = plan(obj, Observed(config_source=config_source_for(obj)), OPERATOR_DEFAULTS, NOW)
    assert [(a.verb, a.kind) for a in result.actions] == [("create", "ConfigMap"), ("create", "RayJob")]
    ray = result.actions[1].body
    assert ray["spec"]["suspend"] is False  # nothing to wait for
    run = result.actions[0].body["data"]["run.yaml"]
    assert "enable: true" in run and "serviceAccountName" not in run
    assert ray["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] == "trainer"
    assert conditions(result.status)["CacheReady"]["reason"] == "CacheDisabled"
    assert result.status["phase"] == "Training"


def test_invalid_spec_fails_without_creating_anything_until_fixed():
    obj = vrj()
    obj["spec"]["runConfig"]["worker"]["rollout"]["nn"] = 8
    result = plan(obj, Observed(), OPERATOR_DEFAULTS, NOW)
    assert result.actions == [] and result.status["phase"] == "Failed"
    assert "worker.rollout.nn: unknown key" in result.status["message"]
    assert conditions(result.status)["Failed"]["reason"] == "InvalidSpec"
    obj["status"] = result.status
    assert plan(obj, Observed(), OPERATOR_DEFAULTS, LATER).actions == []  # same generation: stays failed
    del obj["spec"]["runConfig"]["worker"]["rollout"]["nn"]
    obj["metadata"]["generation"] = 2
    assert should_reconcile(obj["status"], 2)
    fixed = plan(obj, Observed(), OPERATOR_DEFAULTS, LATER)
    assert len(fixed.actions) == 3 and fixed.status["phase"] == "CacheWarming"
    assert "completionTime" not in fixed.status and conditions(fixed.status)["Failed"]["status"] == "False"


@pytest.mark.parametrize("mutate, message", [
    (lambda v: v["spec"].pop("runConfig"), "exactly one"),
    (lambda v: v["spec"]["cache"].pop("family"), "family"),
    (lambda v: v["metadata"].update(name="x" * 41), "at most 40"),
    (lambda v: v["spec"]["runConfig"]["distributed"].pop("queue_url"), "queue_url"),
])
def test_spec_problems_are_named(mutate, message):
    obj = vrj()
    mutate(obj)
    result = plan(obj, Observed(), OPERATOR_DEFAULTS, NOW)
    assert result.actions == [] and message in result.status["message"]


def test_no_store_anywhere_is_an_invalid_spec():
    result = plan(vrj(), Observed(), OperatorDefaults(), NOW)
    assert result.status["phase"] == "Failed" and "no frame store" in result.status["message"]


def test_job_state_reads_conditions():
    assert job_state(None)[0] == "missing"
    assert job_state({"status": {}})[0] == "running"
    assert job_state(finished_job())[0] == "succeeded"
    assert job_state(finished_job("Failed", "BackoffLimitExceeded")) == ("failed", "BackoffLimitExceeded")
    assert job_state({"status": {"conditions": [{"type": "Failed", "status": "False"}]}})[0] == "running"


def test_cleanup_deletes_owned_children_rayjob_first():
    obj = vrj()
    created = {a.kind: a.body for a in plan(obj, Observed(), OPERATOR_DEFAULTS, NOW).actions}
    foreign = copy.deepcopy(created["ConfigMap"])
    foreign["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    actions = plan_cleanup(obj, Observed(config_map=foreign, cache_job=created["Job"], ray_job=created["RayJob"]))
    assert [(a.verb, a.kind) for a in actions] == [("delete", "RayJob"), ("delete", "Job")]


class FakeCluster:
    """The operator's Cluster protocol over a dict, like the API server: 409s and 404s ignored."""

    def __init__(self, *objects):
        self.objects = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): copy.deepcopy(o)
                        for o in objects}
        self.calls = []

    def get(self, kind, namespace, name):
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def create(self, kind, namespace, body):
        self.calls.append(("create", kind))
        self.objects.setdefault((kind, namespace, body["metadata"]["name"]), copy.deepcopy(body))

    def patch(self, kind, namespace, name, body):
        self.calls.append(("patch", kind))
        target = self.objects[(kind, namespace, name)]
        for key, value in body.items():
            target.setdefault(key, {}).update(value)

    def delete(self, kind, namespace, name):
        self.calls.append(("delete", kind))
        self.objects.pop((kind, namespace, name), None)


def test_handlers_drive_a_run_over_a_cluster():
    obj = vrj()
    cluster = FakeCluster()
    ns, name = "ml-team", obj["metadata"]["name"]

    def step(now):
        changes = reconcile_once(obj, cluster, OPERATOR_DEFAULTS, now)
        status = {k: v for k, v in {**obj.get("status", {}), **changes}.items() if v is not None}
        obj["status"] = status
        assert_status_valid(obj, status)
        return changes

    assert step(NOW)["phase"] == "CacheWarming"
    assert sorted(k[0] for k in cluster.objects) == ["ConfigMap", "Job", "RayJob"]
    assert conditions(step(NOW))["CacheWarming"]["reason"] == "CacheJobRunning"
    assert step(NOW) == {}  # nothing changed, nothing to write
    cluster.objects[("Job", ns, f"{name}-cache")]["status"] = finished_job()["status"]
    assert step(LATER)["phase"] == "Training"
    assert cluster.objects[("RayJob", ns, name)]["spec"]["suspend"] is False
    cluster.objects[("RayJob", ns, name)]["status"] = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}
    assert step(LATER)["phase"] == "Succeeded"
    assert cleanup_once(obj, cluster) == 3 and cluster.objects == {}
    assert cluster.calls.count(("create", "RayJob")) == 1


def test_kopf_handlers_are_registered_for_the_resource():
    registry = kopf.get_default_registry()
    timers = [h for h in registry._spawning.get_all_handlers() if h.selector.group == GROUP]
    deletes = [h for h in registry._changing.get_all_handlers() if h.selector.group == GROUP]
    assert [h.fn.__name__ for h in timers] == ["reconcile"] and timers[0].selector.any_name == PLURAL
    assert [h.fn.__name__ for h in deletes] == ["cleanup"]
    assert [h.reason for h in deletes][0].value == "delete"
    assert timers[0].interval > 0
