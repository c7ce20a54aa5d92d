"""The prepare Job (prepare.enabled): `evr1 data prepare` of every prepare.data file as a Helm
hook before training, reading the release's run config, writing manifests that the run
config's data.train_files / data.val_files name. Off by default."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
import yaml
from helm_python.chart import lint
from helm_python.errors import HelmError
from k8s_commands import evr1_parser, resolve
from k8s_policy import object_problems
from k8s_support import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    by_kind,
    chart,
    config_maps,
    containers,
    kuberay_errors,
    mounted_files,
    notes,
    render_objects,
    validate_builtin,
)

from easyvideor1.cli.data import _prepare
from easyvideor1.config import validate_config
from easyvideor1.k8s import (
    CONFIG_CHECKSUM_ANNOTATION,
    CONFIG_VOLUME,
    RUN_CONFIG_DIR,
    RUN_CONFIG_KEY,
    RUN_CONFIG_PATH,
)

DATA = ["s3://raw/sets/v1/train.jsonl", "s3://raw/sets/v1/val.json"]
EXTERNAL = {"minio": {"enabled": False},
            "store": {"external": {"endpoint": "https://s3.example.com", "existingSecret": "team-s3"}}}
PREPARE = {"prepare": {"enabled": True, "data": DATA}}
JOB, COPY, RELEASE_MAP = "easyvideor1-prepare", "easyvideor1-prepare-run-config", "easyvideor1-run-config"
HOOK = "helm.sh/hook"


def merged(*parts):
    out: dict = {}
    for part in parts:
        out = _merge(out, part)
    return out


def _merge(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **{k: _merge(a[k], v) if k in a else v for k, v in b.items()}}
    return b


def render_upgrade(values):
    """What `helm upgrade` renders (the chart's tests otherwise render a first install)."""
    rendered = chart().render(values, name=RELEASE, namespace=NAMESPACE, is_upgrade=True, revision=2)
    return [doc for path, text in rendered.items() if not path.endswith(".txt")
            for doc in yaml.safe_load_all(text) if doc]


def the(objects, kind, name):
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def pod_of(job):
    return job["spec"]["template"]["spec"]


def argv(container):
    return [*container["command"], *container["args"]]


def run_yaml(objects, name=RELEASE_MAP):
    return config_maps(objects)[name]["data"][RUN_CONFIG_KEY]


def test_disabled_by_default():
    objects = render_objects()
    assert by_kind(objects, "Job") == []
    assert not [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "prepare"]
    data = yaml.safe_load(run_yaml(objects))["data"]
    assert data["train_files"] == "/data/train.jsonl" and "build_before_training" not in data.get("frame_cache", {})
    assert "prepare" in chart().values and chart().values["prepare"]["enabled"] is False


@pytest.mark.parametrize("store", ["external", "minio"])
def test_the_job_renders_and_validates_strictly(store):
    objects = render_objects(merged(EXTERNAL if store == "external" else {}, PREPARE))
    job, copy = the(objects, "Job", JOB), the(objects, "ConfigMap", COPY)
    for obj in (job, copy):
        for version in KUBE_VERSIONS:
            validate_builtin(obj, version)  # kubernetes-validate, strict: unknown fields fail
    assert object_problems(job) == []  # restricted PSS, read-only root with /tmp, requests, labels
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["ttlSecondsAfterFinished"]) == (4, 86400)
    assert pod_of(job)["restartPolicy"] == "Never" and pod_of(job)["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod_of(job)  # the release's does not exist before a pre-install hook
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}
    assert rules[1]["action"] == "Ignore" and rules[1]["onPodConditions"][0]["type"] == "DisruptionTarget"


