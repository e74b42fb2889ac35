"""Idle GPU detection from DCGM utilization in Prometheus (``--prometheus-url``)."""
