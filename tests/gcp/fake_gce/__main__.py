"""``python -m tests.gcp.fake_gce``: the fake on its own, for the end-to-end test."""

from __future__ import annotations

import argparse

from aiohttp import web

from tests.gcp import fake_gce
from tests.gcp.fake_gce.server import FakeGCE


def main() -> None:
    parser = argparse.ArgumentParser(description=fake_gce.__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--operation-seconds", type=float, default=1.0)
    args = parser.parse_args()
    fake = FakeGCE(operation_seconds=args.operation_seconds, pull_wait_seconds=5.0)
    web.run_app(fake.app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
