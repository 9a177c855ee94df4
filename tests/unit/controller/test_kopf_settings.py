"""kopf tuned for many objects: no per-event success lines."""

from __future__ import annotations

import logging

from agentworkers.controller.kopf.kopf_settings import OptionalKinds, QuietSuccesses


def record(level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", level, __file__, 1, msg, args, None)


def test_success_lines_go_and_the_rest_stays() -> None:
    quiet = QuietSuccesses()
    assert not quiet.filter(record(logging.INFO, "Handler %r succeeded.", "worker_event"))
    assert not quiet.filter(record(logging.INFO, "Webhook %r succeeded.", "worker"))
    assert quiet.filter(record(logging.INFO, "Resuming is processed: 1 succeeded; 0 failed."))
    assert quiet.filter(record(logging.ERROR, "Handler %r failed permanently.", "worker_event"))
    assert quiet.filter(record(logging.WARNING, "Handler %r succeeded.", "x"))


def test_a_missing_crd_is_a_warning_unless_only_kueue_s_is_missing() -> None:
    """A cluster without Kueue is no fault: kopf's warning, repeated at each namespace
    change, goes; a missing CRD of the operator's own stays a warning."""
    optional = OptionalKinds()
    unresolved = "Unresolved resources cannot be served (try creating their CRDs): %s"
    kueue = "Selector(group='kueue.x-k8s.io', version='v1beta2', any_name='workloads')"
    ours = "Selector(group='agentworkers.io', version='v1alpha1', any_name='workers')"
    assert not optional.filter(record(logging.WARNING, unresolved, kueue))
    assert optional.filter(record(logging.WARNING, unresolved, f"{kueue}, {ours}"))
    assert optional.filter(record(logging.WARNING, unresolved, ours))
    assert optional.filter(record(logging.WARNING, "Something else: %s", kueue))
