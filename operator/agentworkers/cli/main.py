"""The `agentworkers` command, also the kubectl plugin `kubectl workers`.

  agentworkers spawn|query|list|inspect|collect|kill|events|explain ...   the worker lifecycle
  agentworkers profiles|revisions ...                        an agent's profiles and revisions

Run by the system, not by hand (not listed below):
  agentworkers operator [--namespace NS ...] [--no-webhook] ...             run the operator
  agentworkers run --worker NAME --namespace NS         the runtime (a worker pod's command)

Global flags go before or after the verb: -n/--namespace, --kubeconfig,
-o table|wide|json|yaml, -q/--quiet. `agentworkers VERB --help` shows examples. Workers are
Kubernetes objects too: kubectl get workers, kubectl describe worker NAME, kubectl delete
worker NAME (a kill, unless collected).

exit codes:
  0  ok
  1  error (the API server refused, a run that failed while spawn --wait waited, ...)
  2  usage (a bad flag or argument)
  3  not found (UnknownWorker; an unknown agent, revision or profile)
  4  name conflict (WorkerNameConflict)
  5  timeout (CollectTimeout; spawn --wait) - the worker is left as it was
  6  finished (WorkerFinished: a query or a kill to a run that has ended)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from agentworkers import __version__
from agentworkers.cli.parsers import Parser, UsageError, add_globals, parsed_defaults
from agentworkers.cli.verb_parsers import add_verbs

if TYPE_CHECKING:
    from agentworkers.api.workerpod import WorkerPod
    from agentworkers.cli.output import Output
    from agentworkers.client import Client

# Imports of the client and the operator are in the functions that need them: `--help`
# and usage errors load argparse and the parsers only.

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT, EXIT_TIMEOUT, EXIT_FINISHED = range(
    7
)
EXIT_INTERRUPTED = 130


def _operator(args: argparse.Namespace) -> int:
    import kopf  # noqa: PLC0415 (only the operator needs it)
    import prometheus_client  # noqa: PLC0415

    # The operator's imports (kopf, aiohttp, cryptography) stay out of every other verb.
    from agentworkers.controller.infra import collector, tracing  # noqa: PLC0415
    from agentworkers.controller.infra.options import Options  # noqa: PLC0415
    from agentworkers.controller.kopf import kopf_fixes, kopf_settings, startup  # noqa: PLC0415

    # Importing a module registers its kopf handlers.
    if args.role == "admission":
        startup.register_store()
    else:
        import agentworkers.controller.kopf.handlers  # noqa: PLC0415
    webhook = args.role != "controller" and not args.no_webhook
    if webhook:
        import agentworkers.controller.kopf.webhooks  # noqa: F401, PLC0415

    try:
        worker_defaults = _worker_defaults(args.worker_defaults)
    except ValueError as e:
        print(f"error: --worker-defaults {args.worker_defaults}: {e}", file=sys.stderr)
        return EXIT_USAGE
    options = Options(
        worker_defaults=worker_defaults,
        namespaces=tuple(args.namespace),
        kubeconfig=args.kubeconfig,
        webhook_port=args.webhook_port if webhook else None,
        webhook_addr=args.webhook_addr,
        webhook_name=args.webhook_name,
        webhook_host=args.webhook_host,
        tls_dir=args.tls_dir,
        metrics_port=args.metrics_port or None,
        metrics_addr=args.metrics_addr,
        liveness=args.liveness or None,
        shards=args.shards,
        shard_index=_shard_index(args.shard_index, args.shards),
        leader_elect=args.leader_elect,
        lease_namespace=args.lease_namespace or _own_namespace(),
        lease_name=args.lease_name,
        **({} if args.settle_seconds is None else {"settle_seconds": max(args.settle_seconds, 0)}),
        otlp_endpoint=args.otlp_endpoint or None,
        trace_sample_ratio=args.trace_sample_ratio,
    )
    # JSON lines carry the object (kind, name, namespace) under "object": one line, one worker.
    kopf.configure(
        verbose=args.verbose,
        log_format=kopf.LogFormat[args.log_format.upper()],
        log_refkey="object",
    )
    _log_uncaught()
    try:
        kopf_fixes.apply(options.namespaces)
    except kopf_fixes.KopfChanged as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    collector.install()
    if not args.verbose:
        kopf_settings.quiet()
    tracing.configure(options.otlp_endpoint, options.trace_sample_ratio)
    if options.metrics_port:
        prometheus_client.start_http_server(options.metrics_port, addr=options.metrics_addr)
    try:
        kopf.run(
            standalone=True,  # replicas take turns on our own Leases, not kopf's peering
            namespaces=options.namespaces,
            clusterwide=not options.namespaces,
            liveness_endpoint=options.liveness,
            memo=kopf.Memo(options=options),
        )
    finally:
        tracing.close()  # the spans still queued, for at most a few seconds
    return 0


def _log_uncaught() -> None:
    """A fault outside kopf's tasks (a thread's, a finaliser's) goes to the log in its
    format: Python's own hooks print it raw on stderr, lines a JSON log reader rejects."""
    logger = logging.getLogger("agentworkers")

    def thread_fault(a: threading.ExceptHookArgs) -> None:
        name = a.thread.name if a.thread else "?"
        logger.error("thread %s failed", name, exc_info=a.exc_value)

    def unraisable(u: sys.UnraisableHookArgs) -> None:
        logger.error("%s: %r", u.err_msg or "Exception ignored in", u.object, exc_info=u.exc_value)

    threading.excepthook = thread_fault
    sys.unraisablehook = unraisable


