"""The code sandbox against real hostile programs: every attack is contained, the test
process survives, and a normal run right after still works. Fork bombs and memory bombs are in
tests/security/test_sandbox_modes.py, run against every mode."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from easyvideor1.rewards.sandbox import (
    SandboxLimits,
    SandboxUnavailable,
    run_sandboxed,
    sandbox_mode,
)

# Generous wall time: only hostile runs should ever reach it, even on a loaded machine.
FAST = SandboxLimits(wall_time_s=30, cpu_time_s=5)


def _assert_still_works() -> None:
    result = run_sandboxed("print(6 * 7)", limits=FAST)
    assert result.ok, result
    assert result.stdout.strip() == b"42"


def test_mode_is_bwrap_here():
    assert sandbox_mode() == "bwrap"


def test_normal_run_stdin_files_in_and_out():
    program = (
        "import sys\n"
        "data = open('data/in.txt').read()\n"
        "open('out.txt', 'w').write(data.upper() + sys.stdin.read())\n"
        "print('done')\n"
    )
    result = run_sandboxed(program, stdin="-tail", files={"data/in.txt": "hello"}, limits=FAST)
    assert result.ok and result.reason is None
    assert result.stdout == b"done\n"
    assert result.files_out == {"out.txt": b"HELLO-tail"}  # unchanged inputs do not come back


def test_runs_as_nobody_with_minimal_filesystem():
    result = run_sandboxed("import os; print(os.getuid()); print(sorted(os.listdir('/')))", limits=FAST)
    assert result.ok
    uid, listing = result.stdout.decode().splitlines()
    assert uid == "65534"
    for hidden in ("root", "work", "home", "etc", "var", "opt"):
        assert f"'{hidden}'" not in listing


def test_network_is_unreachable(tcp_listener):
    port, accepted = tcp_listener
    program = (
        "import socket\n"
        "s = socket.socket(); s.settimeout(2)\n"
        f"try:\n    s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
        "except OSError as e:\n    print('blocked', e)\n"
        "try:\n    socket.getaddrinfo('example.com', 80); print('RESOLVED')\n"
        "except OSError as e:\n    print('no dns', e)\n"
    )
    result = run_sandboxed(program, limits=FAST)
    assert result.ok, result
    assert b"CONNECTED" not in result.stdout and b"blocked" in result.stdout
    assert b"RESOLVED" not in result.stdout
    time.sleep(0.3)
    assert accepted == []  # the server on the host loopback never saw a connection
    with socket.create_connection(("127.0.0.1", port), timeout=2):  # while the host can reach it
        pass


def test_writes_outside_the_work_dir_fail_and_never_reach_the_host(tmp_path):
    marker = tmp_path / f"escape-{uuid.uuid4().hex}"
    program = (
        "import os\n"
        f"for path in ['/usr/evil', '/evil', '/dev/evil', '/sandbox/in/evil', {str(marker)!r}]:\n"
        "    try:\n        open(path, 'w').write('x'); print('WROTE', path)\n"
        "    except OSError as e:\n        print('denied', path, e.errno)\n"
    )
    result = run_sandboxed(program, limits=FAST)
    assert result.ok
    lines = result.stdout.decode().splitlines()
    assert all(line.startswith("denied") for line in lines), lines
    assert not marker.exists()
    big = run_sandboxed("open('big', 'wb').write(b'x' * (4 << 20))", limits=SandboxLimits(file_size_bytes=1 << 20))
    assert big.returncode == 1 and "file size" in big.reason
    full = run_sandboxed("for i in range(64): open(f'f{i}', 'wb').write(b'x' * (1 << 20))",
                         limits=SandboxLimits(tmpfs_bytes=4 << 20))
    assert full.returncode == 1 and b"No space left" in full.stderr


def test_host_secrets_are_invisible():
    secret = uuid.uuid4().hex
    paths = [Path("/root") / f"evr1-secret-{secret}.txt", Path("/work") / f"evr1-secret-{secret}.txt"]
    for path in paths:
        path.write_text(secret)
    try:
        program = (
            "import os\n"
            f"for path in {[str(p) for p in paths]!r} + ['/proc/1/root' + {str(paths[0])!r}]:\n"
            "    try:\n        print('READ', open(path).read())\n"
            "    except OSError as e:\n        print('missing', e.errno)\n"
        )
        result = run_sandboxed(program, limits=FAST)
        assert result.ok
        assert secret.encode() not in result.stdout
        assert result.stdout.count(b"missing") == 3
    finally:
        for path in paths:
            path.unlink()


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_infinite_loop_and_background_children_are_killed():
    marker = f"{uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    program = (
        "import os, subprocess\n"
        f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        "while True:\n    pass\n"
    )
    start = time.monotonic()
    result = run_sandboxed(program, limits=SandboxLimits(wall_time_s=1.5, cpu_time_s=30))
    assert result.timed_out and result.returncode is None
    assert 1.4 < time.monotonic() - start < 5
    deadline = time.monotonic() + 3
    while _processes_with(f"sleep\0{marker}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(f"sleep\0{marker}") == []
    _assert_still_works()


def test_cpu_limit_and_output_cap():
    result = run_sandboxed("while True: pass", limits=SandboxLimits(wall_time_s=10, cpu_time_s=1))
    assert result.returncode == -24 and result.reason == "cpu time limit exceeded"
    loud = run_sandboxed("import sys\nsys.stdout.write('x' * (3 << 20))", limits=SandboxLimits(output_bytes=1000))
    assert loud.returncode == 0 and len(loud.stdout) == 1000 and loud.truncated
    assert "truncated" in loud.reason


def test_concurrent_runs_are_independent():
    results: list[bytes] = []

    def one(i: int) -> None:
        results.append(run_sandboxed(f"print({i} * 2)", limits=FAST).stdout)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == sorted(f"{i * 2}\n".encode() for i in range(4))


def test_bad_file_names_are_rejected():
    with pytest.raises(ValueError):
        run_sandboxed("pass", files={"../x": b""})
    with pytest.raises(ValueError):
        run_sandboxed("pass", files={"/etc/x": b""})


def test_refuses_without_an_isolation_tool(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty dir: neither bwrap nor unshare
    with pytest.raises(SandboxUnavailable, match="bwrap not found.*unshare"):
        sandbox_mode(refresh=True)
    monkeypatch.setenv("EVR1_SANDBOX", "nonsense")
    with pytest.raises(SandboxUnavailable, match="EVR1_SANDBOX"):
        sandbox_mode()
    monkeypatch.undo()
    assert sandbox_mode(refresh=True) == "bwrap"


def test_unshare_fallback_mode(monkeypatch, tcp_listener):
    """The fallback (root + unshare + setpriv) still blocks network and caps processes."""
    port, accepted = tcp_listener
    monkeypatch.setenv("EVR1_SANDBOX", "unshare")
    assert os.geteuid() == 0, "the fallback needs root; these tests run as root"
    assert sandbox_mode(refresh=True) == "unshare"
    program = (
        "import os, socket\n"
        "print(os.getuid())\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n"
        "except OSError:\n    print('blocked')\n"
        "try:\n    open('/root/x', 'w'); print('WROTE')\nexcept OSError:\n    print('denied')\n"
        "n = 0\n"
        "for _ in range(200):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        import time; time.sleep(2); os._exit(0)\n"
        "    n += 1\n"
        "print(n)\n"
    )
    result = run_sandboxed(program, limits=SandboxLimits(max_processes=8, wall_time_s=10))
    assert result.ok and result.mode == "unshare", result
    uid, net, write, forked = result.stdout.decode().split()
    assert int(uid) != 0 and net == "blocked" and write == "denied" and int(forked) == 7
    assert accepted == []
    looping = run_sandboxed("while True: pass", limits=SandboxLimits(wall_time_s=1))
    assert looping.timed_out
    monkeypatch.undo()
    assert sandbox_mode(refresh=True) == "bwrap"


def test_run_dirs_of_dead_processes_are_swept():
    dead = Path("/tmp") / "evr1-sbx-999999999-1-stale"
    alive = Path("/tmp") / f"evr1-sbx-{os.getpid()}-999-mine"
    for path in (dead, alive):
        (path / "in").mkdir(parents=True, exist_ok=True)
    try:
        assert sandbox_mode(refresh=True) == "bwrap"
        assert not dead.exists() and alive.exists()
    finally:
        for path in (dead, alive):
            if path.exists():
                (path / "in").rmdir()
                path.rmdir()
