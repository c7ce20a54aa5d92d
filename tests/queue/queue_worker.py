"""A queue worker process for the multi-process test: doubles ``payload["x"]``.

Writes one JSON line per event to ``--log`` (line-buffered, so a SIGKILL loses nothing written
before it). With ``--hang-after N`` it leases one more batch after N tasks and then hangs
without acking, so the test can SIGKILL it at a known point with leases in flight. With
``--lease S`` its leases last S seconds and a heartbeat (``LeaseRenewer``) renews the batch in
hand, also while it hangs: only the SIGKILL stops it.
"""

from __future__ import annotations

import argparse
import json
import signal
import time

from easyvideor1.queue import LeaseRenewer, open_queue


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("namespace")
    parser.add_argument("consumer")
    parser.add_argument("--log", required=True)
    parser.add_argument("--visibility", type=float, default=0.5)
    parser.add_argument("--lease", type=float, default=None)
    parser.add_argument("--hang-after", type=int, default=None)
    parser.add_argument("--work-s", type=float, default=0.005)
    args = parser.parse_args()

    stopping = False

    def request_stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    queue = open_queue(args.url, args.namespace, visibility_timeout_s=args.visibility, lease_s=args.lease)
    leases = LeaseRenewer(queue)
    done = 0
    with open(args.log, "a", buffering=1) as log:
        log.write(json.dumps({"event": "ready"}) + "\n")
        while not stopping:
            batch = queue.get(args.consumer, count=4, block_s=0.2)
            leases.hold(batch)
            if batch and args.hang_after is not None and done >= args.hang_after:
                log.write(json.dumps({"event": "hung", "tasks": [m.task_id for m in batch]}) + "\n")
                while True:  # holds the leases until the test SIGKILLs this process
                    time.sleep(1)
            for message in batch:
                time.sleep(args.work_s)
                written = queue.put_result(message.task_id, {"y": message.payload["x"] * 2, "by": args.consumer})
                acked = queue.ack(message)
                leases.drop([message])
                log.write(json.dumps({"event": "done", "task": message.task_id, "attempt": message.attempt,
                                      "written": written, "acked": acked}) + "\n")
                done += 1
    leases.close()
    queue.close()


if __name__ == "__main__":
    main()
