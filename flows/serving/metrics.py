"""The service's Prometheus metrics (``GET /metrics``), in a registry of its own (one per app)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["ServeMetrics"]

_LATENCY = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class ServeMetrics:
    """Request counts by endpoint and status, latency and batch-size histograms, swaps, refused queries."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("bctflow_serve_requests", "requests answered", ["endpoint", "status"], registry=r)
        self.latency = Histogram(
            "bctflow_serve_request_seconds", "request latency", ["endpoint"], buckets=_LATENCY, registry=r
        )
        self.batch = Histogram("bctflow_serve_batch_size", "queries per batch", ["kind"], buckets=_BATCH, registry=r)
        self.swaps = Counter("bctflow_serve_swaps", "live versions swapped in", registry=r)
        self.swap_failures = Counter("bctflow_serve_swap_failures", "new versions that failed to load", registry=r)
        self.refused = Counter("bctflow_serve_refused_queries", "queries refused", ["status"], registry=r)
        self.version = Gauge("bctflow_serve_version", "the live version answering queries", registry=r)
        self._children: dict[tuple[str, int], tuple[Any, Any, Any]] = {}

    def answered(self, endpoint: str, status: int, seconds: float) -> None:
        """Count one answered request (and a refused one, 4xx) and observe its latency. The labelled children are
        looked up once per (endpoint, status) — ``labels()`` takes a lock and builds a key on every call."""
        children = self._children.get((endpoint, status))
        if children is None:
            refused = self.refused.labels(str(status)) if 400 <= status < 500 else None
            children = (self.requests.labels(endpoint, str(status)), refused, self.latency.labels(endpoint))
            self._children[(endpoint, status)] = children
        count, refused, latency = children
        count.inc()
        if refused is not None:
            refused.inc()
        latency.observe(seconds)

    def text(self) -> bytes:
        """The Prometheus text format."""
        return generate_latest(self.registry)
