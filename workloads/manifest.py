"""The manifest of a run directory: how the run was made and what it left.

    python -m workloads.manifest RUN_DIR --status complete --command "./run_profiles.sh ..." \
        --settings '{"variants": ["naive"], ...}' [--failed naive,flat]

run_profiles.sh writes it when a run starts (status "running"), after each variant, and at the
end ("complete", "failed" or "interrupted"). Written atomically; files are listed with sizes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tracekit.atomic import write_text
from tracekit.contract import MANIFEST
from workloads.env import environment

STATUSES = ("running", "complete", "failed", "interrupted")


def _first_line(cmd: list[str]) -> str | None:
    """First line a tool prints, or None when it is absent or fails."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if lines else None


def tools() -> dict[str, str | None]:
    """Versions of the tools outside Python that a run depends on."""
    return {
        "nvidia_driver": _first_line(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        ),
        "nsys": _first_line(["nsys", "--version"]),
    }


def files(run_dir: Path) -> list[dict[str, Any]]:
    """Every file under ``run_dir`` but the manifest, with its size."""
    return [
        {"path": p.relative_to(run_dir).as_posix(), "bytes": p.stat().st_size}
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    ]


def build(
    run_dir: Path,
    *,
    status: str,
    command: str,
    settings: dict[str, Any],
    failed: list[str],
    created: str | None = None,
) -> dict[str, Any]:
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {
        "status": status,
        "created": created or now,
        "updated": now,
        "command": command,
        "settings": settings,
        "failed_variants": failed,
        "environment": environment() | tools(),
        "files": files(run_dir),
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="workloads.manifest", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--status", choices=STATUSES, required=True)
    p.add_argument("--command", default="")
    p.add_argument("--settings", default="{}", help="settings as a JSON object")
    p.add_argument("--failed", default="", help="comma-separated variants that failed")
    args = p.parse_args()
    path = args.run_dir / MANIFEST
    created = None
    if path.is_file():
        try:
            created = json.loads(path.read_text()).get("created")
        except (OSError, ValueError):
            created = None
    doc = build(
        args.run_dir,
        status=args.status,
        command=args.command,
        settings=json.loads(args.settings),
        failed=[v for v in args.failed.split(",") if v],
        created=created,
    )
    write_text(path, json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
