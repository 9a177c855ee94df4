#!/usr/bin/env python3
"""The project's image, built here from the Dockerfile: no Docker engine, no registry.

    python hack/image.py            # build what is missing or stale; print the image's ref

The Dockerfile is the one recipe. This builder reads it and builds its stages the way
`docker build` would, with three substitutions: `FROM debian:<suite>-<date>-slim` becomes
a Debian root filesystem made by `debootstrap --variant=minbase` from the mirror this
machine's apt already uses (with the slim image's dpkg and apt settings), each `RUN` runs
as written under `/bin/sh -c` in a chroot of its stage's root, and the result is packed by
`umoci` into an OCI image layout with the final stage's user, entrypoint, cmd, env,
working directory and labels. It needs root (debootstrap, chroot, mounts), and installs
debootstrap, umoci and runc with apt-get when they are missing.

Two layers, cached under ${XDG_CACHE_HOME:-~/.cache}/agentworkers/image/:
* the base: every instruction before the first `COPY` of the package's source (`operator`):
  the Debian root, its Python, the final stage's own steps, and the virtualenv with the
  project's dependencies. Keyed by a hash of those instructions and of what they copy
  (of pyproject.toml only its dependencies, requires-python and build-system), so it is
  rebuilt (minutes) only when one of them changes;
* the project's own code: the build stage's remaining instructions, run on an overlay of
  the build stage's cached root; the overlay's upper directory under the final stage's
  `COPY --from=build` paths is the layer. Keyed by the copied files' contents, rebuilt in
  seconds whenever operator/ changes, so every test runs the working tree's code.

The API, for hack/ scripts and tests (put hack/ on sys.path, then `import image`):

    img = image.ensure_image()      # -> image.Image; builds under a lock, reuses the cache
    img.layout    # Path of the OCI image layout (skopeo: oci:<layout>:<version>)
    img.tag       # "agentworkers:0.1.0": the layout's name and the tag it holds
    img.ref       # "<layout>:0.1.0": the reference umoci and skopeo take
    img.digest    # the manifest's digest, "sha256:..."
    img.config    # the OCI image config (dict); img.config["config"] has User, Env,
                  # Entrypoint, Cmd, WorkingDir and Labels
    img.rootfs    # Path: this image's root filesystem, unpacked. Shared by every
                  # container and every run: mount it read-only (OCI `root.readonly`)
                  # and never write into it (its files are hard links into the cache).
                  # It already has the mount points a pod needs: /sandbox (mode 1777, as
                  # an emptyDir: runc gives a tmpfs its mount point's mode), /tmp,
                  # /var/run/agentworkers (→ /run/agentworkers),
                  # /var/run/secrets/kubernetes.io/serviceaccount, and empty /etc/hosts,
                  # /etc/hostname and /etc/resolv.conf to bind files onto. A mount point
                  # the image lacks needs a tmpfs mounted above it first (runc would
                  # otherwise make it in this directory).

The root filesystems of the last six builds, and of any handed out in the last day, are kept
(hard links into the base's, so each costs only its own files); later builds remove older
ones.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Bump when the builder itself changes what it puts into the base layer.
BUILDER_VERSION = "1"
# The package's source directory: the first COPY of it starts the code's layer.
SOURCE = "operator"
# What the base image's own config sets (Debian's images, like Docker's defaults).
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
BASE_IMAGE = re.compile(r"debian:(?P<suite>[a-z]+)-(?P<date>\d{8})-slim(@sha256:[0-9a-f]{64})?")
SUPPORTED = {"FROM", "ARG", "ENV", "WORKDIR", "COPY", "RUN", "LABEL", "USER", "ENTRYPOINT", "CMD"}
# Files a container runtime binds onto, and directories it mounts on: made empty here so
# that a read-only root needs nothing made at run time.
MOUNT_FILES = ("etc/hosts", "etc/hostname", "etc/resolv.conf")
KEEP_BUILDS = 6
KEEP_BASES = 2
KEEP_LOGS = 20
# What Debian's slim images leave out (debuerreotype's --slimify), and their apt cleanup.
SLIM_DPKG = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
"""
_CLEAN = "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb"
SLIM_APT = f"""\
DPkg::Post-Invoke {{ "{_CLEAN} /var/cache/apt/*.bin || true"; }};
APT::Update::Post-Invoke {{ "{_CLEAN} /var/cache/apt/*.bin || true"; }};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""
# The build machine's settings a RUN's pip and apt need to reach their registries; only
# RUN's environment, never the image's.
PASSED_ENV = (
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_DEFAULT_TIMEOUT",
)


class ImageError(RuntimeError):
    """A step of the build failed; the message says which and why."""


def log(message: str) -> None:
    print(f"[image {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- The Dockerfile -----------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    arg: str
    line: int

    def __str__(self) -> str:
        return f"{self.keyword} {self.arg}"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def of(self, keyword: str) -> list[str]:
        return [i.arg for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """The global ARG defaults and the stages, continuation lines joined."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        start = number
        line = lines[number].strip()
        number += 1
        if not line or line.startswith("#"):
            continue
        while line.endswith("\\") and number < len(lines):
            following = lines[number].strip()
            number += 1
            if not following.startswith("#"):
                line = line[:-1].rstrip() + " " + following
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword not in SUPPORTED:
            raise ImageError(f"Dockerfile line {start + 1}: {keyword} is not supported here")
        if keyword == "FROM":
            parts = rest.split()
            base = expand(parts[0], args)
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif keyword == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key] = default
        elif not stages:
            raise ImageError(f"Dockerfile line {start + 1}: {keyword} before FROM")
        else:
            stages[-1].instructions.append(Instruction(keyword, rest, start + 1))
    return args, stages


