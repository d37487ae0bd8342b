"""The source distributions whose own test suites the compatibility suite runs.

:func:`source_tree` downloads a package's sdist for the installed version from
the package index (its JSON "simple" API: the file's URL and SHA-256), checks the
digest, unpacks it, and keeps it in a cache directory, so the network is needed
once per version: ``$SENTINEL_COMPAT_CACHE``, else ``~/.cache/sentinel/compat``.
Without a network (and nothing cached) the caller skips with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import urllib.request
from importlib import metadata
from pathlib import Path

__all__ = ["SourceUnavailable", "cache_dir", "installed_version", "source_tree"]

INDEX = os.environ.get("SENTINEL_COMPAT_INDEX", "https://pypi.org/simple")
TIMEOUT = 30


class SourceUnavailable(Exception):
    """The sdist could not be had (no network, no such file): the reason."""


def cache_dir() -> Path:
    configured = os.environ.get("SENTINEL_COMPAT_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sentinel" / "compat"


def installed_version(dist: str) -> str:
    return metadata.version(dist)


def _sdist_url(project: str, version: str) -> tuple[str, str, str]:
    """(file name, URL, sha256) of ``project``'s sdist for ``version``."""
    req = urllib.request.Request(
        f"{INDEX.rstrip('/')}/{project.lower()}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            listing = json.load(resp)
    except (OSError, ValueError) as err:
        raise SourceUnavailable(f"the package index at {INDEX} did not answer ({err})") from err
    norm = project.lower().replace("-", "_")
    for f in listing.get("files", []):
        name = f["filename"]
        stem = name.lower().replace("-", "_")
        if stem == f"{norm}_{version}.tar.gz":
            return name, f["url"], f["hashes"]["sha256"]
    raise SourceUnavailable(f"no source distribution of {project} {version} on {INDEX}")


def source_tree(project: str, dist: str | None = None) -> Path:
    """The unpacked sdist of the installed version of ``project`` (its
    distribution name ``dist``, default ``project``), downloaded and unpacked into
    the cache on first use. Raises :class:`SourceUnavailable`."""
    version = installed_version(dist or project)
    root = cache_dir()
    target = root / f"{project.lower()}-{version}"
    if (target / ".complete").exists():
        return target
    name, url, digest = _sdist_url(project, version)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        archive = Path(tmp) / name
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT) as resp, archive.open("wb") as out:
                shutil.copyfileobj(resp, out)
        except OSError as err:
            raise SourceUnavailable(f"could not download {url} ({err})") from err
        got = hashlib.sha256(archive.read_bytes()).hexdigest()
        if got != digest:
            raise SourceUnavailable(f"{name}: SHA-256 {got} is not the index's {digest}")
        unpacked = Path(tmp) / "src"
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
        (top,) = list(unpacked.iterdir())
        if target.exists():  # a partial tree from an interrupted run
            shutil.rmtree(target)
        top.rename(target)
        (target / ".complete").touch()
    return target
