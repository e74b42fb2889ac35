"""How fast joiner's Kubernetes client writes pod status to the cluster: the ceiling of the nominations.

    JOINER_CLUSTER_DIR=/work/c-race bash hack/cluster.sh up
    .venv/bin/python -m hack.bench.patch_rate --kubeconfig /work/c-race/kubeconfig [--pods 1000] [--writers 8,32,64]

Creates ``--pods`` pods no scheduler takes (``schedulerName: none``) in a namespace of its own, then for each
writer count sets every pod's ``status.nominatedNodeName`` (one `pods/status` merge patch each, as
`controller.provisioning.nominator` writes them) and prints the rate; deletes the namespace at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from controller.kube.client import KubeClient
from controller.kube.resources import NAMESPACES, PODS


async def measure(kubeconfig: str, pods: int, writers: list[int]) -> None:
    client = await KubeClient.connect(kubeconfig)
    ns = f"patch-rate-{uuid.uuid4().hex[:6]}"
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    names = [f"p-{i}" for i in range(pods)]
    try:
        limit = asyncio.Semaphore(32)

        async def create(name: str) -> None:
            async with limit:
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"schedulerName": "none", "containers": [{"name": "c", "image": "x"}]},
                }
                await client.create(PODS, pod, namespace=ns)

        await asyncio.gather(*(create(n) for n in names))
        for count in writers:
            queue: asyncio.Queue[str] = asyncio.Queue()
            for name in names:
                queue.put_nowait(name)

            async def writer(node: str, queue: asyncio.Queue[str] = queue) -> None:
                while not queue.empty():
                    name = queue.get_nowait()
                    patch = {"status": {"nominatedNodeName": node}}
                    await client.patch(PODS, name, patch, namespace=ns, subresource="status")

            started = time.perf_counter()
            await asyncio.gather(*(writer(f"node-{count}") for _ in range(count)))
            seconds = time.perf_counter() - started
            print(f"{count:>4} writers: {pods} patches in {seconds:5.2f} s = {pods / seconds:5.0f}/s", flush=True)
    finally:
        await client.delete(NAMESPACES, ns)
        await client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--writers", default="8,32,64")
    args = parser.parse_args()
    asyncio.run(measure(args.kubeconfig, args.pods, [int(w) for w in args.writers.split(",")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