def _worker_defaults(path: Path | None) -> WorkerPod:
    """The install's worker pod knobs; ValueError names the field and the rule."""
    import yaml  # noqa: PLC0415
    from pydantic import ValidationError  # noqa: PLC0415

    from agentworkers.api.workerpod import WorkerPod  # noqa: PLC0415
    from agentworkers.errors import describe  # noqa: PLC0415

    if path is None:
        return WorkerPod()
    try:
        return WorkerPod.model_validate(yaml.safe_load(path.read_text()) or {})
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(str(e)) from e
    except ValidationError as e:
        # Named as the chart's value it comes from.
        raise ValueError(str(describe(e, prefix="workerDefaults"))) from e


def _shard_index(given: int | None, shards: int) -> int:
    """--shard-index, else the StatefulSet ordinal at the end of the pod's hostname; 0 with
    one shard (a Deployment's pod names end in a random suffix, at times all digits)."""
    if given is not None:
        return given
    if shards == 1:
        return 0
    ordinal = os.environ.get("HOSTNAME", "").rsplit("-", 1)[-1]
    return int(ordinal) if ordinal.isdigit() else 0


def _operator_flags_error(args: argparse.Namespace) -> str | None:
    """What in the operator's flags cannot go together, or None."""
    shards, index = args.shards, args.shard_index
    if shards < 1:
        return f"--shards {shards}: at least 1"
    if index is not None and not 0 <= index < shards:
        return f"--shard-index {index} is not a shard of --shards {shards} (0..{shards - 1})"
    if args.role == "admission":
        if args.no_webhook:
            return "--role=admission serves the webhook: drop --no-webhook"
        # Leases decide who reconciles; every admission replica answers, none waits.
        if args.leader_elect or shards > 1 or index is not None:
            return (
                "--role=admission: every replica is active; --leader-elect, --shards and "
                "--shard-index are for the replicas that reconcile (--role=all or controller)"
            )
    return None


def _ratio(text: str) -> float:
    """A share from 0 to 1 (argparse's type: its ValueError is a usage error)."""
    value = float(text)
    if not 0 <= value <= 1:
        raise ValueError(f"{text} is not between 0 and 1")
    return value


def _own_namespace() -> str:
    from agentworkers.kube.connection import SERVICE_ACCOUNT_NAMESPACE  # noqa: PLC0415

    if SERVICE_ACCOUNT_NAMESPACE.exists():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return os.environ.get("POD_NAMESPACE", "default")


