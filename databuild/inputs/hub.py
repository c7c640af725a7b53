"""The Hugging Face hub and its cache: snapshots at a 40-hex commit through huggingface_hub's standard
cache (HF_HOME / HF_HUB_CACHE, HF_TOKEN, HF_HUB_OFFLINE), cached files checked against the content
hash their blob is named by, and `fetch`'s check that the whole commit is cached."""

from __future__ import annotations

import fnmatch
import hashlib
import re
import socket
from pathlib import Path

from ..errors import BuildError, first_line


def offline_mode(flag: bool) -> bool:
    from huggingface_hub import constants

    return flag or bool(constants.HF_HUB_OFFLINE)


def fetch_hint(name: str) -> str:
    return f"run 'databuild fetch {name}' where the hub is reachable"


NETWORK_HINT = "check the network, HF_ENDPOINT and any proxy settings"


def offline_hint(name: str) -> str:
    return (f"run 'databuild fetch {name}' on a machine that reaches the hub, into an HF_HOME this one reads, then "
            f"'databuild make {name} --offline'; or give local copies (--dataset-dir / --tokenizer-dir, or the "
            "config's dir)")


def unreachable() -> str | None:
    """Why no TCP connection opens to the hub endpoint (or to the proxy the environment names for it), in
    words; None when one does. One attempt, HF_HUB_ETAG_TIMEOUT seconds at most (huggingface_hub's own
    limit for a metadata request): where there is no network, huggingface_hub retries a refused or
    unresolvable connection five times over 24 s before it gives up, logging each retry."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    from huggingface_hub import constants

    url = urlsplit(constants.ENDPOINT)
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    proxy = getproxies().get(url.scheme)
    if proxy and not proxy_bypass(host or ""):
        proxied = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = proxied.hostname, proxied.port or (443 if proxied.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=constants.HF_HUB_ETAG_TIMEOUT).close()
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc or type(exc).__name__}"
    return None


ASK = "ask"  # hub_snapshot's `down`: open a connection to find out (unreachable())


def hub_snapshot(repo: str, revision: str, repo_type: str, patterns: list[str], offline: bool,
                 hint: str, down: str | None = ASK) -> Path:
    """The cached snapshot of repo at revision (downloading the patterns unless offline); `hint`
    ends the one-line error when it is not to be had. `down`: why the hub is unreachable, or None
    when it is, as a caller resolving several inputs found out once (ASK: find out here)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, HFValidationError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    where = f"{repo_type} {repo}@{revision}"
    # unreachable: the cache alone, as huggingface_hub would after its retries
    down = None if offline else unreachable() if down == ASK else down
    try:
        path = snapshot_download(repo, repo_type=repo_type, revision=revision, allow_patterns=patterns,
                                 local_files_only=offline or down is not None)
    except LocalEntryNotFoundError:
        why = ("not in the hub cache and offline" if offline else f"the hub is unreachable ({down}) and it is not in "
               "the cache" if down else "the hub is unreachable and it is not in the cache")
        raise BuildError(f"{where}: {why}; {hint}") from None
    # huggingface_hub's own messages for these start with the bare status line: say what it means.
    except GatedRepoError as exc:
        raise BuildError(f"{where}: gated on the hub ({_status(exc)}): set HF_TOKEN to a token that was "
                         "granted access") from None
    except RepositoryNotFoundError as exc:
        raise BuildError(f"{where}: no such repo on the hub ({_status(exc)}; a private one needs HF_TOKEN)") from None
    except RevisionNotFoundError as exc:
        raise BuildError(f"{where}: no such commit in the repo ({_status(exc)})") from None
    except HfHubHTTPError as exc:
        detail = f": {exc.server_message}" if exc.server_message else ""
        raise BuildError(f"{where}: {_status(exc)}{detail}") from None
    except (HFValidationError, OSError) as exc:
        raise BuildError(f"{where}: {first_line(exc)}") from None
    except Exception as exc:  # the transport's own errors (a connection cut mid-file): still one line
        raise BuildError(f"{where}: download failed ({type(exc).__name__}: {first_line(exc)}); "
                         "run it again: finished files stay in the cache") from None
    return Path(path)


def _status(exc) -> str:
    response = getattr(exc, "response", None)
    return f"HTTP {response.status_code}" if response is not None else first_line(exc)


def check_cached_blob(path: Path, snapshot: Path, where: str, sha256: str) -> None:
    """A file of a hub snapshot must be a link into its repo's blobs/, and the blob's content must
    hash to the blob's name: sha256 (LFS files) or git's blob sha1. A regular file, a link elsewhere
    or a blob named otherwise is a cache someone changed, and is refused; except that where the
    filesystem has no symlinks huggingface_hub stores regular files, which only their pins (and the
    rows_sha256 they lead to) can vouch for."""
    from huggingface_hub.file_download import are_symlinks_supported

    repo_cache = snapshot.parent.parent
    if not path.is_symlink() and not are_symlinks_supported(repo_cache.parent):
        return
    blobs = (repo_cache / "blobs").resolve()
    target = path.resolve()
    etag = target.name
    if not path.is_symlink() or target.parent != blobs or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", etag):
        raise BuildError(f"{where}: not a link to a blob of the hub cache ({target}); the cache was changed by "
                         "hand: delete the snapshot and fetch again")
    if len(etag) == 64:
        found = sha256
    else:
        data = path.read_bytes()
        found = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    if found != etag:
        raise BuildError(f"{where}: cached file is corrupt (content hash {found}, cache entry {etag}); "
                         "delete it and fetch again")


def fetch_all(repo: str, revision: str, repo_type: str, patterns: list[str]) -> None:
    """snapshot_download, then every file of the commit that the patterns select must be in the
    snapshot: with the hub unreachable, snapshot_download hands back whatever is cached, and a fetch
    that reported success over a partial cache would leave the offline build to find out."""
    from huggingface_hub import HfApi, constants

    where = f"{repo_type} {repo}@{revision}"
    down = unreachable()
    if down is not None:
        raise BuildError(f"{where}: the hub at {constants.ENDPOINT} is unreachable ({down}); fetch on a machine that "
                         f"reaches it, or {NETWORK_HINT}")
    snapshot = hub_snapshot(repo, revision, repo_type, patterns, False, NETWORK_HINT, down=None)  # reached just now
    try:
        listed = HfApi().list_repo_files(repo, revision=revision, repo_type=repo_type)
    except Exception as exc:  # any failure to list means this fetch cannot vouch for the cache
        raise BuildError(f"{where}: cannot list the files of the commit ({type(exc).__name__}: "
                         f"{first_line(exc)}); {NETWORK_HINT}") from None
    missing = [name for name in listed
               if any(fnmatch.fnmatch(name, p) for p in patterns) and not (snapshot / name).is_file()]
    if missing:
        raise BuildError(f"{where}: {missing[0]} is not in the cache ({len(missing)} of the commit's files "
                         f"missing); {NETWORK_HINT}, then fetch again")
