"""The policy every workload of the project meets, as a checker that lists violations.

- the *restricted* Pod Security Standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
  non-root, no privilege escalation, all capabilities dropped, RuntimeDefault/Localhost
  seccomp, restricted volume types, no host namespaces/ports/paths, no privileged or
  unmasked /proc, no unsafe sysctls;
- a read-only root file system, with /tmp mounted writable;
- CPU and memory requests and a memory limit on every container;
- readiness and liveness probes on every long-running container (not on batch pods);
- the six app.kubernetes.io/* labels on the object and on its pod template.
"""

from __future__ import annotations

from typing import Any

from k8s_support import RECOMMENDED_LABELS, containers, ident, pod_specs

ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                   "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SECCOMP_OK = {"RuntimeDefault", "Localhost"}


def object_problems(obj: dict[str, Any]) -> list[str]:
    problems = [f"{ident(obj)}: missing label {label}" for label in RECOMMENDED_LABELS
                if label not in obj["metadata"].get("labels", {})]
    for where, meta, pod, long_running in pod_specs(obj):
        problems += pod_problems(where, meta, pod, long_running)
    if obj["kind"] == "RayService" and obj["spec"]["rayClusterConfig"].get("enableInTreeAutoscaling"):
        problems += autoscaler_problems(obj)
    return problems


def pod_problems(where: str, meta: dict[str, Any], pod: dict[str, Any], long_running: bool) -> list[str]:
    problems = [f"{where}: pod template lacks label {label}" for label in RECOMMENDED_LABELS
                if label not in meta.get("labels", {})]
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            problems.append(f"{where}: {field} is set")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            problems.append(f"{where}: volume {volume['name']} is of a restricted type {sorted(kinds)}")
    pod_ctx = pod.get("securityContext", {})
    for sysctl in pod_ctx.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            problems.append(f"{where}: unsafe sysctl {sysctl['name']}")
    if pod_ctx.get("runAsUser") == 0 or pod_ctx.get("runAsGroup") == 0:
        problems.append(f"{where}: pod runs as root (uid/gid 0)")
    emptydirs = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
    for container in containers(pod):
        problems += container_problems(f"{where} container {container['name']}", container, pod_ctx)
        if not any(m["mountPath"] == "/tmp" and m["name"] in emptydirs for m in container.get("volumeMounts", [])):
            problems.append(f"{where} container {container['name']}: no writable emptyDir at /tmp")
    if long_running:
        for container in pod["containers"]:
            for probe in ("readinessProbe", "livenessProbe"):
                if probe not in container:
                    problems.append(f"{where} container {container['name']}: no {probe}")
    return problems


def container_problems(where: str, container: dict[str, Any], pod_ctx: dict[str, Any]) -> list[str]:
    problems = []
    ctx = container.get("securityContext", {})

    def effective(key: str) -> Any:
        return ctx.get(key, pod_ctx.get(key))

    if effective("runAsNonRoot") is not True:
        problems.append(f"{where}: runAsNonRoot is not true")
    if effective("runAsUser") == 0:
        problems.append(f"{where}: runAsUser is 0")
    if ctx.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{where}: allowPrivilegeEscalation is not false")
    if ctx.get("privileged"):
        problems.append(f"{where}: privileged")
    capabilities = ctx.get("capabilities", {})
    if "ALL" not in capabilities.get("drop", []):
        problems.append(f"{where}: capabilities do not drop ALL")
    if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
        problems.append(f"{where}: adds capabilities {capabilities['add']}")
    seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
    if seccomp not in SECCOMP_OK:
        problems.append(f"{where}: seccompProfile is {seccomp!r}, not RuntimeDefault or Localhost")
    if ctx.get("procMount", "Default") != "Default":
        problems.append(f"{where}: procMount {ctx['procMount']}")
    apparmor = (ctx.get("appArmorProfile") or pod_ctx.get("appArmorProfile") or {}).get("type", "RuntimeDefault")
    if apparmor not in ("RuntimeDefault", "Localhost"):
        problems.append(f"{where}: appArmorProfile {apparmor}")
    if ctx.get("readOnlyRootFilesystem") is not True:
        problems.append(f"{where}: root file system is writable")
    for port in container.get("ports", []):
        if port.get("hostPort"):
            problems.append(f"{where}: hostPort {port['hostPort']}")
    problems += resource_problems(where, container.get("resources"))
    return problems


def resource_problems(where: str, resources: dict[str, Any] | None) -> list[str]:
    resources = resources or {}
    problems = [f"{where}: no {kind} request" for kind in ("cpu", "memory")
                if kind not in resources.get("requests", {})]
    if "memory" not in resources.get("limits", {}):
        problems.append(f"{where}: no memory limit")
    return problems


def autoscaler_problems(obj: dict[str, Any]) -> list[str]:
    """KubeRay injects the autoscaler sidecar into the head pod from autoscalerOptions."""
    cluster = obj["spec"]["rayClusterConfig"]
    options = cluster.get("autoscalerOptions", {})
    head = cluster["headGroupSpec"]["template"]["spec"]
    sidecar = {"name": "autoscaler", "securityContext": options.get("securityContext", {}),
               "resources": options.get("resources"), "volumeMounts": options.get("volumeMounts", [])}
    where = f"{ident(obj)} autoscaler sidecar"
    problems = container_problems(where, sidecar, head.get("securityContext", {}))
    emptydirs = {v["name"] for v in head.get("volumes", []) if "emptyDir" in v}
    if not any(m["mountPath"] == "/tmp" and m["name"] in emptydirs for m in sidecar["volumeMounts"]):
        problems.append(f"{where}: no writable emptyDir at /tmp")
    return problems