def expand(text: str, values: dict[str, str]) -> str:
    """$NAME and ${NAME}, as Docker expands them in ENV, LABEL, WORKDIR, COPY and FROM."""
    return re.sub(
        r"\$(?:\{(\w+)\}|(\w+))", lambda m: values.get(m.group(1) or m.group(2), ""), text
    )


def assignments(arg: str, values: dict[str, str]) -> dict[str, str]:
    """`K=V K2="V 2"` of ENV and LABEL, each value expanded with what came before it."""
    found: dict[str, str] = {}
    for word in shlex.split(arg):
        key, sep, value = word.partition("=")
        if not sep:
            raise ImageError(f"expected KEY=VALUE in {arg!r}")
        found[key] = expand(value, {**values, **found})
    return found


@dataclass(frozen=True)
class Recipe:
    """What the Dockerfile says, as the local build reads it."""

    stages: list[Stage]
    base_image: str
    suite: str
    version: str
    dockerfile: str

    @classmethod
    def read(cls, repo: Path = REPO) -> Recipe:
        text = (repo / "Dockerfile").read_text()
        _, stages = parse_dockerfile(text)
        if not stages:
            raise ImageError("Dockerfile: no FROM")
        match = BASE_IMAGE.fullmatch(stages[0].base)
        if not match:
            raise ImageError(
                f"Dockerfile: the first stage's base {stages[0].base!r} is not "
                "debian:<suite>-<YYYYMMDD>-slim, the one base this builder makes"
            )
        names = [s.name for s in stages]
        for stage in stages[1:]:
            if stage.base not in names:
                raise ImageError(f"Dockerfile: stage {stage.name} is FROM {stage.base}, no stage")
        project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
        return cls(stages, stages[0].base, match["suite"], project["version"], text)

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def config(self) -> dict[str, Any]:
        """The final stage's image config, in the OCI config's own spelling."""
        env = dict(BASE_ENV)
        variables = {"VERSION": self.version}
        labels: dict[str, str] = {}
        config: dict[str, Any] = {}
        for i in self.final.instructions:
            if i.keyword == "ARG":
                key, _, default = i.arg.partition("=")
                variables.setdefault(key, default)
            elif i.keyword == "ENV":
                env.update(assignments(i.arg, env))
            elif i.keyword == "LABEL":
                labels.update(assignments(i.arg, variables))
            elif i.keyword == "USER":
                config["User"] = expand(i.arg, variables)
            elif i.keyword == "WORKDIR":
                config["WorkingDir"] = expand(i.arg, variables)
            elif i.keyword in ("ENTRYPOINT", "CMD"):
                config["Entrypoint" if i.keyword == "ENTRYPOINT" else "Cmd"] = json.loads(i.arg)
        config["Env"] = [f"{k}={v}" for k, v in env.items()]
        config["Labels"] = labels
        return config


# --- The build context (.dockerignore) ----------------------------------------------


