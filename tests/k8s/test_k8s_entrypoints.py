"""Every command a rendered object runs resolves to a real CLI command or module, and every
image is built by a Dockerfile of docker/ (or is a pinned third-party image)."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml
from k8s_commands import (
    PROJECT_REGISTRY,
    THIRD_PARTY_IMAGES,
    container_argv,
    dockerfile_for,
    dockerfile_problems,
    parse_dockerfile,
    pip_requirements,
    resolve,
    resolve_evr1,
    resolve_import_path,
    resolve_kopf,
)
from k8s_corpus import corpus, corpus_ids
from k8s_support import (
    REPO,
    chart,
    config_maps,
    containers,
    ident,
    images,
    mounted_files,
    pod_specs,
    render,
    split_image,
)

from easyvideor1.errors import ConfigError
from easyvideor1.k8s import RAY_VERSION

DOCKERFILES = sorted((REPO / "docker").glob("*.Dockerfile"))


@pytest.mark.parametrize("source", corpus_ids())
def test_every_container_command_resolves(source):
    """... and every command that reads a run config finds it mounted, and it validates."""
    checked = 0
    objects = corpus()[source]
    maps = config_maps(objects)
    for obj in objects:
        for where, _, pod, _ in pod_specs(obj):
            for container in containers(pod):
                repository, _ = split_image(container["image"])
                argv = container_argv(container)
                if repository in THIRD_PARTY_IMAGES:
                    assert argv and argv[0] in THIRD_PARTY_IMAGES[repository], f"{where}: {argv}"
                    continue
                if argv is None:
                    # KubeRay supplies `ray start` (Ray pods) or `ray job submit` (submitter):
                    # the image must carry the Ray version the object declares.
                    assert obj["kind"] in ("RayJob", "RayService"), f"{where}: {container['name']} has no command"
                    assert _dockerfile_ray_version(container["image"]) == RAY_VERSION, where
                    assert _login_shell_path(container["image"]), f"{where}: `bash -l` would not find ray"
                    continue
                resolve(argv, mounted_files(pod, container, maps))
                checked += 1
        if obj["kind"] == "RayJob":  # the driver runs on the head
            head = obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
            resolve(shlex.split(obj["spec"]["entrypoint"]), mounted_files(head, head["containers"][0], maps))
            checked += 1
    if source.startswith("render-job"):
        assert checked == 1  # the entrypoint
    else:
        assert checked >= 1


def _login_shell_path(image: str) -> bool:
    """KubeRay runs its commands with `bash -l`; Debian's /etc/profile resets PATH there."""
    final = parse_dockerfile(dockerfile_for(image))[-1]
    return any(key == "RUN" and "/etc/profile.d/" in rest and "/opt/venv/bin" in rest
               for key, rest in final.instructions)


def _dockerfile_ray_version(image: str) -> str | None:
    for requirement in pip_requirements(parse_dockerfile(dockerfile_for(image))[0]):
        match = re.fullmatch(r"ray(\[[a-z,]+\])?==(\S+)", requirement)
        if match:
            return match.group(2)
    return None


def _serve_applications():
    """(where, application, files every Ray pod of the service mounts)."""
    for source, objects in corpus().items():
        maps = config_maps(objects)
        for obj in objects:
            if obj["kind"] == "RayService":
                pods = [pod for _, _, pod, _ in pod_specs(obj)]
                seen = [mounted_files(pod, pod["containers"][0], maps) for pod in pods]
                common = {path: text for path, text in seen[0].items() if all(f.get(path) == text for f in seen)}
                for app in yaml.safe_load(obj["spec"]["serveConfigV2"])["applications"]:
                    yield f"{source} {ident(obj)}", app, common


def test_rollout_serve_application_builds(tmp_path):
    """Ray Serve imports the import_path in the rollout image and calls it with the args; the
    run config file they name is mounted in the head and every worker group (Serve may build
    the application and places replicas on any of them)."""
    apps = list(_serve_applications())
    assert apps
    for index, (where, app, files) in enumerate(apps):
        builder = resolve_import_path(app["import_path"])
        args = dict(app["args"])
        assert args.get("config") in files, f"{where}: args {args} name no file every Ray pod mounts"
        local = tmp_path / f"run-{index}.yaml"
        local.write_text(files[args["config"]])
        assert builder({**args, "config": str(local)}) is not None, where
    broken = {**apps[0][1]["args"], "config": str(tmp_path / "run-0.yaml"), "queue_ur": "redis://x:6379/0"}
    with pytest.raises(ConfigError, match="queue_ur"):
        builder(broken)


@pytest.mark.parametrize("image", sorted(set().union(*(images(objs) for objs in corpus().values()))))
def test_every_image_is_built_here_or_pinned(image):
    repository, tag = split_image(image)
    assert tag and tag != "latest" and re.search(r"\d", tag), f"{image}: tag is not a pinned version"
    if repository in THIRD_PARTY_IMAGES:
        return
    assert image.startswith(PROJECT_REGISTRY), f"{image}: neither a project image nor an allowed third-party one"
    assert dockerfile_for(image).is_file(), f"{image}: no {dockerfile_for(image).relative_to(REPO)}"


