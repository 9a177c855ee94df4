"""`agentworkers run`: the program in a worker pod, wired to its Worker through the API.

It reads its own Worker (with its own least-privilege credentials), re-verifies its
profile pin before the first step, builds the agent loop from the effective config
the operator computed, and then:

* reports phase, output, error, the last event and a ring of recent events to its
  Worker's status (its own fields; the operator writes the others);
* delivers spec.queries, in order, once each (an interactive run idles between them;
  any other run is Done after its first answer);
* stops on spec.kill or SIGTERM (the operator records the kill; the runtime just ends).

Every event is also one JSON line on stdout, so `kubectl logs` shows the run.
"""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agentworkers import kube
from agentworkers.api import AgentConfigStatus, WorkerSpec, WorkerStatus, reasons
from agentworkers.api.names import BINDING_ANNOTATION
from agentworkers.client import Client
from agentworkers.core.clocks import now
from agentworkers.core.effective import EffectiveConfig, ModelEndpoint
from agentworkers.core.objects import meta
from agentworkers.core.pods import EFFECTIVE_CONFIG_ENV, SECRETS_DIR
from agentworkers.core.pools import (
    CLAIM_FILE_ENV,
    WARM_MODEL_ENV,
    WARM_REVISION_ENV,
    Claim,
    check_claim,
)
from agentworkers.core.spawning import verify_run_start
from agentworkers.errors import REFUSALS, AgentWorkersError, ApiError
from agentworkers.kube.repository import Storage
from agentworkers.kube.watch import observe
from agentworkers.runtime.claims import wait_for_claim
from agentworkers.runtime.events import EventBus, EventKind, JsonLinesSink
from agentworkers.runtime.inputs import take as take_inputs
from agentworkers.runtime.loop import DONE, FAILED, IDLE, RUNNING, AgentLoop, LoopClosed
from agentworkers.runtime.mcp import CONNECTED, Connection, McpServers
from agentworkers.runtime.models import ModelClient
from agentworkers.runtime.providers import Prepared, client_for, prepare
from agentworkers.runtime.reporter import Reporter
from agentworkers.runtime.skills import Skill, load_skills
from agentworkers.runtime.tools import Sandbox, Toolbox, planner_tools
from agentworkers.runtime.tracing import RunSpans
from agentworkers.runtime.tracing import start as start_spans
from agentworkers.runtime.worker_ops import KubeWorkerOps, once_granted

log = logging.getLogger("agentworkers.runtime")
T = TypeVar("T")

PHASES = {RUNNING: "Running", IDLE: "Idle", DONE: "Done", FAILED: "Failed"}
WATCH_SECONDS = 300  # a long watch: the run's own reports end each quiet spell anyway


def _api_key(secret: str | None) -> str | None:
    """The model key: key `apiKey` of the mounted api-key Secret, else AGENTWORKERS_API_KEY."""
    if secret:
        # AGENTWORKERS_SECRETS_DIR: where the local pod runner puts what a kubelet would mount.
        mounts = Path(os.environ.get("AGENTWORKERS_SECRETS_DIR", SECRETS_DIR))
        path = mounts / secret / "apiKey"
        if path.exists():
            return path.read_text().strip()
    return os.environ.get("AGENTWORKERS_API_KEY")


def verify_pin(storage: Storage, body: dict[str, Any]) -> None:
    """The runtime's own re-check, before its first step: a restart runs the exact profile."""
    spec = WorkerSpec.model_validate(body["spec"])
    if not spec.profile:
        return
    status = WorkerStatus.model_validate(body.get("status") or {})
    namespace = body["metadata"]["namespace"]
    config = storage.get("agentconfigs", namespace, spec.agent) or {}
    active = AgentConfigStatus.model_validate(config.get("status") or {}).active_revision
    current = storage.revision_spec(namespace, active.name) if active else None
    annotation = (body["metadata"].get("annotations") or {}).get(BINDING_ANNOTATION)
    verify_run_start(spec, annotation, status.binding, None, current)


