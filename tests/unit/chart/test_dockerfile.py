"""The Dockerfile's rules, and its install steps run for real in a clean environment.

No Docker engine here: the rules are read from the file, and the builder stage's RUN
steps run on this machine with the image's paths moved under a temporary directory
(the same commands, a fresh virtualenv, only the files the Dockerfile copies).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|cc|clang|make|build-essential|apt-get|apt|apk|dnf|yum|git|curl|wget|"
    r"pip\s+(install|wheel)|python\s+-m\s+(pip\s+(install|wheel)|build)|setuptools)\b"
)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def of(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), " ".join(rest.split())
        if keyword == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif keyword == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key] = default
        elif stages:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text())[1]


def test_multi_stage(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    assert stages[0].name == "build"
    assert stages[-1].name is None or stages[-1].name != "build"


def test_bases_are_pinned(stages: list[Stage]) -> None:
    for stage in stages:
        # An exact patch release (python:3.12.11-slim-...) or a digest; never latest.
        assert re.fullmatch(
            r"[\w./-]+(:\d+\.\d+\.\d+[\w.-]*)?(@sha256:[0-9a-f]{64})?", stage.base
        ), stage.base
        assert re.search(r":\d+\.\d+\.\d+|@sha256:", stage.base), f"{stage.base} is not pinned"
        assert "latest" not in stage.base
    assert len({s.base for s in stages}) == 1, "the venv moves between stages: same Python"


def test_final_stage_runs_as_a_numeric_non_root_user(stages: list[Stage]) -> None:
    users = stages[-1].of("USER")
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and uid == "65532"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    # Nothing after USER switches back.
    last = max(i for i, (kw, _) in enumerate(stages[-1].instructions) if kw == "USER")
    assert all(kw != "USER" for kw, _ in stages[-1].instructions[last + 1 :])


def test_no_build_tools_in_the_final_stage(stages: list[Stage]) -> None:
    final = stages[-1]
    for run in final.of("RUN"):
        assert not BUILD_TOOLS.search(run.replace("pip uninstall", "")), run
    copies = final.of("COPY")
    assert copies and all(c.startswith("--from=build ") for c in copies), copies
    assert [c.split()[1:] for c in copies] == [["/opt/agentworkers", "/opt/agentworkers"]]


def test_entrypoint_is_the_agentworkers_command(stages: list[Stage]) -> None:
    assert stages[-1].of("ENTRYPOINT") == ['["agentworkers"]']
    # The local pod runner runs the chart's operator pod (no command, only args) with the
    # image's entry point: the two stay in step.
    sys.path.insert(0, str(REPO / "hack"))
    try:
        import podrunner  # noqa: PLC0415
    finally:
        sys.path.remove(str(REPO / "hack"))
    assert json.loads(stages[-1].of("ENTRYPOINT")[0]) == podrunner.ENTRYPOINT
    env = " ".join(stages[-1].of("ENV"))
    assert "PATH=/opt/agentworkers/bin:" in env


def test_dockerignore_keeps_the_context_small() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line for line in lines if line and not line.startswith("#")]
    # Everything out, then only what the image needs back in.
    assert patterns[0] == "*"
    allowed = {line[1:] for line in lines if line.startswith("!")}
    copied = {
        src
        for stage in parse(DOCKERFILE.read_text())[1]
        for copy in stage.of("COPY")
        if not copy.startswith("--from")
        for src in copy.split()[:-1]
    }
    assert {c.rstrip("/") for c in copied} <= {a.rstrip("/") for a in allowed}


@pytest.mark.timeout(900)
def test_install_steps_work_in_a_clean_environment(stages: list[Stage], tmp_path: Path) -> None:
    """The builder's RUN steps, as written, with / moved to a temporary directory."""
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    root = tmp_path / "root"
    build = stages[0]
    # `python` is the base image's interpreter there; here, the one running the tests
    # (a virtualenv's python makes venvs from its base interpreter, with nothing installed).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        "LANG": "C.UTF-8",
    }
    # Reuse the machine's pip cache and index settings: the Dockerfile's
    # PIP_NO_CACHE_DIR keeps the image small, here it would only make the test slow.
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CACHE_DIR"):
        if key in os.environ:
            env[key] = os.environ[key]
    env.setdefault("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    paths = sorted(
        {p for _, arg in build.instructions for p in re.findall(r"(?<![\w.])/[a-z][\w/.-]*", arg)},
        key=len,
        reverse=True,
    )

    def moved(text: str) -> str:
        for p in paths:
            top = "/" + p.strip("/").split("/")[0]
            if top in ("/dev", "/tmp"):
                continue
            text = re.sub(rf"(?<![\w.]){re.escape(top)}(?=/|\b)", str(root) + top, text)
        return text

    workdir = root
    for keyword, arg in build.instructions:
        if keyword == "WORKDIR":
            workdir = Path(moved(arg))
            workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "ENV":
            for key, value in re.findall(r"(\w+)=(\S+)", arg):
                if key != "PIP_NO_CACHE_DIR":
                    env[key] = value
        elif keyword == "COPY":
            *sources, dest = shlex.split(arg)
            target = workdir / dest if not dest.startswith("/") else Path(moved(dest))
            for src in sources:
                source = REPO / src
                if source.is_dir():
                    shutil.copytree(
                        source,
                        target,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
                        dirs_exist_ok=True,
                    )
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, target / source.name)
        elif keyword == "RUN":
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", moved(arg)],
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=800,
            )
            assert result.returncode == 0, (
                f"RUN {arg}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
    venv = root / "opt" / "agentworkers"
    # What the final stage copies: a virtualenv with the command and no pip in it.
    assert (venv / "bin" / "agentworkers").exists()
    assert not list(venv.glob("lib/python*/site-packages/pip"))
    # The source tree is not needed to run: the venv works on its own.
    shutil.rmtree(root / "src")
    for argv in (["--help"], ["operator", "--help"]):
        ran = subprocess.run(
            [str(venv / "bin" / "agentworkers"), *argv],
            env={"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp_path)},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stderr
        assert "agentworkers" in ran.stdout
