"""Seeding a run's shared JIT cache from an earlier run's, for ``engine.cache_state: seeded``.

On a GPU machine lent for 30 minutes, the warm-up pass of the 48-layer claim-1 experiment took about 9 of
them (its first engine, compiling from cold, needed 266 s to become healthy; later ones about 80 s). The
caches that pass fills (2.2 MB as tar.xz for that experiment) can be carried to the next hold instead, so
every engine starts as warm as a measured arm of the run that made them, and the hold spends its time on
rounds. Only the copy is done here; whether the seed really covered the arms' kernels is measured as usual,
by the compiles counted in each measured window.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cluster.engine.command import JIT_CACHE_VARS

SEED_SUBDIRS = tuple(JIT_CACHE_VARS.values())


def seed_problem(seed: str | Path) -> str | None:
    """Why ``seed`` cannot seed a run's cache, or None; checked before anything starts."""
    p = Path(seed).expanduser()
    if not p.is_dir():
        return f"{p} is not a folder"
    if not any((p / sub).is_dir() and any((p / sub).iterdir()) for sub in SEED_SUBDIRS):
        return f"{p} holds no JIT cache (none of {', '.join(SEED_SUBDIRS)} is a non-empty subfolder)"
    return None


def copy_seed(seed: str | Path, cache_dir: Path) -> tuple[int, int]:
    """Copy the seed's cache subfolders into ``cache_dir``; (files, bytes) copied.

    A copy, not a link: the run's engines write to their cache, and the seed must stay what it was, for the
    next hold and as the record of what this one started from.
    """
    src = Path(seed).expanduser()
    files = size = 0
    for sub in SEED_SUBDIRS:
        if (src / sub).is_dir():
            shutil.copytree(src / sub, cache_dir / sub, dirs_exist_ok=True, symlinks=True)
            for f in (cache_dir / sub).rglob("*"):
                if f.is_file():
                    files += 1
                    size += f.stat().st_size
    return files, size