def _interruptible(call: Callable[[], T]) -> T:
    """`call`, run on a thread of its own while the main thread waits for it in short
    waits. A signal's Python handler runs only on the main thread, between two
    bytecodes: had the main thread been in a long read itself (the Worker's watch), a
    SIGTERM delivered to another thread would wait with that read, for minutes."""
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as e:  # handed over to the main thread as it is
            outcome.append((False, e))
        finally:
            done.set()

    threading.Thread(target=target, name="serve", daemon=True).start()
    while not done.wait(0.5):
        pass
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def warm(namespace: str, sandbox: str, kubeconfig: str | None) -> int:
    """A warm pod's runtime: imported, its model client built and its connections open
    ahead of any run, it waits for its claim and then runs the run it names exactly as a
    cold pod runs its own, after checking the claim fits this pod
    (`core.pools.check_claim`)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    api = kube.Api(kube.connect(kubeconfig).api)
    endpoint = ModelEndpoint.model_validate_json(os.environ[WARM_MODEL_ENV])
    model = prepare(endpoint, _api_key(endpoint.api_key_secret))
    # A run's first requests go at once on two connections (its reads, its reports):
    # their TLS handshakes are made now, and kept, not on the way to its first report.
    connect = functools.partial(api.open_connections, 2)
    connect()
    gc.freeze()  # the SDK's modules too (as `main` does)
    claim = wait_for_claim(Path(os.environ[CLAIM_FILE_ENV]), connect)
    config = EffectiveConfig.model_validate_json(claim.effective)
    return run(claim.worker, namespace, sandbox, kubeconfig, config, api, claim, model)


def run(
    name: str,
    namespace: str,
    sandbox: str,
    kubeconfig: str | None,
    config: EffectiveConfig,
    api: kube.Api | None = None,
    claim: Claim | None = None,
    model: Prepared | None = None,
) -> int:
    # SIGTERM (the pod is going away) ends the process from here on, whatever it is doing;
    # the `finally` clauses still close the loop and flush the last report. A container's
    # pid 1 with no handler would ignore it, to be killed only at the grace period's end.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    api = api or kube.Api(kube.connect(kubeconfig).api)
    storage = Storage(api)
    # The operator grants the runtime its Role right after creating the pod (claiming it).
    pause = 0.005 if claim is not None else 0.2
    body = once_granted(lambda: storage.get("workers", namespace, name), pause)
    if body is None:
        log.error("worker %s/%s not found", namespace, name)
        return 1
    bus = EventBus(name)
    sink = JsonLinesSink(bus, sys.stdout)
    reporter = Reporter(storage, namespace, name, bus)
    spec = WorkerSpec.model_validate(body["spec"])
    spans = start_spans(config.tracing, body, config.provider, config.model)
    reporter.on_report = spans.observe
    try:
        if claim is not None:
            check_claim(claim, os.environ.get(WARM_REVISION_ENV, ""), body)
        verify_pin(storage, body)
        # Before the first step: the inputs, checked against their digests.
        inputs_note = take_inputs(sandbox, spec.inputs, config.input_disposition)
    except REFUSALS as error:
        reporter.report(
            phase="Failed",
            error=f"{error.reason}: {error}",
            lastEvent=f"{error.reason} at run start",
        )
        close_spans(spans, bus)
        reporter.close()
        sink.close()
        return 1
    tools = [
        *Sandbox(sandbox).tools(),
        *planner_tools(
            KubeWorkerOps(Client(api, namespace), name, spec.agent, Sandbox(sandbox), spans)
        ),
    ]
    servers = McpServers(config.mcp_servers)
    toolbox = Toolbox.for_config(config, tools, servers.tools)
    skills, problems = load_skills(sandbox, config.skills)
    for skill, why in problems.items():
        log.warning("skill %s not loaded: %s", skill, why)
        bus.publish(
            EventKind.NOTICE, {"text": f"skill {skill!r} not loaded: {why}", "skill": skill}
        )
    try:
        if not connect_mcp(servers, toolbox, bus, reporter):
            return 1
        client = client_for(config, _api_key(config.api_key_secret), config.script, model)
        return _run_loop(
            storage,
            namespace,
            name,
            body,
            spec,
            config,
            client,
            toolbox,
            skills,
            inputs_note,
            bus,
            reporter,
            spans,
        )
    finally:
        servers.close()
        close_spans(spans, bus)
        reporter.close()
        sink.close()
        api.client.close()


def close_spans(spans: RunSpans, bus: EventBus) -> None:
    """End the run span and send the spans left; a notice says how many were dropped."""
    dropped = spans.close()
    if dropped:
        bus.publish(
            EventKind.NOTICE,
            {"text": f"tracing: {dropped} spans did not reach the collector", "dropped": dropped},
        )


def connect_mcp(servers: McpServers, toolbox: Toolbox, bus: EventBus, reporter: Reporter) -> bool:
    """Connect to the run's MCP servers: one mcp_server event each, and the Worker status
    names each with the tools the run got (the operator posts a Warning Event for one that
    is unavailable). False, with the run Failed (McpServerUnavailable), when a required
    one is unavailable; an optional one down, the run goes on without its tools."""

    def report(connections: list[Connection]) -> None:
        for c in connections:
            status = c.status(toolbox.offers_mcp)
            payload: dict[str, Any] = {"name": c.server.name, "url": c.server.url}
            payload |= {"state": c.state, "required": c.server.required}
            payload |= {"tools": list(status.tools)} if c.state == CONNECTED else {"error": c.error}
            bus.publish(EventKind.MCP_SERVER, payload)
        reporter.report(
            mcpServers=[c.status(toolbox.offers_mcp).wire() for c in servers.connections]
        )

    connections = servers.start()
    if not connections:
        return True
    report(connections)
    down = servers.required_down()
    if down:
        named = "; ".join(f"{c.server.name} ({c.server.url}): {c.error}" for c in down)
        error = f"{reasons.MCP_SERVER_UNAVAILABLE}: required MCP server unavailable: {named}"
        bus.publish(EventKind.STATUS_CHANGE, {"status": FAILED, "error": error})
        reporter.report(phase="Failed", error=error, lastEvent=error[:200])
        return False
    servers.on_change = lambda connection: report([connection])
    return True


def _run_loop(
    storage: Storage,
    namespace: str,
    name: str,
    body: dict[str, Any],
    spec: WorkerSpec,
    config: EffectiveConfig,
    client: ModelClient,
    toolbox: Toolbox,
    skills: list[Skill],
    inputs_note: str,
    bus: EventBus,
    reporter: Reporter,
    spans: RunSpans,
) -> int:
    """The agent loop, its status reports, and the queries, until the run ends."""
    finished = threading.Event()

    def on_status(status: str, output: str | None, error: str | None) -> None:
        fields: dict[str, Any] = {"phase": PHASES.get(status, "Running")}
        # The operator's idle clock runs from here (a merge patch's null clears it).
        fields["idleSince"] = now() if status == IDLE else None
        if output is not None:
            fields["output"] = output
        if error is not None:
            fields["error"] = error
        reporter.report(**fields)
        if status in (DONE, FAILED):
            finished.set()

    loop = AgentLoop(
        config,
        client,
        toolbox,
        bus,
        on_status,
        skills,
    )
    # The operator sums every run's usage into its tree's (AgentConfig spec.tree.tokenBudget).
    loop.spans = spans
    loop.on_usage = lambda prompt, completion: reporter.report(
        tokensUsed={
            "prompt": prompt,
            "completion": completion,
            "estimated": loop.estimated_tokens,
        }
    )
    delivered = int((body.get("status") or {}).get("queriesDelivered") or 0)
    code = 0
    try:
        if spec.initial_message and delivered == 0:
            loop.send(inputs_note + spec.initial_message)
        code = _interruptible(
            lambda: _serve(storage, body, spec, loop, reporter, finished, delivered)
        )
    except LoopClosed:
        code = 1
    finally:
        loop.close()
    return code


def _serve(
    storage: Storage,
    body: dict[str, Any],
    spec: WorkerSpec,
    loop: AgentLoop,
    reporter: Reporter,
    finished: threading.Event,
    delivered: int,
) -> int:
    """Deliver queries and watch for a kill until the run ends.

    One watch of the Worker (`agentworkers.kube.watch`), from the version the run read
    (`body`). The run's own status reports come back on it as events, which is when it
    checks whether a non-interactive run has answered (and so is Done). A broken watch is
    opened again after a second, from a listing.
    """
    namespace, name = meta(body).namespace, meta(body).name
    since: dict[str, Any] | None = body
    while not finished.is_set():
        try:
            changes = observe(
                storage.api, "workers", namespace, name=name, heartbeat=WATCH_SECONDS, since=since
            )
            since = None
            for kind, changed in changes:
                if finished.is_set():
                    break
                if changed is None or kind == "DELETED":
                    continue
                current = WorkerSpec.model_validate(changed["spec"])
                if current.kill is not None:
                    loop.spans.killed(current.kill.reason)
                    return 0  # the operator records the kill and removes the pod
                for query in current.queries[delivered:]:
                    loop.send(query)
                    delivered += 1
                    reporter.report(queriesDelivered=delivered)
                if not spec.interactive and loop.wait_idle(0) and loop.status == IDLE:
                    loop.finish()
        except ApiError as e:
            log.warning("watching the Worker failed (%s); watching again", e)
            time.sleep(1)
    return 0 if loop.status == DONE else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agentworkers run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--worker", default=os.environ.get("AGENTWORKERS_WORKER"), required=False)
    parser.add_argument("--namespace", default=os.environ.get("AGENTWORKERS_NAMESPACE"))
    parser.add_argument("--sandbox", default=os.environ.get("AGENTWORKERS_SANDBOX", os.getcwd()))
    parser.add_argument("--kubeconfig")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="a warm pod's runtime: wait for the run the operator gives the pod "
        f"(its claim, in the file ${CLAIM_FILE_ENV})",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.warm:
        if not args.namespace or CLAIM_FILE_ENV not in os.environ:
            parser.error(f"--warm needs --namespace and {CLAIM_FILE_ENV}")
        try:
            return warm(args.namespace, args.sandbox, args.kubeconfig)
        except AgentWorkersError as e:
            log.error("%s: %s", e.reason, e)
            return 1
    if not args.worker or not args.namespace:
        parser.error(
            "--worker and --namespace (or AGENTWORKERS_WORKER, AGENTWORKERS_NAMESPACE) are required"
        )
    if EFFECTIVE_CONFIG_ENV not in os.environ:
        parser.error(
            f"{EFFECTIVE_CONFIG_ENV} is not set: `agentworkers run` is the command of a "
            "worker's pod, which the operator makes with it"
        )
    config = EffectiveConfig.model_validate_json(os.environ[EFFECTIVE_CONFIG_ENV])
    # What is imported by now lives as long as the process: out of the collector's sight,
    # no collection walks it again, nor does the exit (about 0.1 s of CPU a run).
    gc.freeze()
    try:
        return run(args.worker, args.namespace, args.sandbox, args.kubeconfig, config)
    except AgentWorkersError as e:
        log.error("%s: %s", e.reason, e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
