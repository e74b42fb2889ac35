"""A free TCP port on 127.0.0.1 for the local cluster and the processes the tests and benchmarks
start, picked below Linux's ephemeral range (32768-60999).

A port the kernel hands out for ``bind(0)`` is also the local port of some outgoing connection
sooner or later: on a cluster busy with connections one took a controller's metrics port between
the pick and the bind ("address already in use"), and the fault suite restarts kube-apiserver on
its old port, which a connection could take while it is down. Standard library only:
``hack/cluster.sh`` runs it with the system Python (``python3 hack/ports.py [taken ...]``).
"""

from __future__ import annotations

import random
import socket
import sys
from collections.abc import Iterable

PORTS = range(20000, 32768)
_handed_out: set[int] = set()  # by this process: never the same port twice
_pick = random.Random()


def free_port(taken: Iterable[int] = ()) -> int:
    """A port nothing listens on or connects from now, not in ``taken`` and not handed out before
    by this process."""
    avoid = set(taken)
    while True:
        port = _pick.choice(PORTS)
        if port in avoid or port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


if __name__ == "__main__":
    print(free_port(int(a) for a in sys.argv[1:]))
