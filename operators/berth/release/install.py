"""``install.yaml``: what ``kubectl kustomize manifests`` renders, in one file for
``kubectl apply -f`` where a checkout of the manifests is not at hand.

Run ``python -m berth.release.install --write install.yaml`` after changing ``manifests/``
or ``crds/``; ``--check install.yaml`` exits 1 when it is stale. The kubectl built with
the local cluster renders it, so every checkout renders the same bytes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from berth.localcluster.build import ensure_built
from berth.localcluster.paths import REPO_DIR
from berth.release import generated

MANIFESTS: Final = REPO_DIR / "manifests"
COMMAND: Final = "python -m berth.release.install --write install.yaml"
HEADER: Final = (
    "# Berth as `kubectl apply -k manifests` installs it, in one file; do not edit.\n"
    f"# Rendered by `{COMMAND}`.\n"
    "# Install: kubectl apply -f install.yaml (docs/installing.md)\n"
)


class RenderError(RuntimeError):
    """kubectl could not render the manifests; the message carries its stderr."""


def render(kubectl: Path, manifests: Path = MANIFESTS) -> str:
    """The manifests rendered by ``kubectl kustomize``, header included."""
    result = subprocess.run(
        [str(kubectl), "kustomize", str(manifests)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RenderError(f"kubectl kustomize {manifests}: {result.stderr.strip()}")
    return HEADER + result.stdout


def _rendered() -> str:
    return render(ensure_built(_say)["kubectl"])


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")


def _write(path: Path) -> None:
    path.write_text(_rendered(), encoding="utf-8")


def _problems(path: Path) -> list[str]:
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    return [] if current == _rendered() else [f"{path} is stale"]


def main(argv: Sequence[str] | None = None) -> int:
    """``--write FILE`` renders the manifests into FILE; ``--check FILE`` exits 1 when it is
    stale."""
    return generated.main(
        argv,
        command=COMMAND,
        description="Render manifests/ into one file for kubectl apply -f.",
        write=_write,
        problems=_problems,
    )


if __name__ == "__main__":
    raise SystemExit(main())