def _add_operator(sub: argparse._SubParsersAction[Parser]) -> None:
    op = sub.add_parser(
        "operator", description="Run the operator (kopf): reconcile and answer admission."
    )
    op.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch this namespace (repeatable; globs such as team-* work); default: all",
    )
    op.add_argument(
        "--kubeconfig",
        help="kubeconfig file; default: KUBECONFIG, then in-cluster, then ~/.kube/config",
    )
    op.add_argument("--no-webhook", action="store_true", help="run without the admission webhook")
    op.add_argument(
        "--webhook-port", type=int, default=9443, help="port the admission webhook listens on"
    )
    op.add_argument(
        "--webhook-name",
        default="agentworkers.io",
        help="ValidatingWebhookConfiguration the operator manages",
    )
    op.add_argument("--webhook-addr", default="127.0.0.1", help="address the webhook listens on")
    op.add_argument("--webhook-host", help="name the API server dials (default: --webhook-addr)")
    op.add_argument(
        "--tls-dir",
        type=Path,
        default=Path("/tmp/agentworkers-webhook"),
        help="webhook certificate directory (tls.crt, tls.key); made if missing",
    )
    op.add_argument(
        "--metrics-port", type=int, default=8080, help="Prometheus metrics port; 0: off"
    )
    op.add_argument(
        "--metrics-addr", default="127.0.0.1", help="metrics address (0.0.0.0 in a pod)"
    )
    op.add_argument(
        "--otlp-endpoint",
        default=os.environ.get("AGENTWORKERS_OTLP_ENDPOINT", ""),
        help="OTLP/HTTP endpoint of a trace collector for the operator's spans of each spawn "
        "(admission, binding, pod creation); spans go to <endpoint>/v1/traces. '' (default): off",
    )
    op.add_argument(
        "--trace-sample-ratio",
        type=_ratio,
        default=1.0,
        help="share of spawn trees whose spans the operator sends (0 to 1; a tree's runs "
        "decide alike from its trace id when their AgentConfig's ratio is the same)",
    )
    op.add_argument(
        "--liveness", default="http://127.0.0.1:8081/healthz", help="liveness endpoint; '' off"
    )
    op.add_argument(
        "--worker-defaults",
        type=Path,
        help="YAML of the worker pod knobs every agent gets unless its AgentConfig's "
        "spec.worker sets its own (image, imagePullSecrets, runtimeClassName, nodeSelector, "
        "tolerations, affinity, resources, priorityClassName, serviceAccountAnnotations)",
    )
    op.add_argument(
        "--leader-elect",
        action="store_true",
        help="replicas take turns on a Lease: the holder reconciles, the others keep their "
        "watches warm and take over within about 20 s of its end (active/standby; "
        "docs/scaling.md). Implied by --shards N > 1",
    )
    op.add_argument(
        "--shards",
        type=int,
        default=1,
        help="controller replicas that split the namespaces between them (a StatefulSet); "
        "each serves its own shard and takes over a lost replica's (docs/scaling.md)",
    )
    op.add_argument(
        "--shard-index",
        type=int,
        help="this replica's shard; default: the ordinal ending $HOSTNAME (name-2: 2)",
    )
    op.add_argument(
        "--lease-namespace",
        help="where the Leases of --shards and --leader-elect live; default: the operator's "
        "own namespace",
    )
    op.add_argument(
        "--lease-name",
        default="agentworkers",
        help="what their names start with (NAME-shard-K, NAME-member-I): one per install "
        "sharing --lease-namespace",
    )
    op.add_argument(
        "--settle-seconds",
        type=float,
        help="a change to an agent's config or profiles is cut into a revision once they "
        "have kept still this long: one sync, one revision (default 2; docs/gitops.md); "
        "0: at once",
    )
    op.add_argument(
        "--role",
        choices=("all", "controller", "admission"),
        default="all",
        help="all: reconcile and answer admission in one process; controller: reconcile "
        "only; admission: only answer the webhook (any number of replicas, all active)",
    )
    op.add_argument(
        "--log-format",
        choices=("full", "json", "plain"),
        default="full",
        help="json: one JSON object a line, with the object it is about (use in clusters)",
    )
    op.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="a log line per handled event (costly at scale)",
    )
    op.set_defaults(func=_operator)