def test_it_mounts_and_uses_the_run_config_of_this_revision():
    objects = render_objects(merged(EXTERNAL, PREPARE))
    job, maps = the(objects, "Job", JOB), config_maps(objects)
    pod = pod_of(job)
    # A hook copy of the release's file (the release's ConfigMap does not exist before a
    # pre-install hook, and holds the previous revision's file before a pre-upgrade one).
    (volume,) = [v for v in pod["volumes"] if v["name"] == CONFIG_VOLUME]
    assert volume["configMap"]["name"] == COPY
    text = run_yaml(objects)
    assert run_yaml(objects, COPY) == text
    assert job["spec"]["template"]["metadata"]["annotations"][CONFIG_CHECKSUM_ANNOTATION] == \
        hashlib.sha256(text.encode()).hexdigest()
    validate_config(yaml.safe_load(text), "prepare run.yaml")
    for container in containers(pod):
        mount = next(m for m in container["volumeMounts"] if m["name"] == CONFIG_VOLUME)
        assert (mount["mountPath"], mount.get("readOnly")) == (RUN_CONFIG_DIR, True)
        files = mounted_files(pod, container, maps)
        assert files[RUN_CONFIG_PATH] == text
        resolve(argv(container), files)  # the real argparse, then the run config as the command loads it
        assert container["args"][container["args"].index("--config") + 1] == RUN_CONFIG_PATH
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
        assert env["EVR1_S3_ENDPOINT"] == "https://s3.example.com"
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert env[key] == {"secretKeyRef": {"name": "team-s3", "key": key}}