def _glob(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignored(repo: Path) -> Callable[[str], bool]:
    """Docker's reading of .dockerignore: the last pattern matching a path or one of its
    parents decides, `!` re-includes."""
    rules = []
    path = repo / ".dockerignore"
    for raw in path.read_text().splitlines() if path.exists() else []:
        line = raw.strip()
        if line and not line.startswith("#"):
            negate = line.startswith("!")
            rules.append((negate, _glob(line.lstrip("!").strip("/"))))

    def check(rel: str) -> bool:
        parts = rel.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        out = False
        for negate, pattern in rules:
            if any(pattern.fullmatch(p) for p in prefixes):
                out = not negate
        return out

    return check


def context_files(repo: Path, source: str) -> list[str]:
    """The files of `source` (a file or folder of the repository) that a COPY sends."""
    skip = ignored(repo)
    top = repo / source
    if top.is_file():
        return [] if skip(source) else [source]
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        rel_dir = Path(dirpath).relative_to(repo).as_posix()
        dirnames[:] = sorted(d for d in dirnames if not skip(f"{rel_dir}/{d}"))
        found += [f"{rel_dir}/{f}" for f in sorted(filenames) if not skip(f"{rel_dir}/{f}")]
    return found


# --- Running a stage ----------------------------------------------------------------


def run(argv: list[str], what: str, logfile: Path, **kwargs: Any) -> None:
    """Run one step, its output to the build log; a failure names the step and shows the
    end of its output."""
    with logfile.open("a") as out:
        out.write(f"\n$ {shlex.join(argv)}\n")
        out.flush()
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False, **kwargs)
    if done.returncode != 0:
        tail = "\n".join(logfile.read_text().splitlines()[-30:])
        raise ImageError(f"{what} failed (exit {done.returncode}); end of {logfile}:\n{tail}")


@dataclass
class Root:
    """A stage's root filesystem being built: `path` takes COPY and WORKDIR; RUN runs in a
    chroot of it, or of an overlay of `lower` with `path` as its upper directory."""

    path: Path
    logfile: Path
    cache: Path
    ships: bool
    lower: Path | None = None
    env: dict[str, str] = field(default_factory=lambda: dict(BASE_ENV))
    workdir: str = "/"
    variables: dict[str, str] = field(default_factory=dict)

    def run(self, command: str) -> None:
        mounts = []
        if self.lower is not None:
            merged, work = self.path.with_name("merged"), self.path.with_name("work")
            merged.mkdir(exist_ok=True)
            work.mkdir(exist_ok=True)
            opts = f"lowerdir={self.lower},upperdir={self.path},workdir={work}"
            mounts.append(f"mount -t overlay overlay -o {shlex.quote(opts)} {merged}")
            root = merged
        else:
            root = self.path
        env = {**self.env, "HOME": self.env.get("HOME", "/root")}
        env.update({k: os.environ[k] for k in PASSED_ENV if k in os.environ})
        binds = [("/etc/resolv.conf", "etc/resolv.conf")]
        if not self.ships:
            # A stage that is not shipped whole may keep pip's downloads between builds
            # (the Dockerfile turns the cache off to keep its layers small) and trust
            # this machine's certificates, which its registries may need.
            env.pop("PIP_NO_CACHE_DIR", None)
            env["PIP_CACHE_DIR"] = "/root/.cache/pip"
            pip_cache = self.cache / "pip"
            pip_cache.mkdir(parents=True, exist_ok=True)
            binds.append((str(pip_cache), "root/.cache/pip"))
            found = host_pip_settings()
            for source, target, variable in found:
                binds.append((source, target))
                env[variable] = f"/{target}"
        script = ["set -e", *mounts, f"mount -t proc proc {shlex.quote(str(root / 'proc'))}"]
        for source, target in binds:
            where = shlex.quote(str(root / target))
            make = f"mkdir -p {where}"
            if not os.path.isdir(source):
                make = f"mkdir -p $(dirname {where}) && touch {where}"
            script += [make, f"mount --bind {shlex.quote(source)} {where}"]
        inner = ["/usr/bin/env", "-i", "-C", self.workdir, *(f"{k}={v}" for k, v in env.items())]
        chroot = ["chroot", str(root), *inner, "/bin/sh", "-c", command]
        script.append(f"exec {shlex.join(chroot)}")
        # A mount namespace of its own: the mounts go with the process, however it ends.
        run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)],
            f"RUN {command}",
            self.logfile,
        )

    def target(self, dest: str) -> Path:
        """A path of the image, under `path`."""
        absolute = dest if dest.startswith("/") else f"{self.workdir.rstrip('/')}/{dest}"
        return self.path / absolute.lstrip("/")


