"""The Argo CD health checks, rendered from their templates in hack/argocd-health/ into the
three places a user takes them from: resource_customizations/agentworkers.io/<Kind>/
health.lua (Argo CD's own layout), the argocd-cm patch, and docs/gitops.md.

Argo CD runs each check as one self-contained script (it loads no file of ours), so the
part the AgentConfig and VirtualAgentProfile checks share is written once, in
conditions.lua.in, and a template takes it in with a `--@include FILE` line (the included
file's leading comment, which says what it is, is left out).

    python hack/argocd_health.py           render, after editing a template
    python hack/argocd_health.py --check   exit 1 and name what differs from its rendering

tests/unit/chart/test_gitops.py runs the check, and runs the rendered scripts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "hack" / "argocd-health"
ARGOCD = REPO / "examples" / "gitops" / "argocd"
CUSTOMIZATIONS = ARGOCD / "resource_customizations" / "agentworkers.io"
CONFIGMAP = ARGOCD / "argocd-cm.yaml"
DOC = REPO / "docs" / "gitops.md"
KINDS = ("AgentConfig", "VirtualAgentProfile", "Worker")
INCLUDE = "--@include "


def script(kind: str) -> str:
    """The check for `kind`, its includes expanded."""
    lines = []
    for line in (TEMPLATES / f"{kind}.lua.in").read_text().splitlines(keepends=True):
        if line.startswith(INCLUDE):
            included = (TEMPLATES / line.removeprefix(INCLUDE).strip()).read_text()
            lines.append(re.sub(r"\A(--[^\n]*\n)+", "", included))
        else:
            lines.append(line)
    return "".join(lines)


def key(kind: str) -> str:
    """The check's key in argocd-cm, and its heading in docs/gitops.md."""
    return f"resource.customizations.health.agentworkers.io_{kind}"


def _replace(text: str, pattern: str, body: str, where: str) -> str:
    """`text` with the one match of `pattern` (group 2: the script) holding `body` instead."""
    found = list(re.finditer(pattern, text, re.M))
    if len(found) != 1:
        raise SystemExit(f"{where}: expected one place for the script, found {len(found)}")
    match = found[0]
    return text[: match.start(2)] + body + text[match.end(2) :]


def rendered() -> dict[Path, str]:
    """Every file that holds a check, as the templates make it."""
    files = {CUSTOMIZATIONS / kind / "health.lua": script(kind) for kind in KINDS}
    configmap, doc = CONFIGMAP.read_text(), DOC.read_text()
    for kind in KINDS:
        indented = "".join(
            f"    {line}" if line.strip() else line for line in script(kind).splitlines(True)
        )
        configmap = _replace(
            configmap,
            rf"(^  {re.escape(key(kind))}: \|\n)((?:    .*\n|\n)+?)(?=^\S|^  \S|\Z)",
            indented,
            str(CONFIGMAP),
        )
        doc = _replace(
            doc,
            rf"(^### {re.escape(key(kind))}\n+```lua\n)((?s:.*?))(^```)",
            script(kind),
            str(DOC),
        )
    return {**files, CONFIGMAP: configmap, DOC: doc}


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print(__doc__, file=sys.stderr)
        return 2
    stale = []
    for path, text in rendered().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(str(path.relative_to(REPO)))
        if not check:
            path.write_text(text)
    if check and stale:
        print(
            "not as hack/argocd-health/ renders it (run python hack/argocd_health.py): "
            + ", ".join(stale),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
