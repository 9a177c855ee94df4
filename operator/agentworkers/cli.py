"""The `agentworkers` command.

agentworkers operator [--namespace NS ...] [--no-webhook] ...   run the operator
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from agentworkers.controller.options import Options


def _operator(args: argparse.Namespace) -> int:
    import kopf  # noqa: PLC0415 (only the operator needs it)
    import prometheus_client  # noqa: PLC0415

    import agentworkers.controller.handlers  # noqa: PLC0415 (registers the handlers)

    if not args.no_webhook:
        import agentworkers.controller.webhooks  # noqa: F401, PLC0415

    options = Options(
        namespaces=tuple(args.namespace),
        kubeconfig=args.kubeconfig,
        webhook_port=None if args.no_webhook else args.webhook_port,
        webhook_addr=args.webhook_addr,
        webhook_name=args.webhook_name,
        webhook_host=args.webhook_host,
        tls_dir=args.tls_dir,
        metrics_port=args.metrics_port or None,
        liveness=args.liveness or None,
        standalone=not args.peering,
        peering=args.peering,
    )
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if options.metrics_port:
        prometheus_client.start_http_server(options.metrics_port, addr=options.metrics_addr)
    kopf.run(
        standalone=options.standalone,
        peering_name=options.peering,
        namespaces=options.namespaces,
        clusterwide=not options.namespaces,
        liveness_endpoint=options.liveness,
        memo=kopf.Memo(options=options),
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agentworkers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    op = sub.add_parser("operator", help="run the operator (kopf)")
    op.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch this namespace (repeatable; globs such as team-* work); default: all",
    )
    op.add_argument("--kubeconfig", help="kubeconfig file; default: in-cluster, then KUBECONFIG")
    op.add_argument("--no-webhook", action="store_true", help="run without the admission webhook")
    op.add_argument("--webhook-port", type=int, default=9443)
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
        "--liveness", default="http://127.0.0.1:8081/healthz", help="liveness endpoint; '' off"
    )
    op.add_argument("--peering", help="kopf peering name for active/standby replicas")
    op.add_argument("-v", "--verbose", action="store_true")
    op.set_defaults(func=_operator)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