def host_pip_settings() -> list[tuple[str, str, str]]:
    """(host file, path in the chroot, pip's variable) of this machine's pip configuration
    and certificate authorities, which its registries (or a proxy to them) may need."""
    home = str(Path.home())
    configs = [os.environ.get("PIP_CONFIG_FILE", ""), f"{home}/.config/pip/pip.conf"]
    configs += [f"{home}/.pip/pip.conf", "/etc/pip.conf", "/etc/xdg/pip/pip.conf"]
    authorities = [os.environ.get(n, "") for n in ("PIP_CERT", "REQUESTS_CA_BUNDLE")]
    authorities += [os.environ.get("SSL_CERT_FILE", ""), "/etc/ssl/certs/ca-certificates.crt"]
    found = []
    for candidates, target, variable in (
        (configs, "run/build-pip.conf", "PIP_CONFIG_FILE"),
        (authorities, "run/build-ca.crt", "PIP_CERT"),
    ):
        source = next((c for c in candidates if c and os.path.isfile(c)), None)
        if source:
            found.append((source, target, variable))
    return found


def copy_into(root: Root, arg: str, stages: dict[str, Path], repo: Path) -> None:
    words = shlex.split(arg)
    source_stage = None
    if words[0].startswith("--from="):
        source_stage = words.pop(0).removeprefix("--from=")
    *sources, dest = (expand(w, root.variables) for w in words)
    into_dir = dest.endswith("/") or len(sources) > 1
    target = root.target(dest)
    for source in sources:
        if source_stage is not None:
            origin = stages[source_stage] / source.lstrip("/")
            end = target / origin.name if into_dir else target
            if origin.is_dir():
                shutil.copytree(origin, end, symlinks=True, dirs_exist_ok=True)
            else:
                end.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, end, follow_symlinks=False)
            continue
        for rel in context_files(repo, source):
            inner = Path(rel).relative_to(source).as_posix() if rel != source else ""
            end = target / (inner or (Path(rel).name if into_dir else ""))
            end.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, end)


def apply(root: Root, instructions: list[Instruction], stages: dict[str, Path], repo: Path) -> None:
    """The instructions that change a stage's files; the image config is `Recipe.config`."""
    for i in instructions:
        if i.keyword == "ARG":
            key, _, default = i.arg.partition("=")
            root.variables.setdefault(key, default)
        elif i.keyword == "ENV":
            root.env.update(assignments(i.arg, root.env))
        elif i.keyword == "WORKDIR":
            root.workdir = expand(i.arg, root.env)
            root.target(root.workdir).mkdir(parents=True, exist_ok=True)
        elif i.keyword == "COPY":
            log(f"  line {i.line}: COPY {i.arg}")
            copy_into(root, i.arg, stages, repo)
        elif i.keyword == "RUN":
            started = time.monotonic()
            log(f"  line {i.line}: RUN {i.arg[:80]}{'...' if len(i.arg) > 80 else ''}")
            root.run(i.arg)
            log(f"  line {i.line}: done in {time.monotonic() - started:.1f} s")


# --- The host: tools, mirror ---------------------------------------------------------


