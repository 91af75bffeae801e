"""Running the kubectl built with the local cluster, against any kubeconfig."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from berth.localcluster.build import cached, ensure_built


class KubectlError(RuntimeError):
    """kubectl exited non-zero; the message carries its stderr."""


class Kubectl:
    """``Kubectl(kubeconfig)("get", "nodes")`` returns stdout or raises KubectlError."""

    def __init__(self, kubeconfig: str, binary: Path | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.binary = binary or _find_kubectl()

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 180) -> str:
        return self._run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args], stdin, timeout
        )

    def plugin(self, name: str, *args: str, timeout: float = 180) -> str:
        """A kubectl plugin (``kubectl NAME ...``): kubectl takes no flags before its name,
        so the kubeconfig goes after, for the plugin to read."""
        argv = [str(self.binary), name, *args, f"--kubeconfig={self.kubeconfig}"]
        return self._run(argv, None, timeout)

    def _run(self, argv: list[str], stdin: str | None, timeout: float) -> str:
        args = [a for a in argv[1:] if not a.startswith("--kubeconfig=")]
        result = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout


def _find_kubectl() -> Path:
    """The built kubectl if present, else one on PATH, else build it."""
    built = cached()["kubectl"]
    if built.is_file():
        return built
    found = shutil.which("kubectl")
    if found:
        return Path(found)
    return ensure_built()["kubectl"]
