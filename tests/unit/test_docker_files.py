"""Static checks of the deployment files (no Docker engine needed).

``docker/Dockerfile``, ``docker/compose.yaml`` and ``.dockerignore`` are parsed
and checked against the repository: every path they copy exists, the image
runs as a non-root user with the ``acms`` entrypoint, compose points at the
Dockerfile and at a script the image contains, and every ``acms`` subcommand
they name exists in the CLI.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "docker"
DOCKERFILE = DOCKER_DIR / "Dockerfile"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
DOCKER_README = DOCKER_DIR / "README.md"
DOCKERIGNORE = ROOT / ".dockerignore"


# --------------------------------------------------------------- Dockerfile


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str  # the rest of the logical line, continuations joined


def parse_dockerfile(text: str) -> list[Instruction]:
    """Logical instructions: comments dropped, ``\\`` continuations joined."""
    instructions: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continuation are ignored by Docker
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        line = (pending + stripped).strip()
        pending = ""
        if not line:
            continue
        keyword, _, args = line.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip()))
    assert not pending, "the Dockerfile ends inside a line continuation"
    return instructions


def split_flags(args: str) -> tuple[dict[str, str], str]:
    """Leading ``--name=value`` flags of an instruction, and the rest."""
    flags: dict[str, str] = {}
    rest = args
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        name, _, value = flag[2:].partition("=")
        flags[name] = value
        rest = rest.lstrip()
    return flags, rest


def exec_form(args: str) -> list[str] | None:
    """The JSON (exec) form of CMD/ENTRYPOINT/COPY arguments, or None."""
    if not args.startswith("["):
        return None
    value = json.loads(args)
    assert isinstance(value, list), args
    assert all(isinstance(item, str) for item in value), args
    return value


def arguments(args: str) -> list[str]:
    form = exec_form(args)
    return form if form is not None else shlex.split(args)


@dataclass(frozen=True)
class Copy:
    sources: tuple[str, ...]
    destination: str
    flags: dict[str, str]


def copies(instructions: list[Instruction]) -> list[Copy]:
    result: list[Copy] = []
    for ins in instructions:
        if ins.keyword not in {"COPY", "ADD"}:
            continue
        flags, rest = split_flags(ins.args)
        parts = arguments(rest)
        assert len(parts) >= 2, f"{ins.keyword} needs a source and a destination: {ins.args}"
        result.append(Copy(tuple(parts[:-1]), parts[-1], flags))
    return result


def workdir_before(instructions: list[Instruction], index: int) -> str:
    workdir = "/"
    for ins in instructions[:index]:
        if ins.keyword == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / ins.args.strip())
    return workdir


def image_path_to_repo_path(instructions: list[Instruction], image_path: str) -> Path | None:
    """The repository file a path in the image comes from, via the COPY instructions."""
    target = PurePosixPath(image_path)
    found: Path | None = None
    for index, ins in enumerate(instructions):
        if ins.keyword not in {"COPY", "ADD"}:
            continue
        (copy,) = copies([ins])
        if "from" in copy.flags:
            continue
        dest = PurePosixPath(workdir_before(instructions, index)) / copy.destination
        dest_is_dir = copy.destination.endswith("/") or len(copy.sources) > 1
        for source in copy.sources:
            src = ROOT / source.rstrip("/")
            if src.is_dir():
                # A directory's contents are copied into the destination.
                if target == dest or dest in target.parents:
                    found = src / target.relative_to(dest)
            else:
                into = dest / src.name if dest_is_dir else dest
                if into == target:
                    found = src
    return found


@pytest.fixture(scope="module")
def dockerfile() -> list[Instruction]:
    assert DOCKERFILE.is_file(), DOCKERFILE
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


def only(instructions: list[Instruction], keyword: str) -> Instruction:
    found = [ins for ins in instructions if ins.keyword == keyword]
    assert found, f"no {keyword} instruction"
    # Docker uses the last one; more than one is a mistake here.
    assert len(found) == 1, f"{len(found)} {keyword} instructions"
    return found[0]


def test_parse_dockerfile_joins_continuations_and_drops_comments():
    text = "# c\nFROM x\nRUN a \\\n  # inner\n  && b\nCOPY --chown=u:g a b /d/\n"
    parsed = parse_dockerfile(text)
    assert [i.keyword for i in parsed] == ["FROM", "RUN", "COPY"]
    assert parsed[1].args == "a && b"
    (copy,) = copies(parsed)
    assert copy.sources == ("a", "b")
    assert copy.destination == "/d/"
    assert copy.flags == {"chown": "u:g"}
    (json_copy,) = copies(parse_dockerfile('COPY ["x y", "z", "/d/"]'))
    assert json_copy.sources == ("x y", "z")


def test_every_copy_source_exists(dockerfile):
    found = copies(dockerfile)
    assert found, "the Dockerfile copies nothing"
    for copy in found:
        if "from" in copy.flags:
            continue  # copied from another build stage, not from the context
        for source in copy.sources:
            assert not PurePosixPath(source).is_absolute(), source
            assert ".." not in PurePosixPath(source).parts, source
            matches = list(ROOT.glob(source.rstrip("/")))
            assert matches, f"COPY source {source!r} does not exist in the repository"
            if source.endswith("/"):
                assert all(m.is_dir() for m in matches), source


def test_image_contains_the_package_and_scripts(dockerfile):
    assert image_path_to_repo_path(dockerfile, "/app/pyproject.toml") == ROOT / "pyproject.toml"
    assert image_path_to_repo_path(dockerfile, "/app/src/cleveragents/__init__.py") == (
        ROOT / "src" / "cleveragents" / "__init__.py"
    )
    assert image_path_to_repo_path(dockerfile, "/app/scripts/reindex.py") == (
        ROOT / "scripts" / "reindex.py"
    )
    # quickstart.py without a PATH indexes <its dir>/../data/sample.
    assert image_path_to_repo_path(dockerfile, "/app/data/sample/inventory/store.py") == (
        ROOT / "data" / "sample" / "inventory" / "store.py"
    )
    installs = [
        ins.args for ins in dockerfile if ins.keyword == "RUN" and "pip install" in ins.args
    ]
    assert any(re.search(r"pip install .*--no-cache-dir.* /app\b", run) for run in installs)
    assert not any(" -e " in run or "[dev]" in run for run in installs), installs


def test_base_image_is_python_311_slim(dockerfile):
    froms = [ins for ins in dockerfile if ins.keyword == "FROM"]
    assert froms
    image = split_flags(froms[-1].args)[1].split()[0]
    name, _, tag = image.partition(":")
    assert name in {"python", "docker.io/library/python", "library/python"}, image
    assert tag.startswith("3.11"), image
    assert "slim" in tag, image


def test_installs_git(dockerfile):
    runs = " ".join(ins.args for ins in dockerfile if ins.keyword == "RUN")
    assert re.search(r"apt-get install\b[^&;]*\bgit\b", runs), runs


def test_runs_as_a_non_root_user(dockerfile):
    keywords = [ins.keyword for ins in dockerfile]
    user = only(dockerfile, "USER")
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")
    name, _, group = user.args.strip().partition(":")
    assert name not in {"root", "0"}, user.args
    assert group not in {"root", "0"}, user.args


def test_the_data_directory_is_owner_only(dockerfile):
    # The store only makes the directories it creates 0700; /data exists
    # already, and `acms status` (CMD and HEALTHCHECK) warns on a 0755 one.
    runs = " ".join(ins.args for ins in dockerfile if ins.keyword == "RUN")
    assert re.search(r"\bchown acms:acms /data\b", runs), runs
    assert re.search(r"\bchmod 0?700 /data\b", runs), runs


def env_settings(instructions: list[Instruction]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword != "ENV":
            continue
        parts = shlex.split(ins.args)
        if parts and "=" not in parts[0]:  # legacy form: ENV KEY value
            settings[parts[0]] = " ".join(parts[1:])
            continue
        for part in parts:
            key, sep, value = part.partition("=")
            assert sep, f"ENV item without '=': {part!r}"
            settings[key] = value
    return settings


def test_env_points_at_the_data_volume(dockerfile):
    env = env_settings(dockerfile)
    assert env.get("ACMS_DATA_DIR") == "/data"
    assert env.get("ACMS_PROFILE") == "local"
    assert env.get("PYTHONUNBUFFERED") == "1"
    volumes = [arguments(ins.args) for ins in dockerfile if ins.keyword == "VOLUME"]
    assert ["/data"] in volumes


def test_entrypoint_cmd_and_healthcheck(dockerfile):
    assert exec_form(only(dockerfile, "ENTRYPOINT").args) == ["acms"]
    assert exec_form(only(dockerfile, "CMD").args) == ["status"]
    flags, rest = split_flags(only(dockerfile, "HEALTHCHECK").args)
    assert rest.startswith("CMD "), rest
    assert exec_form(rest.removeprefix("CMD ").strip()) == ["acms", "status"]
    for name in ("interval", "timeout"):
        assert re.fullmatch(r"\d+(ms|s|m)", flags.get(name, "")), flags


# ------------------------------------------------------------- compose.yaml


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    import yaml

    assert COMPOSE_FILE.is_file(), COMPOSE_FILE
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    assert isinstance(data.get("services"), dict)
    return data


def test_compose_builds_from_the_dockerfile(compose):
    for name in ("acms", "reindex"):
        build = compose["services"][name]["build"]
        context = (COMPOSE_FILE.parent / build["context"]).resolve()
        assert context == ROOT, context
        assert (context / build["dockerfile"]).resolve() == DOCKERFILE.resolve()


def test_compose_services_share_the_data_volume(compose):
    assert "acms-data" in compose["volumes"]
    for name in ("acms", "reindex"):
        volumes = compose["services"][name]["volumes"]
        assert "acms-data:/data" in volumes, volumes
        sources = [v for v in volumes if ":/src" in v]
        assert sources, f"{name}: no read-only /src mount"
        assert all(v.endswith(":ro") for v in sources), sources


def test_compose_acms_service(compose):
    acms = compose["services"]["acms"]
    assert acms["command"] == ["status"]
    assert "entrypoint" not in acms  # the image's ENTRYPOINT ["acms"]
    assert "healthcheck" not in acms  # the image's HEALTHCHECK applies
    assert "profiles" not in acms


def test_compose_reindex_job(compose, dockerfile):
    job = compose["services"]["reindex"]
    assert job["profiles"] == ["jobs"]
    assert job["restart"] == "no"
    assert job["command"] == ["--json"]
    interpreter, script = job["entrypoint"]
    assert interpreter == "python"
    source = image_path_to_repo_path(dockerfile, script)
    assert source == ROOT / "scripts" / "reindex.py", f"{script} is not copied into the image"


def test_reindex_script_exists():
    assert (ROOT / "scripts" / "reindex.py").is_file()


# -------------------------------------------------------------- .dockerignore


def dockerignore_excludes(patterns: list[str], path: str) -> bool:
    """Whether ``path`` (or a parent directory of it) is excluded; last match wins."""
    parts = PurePosixPath(path).parts
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern.lstrip("!").strip("/")
        body = os.path.normpath(body).replace(os.sep, "/")
        globs = [body]
        if body.startswith("**/"):
            globs.append(body[3:])
        for candidate in candidates:
            if any(fnmatch.fnmatchcase(candidate, g) for g in globs):
                excluded = not negated
                break
    return excluded


def test_dockerignore_matcher():
    patterns = [".git", "**/__pycache__", "data/*", "!data/sample", "tests"]
    assert dockerignore_excludes(patterns, ".git/HEAD")
    assert dockerignore_excludes(patterns, "src/pkg/__pycache__/x.pyc")
    assert dockerignore_excludes(patterns, "data/text/meta.json")
    assert not dockerignore_excludes(patterns, "data/sample/inventory/x.py")
    assert not dockerignore_excludes(patterns, "src/pkg/x.py")


@pytest.fixture(scope="module")
def ignore_patterns() -> list[str]:
    assert DOCKERIGNORE.is_file(), DOCKERIGNORE
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_dockerignore_excludes_git_and_local_state(ignore_patterns):
    for path in (".git/HEAD", ".venv/bin/python", ".ci/.venv/bin/python", "tests/conftest.py"):
        assert dockerignore_excludes(ignore_patterns, path), path
    assert dockerignore_excludes(ignore_patterns, "src/cleveragents/__pycache__/x.pyc")
    assert not dockerignore_excludes(ignore_patterns, "data/sample/README.md")


def test_dockerignore_keeps_everything_the_image_copies(ignore_patterns, dockerfile):
    needed = [
        p.relative_to(ROOT).as_posix()
        for copy in copies(dockerfile)
        if "from" not in copy.flags
        for source in copy.sources
        for match in ROOT.glob(source.rstrip("/"))
        for p in ([match] if match.is_file() else match.rglob("*"))
        # Build and cache output that .gitignore keeps out of a clean checkout too.
        if p.is_file()
        and "__pycache__" not in p.parts
        and not p.name.endswith(".pyc")
        and not any(part.endswith(".egg-info") for part in p.parts)
    ]
    assert any(p.startswith("src/") for p in needed)
    assert any(p.startswith("scripts/") for p in needed)
    excluded = [p for p in needed if dockerignore_excludes(ignore_patterns, p)]
    assert not excluded, excluded


# ---------------------------------------------------------------- the CLI


def named_subcommands(dockerfile: list[Instruction], compose: dict[str, Any]) -> set[str]:
    """``acms`` subcommands the deployment files and docker/README.md run."""
    names = {arguments(only(dockerfile, "CMD").args)[0]}
    health = split_flags(only(dockerfile, "HEALTHCHECK").args)[1].removeprefix("CMD ").strip()
    names.add(arguments(health)[1])
    names.add(compose["services"]["acms"]["command"][0])
    readme = DOCKER_README.read_text(encoding="utf-8")
    for match in re.finditer(r"compose run --rm acms ((?:--\S+ )*)([a-z][\w-]*)", readme):
        names.add(match.group(2))
    return names


def run_cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ACMS_DATA_DIR": str(tmp_path / "data"), "ACMS_PROFILE": "local"}
    return subprocess.run(
        [sys.executable, "-m", "cleveragents.acms", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_acms_console_script_is_declared():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["scripts"]["acms"] == "cleveragents.cli.main:console"


def test_named_subcommands_exist_in_the_cli(dockerfile, compose, tmp_path):
    names = named_subcommands(dockerfile, compose)
    assert "status" in names
    top = run_cli("--help", tmp_path=tmp_path)
    assert top.returncode == 0, top.stderr
    for name in sorted(names):
        assert name in top.stdout, f"`acms --help` does not mention {name!r}"
        sub = run_cli(name, "--help", tmp_path=tmp_path)
        assert sub.returncode == 0, f"acms {name} --help: {sub.stderr}"


def test_reindex_job_options_exist(compose, tmp_path):
    script = ROOT / "scripts" / "reindex.py"
    env = {**os.environ, "ACMS_DATA_DIR": str(tmp_path / "data"), "ACMS_PROFILE": "local"}
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for option in compose["services"]["reindex"]["command"]:
        assert option in done.stdout, option


# ------------------------------------------------------- compose.remote.yaml

REMOTE_COMPOSE_FILE = DOCKER_DIR / "compose.remote.yaml"


@pytest.fixture(scope="module")
def remote_compose() -> dict[str, Any]:
    import yaml

    assert REMOTE_COMPOSE_FILE.is_file(), REMOTE_COMPOSE_FILE
    data = yaml.safe_load(REMOTE_COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    assert isinstance(data.get("services"), dict)
    return data


def test_remote_compose_builds_the_same_image(remote_compose, compose):
    for name in ("acms", "reindex"):
        service = remote_compose["services"][name]
        assert service["image"] == compose["services"][name]["image"]
        context = (REMOTE_COMPOSE_FILE.parent / service["build"]["context"]).resolve()
        assert context == ROOT
        assert (context / service["build"]["dockerfile"]).resolve() == DOCKERFILE.resolve()
        assert "acms-data:/data" in service["volumes"]


def test_remote_compose_wires_the_remote_profile_to_its_services(remote_compose):
    from urllib.parse import urlsplit

    from cleveragents.application.remote_profile import remote_settings

    services = remote_compose["services"]
    for name in ("acms", "reindex"):
        env = {k: str(v) for k, v in services[name]["environment"].items()}
        assert env["ACMS_PROFILE"] == "remote"
        settings = remote_settings(env)  # every required variable is set
        for url in (
            settings.milvus_uri,
            settings.sparql_query_url,
            settings.sparql_update_url,
            settings.sparql_store_url,
        ):
            host = urlsplit(url).hostname
            assert host in services, f"{url}: no service {host!r}"
            assert host in services[name]["depends_on"], f"{name} does not wait for {host}"
        # Secrets only ever come from the environment of the host.
        for secret in ("ACMS_MILVUS_TOKEN", "ACMS_SPARQL_PASSWORD"):
            assert env[secret].startswith("${"), secret


def test_remote_compose_publishes_no_engine_port(remote_compose):
    for name, service in remote_compose["services"].items():
        assert "ports" not in service, f"{name} publishes a port to the host"
        assert "network_mode" not in service, name


def test_remote_compose_pins_every_image(remote_compose):
    for name, service in remote_compose["services"].items():
        image = service["image"]
        assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), (name, image)


def test_remote_compose_runs_the_oxigraph_version_the_tests_run(remote_compose):
    with (ROOT / "pyproject.toml").open("rb") as f:
        dev = tomllib.load(f)["project"]["optional-dependencies"]["dev"]
    (pin,) = [d for d in dev if d.startswith("oxigraph==")]
    image = remote_compose["services"]["oxigraph"]["image"]
    assert image == f"ghcr.io/oxigraph/oxigraph:{pin.removeprefix('oxigraph==')}"


def test_remote_reindex_job_options_exist(remote_compose, tmp_path):
    script = ROOT / "scripts" / "reindex.py"
    env = {**os.environ, "ACMS_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    job = remote_compose["services"]["reindex"]
    assert job["entrypoint"] == compose_reindex_entrypoint()
    for option in job["command"]:
        assert option in done.stdout, option


def compose_reindex_entrypoint() -> list[str]:
    import yaml

    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    return list(data["services"]["reindex"]["entrypoint"])