def build_parser(prog: str = "agentworkers") -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_globals(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB")
    add_verbs(sub, prog)
    _add_operator(sub)
    # Not listed (no help=): main() hands its arguments to the runtime's own parser.
    sub.add_parser("run", add_help=False)
    return parser


def exit_code(error: BaseException) -> int:
    """The exit code scripts may rely on for an error (the table in the module docstring)."""
    from agentworkers.client import (  # noqa: PLC0415
        NotFoundError,
        WaitTimeoutError,
        WorkerFinishedError,
        WorkerNameConflictError,
    )

    if isinstance(error, UsageError):
        return EXIT_USAGE
    if isinstance(error, NotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(error, WorkerNameConflictError):
        return EXIT_CONFLICT
    if isinstance(error, WaitTimeoutError):
        return EXIT_TIMEOUT
    if isinstance(error, WorkerFinishedError):
        return EXIT_FINISHED
    return EXIT_ERROR


def message(error: Exception) -> str:
    """The error as one line; the seed's errors lead with their reason, as the operator's do."""
    from agentworkers.errors import AgentWorkersError, ApiError  # noqa: PLC0415

    if isinstance(error, ApiError) and error.cause is not None:
        # A refusal with its reason (admission's, or the schema's): that, not the HTTP wrapping.
        return f"{error.cause.reason}: {error.cause}"
    if isinstance(error, AgentWorkersError) and type(error) not in (AgentWorkersError, ApiError):
        return f"{error.reason}: {error}"
    return str(error)


def connect(args: argparse.Namespace) -> Client:
    from agentworkers.client import Client  # noqa: PLC0415

    return Client.from_kubeconfig(namespace=args.g_namespace, kubeconfig=args.g_kubeconfig)


def run(args: argparse.Namespace, out: Output) -> int:
    """One verb; its errors become a line on stderr and an exit code, never a traceback."""
    from agentworkers.cli import verbs  # noqa: PLC0415
    from agentworkers.errors import AgentWorkersError  # noqa: PLC0415

    handler: verbs.Handler = getattr(verbs, args.run)
    try:
        with connect(args) as client:
            return int(handler(client, parsed_defaults(args), out))
    except (AgentWorkersError, UsageError) as e:
        out.stderr.write(f"error: {message(e)}\n")
        return exit_code(e)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python's exit flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _prog() -> str:
    """`kubectl workers` when kubectl runs us as its plugin, so --help reads right."""
    return "kubectl workers" if Path(sys.argv[0]).name == "kubectl-workers" else "agentworkers"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        from agentworkers.runtime.main import main as runtime  # noqa: PLC0415

        return runtime(argv[1:])
    parser = build_parser(_prog())
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if args.command == "run":
        sys.stderr.write(
            "error: `run` is the worker runtime, a pod's command; it takes its own flags "
            "and comes first: agentworkers run --worker NAME --namespace NS\n"
        )
        return EXIT_USAGE
    if args.command == "operator":
        if args.g_namespace or args.g_kubeconfig or args.output != "table" or args.quiet:
            parser.print_usage(sys.stderr)
            sys.stderr.write("error: `operator` takes its own flags, after it\n")
            return EXIT_USAGE
        if (wrong := _operator_flags_error(args)) is not None:
            parser.print_usage(sys.stderr)
            sys.stderr.write(f"error: {wrong}\n")
            return EXIT_USAGE
        return int(args.func(args))
    from agentworkers.cli.output import Output  # noqa: PLC0415

    return run(args, Output(args.output, args.quiet, sys.stdout, sys.stderr))


if __name__ == "__main__":
    sys.exit(main())
