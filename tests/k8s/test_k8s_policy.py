"""Policy (restricted PSS, read-only root, resources, probes, labels) on every workload,
Ray head/worker/submitter pods and the Ray autoscaler sidecar included."""

from __future__ import annotations

import copy

import pytest
from k8s_corpus import corpus, corpus_ids
from k8s_policy import object_problems
from k8s_support import by_kind, pod_specs, render_objects


@pytest.mark.parametrize("source", corpus_ids())
def test_every_workload_meets_the_policy(source):
    objects = corpus()[source]
    problems = [p for obj in objects for p in object_problems(obj)]
    assert problems == []


@pytest.mark.parametrize("source", corpus_ids())
def test_every_workload_is_checked(source):
    # The policy only sees what pod_specs finds: every pod-making object must be walked.
    objects = corpus()[source]
    makers = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet", "Job", "RayJob", "RayService")]
    assert makers
    for obj in makers:
        assert list(pod_specs(obj)), obj["kind"]


def _first(kind, values=None):
    return copy.deepcopy(by_kind(render_objects(values), kind)[0])


def _reward():
    return next(d for d in by_kind(render_objects(), "Deployment") if d["metadata"]["name"].endswith("-reward"))


def _container(obj):
    return obj["spec"]["template"]["spec"]["containers"][0]


def _rayservice_worker(obj):
    return obj["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]


def _trainer_submitter(obj):
    return obj["spec"]["submitterPodTemplate"]["spec"]


TRAINER = {"trainer": {"enabled": True}}
MUTATIONS = {
    "no readiness probe": (_reward, lambda o: _container(o).pop("readinessProbe"), "no readinessProbe"),
    "no liveness probe": (_reward, lambda o: _container(o).pop("livenessProbe"), "no livenessProbe"),
    "privilege escalation": (_reward, lambda o: _container(o)["securityContext"].update(
        allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
    "root user": (_reward, lambda o: o["spec"]["template"]["spec"]["securityContext"].update(runAsUser=0),
                  "root"),
    "runAsNonRoot dropped": (_reward, lambda o: [o["spec"]["template"]["spec"]["securityContext"].pop(
        "runAsNonRoot"), _container(o)["securityContext"].pop("runAsNonRoot")], "runAsNonRoot"),
    "capabilities kept": (_reward, lambda o: _container(o)["securityContext"].pop("capabilities"), "drop ALL"),
    "capability added": (_reward, lambda o: _container(o)["securityContext"]["capabilities"].update(
        add=["SYS_ADMIN"]), "SYS_ADMIN"),
    "unconfined seccomp": (_reward, lambda o: o["spec"]["template"]["spec"]["securityContext"].update(
        seccompProfile={"type": "Unconfined"}), "seccompProfile"),
    "writable root": (_reward, lambda o: _container(o)["securityContext"].update(readOnlyRootFilesystem=False),
                      "writable"),
    "no memory limit": (_reward, lambda o: _container(o)["resources"]["limits"].pop("memory"), "memory limit"),
    "no cpu request": (_reward, lambda o: _container(o)["resources"]["requests"].pop("cpu"), "cpu request"),
    "hostPath volume": (_reward, lambda o: o["spec"]["template"]["spec"]["volumes"].append(
        {"name": "host", "hostPath": {"path": "/"}}), "restricted type"),
    "host network": (_reward, lambda o: o["spec"]["template"]["spec"].update(hostNetwork=True), "hostNetwork"),
    "no /tmp": (_reward, lambda o: _container(o).pop("volumeMounts"), "/tmp"),
    "missing label": (_reward, lambda o: o["metadata"]["labels"].pop("app.kubernetes.io/part-of"), "part-of"),
    "pod label missing": (_reward, lambda o: o["spec"]["template"]["metadata"]["labels"].pop(
        "app.kubernetes.io/component"), "component"),
    "ray worker privileged": (lambda: _first("RayService"), lambda o: _rayservice_worker(o)["containers"][0][
        "securityContext"].update(privileged=True), "privileged"),
    "ray worker probe": (lambda: _first("RayService"), lambda o: _rayservice_worker(o)["containers"][0].pop(
        "livenessProbe"), "livenessProbe"),
    "autoscaler sidecar": (lambda: _first("RayService"), lambda o: o["spec"]["rayClusterConfig"][
        "autoscalerOptions"].pop("securityContext"), "autoscaler sidecar"),
    "submitter as root": (lambda: _first("RayJob", TRAINER), lambda o: _trainer_submitter(o)[
        "securityContext"].update(runAsUser=0), "submitter"),
    "no submitter template": (lambda: _first("RayJob", TRAINER), lambda o: o["spec"].pop(
        "submitterPodTemplate"), "submitterPodTemplate"),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_policy_catches_a_defect(case):
    make, mutate, expected = MUTATIONS[case]
    obj = copy.deepcopy(make())
    assert object_problems(obj) == []
    mutate(obj)
    try:
        problems = object_problems(obj)
    except AssertionError as exc:  # a RayJob that cannot be walked at all
        problems = [str(exc)]
    assert problems, case
    assert expected in " ".join(problems), problems

