#!/usr/bin/env python3
"""The image's health check (Dockerfile HEALTHCHECK, docker-compose.yml): healthy when the
bot's /healthz answers 200. A bot held on a configuration error (deploy/entrypoint.py) is
unhealthy, and this prints why, which `docker inspect` shows under State.Health.

Usage: mnemo-healthcheck [PORT]  (default 9464, the config's health.port)."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from entrypoint import HOLD_FILE


def main(argv: list[str]) -> int:
    if HOLD_FILE.exists():
        print("configuration error:", HOLD_FILE.read_text(encoding="utf-8").strip())
        return 1
    port = int(argv[0]) if argv else 9464
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=3) as resp:
            print(resp.read(500).decode("utf-8", "replace"))
            return 0
    except (urllib.error.URLError, OSError) as exc:
        print(f"/healthz on port {port}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
