"""The Dockerfile's rules, and the local build's reading of it (hack/image.py).

No Docker engine here: the rules are read from the file. The local build runs the same
RUN steps in a Debian root (tests/e2e/test_image.py checks the image it makes); here,
that it reads the Dockerfile's values and splits it into its two cached layers right.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

import image
import podrunner
from agentworkers.core.pods import RUNTIME_UID

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"

BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|cc|clang|make|build-essential|apt-get|apt|apk|dnf|yum|git|curl|wget|"
    r"pip|python3?(\.\d+)?\s+-m\s+(pip|build)|setuptools)\b"
)
Stage = image.Stage


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return image.parse_dockerfile(DOCKERFILE.read_text())[1]


def test_stages(stages: list[Stage]) -> None:
    # Debian's Python, a build stage on it, and the image on it again: the venv moves
    # between stages of one Python.
    assert [s.name for s in stages] == ["python", "build", None]
    assert [s.base for s in stages[1:]] == ["python", "python"]


def test_the_base_is_pinned(stages: list[Stage]) -> None:
    # A dated release of Debian's slim image, or a digest; never latest. The local build
    # makes the same release's root with debootstrap.
    assert image.BASE_IMAGE.fullmatch(stages[0].base), stages[0].base
    assert "latest" not in stages[0].base


def test_python_is_debians_and_the_projects(stages: list[Stage]) -> None:
    """One Python: the one Debian's release ships, the one the project is checked for."""
    (install,) = stages[0].of("RUN")
    packages = re.search(r"apt-get install --yes --no-install-recommends (.+?) &&", install)
    assert packages and packages.group(1).split() == ["python3.11"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == ">=3.11"
    assert pyproject["tool"]["mypy"]["python_version"] == "3.11"
    assert pyproject["tool"]["ruff"]["target-version"] == "py311"
    # Every later step names that interpreter, and the venv is made with it.
    runs = " ".join(stages[1].of("RUN"))
    assert "python3.11 -m venv --without-pip /opt/agentworkers" in runs
    assert not re.search(r"(?<![/\w-])python3?\s", runs), "a bare python in the build stage"
    assert "--only-binary=:all:" in runs and "compileall" in runs


def test_final_stage_runs_as_a_numeric_non_root_user(stages: list[Stage]) -> None:
    users = stages[-1].of("USER")
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and uid == "65532"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    # Nothing after USER switches back.
    keywords = [i.keyword for i in stages[-1].instructions]
    last = max(n for n, keyword in enumerate(keywords) if keyword == "USER")
    assert "USER" not in keywords[last + 1 :]


def test_no_build_tools_in_the_final_stage(stages: list[Stage]) -> None:
    final = stages[-1]
    for run in final.of("RUN"):
        assert not BUILD_TOOLS.search(run), run
    copies = final.of("COPY")
    assert copies and all(c.startswith("--from=build ") for c in copies), copies
    assert [c.split()[1:] for c in copies] == [["/opt/agentworkers", "/opt/agentworkers"]]


def test_entrypoint_is_the_agentworkers_command(stages: list[Stage]) -> None:
    assert stages[-1].of("ENTRYPOINT") == ['["agentworkers"]']
    # The local pod runner runs the chart's operator pod (no command, only args) with the
    # image's entry point: the two stay in step.
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
        for stage in image.parse_dockerfile(DOCKERFILE.read_text())[1]
        for copy in stage.of("COPY")
        if not copy.startswith("--from")
        for src in copy.split()[:-1]
    }
    assert {c.rstrip("/") for c in copied} <= {a.rstrip("/") for a in allowed}


def test_the_local_build_reads_the_dockerfiles_config() -> None:
    recipe = image.Recipe.read(REPO)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert recipe.suite == "bookworm" and recipe.version == project["version"]
    # `docker build` without --build-arg VERSION labels the package's version too.
    assert f"VERSION={project['version']}" in recipe.final.of("ARG")
    config = recipe.config()
    # The worker pods' user is the image's.
    assert config["User"] == f"{RUNTIME_UID}:{RUNTIME_UID}"
    assert config["Entrypoint"] == podrunner.ENTRYPOINT
    assert config["Cmd"] == ["--help"]
    assert config["WorkingDir"] == "/tmp"
    assert config["Env"] == [
        "PATH=/opt/agentworkers/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
        "HOME=/tmp",
    ]
    assert config["Labels"] == {
        "org.opencontainers.image.title": "agentworkers",
        "org.opencontainers.image.description": (
            "Kubernetes operator and runtime for AI agent workers"
        ),
        "org.opencontainers.image.licenses": project["license"],
        "org.opencontainers.image.version": project["version"],
    }


