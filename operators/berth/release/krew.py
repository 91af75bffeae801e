"""The krew manifest of ``kubectl-berth`` (plugins/krew/berth.yaml) and the release step
that completes it.

The checked-in manifest holds placeholders where only a release knows the value: the
version, the homepage, where the archives are and their sha256. ``python -m
berth.release.krew`` fills them from the archives a release built and refuses to write a
manifest that krew's own validation (``ValidatePlugin``) would refuse.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from berth.localcluster.paths import REPO_DIR
from berth.release import generated

MANIFEST: Final = REPO_DIR / "plugins" / "krew" / "berth.yaml"
API_VERSION: Final = "krew.googlecontainertools.github.com/v1alpha2"
VERSION: Final = "@VERSION@"
HOMEPAGE: Final = "@HOMEPAGE@"
BASE_URL: Final = "@BASE_URL@"
SHA256: Final = "@SHA256@"
# krew's rules (internal/index/validation): plugin names, digests, semantic versions.
SAFE_NAME: Final = re.compile(r"^[\w-]+$")
DIGEST: Final = re.compile(r"^[a-f0-9]{64}$")
SEMVER: Final = re.compile(r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
SELECTOR_KEYS: Final = frozenset({"os", "arch"})


class ReleaseError(ValueError):
    """The manifest cannot be completed; the message says why."""


def problems(plugin: dict[str, Any], name: str) -> list[str]:
    """What krew would refuse in a plugin manifest for plugin ``name``; empty if none."""
    found = []
    spec = plugin.get("spec") or {}
    if plugin.get("apiVersion") != API_VERSION:
        found.append(f"apiVersion is not {API_VERSION}")
    if plugin.get("kind") != "Plugin":
        found.append("kind is not Plugin")
    if not SAFE_NAME.match(name) or (plugin.get("metadata") or {}).get("name") != name:
        found.append(f"metadata.name is not {name!r} (the file's name)")
    description = spec.get("shortDescription") or ""
    if not description or "\n" in description or "\r" in description:
        found.append("shortDescription is empty or has line breaks")
    if not SEMVER.match(str(spec.get("version", ""))):
        found.append(f"version {spec.get('version')!r} is not a semantic version with a v")
    platforms = spec.get("platforms") or []
    if not platforms:
        found.append("no platforms")
    for index, platform in enumerate(platforms):
        found.extend(f"platforms[{index}]: {p}" for p in _platform_problems(platform))
    return found


def _platform_problems(platform: dict[str, Any]) -> list[str]:
    found = []
    if not platform.get("uri"):
        found.append("uri is not set")
    if not DIGEST.match(str(platform.get("sha256", ""))):
        found.append(f"sha256 {platform.get('sha256')!r} is not 64 lowercase hex digits")
    if not platform.get("bin"):
        found.append("bin is not set")
    files = platform.get("files")
    if files is not None and (not files or not all(f.get("from") and f.get("to") for f in files)):
        found.append("files is empty or an entry lacks from or to")
    selector = platform.get("selector") or {}
    labels = selector.get("matchLabels") or {}
    keys = set(labels) | {e.get("key") for e in selector.get("matchExpressions") or ()}
    if not keys:
        found.append("the selector is empty")
    if keys - SELECTOR_KEYS:
        found.append(f"the selector uses {sorted(keys - SELECTOR_KEYS)}: only os and arch")
    return found


def fill(
    template: dict[str, Any], version: str, homepage: str, base_url: str, archives: Path
) -> dict[str, Any]:
    """The manifest with its placeholders filled: each platform's sha256 is that of the
    archive its uri names, read from ``archives``."""
    spec = template["spec"]
    filled_platforms = []
    for platform in spec["platforms"]:
        uri: str = platform["uri"]
        archive = archives / uri.rsplit("/", 1)[-1]
        if not archive.is_file():
            raise ReleaseError(f"no archive {archive} for {platform['selector']}")
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        filled_platforms.append(
            {**platform, "uri": uri.replace(BASE_URL, base_url.rstrip("/")), "sha256": digest}
        )
    filled_spec = {**spec, "version": version, "homepage": homepage, "platforms": filled_platforms}
    filled = {**template, "spec": filled_spec}
    found = problems(filled, template["metadata"]["name"])
    if found:
        raise ReleaseError("; ".join(found))
    return filled


def main(argv: Sequence[str] | None = None) -> int:
    """Writes the completed manifest for a release's archives."""
    parser = argparse.ArgumentParser(
        prog="python -m berth.release.krew",
        description="Complete plugins/krew/berth.yaml for the archives of a release.",
    )
    parser.add_argument("--homepage", required=True, help="the project's home page")
    parser.add_argument("--base-url", required=True, help="where the release's archives are")
    parser.add_argument("--archives", type=Path, required=True, help="the built archives")
    parser.add_argument("--out", type=Path, required=True, help="the manifest to write")
    parser.add_argument(
        "--version", default=f"v{generated.package_version()}", help="default: %(default)s"
    )
    args = parser.parse_args(argv)
    template = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    try:
        plugin = fill(template, args.version, args.homepage, args.base_url, args.archives)
    except ReleaseError as err:
        sys.stderr.write(f"error: {err}\n")
        return 1
    text = yaml.dump(plugin, Dumper=generated.LiteralDumper, sort_keys=False, width=100)
    args.out.write_text(text, encoding="utf-8")
    sys.stderr.write(f"wrote {args.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