def ensure_tools(logfile: Path) -> None:
    if os.geteuid() != 0:
        raise ImageError("building the image needs root (debootstrap, chroot, mounts)")
    missing = [t for t in ("debootstrap", "umoci", "runc") if shutil.which(t) is None]
    if not missing:
        return
    log(f"installing {', '.join(missing)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "--yes", "--no-install-recommends", *missing]
    try:
        run(install, f"apt-get install {' '.join(missing)}", logfile, env=env)
    except ImageError:
        run(["apt-get", "update"], "apt-get update", logfile, env=env)
        run(install, f"apt-get install {' '.join(missing)}", logfile, env=env)


def apt_entries(etc: Path) -> Iterator[tuple[str, list[str]]]:
    """(URI, suites) of each enabled `deb` source in an apt configuration (`etc`/apt)."""
    etc = etc / "apt"
    lists = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list"))]
    for path in lists:
        for line in path.read_text().splitlines() if path.is_file() else []:
            words = re.sub(r"\[[^]]*\]", "", line.split("#")[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                yield words[1], [words[2]]
    for path in sorted((etc / "sources.list.d").glob("*.sources")):
        for paragraph in re.split(r"\n\s*\n", path.read_text()):
            fields: dict[str, str] = {}
            for line in paragraph.splitlines():
                if line and not line.startswith(("#", " ", "\t")) and ":" in line:
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                for uri in fields.get("uris", "").split():
                    yield uri, fields.get("suites", "").split()


def mirrors(suite: str, etc: Path = Path("/etc")) -> dict[str, str]:
    """The apt sources for `suite`, `-updates` and `-security`, from the mirrors this machine
    uses for its own Debian release."""
    lines = (etc / "os-release").read_text().splitlines()
    release = dict(line.split("=", 1) for line in lines if "=" in line)
    host = release.get("VERSION_CODENAME", "").strip('"')
    found: dict[str, str] = {}
    for uri, suites in apt_entries(etc):
        for name in suites:
            ours = suite + name.removeprefix(host) if host and name.startswith(host) else None
            if ours in (suite, f"{suite}-updates", f"{suite}-security"):
                found.setdefault(ours, uri)
    if suite not in found:
        raise ImageError(
            f"no Debian mirror for {host or 'this release'} in {etc}/apt/sources.list*: "
            f"debootstrap of {suite} takes the mirror apt uses"
        )
    return found


# --- The cache, the layout -----------------------------------------------------------


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentworkers" / "image"


@dataclass(frozen=True)
class Image:
    layout: Path
    tag: str
    ref: str
    digest: str
    config: dict[str, Any]
    rootfs: Path


def umoci(logfile: Path, *args: str) -> None:
    run(["umoci", *args], f"umoci {args[0]}", logfile)


def manifest(layout: Path, tag: str) -> tuple[str, dict[str, Any]]:
    """The digest and config of `tag` in the layout."""
    index = json.loads((layout / "index.json").read_text())
    for entry in index.get("manifests", []):
        if entry.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            digest = entry["digest"]
            body = json.loads(blob(layout, digest))
            return digest, json.loads(blob(layout, body["config"]["digest"]))
    raise ImageError(f"{layout}: no tag {tag}")


def blob(layout: Path, digest: str) -> bytes:
    algorithm, _, value = digest.partition(":")
    return (layout / "blobs" / algorithm / value).read_bytes()


def digest_of(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big") + part)
    return h.hexdigest()


# --- The two layers ------------------------------------------------------------------


@dataclass
class Plan:
    """The Dockerfile split into the base's instructions and the code's."""

    recipe: Recipe
    repo: Path
    base_key: str = ""
    build_stage: str = ""
    code: list[Instruction] = field(default_factory=list)
    before: dict[str, list[Instruction]] = field(default_factory=dict)
    shipped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        stages = self.recipe.stages
        final = self.recipe.final
        for stage in stages:
            key = stage.name or "final"
            for n, i in enumerate(stage.instructions):
                if i.keyword != "COPY" or SOURCE not in shlex.split(i.arg)[:-1]:
                    continue
                if self.code or stage is final or stage.name is None:
                    raise ImageError(
                        f"Dockerfile line {i.line}: {SOURCE} is copied once, in a build stage"
                    )
                self.build_stage, self.code = stage.name, stage.instructions[n:]
                self.before[key] = stage.instructions[:n]
                break
            else:
                self.before[key] = stage.instructions
        if not self.code:
            raise ImageError(f"Dockerfile: no stage copies {SOURCE}")
        if len(stages) < 2 or final.base != stages[0].name:
            raise ImageError("Dockerfile: the final stage must start FROM the first stage")
        copies = [i for i in final.instructions if i.keyword == "COPY"]
        for i in copies:
            words = shlex.split(i.arg)
            if words[0] != f"--from={self.build_stage}" or len(words) != 3 or words[1] != words[2]:
                raise ImageError(
                    f"Dockerfile line {i.line}: the final stage may only copy a path from "
                    f"{self.build_stage} to the same path"
                )
            self.shipped.append(words[1])
        last_copy = final.instructions.index(copies[-1]) if copies else -1
        for i in final.instructions[last_copy + 1 :]:
            if i.keyword in ("RUN", "COPY"):
                raise ImageError(
                    f"Dockerfile line {i.line}: no RUN or COPY after the final stage's COPY "
                    "(it would change the code's layer)"
                )
        self.base_key = digest_of(
            [
                BUILDER_VERSION.encode(),
                self.recipe.base_image.encode(),
                *(str(i).encode() for s in stages for i in self.before[s.name or "final"]),
                *self._copied_before(),
            ]
        )

    def _copied_before(self) -> Iterator[bytes]:
        for stage_instructions in self.before.values():
            for i in stage_instructions:
                if i.keyword != "COPY" or i.arg.startswith("--from"):
                    continue
                for source in shlex.split(i.arg)[:-1]:
                    for rel in context_files(self.repo, source):
                        yield rel.encode()
                        if rel == "pyproject.toml":
                            # The base holds the dependencies and the build backend: a new
                            # version or a new dev tool does not rebuild it (the code's
                            # layer copies the file again).
                            yield json.dumps(base_inputs(self.repo / rel)).encode()
                        else:
                            yield (self.repo / rel).read_bytes()

    def code_key(self) -> str:
        """The base, the code's instructions and every file they copy (and those copied
        before them, which the code's layer copies again)."""
        parts = [self.base_key.encode(), self.recipe.version.encode()]
        parts += [str(i).encode() for i in self.code]
        for i in [*self.before[self.build_stage], *self.code]:
            if i.keyword == "COPY" and not i.arg.startswith("--from"):
                for source in shlex.split(i.arg)[:-1]:
                    for rel in context_files(self.repo, source):
                        mode = (self.repo / rel).stat().st_mode & 0o777
                        parts += [rel.encode(), str(mode).encode(), (self.repo / rel).read_bytes()]
        return digest_of(parts)


def base_inputs(pyproject: Path) -> dict[str, Any]:
    """What of pyproject.toml the base layer holds."""
    data = tomllib.loads(pyproject.read_text())
    project = data["project"]
    return {
        "dependencies": project.get("dependencies", []),
        "requires-python": project.get("requires-python"),
        "build-system": data.get("build-system", {}).get("requires", []),
    }


class Builder:
    def __init__(self, repo: Path, cache: Path) -> None:
        self.repo = repo
        self.cache = cache
        self.layout = cache / "agentworkers"
        self.recipe = Recipe.read(repo)
        self.plan = Plan(self.recipe, repo)
        (cache / "logs").mkdir(parents=True, exist_ok=True)
        self.logfile = cache / "logs" / f"build-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"

    # The base: debootstrap, every stage's instructions before the code, packed by umoci.

    def base(self) -> Path:
        key = self.plan.base_key[:16]
        home = self.cache / f"base-{key}"
        if (home / "done").exists():
            return home
        started = time.monotonic()
        log(f"building the base layer {key} (a few minutes; log: {self.logfile})")
        ensure_tools(self.logfile)
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        if not (self.layout / "index.json").exists():
            umoci(self.logfile, "init", "--layout", str(self.layout))
        tag = f"{self.layout}:base-{key}"
        with contextlib.suppress(ImageError):
            umoci(self.logfile, "rm", "--image", tag)
        umoci(self.logfile, "new", "--image", tag)
        umoci(self.logfile, "unpack", "--image", tag, str(home / "bundle"))
        rootfs = home / "bundle" / "rootfs"
        self.debian(rootfs)
        stages: dict[str, Path] = {}
        roots: dict[str, Root] = {}
        for stage in self.recipe.stages:
            name = stage.name or "final"
            if stage is self.recipe.stages[0]:
                path = rootfs
            else:
                parent = stages[stage.base]
                if stage is self.recipe.final:
                    # The final stage goes on where the first stage, its parent, ended.
                    path = rootfs
                else:
                    log(f"stage {name}: a copy of {stage.base}")
                    path = self._copy(parent, home / name)
            root = Root(
                path,
                self.logfile,
                self.cache,
                ships=path == rootfs,
                env=dict(roots[stage.base].env) if stage.base in roots else dict(BASE_ENV),
                workdir=roots[stage.base].workdir if stage.base in roots else "/",
                variables={"VERSION": self.recipe.version},
            )
            log(f"stage {name}")
            apply(root, self.plan.before[name], stages, self.repo)
            stages[name], roots[name] = path, root
        self._finish(rootfs)
        log("packing the base layer (umoci repack)")
        umoci(self.logfile, "repack", "--image", tag, str(home / "bundle"))
        config = self.recipe.config()
        flags = [f"--config.user={config['User']}", f"--config.workingdir={config['WorkingDir']}"]
        flags += [f"--config.env={e}" for e in config["Env"]]
        flags += [f"--config.entrypoint={e}" for e in config["Entrypoint"]]
        flags += [f"--config.cmd={c}" for c in config["Cmd"]]
        flags += [f"--config.label={k}={v}" for k, v in config["Labels"].items()]
        umoci(self.logfile, "config", "--image", tag, "--no-history", *flags)
        # What the code's layer needs: the build stage's root as its instructions left it.
        (home / "build.json").write_text(
            json.dumps(
                {
                    "stage": self.plan.build_stage,
                    "env": roots[self.plan.build_stage].env,
                    "workdir": roots[self.plan.build_stage].workdir,
                }
            )
        )
        for name, path in stages.items():
            if path != rootfs and name != self.plan.build_stage:
                shutil.rmtree(path)
        (home / "done").write_text(self.plan.base_key)
        log(f"base layer {key} built in {time.monotonic() - started:.0f} s")
        return home

    def _copy(self, source: Path, dest: Path) -> Path:
        run(["cp", "-a", f"{source}/.", str(dest)], f"copying {source}", self.logfile)
        return dest

    def debian(self, rootfs: Path) -> None:
        """What `FROM debian:<suite>-<date>-slim` gives: minbase, slim, Debian's sources."""
        sources = mirrors(self.recipe.suite)
        log(f"debootstrap {self.recipe.suite} (minbase) into {rootfs}")
        debs = self.cache / "debs"
        debs.mkdir(exist_ok=True)
        run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--cache-dir={debs}",
                self.recipe.suite,
                str(rootfs),
                sources[self.recipe.suite],
            ],
            "debootstrap",
            self.logfile,
        )
        (rootfs / "etc/dpkg/dpkg.cfg.d/docker").write_text(SLIM_DPKG)
        (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(SLIM_APT)
        (rootfs / "etc/apt/sources.list").write_text(
            "".join(f"deb {uri} {suite} main\n" for suite, uri in sources.items())
        )
        share = rootfs / "usr/share"
        for name in ("groff", "info", "linda", "lintian", "locale", "man"):
            for child in (share / name).glob("*"):
                _remove(child)
        for doc in (share / "doc").glob("*"):
            for child in doc.iterdir() if doc.is_dir() and not doc.is_symlink() else []:
                if child.name != "copyright":
                    _remove(child)
        for lists in (rootfs / "var/lib/apt/lists").glob("*"):
            if lists.is_file():
                lists.unlink()
        for cached in (rootfs / "var/cache/apt").glob("*.bin"):
            cached.unlink()

    def _finish(self, rootfs: Path) -> None:
        """What a container runtime provides at run time is left empty, as in Docker's
        images: /dev, and the files it binds onto (made, so a read-only root can take them)."""
        for child in (rootfs / "dev").iterdir():
            _remove(child)
        for name in MOUNT_FILES:
            path = rootfs / name
            if path.is_symlink():
                path.unlink()
            path.write_text("")
        for leftover in ("root/.cache", "tmp"):
            for child in (rootfs / leftover).glob("*"):
                _remove(child)

    # The code: the build stage's remaining instructions on an overlay of its root.

    def code(self, home: Path) -> Image:
        key = self.plan.code_key()[:16]
        app_tag, version = f"app-{key}", self.recipe.version
        root_dir = self.cache / "rootfs" / key
        if not (root_dir / "done").exists() or not self._has_tag(app_tag):
            self._build_code(home, key, root_dir)
        if not self._has_tag(version) or manifest(self.layout, version) != manifest(
            self.layout, app_tag
        ):
            umoci(self.logfile, "tag", "--image", f"{self.layout}:{app_tag}", version)
        os.utime(root_dir)
        digest, config = manifest(self.layout, version)
        return Image(
            layout=self.layout,
            tag=f"{self.layout.name}:{version}",
            ref=f"{self.layout}:{version}",
            digest=digest,
            config=config,
            rootfs=root_dir / "rootfs",
        )

    def _has_tag(self, tag: str) -> bool:
        try:
            manifest(self.layout, tag)
        except (ImageError, OSError):
            return False
        return True

    def _build_code(self, home: Path, key: str, root_dir: Path) -> None:
        started = time.monotonic()
        log(f"building the code's layer {key} (log: {self.logfile})")
        state = json.loads((home / "build.json").read_text())
        scratch = self.cache / "scratch" / key
        shutil.rmtree(scratch, ignore_errors=True)
        (scratch / "upper").mkdir(parents=True)
        try:
            root = Root(
                scratch / "upper",
                self.logfile,
                self.cache,
                ships=False,
                lower=home / state["stage"],
                env=state["env"],
                workdir=state["workdir"],
                variables={"VERSION": self.recipe.version},
            )
            # What was copied before the code is copied again: the base keeps only the
            # dependencies of pyproject.toml, the code's layer takes today's file.
            again = [i for i in self.plan.before[state["stage"]] if i.keyword == "COPY"]
            apply(root, again, {}, self.repo)
            apply(root, self.plan.code, {}, self.repo)
            layer = scratch / "layer.tar"
            tmp = root_dir.with_name(f"{key}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            base_root = home / "bundle" / "rootfs"
            run(["cp", "-al", str(base_root), str(tmp / "rootfs")], "linking", self.logfile)
            with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
                for path in self.plan.shipped:
                    write_layer(scratch / "upper", path, tar, tmp / "rootfs")
            umoci(
                self.logfile,
                "raw",
                "add-layer",
                "--image",
                f"{self.layout}:base-{self.plan.base_key[:16]}",
                "--tag",
                f"app-{key}",
                f"--history.created_by={'; '.join(str(i)[:60] for i in self.plan.code)}",
                str(layer),
            )
            shutil.rmtree(root_dir, ignore_errors=True)
            (tmp / "done").write_text(key)
            tmp.rename(root_dir)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        log(f"code's layer {key} built in {time.monotonic() - started:.1f} s")

    def prune(self, keep_base: str) -> None:
        """Older builds go: a few of each kind stay for other work trees sharing the cache,
        and every root a build handed out in the last day (a container may still run it)."""
        rootfs = sorted((self.cache / "rootfs").glob("*"), key=lambda p: p.stat().st_mtime)
        stale = [p for p in rootfs if p.name.endswith(".tmp")]
        day_ago = time.time() - 86400
        older = [p for p in rootfs if not p.name.endswith(".tmp")][:-KEEP_BUILDS]
        stale += [p for p in older if p.stat().st_mtime < day_ago]
        kept_apps = {p.name for p in rootfs if p not in stale}
        bases = sorted(self.cache.glob("base-*"), key=lambda p: p.stat().st_mtime)
        old_bases = [b for b in bases[:-KEEP_BASES] if b.name != keep_base]
        for path in [*stale, *old_bases]:
            shutil.rmtree(path, ignore_errors=True)
        for old_log in sorted((self.cache / "logs").glob("*.log"))[:-KEEP_LOGS]:
            old_log.unlink()
        index = json.loads((self.layout / "index.json").read_text())
        bases_gone = False
        for entry in index.get("manifests", []):
            name = entry.get("annotations", {}).get("org.opencontainers.image.ref.name", "")
            gone_app = name.startswith("app-") and name[4:] not in kept_apps
            gone_base = name.startswith("base-") and not (self.cache / name).exists()
            if gone_app or gone_base:
                umoci(self.logfile, "rm", "--image", f"{self.layout}:{name}")
                bases_gone |= gone_base
        # A code layer is half a megabyte, a base 75 MB: the slow collection (seconds) is
        # worth it only for a base's.
        if bases_gone:
            umoci(self.logfile, "gc", "--layout", str(self.layout))


def write_layer(upper: Path, shipped: str, tar: tarfile.TarFile, rootfs: Path) -> None:
    """The overlay's changes under `shipped` into the layer (an OCI layer: whiteouts as
    `.wh.` files) and onto `rootfs` (a hard-linked copy of the base's: replaced files are
    unlinked first, so the base's own copy is never written)."""
    top = upper / shipped.strip("/")
    if not top.exists():
        return
    parents = Path(shipped.strip("/")).parents
    entries = [upper / p for p in reversed(list(parents)) if str(p) != "."]
    entries += [top]
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        entries += [Path(dirpath) / n for n in sorted(dirnames + filenames)]
    for path in entries:
        rel = path.relative_to(upper).as_posix()
        target = rootfs / rel
        info = path.lstat()
        if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
            whiteout = tarfile.TarInfo(str(Path(rel).parent / f".wh.{path.name}"))
            tar.addfile(_owned_by_root(whiteout))
            _remove(target)
            continue
        item = _owned_by_root(tar.gettarinfo(str(path), arcname=rel))
        if path.is_dir() and not path.is_symlink():
            if _opaque(path):
                tar.addfile(_owned_by_root(tarfile.TarInfo(f"{rel}/.wh..wh..opq")))
                _remove(target)
            tar.addfile(item)
            target.mkdir(exist_ok=True)
            os.chmod(target, stat.S_IMODE(info.st_mode))
        elif path.is_symlink():
            tar.addfile(item)
            _remove(target)
            os.symlink(os.readlink(path), target)
        elif path.is_file():
            with path.open("rb") as data:
                tar.addfile(item, data)
            _remove(target)
            shutil.copy2(path, target)
        else:
            raise ImageError(f"{rel}: a special file in the code's layer")


def _opaque(path: Path) -> bool:
    """A directory the overlay made anew over one of the lower's (its old entries gone)."""
    try:
        return os.getxattr(path, "trusted.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextlib.contextmanager
def locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("waiting for another build of the image")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_image(repo: Path = REPO, cache: Path | None = None) -> Image:
    """The image of `repo`'s working tree, built or taken from the cache (see the module)."""
    cache = cache or cache_dir()
    with locked(cache):
        builder = Builder(repo, cache)
        home = builder.base()
        image = builder.code(home)
        builder.prune(home.name)
        return image


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    started = time.monotonic()
    try:
        image = ensure_image()
    except ImageError as error:
        log(f"error: {error}")
        return 1
    log(f"{image.tag} ({image.digest[:19]}) ready in {time.monotonic() - started:.1f} s")
    print(image.ref)
    print(image.rootfs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