def test_the_context_is_what_dockerignore_lets_in() -> None:
    files = image.context_files(REPO, "operator")
    assert "operator/agentworkers/__init__.py" in files
    assert not [f for f in files if "__pycache__" in f or f.endswith((".pyc", ".egg-info"))]
    assert image.context_files(REPO, "pyproject.toml") == ["pyproject.toml"]
    skip = image.ignored(REPO)
    assert skip("tests/unit") and skip(".venv/bin/python") and not skip("operator/x.py")
    assert skip("operator/agentworkers/__pycache__/x.pyc")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the image is built from, to change."""
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "operator", tmp_path / "operator")
    return tmp_path


def test_the_base_layer_is_rebuilt_for_its_inputs_only(tree: Path) -> None:
    def keys() -> tuple[str, str]:
        plan = image.Plan(image.Recipe.read(tree), tree)
        return plan.base_key, plan.code_key()

    plan = image.Plan(image.Recipe.read(tree), tree)
    # The code's layer: the build stage from the package's COPY on; the image takes its venv.
    assert plan.build_stage == "build"
    assert str(plan.code[0]) == "COPY operator ./operator"
    assert plan.shipped == ["/opt/agentworkers"]
    base, code = keys()
    assert keys() == (base, code)
    # Bytecode and caches are not in the build's context.
    (tree / "operator" / "agentworkers" / "__pycache__").mkdir(exist_ok=True)
    (tree / "operator" / "agentworkers" / "__pycache__" / "x.pyc").write_bytes(b"x")
    assert keys() == (base, code)
    # The code, the README, the version: the code's layer only.
    init = tree / "operator" / "agentworkers" / "__init__.py"
    init.write_text(init.read_text() + "\n# changed\n")
    base2, code2 = keys()
    assert base2 == base and code2 != code
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "', 'version = "9', 1))
    base3, code3 = keys()
    assert base3 == base and code3 not in (code, code2)
    # A dependency, the build backend or the Dockerfile's base steps: the base too.
    pyproject.write_text(pyproject.read_text().replace('"PyYAML>=6.0,<7"', '"PyYAML>=6.0.1,<7"'))
    assert keys()[0] != base
    base = keys()[0]
    pyproject.write_text(pyproject.read_text().replace('"setuptools>=69"', '"setuptools>=77"'))
    assert keys()[0] != base
    base = keys()[0]
    dockerfile = tree / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("python3.11 \\\n", "python3.11 tini \\\n"))
    assert "tini" in dockerfile.read_text()
    assert keys()[0] != base


def test_what_the_local_build_cannot_layer_is_refused(tree: Path) -> None:
    dockerfile = tree / "Dockerfile"
    text = dockerfile.read_text()
    dockerfile.write_text(text.replace('CMD ["', 'RUN chmod -R a-w /opt/agentworkers\nCMD ["'))
    with pytest.raises(image.ImageError, match="no RUN or COPY after the final stage's COPY"):
        image.Plan(image.Recipe.read(tree), tree)
    dockerfile.write_text(text.replace('ENTRYPOINT ["', 'HEALTHCHECK CMD true\nENTRYPOINT ["'))
    with pytest.raises(image.ImageError, match="HEALTHCHECK is not supported"):
        image.Recipe.read(tree)
    dockerfile.write_text(text.replace("\nFROM python\n", "\nFROM build\n"))
    with pytest.raises(image.ImageError, match="final stage must start FROM the first stage"):
        image.Plan(image.Recipe.read(tree), tree)
    dockerfile.write_text(text.replace("bookworm-20250520-slim", "latest"))
    with pytest.raises(image.ImageError, match="debian:<suite>-<YYYYMMDD>-slim"):
        image.Recipe.read(tree)
