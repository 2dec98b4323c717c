"""Start an embedded Ray as ``tuner run`` does, report its ports, and hold it until stdin closes.

Run as ``python -m tests.local_ray_probe AGENT_PORT`` by tests/test_local_ports.py. The
Ray is started by ``tuner.run.cluster.ray_session`` (as every local run starts it), with one
change: its dashboard agent listens on ``AGENT_PORT`` instead of Ray's fixed 52365,
which another Ray of this machine (the test session's, another checkout's) may hold
already. ``ray start --dashboard-agent-listen-port`` does the same for a node; here
``ray.init`` has no such argument, so Ray's node parameters are given it.

Prints one JSON line: this process's pid, the node's ports (``ray.nodes()``), the GCS
address and the pid of a live worker process (an actor's); then waits.
"""

import json
import os
import sys


def main() -> None:
    agent_port = int(sys.argv[1])
    import ray
    import ray._private.parameter as parameter

    original = parameter.RayParams.__init__

    def with_agent_port(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.dashboard_agent_listen_port = agent_port

    parameter.RayParams.__init__ = with_agent_port

    from tuner.run.cluster import ray_session

    @ray.remote(num_cpus=1)
    class Worker:
        def pid(self) -> int:
            return os.getpid()

    with ray_session(num_cpus=1):
        worker = Worker.remote()
        node = ray.nodes()[0]
        print(json.dumps({"pid": os.getpid(), "node": node, "gcs": ray.get_runtime_context().gcs_address,
                          "worker_pid": ray.get(worker.pid.remote())}, default=str), flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
