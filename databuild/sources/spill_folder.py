"""The spill's folder in $TMPDIR: named after its owner (host and pid) and holding owner.json, so that
a build killed before it could clean up (SIGKILL, a node lost) leaves a folder the next make on the
same host recognises as its and removes once that owner is gone."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from ..errors import BuildError

SPILL_PREFIX = "databuild-"
OWNER_FILE = "owner.json"


def tmpdir_full(path: Path | str, what: str, exc: OSError) -> BuildError:
    """The one line for a write into $TMPDIR that failed (a full disk, most often), whichever process and
    whichever file: where, and the fix."""
    return BuildError(f"{path}: {what} failed ({exc.strerror or exc}); the build needs free space in $TMPDIR: "
                      "free some, or point TMPDIR at a larger disk")


def spill_folder() -> tempfile.TemporaryDirectory:
    """A new folder for a build's temporary files (the bucket files; the encoder its worker processes
    read) in $TMPDIR, `databuild-HOST-PID-XXXXXXXX`, holding `owner.json` ({host, pid, started, boot}),
    which `stale_spill_folders` reads."""
    host = socket.gethostname()
    folder = tempfile.TemporaryDirectory(prefix=f"{SPILL_PREFIX}{re.sub(r'[^A-Za-z0-9.]', '_', host)}-{os.getpid()}-")
    owner = {"host": host, "pid": os.getpid(), "started": _started(os.getpid()), "boot": _boot_id()}
    try:
        (Path(folder.name) / OWNER_FILE).write_text(json.dumps(owner), encoding="utf-8")
    except OSError as exc:
        folder.cleanup()
        raise tmpdir_full(Path(folder.name) / OWNER_FILE, "writing the folder's owner", exc) from None
    return folder


def remove_stale_spill_folders() -> None:
    """Remove the spill folders in $TMPDIR of this host's builds that are gone, each said in a line."""
    for path, owner in stale_spill_folders(Path(tempfile.gettempdir())):
        shutil.rmtree(path, ignore_errors=True)
        logging.getLogger(__name__).warning(f"removed {path}: temporary files of a build stopped before it could "
                                            f"clean up (pid {owner['pid']} on {owner['host']}, gone)")


def stale_spill_folders(directory: Path) -> list[tuple[Path, dict]]:
    """Spill folders in `directory` whose owner (per its owner.json) was a process of this host that is
    gone: not running, or its pid now another process's (another start time, or the host rebooted).
    A folder with no readable owner.json (one being made, or of an older databuild) is left alone."""
    host, boot, stale = socket.gethostname(), _boot_id(), []
    for path in sorted(directory.glob(f"{SPILL_PREFIX}*")):
        try:
            owner = json.loads((path / OWNER_FILE).read_text(encoding="utf-8"))
            pid = int(owner["pid"])
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if owner.get("host") != host:
            continue
        rebooted = boot is not None and owner.get("boot") not in (None, boot)
        reused = owner.get("started") is not None and _started(pid) not in (None, owner["started"])
        if rebooted or reused or not _running(pid):
            stale.append((path, owner))
    return stale


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _started(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (Linux); None where it cannot be told."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
