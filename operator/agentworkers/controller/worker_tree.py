"""A Worker's place in its spawn tree, as a reconcile pass sees it: room for it before its
pod (the tree's limits, `core.tree`), and, for a top-level run, its tree's sums and token
budget (`status.tree`). Tree-wide reads come from the store's parent -> children index."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any

from agentworkers.api import reasons
from agentworkers.api.worker import TERMINAL_PHASES, TreeStatus
from agentworkers.controller import lineage, metrics
from agentworkers.controller.worker_pass import Worker
from agentworkers.core import clocks
from agentworkers.core.clocks import now
from agentworkers.core.pods import pod_name
from agentworkers.core.tree import check_tree
from agentworkers.kube.repository import Repository

# How often a busy tree's sums (status.tree) are written to its root, at most.
TREE_SUM_SECONDS = 5.0


@contextlib.contextmanager
def place(
    storage: Repository,
    worker: Worker,
    parent_body: dict[str, Any] | None,
    child_budget: int | None,
) -> Iterator[None]:
    """Hold the run's tree while it starts, if it has room: admission counted from a store
    a burst may outrun (or was off), so the runs started are what is exact. Runs that
    slipped past admission fail here, before any pod of theirs."""
    if parent_body is None:
        yield
        return
    chain = lineage.ancestry(storage, worker.namespace, parent_body)
    root = chain[-1]

    def started(body: dict[str, Any]) -> bool:
        name = body["metadata"]["name"]
        return bool((body.get("status") or {}).get("pod")) or (
            storage.get_pod(worker.namespace, pod_name(name)) is not None
        )

    with lineage.tree_lock(worker.namespace, root["metadata"]["name"]):
        shape = lineage.tree_shape(storage, worker.namespace, chain, started, worker.name)
        check_tree(
            lineage.tree_limits(storage, worker.namespace, root), root["spec"]["agent"], shape
        )
        yield


def account(storage: Repository, worker: Worker) -> None:
    """A top-level run sums its tree (runs, live runs, tokens) into `status.tree`, at most
    every TREE_SUM_SECONDS. Past the tree's tokenBudget it marks the tree spent (saved at
    once, and the root told by one Event); each live run below then stops itself in its
    own pass (`_tree_spent`), so that no Worker has two writers."""
    below = lineage.descendants(storage, worker.namespace, worker.name)
    previous = worker.status.tree
    if not below and previous is None:
        return  # a run alone: no tree to speak of
    limits = lineage.tree_limits(storage, worker.namespace, worker.body)
    budget = limits.token_budget if limits else None
    used = lineage.tokens_used(worker.body) + sum(lineage.tokens_used(b) for b in below)
    live = [b for b in below if (b.get("status") or {}).get("phase") not in TERMINAL_PHASES]
    was_spent = previous is not None and previous.budget_exhausted
    spent = was_spent or (budget is not None and used >= budget)
    tree = TreeStatus(
        runs=len(below),
        live=len(live),
        tokens_used=previous.tokens_used if was_spent and previous else used,
        token_budget=budget,
        budget_exhausted=spent,
    )
    if previous is not None and tree == previous.model_copy(update={"summed_at": None}):
        return
    left = clocks.seconds_left(
        previous.summed_at if previous else None,
        TREE_SUM_SECONDS,
        dt.datetime.now(dt.UTC),
        spread=worker.uid,
    )
    if left is not None and left > 0 and spent == was_spent:
        worker.again(left)  # a busy tree is summed every few seconds, not on every report
        return
    metrics.TREE_RUNS.labels(agent=worker.spec.agent).observe(tree.runs)
    worker.update(tree=tree.model_copy(update={"summed_at": now()}))
    if spent and not was_spent:
        worker.save(storage)  # before any run below reads it
        storage.post_event(
            worker.body,
            "Warning",
            reasons.TREE_BUDGET_EXHAUSTED,
            f"the tree used {used} of its tokenBudget {budget}: its {len(live)} live runs "
            "below are killed",
        )
