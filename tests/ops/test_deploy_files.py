"""docker-compose.yml, the Dockerfile and the README's Docker section, checked without a
Docker engine: the files parse, hold what an operator relies on, and agree with each
other and with mnemo's own config and CLI."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.cli import build_parser
from bot.config import interpolate, load_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


@pytest.fixture(scope="module")
def readme_docker() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Docker\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, "README.md has no '## Docker' section"
    return match.group(1)


def _compose_env(value: str) -> str:
    """Compose's `${VAR:-default}` with nothing set: the default."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_services_volumes_and_profile(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"bot", "db", "llm", "embed"}
    assert services["bot"]["build"] == "."
    assert services["bot"]["depends_on"] == {
        "db": {"condition": "service_healthy"},
        # Optional: only with --profile local-llm, where the bot reads the model's context.
        "llm": {"condition": "service_healthy", "required": False},
    }
    assert "profiles" not in services["bot"] and "profiles" not in services["db"]
    assert services["llm"]["profiles"] == services["embed"]["profiles"] == ["local-llm"]
    assert services["db"]["image"].startswith("postgres:")
    # Data survives `docker compose down`: named volumes, declared at the top level.
    assert set(compose["volumes"]) == {"bot-data", "pg-data"}
    assert "bot-data:/app/data" in services["bot"]["volumes"]
    assert "pg-data:/var/lib/postgresql/data" in services["db"]["volumes"]


def test_every_service_has_a_healthcheck(compose: dict[str, Any], dockerfile) -> None:
    for name, service in compose["services"].items():
        check = service.get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), name
    assert "pg_isready" in compose["services"]["db"]["healthcheck"]["test"][1]
    bot_check = compose["services"]["bot"]["healthcheck"]["test"]
    assert "http://127.0.0.1:9464/healthz" in bot_check[-1]
    # The image's own HEALTHCHECK probes the same endpoint the compose file does.
    image_check = dict(dockerfile)["HEALTHCHECK"]
    assert json.loads(image_check[image_check.index("CMD") + 4 :]) == bot_check[1:]


def test_bot_environment_reaches_mnemo_config(compose: dict[str, Any], tmp_path: Path) -> None:
    env = {k: _compose_env(str(v)) for k, v in compose["services"]["bot"]["environment"].items()}
    db_env = compose["services"]["db"]["environment"]
    for needed in (
        "TELEGRAM_BOT_TOKEN",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "MNEMO_DATABASE_URL",
        "TELEGRAM_WEBHOOK_URL",
        "TELEGRAM_WEBHOOK_SECRET",
        "MNEMO_HEALTH_ENABLED",
    ):
        assert needed in env
    # The URL names the db service and its credentials.
    url = env["MNEMO_DATABASE_URL"]
    assert url == (
        f"postgresql+psycopg://{db_env['POSTGRES_USER']}:"
        f"{_compose_env(db_env['POSTGRES_PASSWORD'])}@db:5432/{db_env['POSTGRES_DB']}"
    )
    # The repository's config.yaml, with this environment, is what the bot runs with.
    raw = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    resolved = interpolate(raw, env)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(resolved), encoding="utf-8")
    settings = load_settings(path)
    assert settings.database.url == url
    assert settings.health.enabled and settings.health.listen == "0.0.0.0"
    # Voice and photos stay off unless the operator's environment turns them on.
    assert (settings.llm.transcription_model, settings.llm.vision) == ("", False)
    env.update(MNEMO_TRANSCRIPTION_MODEL="whisper-1", MNEMO_VISION="true")
    path.write_text(yaml.safe_dump(interpolate(raw, env)), encoding="utf-8")
    llm = load_settings(path).llm
    assert (llm.transcription_model, llm.vision) == ("whisper-1", True)
    assert (
        f"127.0.0.1:{settings.health.port}" in compose["services"]["bot"]["healthcheck"]["test"][-1]
    )
    ports = [_compose_env(p) for p in compose["services"]["bot"]["ports"]]
    assert f"127.0.0.1:{settings.health.port}:{settings.health.port}" in ports
    # A polling bot publishes no webhook port; the webhook override file does.
    webhook_port = f"{settings.telegram.webhook.port}:{settings.telegram.webhook.port}"
    assert webhook_port not in ports and len(ports) == 1
    override = yaml.safe_load((ROOT / "docker-compose.webhook.yml").read_text(encoding="utf-8"))
    assert set(override["services"]) == {"bot"}
    assert [_compose_env(p) for p in override["services"]["bot"]["ports"]] == [webhook_port]


def test_dockerfile_builds_what_the_readme_says(dockerfile, readme_docker: str) -> None:
    instructions = dict(dockerfile)
    assert instructions["FROM"] == "python:3.11-slim"
    runs = [args for word, args in dockerfile if word == "RUN"]
    installs = [r for r in runs if r.startswith("pip install")]
    assert installs == ['pip install ".[postgres,webhooks]"']
    assert f"`{installs[0]}`" in readme_docker
    assert json.loads(instructions["CMD"]) == ["mnemo", "run"]
    assert "`mnemo run`" in readme_docker
    # Everything the image installs from is copied in (and not excluded by .dockerignore).
    copied = {w for word, args in dockerfile if word == "COPY" for w in args.split()[:-1]}
    assert {"pyproject.toml", "README.md", "bot", "memory", "plugins", "config.yaml"} <= copied
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert "tests" in ignored and ".venv" in ignored
    assert not copied & ignored


def test_readme_commands_are_real(readme_docker: str, compose: dict[str, Any]) -> None:
    commands = [
        line.split("#")[0].strip()
        for line in readme_docker.splitlines()
        if line.startswith("docker compose")
    ]
    assert "docker compose up -d" in commands
    parser = build_parser()
    execs = [shlex.split(c) for c in commands if c.startswith("docker compose exec")]
    assert execs
    for argv in execs:
        service, program, *args = argv[3:]
        assert service in compose["services"] and program == "mnemo"
        parser.parse_args(args)  # exits (SystemExit) on an unknown command
    profiles = set(re.findall(r"--profile ([\w-]+)", readme_docker))
    assert profiles == {"local-llm"}


def test_the_local_models_context_and_the_bots_budget_are_set_from_env(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    # Issue 20 item 4: llama.cpp's --ctx-size and the bot's budget both come from .env;
    # left unset, the bot fits its budget to the server's context at start
    # (bot/model_context.py, tested through mnemo chat in tests/cli/test_setup.py).
    command = compose["services"]["llm"]["command"]
    ctx = command[command.index("--ctx-size") + 1]
    assert ctx == "${LLM_CTX_SIZE:-24576}"
    env = compose["services"]["bot"]["environment"]
    assert env["MNEMO_BUDGET_TOKENS"] == "${MNEMO_BUDGET_TOKENS:-}"
    assert env["MNEMO_COMPACTION_MAX_TOKENS"] == "${MNEMO_COMPACTION_MAX_TOKENS:-}"
    raw = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    path = tmp_path / "config.yaml"
    for given, budget in (({}, 13500), ({"MNEMO_BUDGET_TOKENS": "12000"}, 12000)):
        path.write_text(yaml.safe_dump(interpolate(raw, given)), encoding="utf-8")
        assert load_settings(path).memory.budget_tokens == budget
