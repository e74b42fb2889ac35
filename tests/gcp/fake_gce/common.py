"""What every part of the fake shares: the project it plays, the URLs it answers with, the time,
and Google's JSON error shape."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

Obj = dict[str, Any]
BASE = "https://www.googleapis.com/compute/v1/"

PROJECT = "joiner-test"

REGION = "us-central1"

ZONES = ("us-central1-a", "us-central1-b", "us-central1-c")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000-00:00", time.gmtime())


def error_body(code: int, reason: str, message: str, status: str) -> Obj:
    return {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
            "status": status,
        }
    }


def _error(code: int, reason: str, message: str) -> web.Response:
    status = {
        400: "INVALID_ARGUMENT",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        409: "ALREADY_EXISTS",
        429: "RESOURCE_EXHAUSTED",
        503: "UNAVAILABLE",
    }.get(code, "UNKNOWN")
    return web.json_response(error_body(code, reason, message, status), status=code)


def already_exists(path: str) -> web.Response:
    return _error(409, "alreadyExists", f"The resource '{path}' already exists")


def not_found(path: str) -> web.Response:
    return _error(404, "notFound", f"The resource '{path}' was not found")