def test_default_image_tags_follow_the_chart_version():
    app_version = chart().metadata["appVersion"]
    default_images = images([doc for path, text in render({"trainer": {"enabled": True}, "operator": {
        "enabled": True}}).items() if not path.endswith(".txt") for doc in yaml.safe_load_all(text) if doc])
    project = {i for i in default_images if i.startswith(PROJECT_REGISTRY)}
    assert {i.rpartition("/")[2].split(":")[0] for i in project} == {
        "reward", "frame-cache", "rollout", "trainer", "operator"}
    assert {split_image(i)[1] for i in project} == {app_version}


def test_every_dockerfile_builds_an_image_the_project_uses():
    used = {dockerfile_for(i) for objs in corpus().values() for i in images(objs) if i.startswith(PROJECT_REGISTRY)}
    assert set(DOCKERFILES) == used


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_lint(dockerfile):
    assert dockerfile_problems(dockerfile) == []


def test_ray_version_is_the_same_everywhere():
    chart_version = re.search(r'define "easyvideor1.rayVersion" -}}\s*(\S+)',
                              (REPO / "charts/templates/_helpers.tpl").read_text()).group(1)
    assert chart_version == RAY_VERSION
    for name in ("rollout", "trainer"):
        assert _dockerfile_ray_version(f"{PROJECT_REGISTRY}{name}:0") == RAY_VERSION, name


@pytest.mark.parametrize("text, problem", [
    ("FROM python:latest\nUSER 10001\nENTRYPOINT [\"evr1\"]\nCMD [\"config\", \"docs\"]\n", "not pinned"),
    ("FROM python\nUSER 10001\nENTRYPOINT [\"evr1\"]\nCMD [\"config\", \"docs\"]\n", "not pinned"),
    ("FROM python:3.11.13-slim\nENTRYPOINT [\"evr1\"]\nCMD [\"config\", \"docs\"]\n", "no USER"),
    ("FROM python:3.11.13-slim\nUSER root\nENTRYPOINT [\"evr1\"]\nCMD [\"config\", \"docs\"]\n", "root"),
    ("FROM python:3.11.13-slim\nUSER 10001\nENTRYPOINT evr1 config docs\n", "exec (JSON) form"),
    ("FROM python:3.11.13-slim\nUSER 10001\nENTRYPOINT [\"evr1\"]\nCMD [\"serve\", \"rewards\"]\n", "needs one of"),
    ("FROM python:3.11.13-slim\nRUN pip install ray\nUSER 10001\nENTRYPOINT [\"evr1\"]\nCMD [\"config\", "
     "\"docs\"]\n", "not pinned (==)"),
])
def test_dockerfile_lint_catches(tmp_path, text, problem):
    path = tmp_path / "bad.Dockerfile"
    path.write_text(text)
    problems = dockerfile_problems(path)
    assert problem in " ".join(problems), problems


@pytest.mark.parametrize("argv, problem", [
    (["evr1", "serve"], "incomplete"),
    (["evr1", "train"], "required"),
    (["evr1", "cache", "build", "data.jsonl", "--stroe", "s3://b/p"], "--stroe"),
    (["evr1", "serve", "reward", "--prot", "8000"], "--prot"),
    (["evr1", "serve", "reward", "--log-level", "loud"], "serve.reward.log_level"),
    (["evr1", "serve", "frame-cache", "--config", "/etc/easyvideor1/run.yaml"], "not a file the pod mounts"),
    (["python", "-m", "services.trainer.entrypoint", "/etc/easyvideor1/run.yaml", "worker.rollout.nn=2"],
     "not a file the pod mounts"),
    (["kopf", "run", "--standalone", "-m", "operators.videorljob.handler"], "does not import"),
    (["kopf", "run", "--standalon", "-m", "operators.videorljob.handlers"], "standalon"),
    (["python", "-m", "operators.nonexistent"], "does not import"),
    (["gunicorn", "app"], "not a command"),
])
def test_resolver_rejects_broken_commands(argv, problem):
    with pytest.raises(AssertionError, match=re.escape(problem)):
        resolve(argv, files={})


RUN_YAML = "/etc/easyvideor1/run.yaml"
REWARD = ["evr1", "serve", "reward", "--config", RUN_YAML]
FRAME_CACHE = ["evr1", "serve", "frame-cache", "--config", RUN_YAML]
TRAINER = ["python", "-m", "services.trainer.entrypoint", RUN_YAML, "distributed.mode=distributed"]


@pytest.mark.parametrize("argv, text, problem", [
    ([*REWARD, "--port", "http"], "{}", "serve.reward.port"),
    (REWARD, "worker:\n  reward:\n    workers: 0\n", "worker.reward.workers"),
    (FRAME_CACHE, "serve:\n  frame_cache:\n    nost: 0.0.0.0\n", "serve.frame_cache.nost"),
    ([*TRAINER, "worker.rollout.nn=2"], "{}", "worker.rollout.nn"),
    (TRAINER, "- a list\n", "top level must be a mapping"),
])
def test_resolver_loads_the_mounted_run_config(argv, text, problem):
    with pytest.raises(AssertionError, match=re.escape(problem)):
        resolve(argv, {RUN_YAML: text})
    good = [a for a in argv if a not in ("--port", "http", "worker.rollout.nn=2")]
    resolve(good, {RUN_YAML: "worker:\n  reward:\n    workers: 2\n"})


def test_resolver_accepts_the_real_entry_points():
    assert resolve_evr1(["k8s", "render-job", "run.yaml", "--out", "job.yaml"]).out == "job.yaml"
    params = resolve_kopf(["run", "--standalone", "--all-namespaces", "-m", "operators.videorljob.handlers"])
    assert params["clusterwide"] and params["standalone"]
