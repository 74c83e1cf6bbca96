"""Print what pyproject.toml requires, with the extras named, one requirement a line:
the Dockerfile installs these (pinned by constraints.txt) in a layer of their own before
it copies the sources, so editing the code does not reinstall every dependency.

Usage: python project_requirements.py pyproject.toml [EXTRA ...]"""

from __future__ import annotations

import sys
import tomllib


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    found = list(project["dependencies"])
    for extra in extras:
        found += project["optional-dependencies"][extra]  # an unknown extra: KeyError
    return found


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1], sys.argv[2:])))
