"""A fake Google Compute Engine (and Pub/Sub) API server: the documented REST subset joiner uses.

No emulator exists for Compute Engine, so the gcp provider's tests and its end-to-end run talk to
this server instead. It shares no code with joiner (it imports nothing from ``controller`` or
``api``) and keeps state the way GCE does:

* ``/compute/v1/``: regions, subnetworks, images (and ``images/family/<f>``), instance templates,
  machineTypes, acceleratorTypes, reservations (``inUseCount`` counts the instances consuming them),
  instances (``insert``, ``bulkInsert``, ``get``, ``delete``, ``aggregated/instances`` with a
  ``labels.<k> = "<v>"`` or ``name = "<n>"`` filter and pagination) and zone operations (``get``,
  ``wait``): inserts and deletes are long-running, ``PENDING``/``RUNNING`` then ``DONE`` after
  ``operation_seconds``, with errors in ``error.errors[]`` as GCE reports them
  (``ZONE_RESOURCE_POOL_EXHAUSTED``, ``QUOTA_EXCEEDED``...).
* Errors on the HTTP level have Google's JSON error shape: ``{"error": {"code", "message",
  "errors": [{"reason", "domain", "message"}], "status"}}`` (404 ``notFound``, 409 ``alreadyExists``,
  403/429 ``rateLimitExceeded``).
* ``/v1/projects/<p>/subscriptions/<s>:pull`` and ``:acknowledge``: the audit-log entries of
  preemptions and host events, as a Log Router sink would publish them; unacknowledged messages come
  back after the ack deadline.
* ``/_fake/...`` (tests only): capacity per (zone, machine type, provisioning model), errors to
  inject, throttling, preemption and host events, image family updates, orphan instances, state.

Capacity is counted: an offering with ``capacity`` N accepts N more instances; a ``bulkInsert``
whose ``minCount`` does not fit creates nothing (GCE's all-or-nothing promise).

The parts, one module each, stacked into one class (``server.FakeGCE``): ``common`` (the project,
URLs, Google's error shape), ``world`` (what joiner reads and never writes), ``compute``
(instances and operations), ``inserts`` (``insert``, ``bulkInsert``, capacity and reservations),
``pubsub`` (instance events and their subscriptions), ``billing`` (the SKUs), ``server`` (routes,
the request log, throttling, ``/_fake``).

Run alone for the end-to-end test: ``python -m tests.gcp.fake_gce --port 8090``.
"""

from __future__ import annotations

from tests.gcp.fake_gce.billing import CORE_RAM_RATES, GPU_RATES
from tests.gcp.fake_gce.common import BASE, PROJECT, REGION, ZONES, Obj
from tests.gcp.fake_gce.server import FakeGCE

__all__ = ["BASE", "CORE_RAM_RATES", "GPU_RATES", "PROJECT", "REGION", "ZONES", "FakeGCE", "Obj"]