def test_one_prepare_per_data_file_in_order_and_the_run_config_reads_their_manifests():
    objects = render_objects(merged(EXTERNAL, PREPARE))
    pod = pod_of(the(objects, "Job", JOB))
    # Init containers run one after another: the files are prepared in order, the last by the
    # main container.
    assert [c["name"] for c in pod["initContainers"]] == ["prepare-0"]
    assert [c["name"] for c in pod["containers"]] == ["prepare-1"]
    outs = []
    for container, data in zip(containers(pod), DATA):
        args = evr1_parser().parse_args(container["args"])
        assert args.func is _prepare and args.data == data and args.config == RUN_CONFIG_PATH
        assert args.model == ["Qwen/Qwen2.5-VL-7B-Instruct"]  # runConfig.worker.actor.model_path
        assert args.media_per_batch == 256 and args.no_progress and not args.refetch_remote
        outs.append(args.out)
    assert outs == ["s3://easyvideor1/prepared/train.jsonl", "s3://easyvideor1/prepared/val.jsonl"]
    config = validate_config(yaml.safe_load(run_yaml(objects)), "chart run.yaml")
    assert (config.data.train_files, config.data.val_files) == tuple(outs)
    assert config.data.frame_cache.build_before_training is False  # the manifest's media are stored
    assert config.data.frame_cache.store == "s3://easyvideor1/frames"

    # One data file: one main container; prepare.out, models and a models volume as given.
    values = merged(EXTERNAL, {"prepare": {
        "enabled": True, "data": ["s3://raw/a/clips.jsonl"], "out": "s3://team/manifests/",
        "models": ["/models/qwen2.5-vl-7b", "/models/qwen3-vl-8b"], "mediaPerBatch": 32,
        "modelsVolume": {"persistentVolumeClaim": {"claimName": "models", "readOnly": True}}}})
    objects = render_objects(values)
    pod = pod_of(the(objects, "Job", JOB))
    assert "initContainers" not in pod
    (container,) = pod["containers"]
    args = evr1_parser().parse_args(container["args"])
    assert (args.out, args.model, args.media_per_batch) == (
        "s3://team/manifests/clips.jsonl", ["/models/qwen2.5-vl-7b", "/models/qwen3-vl-8b"], 32)
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert {"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}} in pod["volumes"]
    config = validate_config(yaml.safe_load(run_yaml(objects)), "chart run.yaml")
    assert (config.data.train_files, config.data.val_files) == ("s3://team/manifests/clips.jsonl", None)
    for version in KUBE_VERSIONS:
        validate_builtin(the(objects, "Job", JOB), version)
    assert object_problems(the(objects, "Job", JOB)) == []


def test_it_is_a_hook_that_runs_before_the_trainer():
    # External store: pre-install / pre-upgrade, the run-config copy first.
    objects = render_objects(merged(EXTERNAL, PREPARE, {"trainer": {"enabled": True}}))
    job, copy = the(objects, "Job", JOB)["metadata"], the(objects, "ConfigMap", COPY)["metadata"]
    assert job["annotations"][HOOK] == copy["annotations"][HOOK] == "pre-install,pre-upgrade"
    assert int(copy["annotations"]["helm.sh/hook-weight"]) < int(job["annotations"]["helm.sh/hook-weight"])
    assert job["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation"
    # The release's own objects are no hooks: the trainer RayJob is applied after the Job succeeded.
    release = [o for o in objects if HOOK not in o["metadata"].get("annotations", {})]
    (rayjob,) = by_kind(release, "RayJob")
    assert kuberay_errors(rayjob) == []
    assert yaml.safe_load(run_yaml(objects))["data"]["train_files"] == "s3://easyvideor1/prepared/train.jsonl"

    # The in-release MinIO is created by the first install: the Job runs after it ...
    objects = render_objects(PREPARE)
    assert the(objects, "Job", JOB)["metadata"]["annotations"][HOOK] == "post-install,pre-upgrade"
    # ... so a trainer in that same install would start first: refused, saying what to do.
    with pytest.raises(HelmError, match="helm upgrade --set trainer.enabled=true"):
        render_objects(merged(PREPARE, {"trainer": {"enabled": True}}))
    # On an upgrade MinIO exists, and the Job runs pre-upgrade, before the RayJob is created.
    objects = render_upgrade(merged(PREPARE, {"trainer": {"enabled": True}}))
    assert the(objects, "Job", JOB)["metadata"]["annotations"][HOOK] == "post-install,pre-upgrade"
    assert by_kind(objects, "RayJob")


def test_values_are_checked():
    with pytest.raises(HelmError, match="/prepare/data': minItems"):
        render_objects({"prepare": {"enabled": True}})
    with pytest.raises(HelmError, match="/prepare/data/0': '/data/train.jsonl' does not match"):
        render_objects({"prepare": {"enabled": True, "data": ["/data/train.jsonl"]}})
    with pytest.raises(HelmError, match="/prepare/out': '/prepared' does not match"):
        render_objects({"prepare": {"enabled": True, "data": DATA, "out": "/prepared"}})
    with pytest.raises(HelmError, match="invalid propertyName 'hostPath'"):  # not allowed by the restricted PSS
        render_objects(merged(EXTERNAL, PREPARE, {"prepare": {"modelsVolume": {"hostPath": {"path": "/models"}}}}))
    with pytest.raises(HelmError, match="different names"):
        render_objects(merged(EXTERNAL, {"prepare": {"enabled": True, "data": ["s3://a/x/train.jsonl",
                                                                                 "s3://a/y/train.json"]}}))
    with pytest.raises(HelmError, match="prepare.models is empty and runConfig.worker.actor.model_path"):
        render_objects(merged(EXTERNAL, PREPARE, {"runConfig": {"worker": {"actor": {"model_path": ""}}}}))


def test_strict_lint_is_clean_with_prepare():
    report = lint(CHART, json.loads(json.dumps(merged(EXTERNAL, PREPARE))), strict=True, kube_version="v1.31.0",
                  namespace="easyvideor1")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []


def test_notes_name_the_job_and_its_manifests():
    text = notes(merged(EXTERNAL, PREPARE))
    assert "Job easyvideor1-prepare" in text and "logs job/easyvideor1-prepare --all-containers" in text
    assert f"{DATA[0]} -> s3://easyvideor1/prepared/train.jsonl" in text
    assert "prepare" not in notes().lower()


def test_kubernetes_validate_cli_passes_the_prepare_objects(tmp_path):
    objects = render_objects(merged(EXTERNAL, PREPARE))
    manifest = tmp_path / "prepare.yaml"
    manifest.write_text(yaml.safe_dump_all([the(objects, "Job", JOB), the(objects, "ConfigMap", COPY)]))
    result = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", KUBE_VERSIONS[0],
                             str(manifest)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ERROR" not in result.stdout and result.stdout.count("INFO") == 2
