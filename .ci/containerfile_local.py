"""Run the Containerfile's build stages on this machine, without a container engine.

CI cannot pull a base image here, so it runs what the image build would run: each
stage's COPY (from the checkout), ENV, ARG, WORKDIR and RUN, in order, with every
absolute path the file uses (/src, /opt/...) moved under ROOT and ``python`` being this
machine's Python 3.11 (the base image's). The final stage's ENV is then printed as
``export`` lines, with its ``COPY --from`` destinations mapped to where the earlier
stages wrote, for the lean install to start the processes in the image's environment.

    python .ci/containerfile_local.py ROOT > runtime.env   # then: . runtime.env
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from dockerfile_parse import DockerfileParser

REPO = Path(__file__).resolve().parent.parent
_ABSOLUTE = re.compile(r"(?<![\w./$])(?:/src|/opt|/tmp)(?:/[\w.-]+)*")
_PYTHON = re.compile(r"(^|&&\s*)python(?= )")


def main(root: Path) -> int:
    # dockerfile-parse wants a path named Dockerfile; hand the file over as an object.
    parser = DockerfileParser(fileobj=io.BytesIO((REPO / "Containerfile").read_bytes()))
    moved: dict[str, str] = {}

    def path(match: re.Match[str]) -> str:
        absolute = match.group(0)
        for dest, source in moved.items():
            if absolute == dest or absolute.startswith(dest.rstrip("/") + "/"):
                return source + absolute[len(dest.rstrip("/")) :]
        return str(root) + absolute

    def local(text: str) -> str:
        text = _ABSOLUTE.sub(path, text)
        return _PYTHON.sub(lambda m: m.group(1) + shlex.quote(sys.executable), text)

    env: dict[str, str] = {}
    args: dict[str, str] = {}
    workdir = root
    final = [i["value"].split()[-1] for i in parser.structure if i["instruction"] == "FROM"][-1]
    stage = ""
    stages: set[str] = set()
    for instruction in parser.structure:
        kind, value = instruction["instruction"], instruction["value"]
        if kind == "FROM":
            stage = value.split()[-1]
            if value.split()[0] not in stages:
                env = {}  # a fresh base image; `FROM build` keeps that stage's state
            stages.add(stage)
        elif kind == "ARG":
            name, _, default = value.partition("=")
            args.setdefault(name, default.strip('"'))
        elif kind == "ENV":
            for item in shlex.split(value):
                name, _, raw = item.partition("=")
                env[name] = raw
        elif kind == "WORKDIR":
            workdir = Path(local(value))
            workdir.mkdir(parents=True, exist_ok=True)
        elif kind == "COPY" and stage != final:
            *sources, dest = shlex.split(value)
            target = Path(local(dest)) if dest.startswith("/") else workdir / dest
            for source in sources:
                origin = REPO / source
                if origin.is_dir():  # COPY dir/ dest/ copies the directory's contents
                    shutil.copytree(
                        origin,
                        target,
                        dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                    )
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, target / origin.name)
        elif kind == "COPY":
            origin, source, dest = shlex.split(value)
            assert origin.startswith("--from="), value
            moved[dest] = local(source)
        elif kind == "RUN" and stage != final:
            command = local(value)
            print(f"containerfile[{stage}]: RUN {value}", file=sys.stderr)
            run_env = {**os.environ, **args, **{k: local(v) for k, v in env.items()}}
            # The pip cache is this machine's; the image build keeps none (PIP_NO_CACHE_DIR).
            run_env.pop("PIP_NO_CACHE_DIR", None)
            run_env.setdefault("PIP_QUIET", "1")  # CI's log keeps the failures, not the list
            command = command.replace(" --no-cache-dir", "")
            subprocess.run(
                ["sh", "-c", command], cwd=workdir, env=run_env, check=True, stdout=sys.stderr
            )
    for name, raw in env.items():
        value = local(raw).replace("$PATH", os.environ["PATH"])
        print(f"export {name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]).resolve()))
