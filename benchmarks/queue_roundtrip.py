"""Round-trip throughput of the work queue: put -> get (batched) -> put_result -> ack -> wait_results.

Runs the Redis Streams backend against a private redis-server on a free loopback port (started
here via tests/servers.py and stopped by its pid at the end) and the in-process backend as the
baseline, side by side in this process, and prints msgs/s for each and their ratio.

    .venv/bin/python benchmarks/queue_roundtrip.py [--tasks 2000] [--batch 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from servers import redis_server  # noqa: E402

from easyvideor1.queue import WorkQueue, open_queue  # noqa: E402


def roundtrip(queue: WorkQueue, tasks: int, batch: int) -> float:
    """Seconds to push ``tasks`` tasks through one full round trip; checks every result."""
    ids = [f"t{i}" for i in range(tasks)]
    start = time.perf_counter()
    for i, task_id in enumerate(ids):
        queue.put(task_id, {"i": i, "video": f"v{i}.mp4"})
    handled = 0
    while handled < tasks:
        for message in queue.get("bench", count=batch, block_s=1.0):
            queue.put_result(message.task_id, {"score": message.payload["i"] % 7})
            queue.ack(message)
            handled += 1
    results = queue.wait_results(ids, timeout_s=60)
    elapsed = time.perf_counter() - start
    if len(results) != tasks or any(results[f"t{i}"]["score"] != i % 7 for i in range(tasks)):
        raise RuntimeError("round trip lost or corrupted results")
    return elapsed


def measure(url: str, tasks: int, batch: int, repeats: int) -> float:
    """Median msgs/s over ``repeats`` runs, each in a fresh namespace (purged afterwards)."""
    rates = []
    for _ in range(repeats):
        with open_queue(url, f"bench{uuid.uuid4().hex[:8]}", max_in_flight=tasks) as queue:
            rates.append(tasks / roundtrip(queue, tasks, batch))
            queue.purge()
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with redis_server() as server:
        redis_rate = measure(server.url, args.tasks, args.batch, args.repeats)
        memory_rate = measure("memory://bench", args.tasks, args.batch, args.repeats)
    print(f"queue round trip: {args.tasks} tasks, get batch {args.batch}, median of {args.repeats} runs")
    print(f"  in-process (baseline) : {memory_rate:>10,.0f} msgs/s")
    print(f"  redis streams         : {redis_rate:>10,.0f} msgs/s")
    print(f"  ratio redis/in-process: {redis_rate / memory_rate:.3f}x")


if __name__ == "__main__":
    main()
