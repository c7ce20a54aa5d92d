"""``evr1 k8s render-job``: a RayJob and its ConfigMap from a run config."""

from __future__ import annotations

import pytest
import yaml
from k8s_corpus import EXAMPLE_RUN
from k8s_support import REPO, kuberay_errors, load_yaml_docs

from easyvideor1.cli.main import main
from easyvideor1.config import apply_override, dump_config, load_config, validate_config
from easyvideor1.errors import ConfigError
from easyvideor1.k8s import (
    CONFIG_CHECKSUM_ANNOTATION,
    RUN_CONFIG_PATH,
    TRAIN_ENTRYPOINT,
    render_job,
    run_config_checksum,
)

EXAMPLE_JOB = REPO / "examples" / "k8s" / "rayjob-qwen25vl-7b.yaml"
EXAMPLE_ARGS = ["--s3-endpoint", "http://easyvideor1-minio:9000", "--s3-secret", "easyvideor1-s3"]


def run_cli(capsys, *args):
    code = main(["k8s", "render-job", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_example_manifest_is_current(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE_RUN, *EXAMPLE_ARGS)
    assert code == 0
    assert out == EXAMPLE_JOB.read_text(), "re-render examples/k8s/rayjob-qwen25vl-7b.yaml (see examples/k8s/README.md)"


def test_output_is_a_configmap_then_a_rayjob(capsys, tmp_path):
    out_file = tmp_path / "job.yaml"
    code, out, err = run_cli(capsys, EXAMPLE_RUN, "kubernetes.num_workers=3", "--out", out_file)
    assert code == 0 and out == "" and str(out_file) in err
    config_map, job = load_yaml_docs(out_file.read_text())
    assert (config_map["kind"], job["kind"]) == ("ConfigMap", "RayJob")
    assert kuberay_errors(job) == []
    spec = job["spec"]
    assert spec["entrypoint"] == TRAIN_ENTRYPOINT == (
        f"python -m services.trainer.entrypoint {RUN_CONFIG_PATH} distributed.mode=distributed")
    assert spec["shutdownAfterJobFinishes"] is True and spec["suspend"] is False
    assert spec["ttlSecondsAfterFinished"] == 1800
    assert yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]["EVR1_RUN_CONFIG"] == RUN_CONFIG_PATH
    workers = spec["rayClusterSpec"]["workerGroupSpecs"][0]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 3
    limits = workers["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "64", "memory": "900Gi", "nvidia.com/gpu": "8"}
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["resources"]["limits"] == {"cpu": "8", "memory": "32Gi"}
    assert {"name": "run-config", "configMap": {"name": config_map["metadata"]["name"]}} in head["volumes"]
    assert job["metadata"]["namespace"] == config_map["metadata"]["namespace"] == "easyvideor1"
    # Mounted read-only where the entrypoint reads it, in the head and every worker, with its checksum.
    checksum = run_config_checksum(config_map["data"]["run.yaml"])
    for template in (spec["rayClusterSpec"]["headGroupSpec"]["template"], workers["template"]):
        assert template["metadata"]["annotations"] == {CONFIG_CHECKSUM_ANNOTATION: checksum}
        mounts = template["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "run-config", "mountPath": "/etc/easyvideor1", "readOnly": True} in mounts


def test_configmap_holds_the_resolved_config(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE_RUN, "worker.rollout.n=16", "trainer.total_steps=7")
    config_map, job = load_yaml_docs(out)
    expected = load_config(EXAMPLE_RUN, ["worker.rollout.n=16", "trainer.total_steps=7"])
    _, plain = load_yaml_docs(run_cli(capsys, EXAMPLE_RUN)[1])
    head = lambda j: j["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]  # noqa: E731
    assert head(job)["annotations"] != head(plain)["annotations"]  # another config, other pods
    assert config_map["data"]["run.yaml"] == dump_config(expected)
    raw = yaml.safe_load(config_map["data"]["run.yaml"])
    apply_override(raw, "distributed.mode=distributed")  # what the entrypoint adds
    assert validate_config(raw).worker.rollout.n == 16


def test_secrets_and_env_reach_every_ray_pod(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE_RUN, *EXAMPLE_ARGS, "--env", "NCCL_DEBUG=INFO",
                           "--secret-env", "EVR1_REWARD_TOKEN=reward-token:token")
    _, job = load_yaml_docs(out)
    cluster = job["spec"]["rayClusterSpec"]
    for template in [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]:
        env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
        assert env["EVR1_S3_ENDPOINT"]["value"] == "http://easyvideor1-minio:9000"
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
            "name": "easyvideor1-s3", "key": "AWS_SECRET_ACCESS_KEY"}
        assert env["NCCL_DEBUG"]["value"] == "INFO"
        assert env["EVR1_REWARD_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "reward-token", "key": "token"}


def test_head_only_job_puts_the_gpus_on_the_head():
    config = load_config(EXAMPLE_RUN, ["kubernetes.num_workers=0", "kubernetes.gpus_per_worker=2"])
    _, job = render_job(config)
    cluster = job["spec"]["rayClusterSpec"]
    assert "workerGroupSpecs" not in cluster
    assert cluster["headGroupSpec"]["rayStartParams"]["num-gpus"] == "2"
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert head["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_suspend_name_and_service_account(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE_RUN, "kubernetes.service_account=trainer", "--suspend", "--name", "run-7")
    config_map, job = load_yaml_docs(out)
    assert job["spec"]["suspend"] is True
    assert (job["metadata"]["name"], config_map["metadata"]["name"]) == ("run-7", "run-7-config")
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["serviceAccountName"] == "trainer"
    assert job["spec"]["submitterPodTemplate"]["spec"]["serviceAccountName"] == "trainer"


def test_job_name_comes_from_the_experiment_name():
    config = load_config(EXAMPLE_RUN, ["trainer.experiment_name=Qwen2.5-VL 7B / GRPO run 3, with a long tail of words"])
    config_map, job = render_job(config)
    name = job["metadata"]["name"]
    assert len(name) <= 40 and name.startswith("qwen2-5-vl-7b-grpo-run-3")
    assert name == config_map["metadata"]["name"].removesuffix("-config")


@pytest.mark.parametrize("args, message", [
    (["distributed.queue_url=null"], "distributed.queue_url"),
    (["distributed.queue_url=memory://q"], "redis://"),
    (["worker.actor.model_path="], "model_path"),
    (["kubernetes.memory_per_worker=lots"], "memory quantity"),
    (["kubernetes.namespace=Not_Valid"], "kubernetes.namespace"),
    (["kubernetes.num_workers=-1"], "num_workers"),
    (["--name", "UPPER"], "RayJob name"),
])
def test_unusable_configs_are_refused(capsys, args, message):
    code, out, err = run_cli(capsys, EXAMPLE_RUN, *args)
    assert code == 1 and out == ""
    assert message in err


def test_bad_flags_are_refused():
    with pytest.raises(SystemExit):
        main(["k8s", "render-job", str(EXAMPLE_RUN), "--secret-env", "TOKEN=no-key"])


def test_unknown_config_key_names_the_file(tmp_path):
    bad = tmp_path / "run.yaml"
    bad.write_text(EXAMPLE_RUN.read_text().replace("num_workers:", "num_worker:"))
    with pytest.raises(ConfigError, match="kubernetes.num_worker: unknown key"):
        render_job(load_config(bad))
