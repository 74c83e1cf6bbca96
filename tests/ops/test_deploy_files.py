"""docker-compose.yml (and its override files), the Dockerfile, .env.example and the Docker
section of docs/DEPLOY.md, checked without a Docker engine: the files are valid Compose
(tests/ops/compose_files.py), hold what an operator relies on, and agree with each other
and with mnemo's own config and CLI."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bot.cli import build_parser
from bot.config.settings import interpolate, load_settings
from tests.ops import compose_files as cf
from tests.ops.compose_files import ROOT
from tests.ops.compose_files import interpolate as compose_interpolate


def _deploy_module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "deploy" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    text = (ROOT / "docs/DEPLOY.md").read_text(encoding="utf-8")
    match = re.search(r"^## Docker\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, "docs/DEPLOY.md has no '## Docker' section"
    return match.group(1)


def _compose_env(value: str) -> str:
    """Compose's interpolation with nothing set: the defaults."""
    return compose_interpolate(value, {})


def test_services_volumes_and_profile(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"bot", "db", "llm", "embed"}
    assert services["bot"]["build"] == "."
    assert services["bot"]["depends_on"] == {
        "db": {"condition": "service_healthy"},
        # Optional: only with --profile local-llm, where the bot reads the model's context
        # and semantic search embeds from the start.
        "llm": {"condition": "service_healthy", "required": False},
        "embed": {"condition": "service_healthy", "required": False},
    }
    assert "profiles" not in services["bot"] and "profiles" not in services["db"]
    assert services["llm"]["profiles"] == services["embed"]["profiles"] == ["local-llm"]
    assert services["db"]["image"].startswith("postgres:")
    # Data survives `docker compose down`: named volumes, declared at the top level.
    assert set(compose["volumes"]) == {"bot-data", "pg-data"}
    assert "bot-data:/app/data" in services["bot"]["volumes"]
    # The configuration is the operator's file, mounted where the image reads it.
    assert "${MNEMO_HOST_CONFIG:-./config.yaml}:/app/config.yaml:ro" in services["bot"]["volumes"]
    assert "pg-data:/var/lib/postgresql/data" in services["db"]["volumes"]


def test_every_service_has_a_healthcheck(compose: dict[str, Any], dockerfile) -> None:
    for name, service in compose["services"].items():
        check = service.get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), name
    assert "pg_isready" in compose["services"]["db"]["healthcheck"]["test"][1]
    bot_check = compose["services"]["bot"]["healthcheck"]["test"]
    assert bot_check[1:] == ["python", "/opt/mnemo/healthcheck.py"]
    # The image's own HEALTHCHECK runs the same check the compose file does, from where
    # the Dockerfile puts it (it probes /healthz: tests/ops/test_docker_entrypoint.py).
    image_check = dict(dockerfile)["HEALTHCHECK"]
    assert json.loads(image_check[image_check.index("CMD") + 4 :]) == bot_check[1:]
    assert ("COPY", "deploy/entrypoint.py deploy/healthcheck.py /opt/mnemo/") in dockerfile


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
    # The health check probes the config's health port unless told another.
    check = (ROOT / "deploy/healthcheck.py").read_text(encoding="utf-8")
    assert f"int(argv[0]) if argv else {settings.health.port}" in check
    ports = [_compose_env(p) for p in compose["services"]["bot"]["ports"]]
    assert ports == [f"127.0.0.1:{settings.health.port}:{settings.health.port}"]
    # MNEMO_HEALTH_PORT set but empty: a free host port per replica (`--scale`).
    scaled = compose_interpolate(compose["services"]["bot"]["ports"][0], {"MNEMO_HEALTH_PORT": ""})
    assert scaled == f"127.0.0.1::{settings.health.port}"
    # No bot publishes its webhook port, even in webhook mode: the TLS proxy of the
    # override reaches it on the compose network, so replicas do not collide.
    override = yaml.safe_load((ROOT / "docker-compose.webhook.yml").read_text(encoding="utf-8"))
    assert set(override["services"]) == {"bot", "proxy"}
    assert "ports" not in override["services"]["bot"]
    assert override["services"]["bot"]["expose"] == [str(settings.telegram.webhook.port)]
    proxy_conf = (ROOT / "deploy/nginx/webhook.conf").read_text(encoding="utf-8")
    assert f"server bot:{settings.telegram.webhook.port};" in proxy_conf


def test_dockerfile_builds_what_the_readme_says(dockerfile, readme_docker: str) -> None:
    instructions = dict(dockerfile)
    assert instructions["FROM"] == "python:3.11-slim"
    runs = [args for word, args in dockerfile if word == "RUN"]
    # Dependencies first, from the lock, before any source is copied: a code edit
    # reinstalls only mnemo itself (the layer order is the instruction order).
    deps = next(i for i, (w, a) in enumerate(dockerfile) if w == "RUN" and "-c " in a)
    assert (
        "pip install -r /tmp/deps/requirements.txt -c /tmp/deps/constraints.txt"
        in (dockerfile[deps][1])
    )
    assert (
        "project_requirements.py /tmp/deps/pyproject.toml postgres webhooks mcp"
        in (dockerfile[deps][1])
    )
    first_source = dockerfile.index(("COPY", "bot ./bot"))
    assert deps < first_source
    assert ("COPY", "pyproject.toml constraints.txt deploy/project_requirements.py /tmp/deps/") in (
        dockerfile[:deps]
    )
    assert "pip install --no-deps . && pip check" in runs
    assert "`pip install --no-deps .`" in readme_docker and "constraints.txt" in readme_docker
    assert json.loads(instructions["ENTRYPOINT"]) == ["python", "/opt/mnemo/entrypoint.py"]
    assert json.loads(instructions["CMD"]) == ["mnemo", "run"]
    assert "`mnemo run`" in readme_docker
    # Everything the image installs from is copied in (and not excluded by .dockerignore).
    copied = {w for word, args in dockerfile if word == "COPY" for w in args.split()[:-1]}
    assert {
        "pyproject.toml",
        "README.md",
        "bot",
        "memory",
        "plugins",
        "config.yaml",
        "constraints.txt",
        "deploy/entrypoint.py",
    } <= copied
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert "tests" in ignored and ".venv" in ignored
    assert not copied & ignored
    assert not {"deploy", ".env.example"} & ignored  # the image needs deploy/


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
    # (bot/model/server_context.py, tested through mnemo chat in tests/cli/test_setup.py).
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


# --- the compose files as Docker Compose reads them (tests/ops/compose_files.py) -------

COMBINATIONS = [[cf.BASE], *([cf.BASE, o] for o in cf.OVERRIDES), [cf.BASE, *cf.OVERRIDES]]


def _operator_env() -> dict[str, str]:
    """.env.example as an operator fills it in: every line on, the secrets given."""
    env = {name: value for name, (value, _, _) in cf.env_example().items()}
    return env | {"TELEGRAM_BOT_TOKEN": "123:abc", "OPENAI_API_KEY": "sk-test"}


@pytest.mark.parametrize("files", COMBINATIONS, ids=lambda f: "+".join(f))
@pytest.mark.parametrize("env_kind", ["empty", "example"])
def test_compose_files_are_valid_compose(files: list[str], env_kind: str) -> None:
    env = {} if env_kind == "empty" else _operator_env()
    model = cf.project(files, env)
    cf.validate(model)
    services = model["services"]
    # What the specification leaves to the engine: every reference resolves.
    for name, service in services.items():
        for needed in service.get("depends_on", {}):
            assert needed in services, f"{name} depends on unknown {needed}"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith(".") and Path(source).suffix:
                # A missing file would be mounted as an empty directory (Docker makes one);
                # folders (./models, ./deploy/certs) are the operator's to fill.
                assert (ROOT / source).is_file(), f"{name} mounts missing {source}"
            elif source.startswith("."):
                continue
            else:
                assert source in model["volumes"], f"{name} mounts undeclared {source}"
        for secret in service.get("secrets", []):
            assert secret in model["secrets"]
            assert f"/run/secrets/{secret}" in service["environment"].values()
    assert model["name"] == "mnemo"


def test_the_compose_check_rejects_what_compose_rejects() -> None:
    # The validator bites: a misspelt key, a wrong restart policy, a wrong type.
    model = cf.project([cf.BASE], {})
    cf.validate(model)
    bot = model["services"]["bot"]
    for broken in (
        {"helthcheck": bot["healthcheck"]},
        {"restart": "always-unless"},
        {"ports": "9464"},
    ):
        spoiled = {**model, "services": {**model["services"], "bot": {**bot, **broken}}}
        with pytest.raises(ValueError):
            cf.validate(spoiled)


def test_env_example_lists_every_variable_with_a_comment(tmp_path: Path) -> None:
    listed = cf.env_example()
    used: set[str] = set()
    for name in (cf.BASE, *cf.OVERRIDES, "config.yaml"):
        used |= cf.references(name)
    # Set by the compose file itself, not by the operator.
    own = {"MNEMO_DATABASE_URL", "MNEMO_HEALTH_ENABLED", "MNEMO_HEALTH_LISTEN"}
    assert own <= used
    assert sorted(used - own - set(listed)) == []
    for name, (_, _, comment) in listed.items():
        assert len(comment) > 10, f"{name} has no comment above it"
    # Only the two secrets are on; everything else shows its default, commented out.
    assert {n for n, (_, on, _) in listed.items() if on} == {"TELEGRAM_BOT_TOKEN", "OPENAI_API_KEY"}
    # A default shown is the compose files' own (an empty default may show an example).
    for file in (cf.BASE, *cf.OVERRIDES):
        text = (ROOT / file).read_text(encoding="utf-8")
        for match in cf.REFERENCE.finditer(text):
            name, op, default = match.groups()
            if op in (":-", "-") and default and listed[name][0]:
                assert listed[name][0] == default, name


def _field(model: type, path: list[str]) -> Any:
    """The pydantic field at `path` under `model`, or None."""
    field = model.model_fields.get(path[0])  # type: ignore[attr-defined]
    if field is None or len(path) == 1:
        return field
    return _field(field.annotation, path[1:])


# The settings issue #28 names as unsettable in Docker: each has its .env.example line.
ISSUE_KEYS = [
    "telegram.allowed_ids",
    "telegram.admin_ids",
    "limits.tokens_per_day",
    "limits.tokens_per_month",
    "limits.background.calls_total",
    "limits.background.tokens_total",
    "web.enabled",
    "web.operators",
    "web.secure_cookies",
    "llm.prices",
    "reflect.enabled",
    "reflect.interval",
    "reflect.batch",
    "log_level",
]


def test_env_example_settings_name_real_config_keys() -> None:
    from bot.config.settings import Settings

    settings_names = [
        name for name in cf.env_example() if name.startswith("MNEMO_") and "__" in name
    ]
    settings_names.append("MNEMO_LOG_LEVEL")  # a top-level key: no section
    keys = {name.removeprefix("MNEMO_").lower().replace("__", ".") for name in settings_names}
    for key in keys:
        assert _field(Settings, key.split(".")) is not None, f"{key}: no such setting"
    assert set(ISSUE_KEYS) <= keys
    assert "MNEMO_LOG_LEVEL" in cf.env_example()


def test_env_example_settings_reach_the_bot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(interpolate(raw, {})), encoding="utf-8")
    given = {
        "MNEMO_TELEGRAM__ALLOWED_IDS": "1,2",
        "MNEMO_LIMITS__TOKENS_PER_DAY": "200000",
        "MNEMO_WEB__ENABLED": "true",
        "MNEMO_LLM__PRICES": cf.env_example()["MNEMO_LLM__PRICES"][0],
        "MNEMO_REFLECT__ENABLED": "false",
        "MNEMO_LOG_LEVEL": "DEBUG",
    }
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(path)
    assert settings.telegram.allowed_ids == [1, 2]
    assert settings.limits.tokens_per_day == 200000
    assert settings.web.enabled and not settings.reflect.enabled
    assert "gpt-4o-mini" in settings.llm.prices
    assert settings.log_level == "DEBUG"


def test_every_env_example_variable_is_accepted_by_the_bot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bot gets all of .env (env_file) and refuses unknown MNEMO_* names: every name the
    # deploy files use for themselves must pass, at the value .env.example shows.
    raw = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(interpolate(raw, {})), encoding="utf-8")
    for name, (value, _on, _comment) in cf.env_example().items():
        if name.endswith("_FILE"):
            continue  # the secrets' files exist only inside the container
        # A placeholder ("...") is for a person to fill in: its name must still pass.
        monkeypatch.setenv(name, value.replace('"..."', '"' + "0" * 64 + '"'))
    for name in ("MNEMO_HOST_CONFIG", "MNEMO_TLS_DIR", "MNEMO_HOLD_FILE"):
        monkeypatch.setenv(name, "/somewhere")
    load_settings(path)  # raises on any refused name or value


# --- the lock, the license -------------------------------------------------------------


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^ ;]+)", line)
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def test_the_lock_pins_every_requirement_within_its_range() -> None:
    # A dependency added or narrowed in pyproject.toml without `make lock` fails here.
    pins = _pins()
    project_requirements = _deploy_module("project_requirements").requirements
    pyproject = str(ROOT / "pyproject.toml")
    for extras in (["postgres", "webhooks"], ["dev"]):
        for line in project_requirements(pyproject, extras):
            req = Requirement(line)
            name = canonicalize_name(req.name)
            assert name in pins, f"{name} is not in constraints.txt: run `make lock`"
            assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name])
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "LOCK := constraints.txt" in makefile
    assert makefile.count("pip install -q -c $(LOCK) -e") == 2


def test_license_is_an_spdx_expression() -> None:
    # A TOML table made setuptools print its deprecation banner at every install.
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert data["project"]["license"] == "MIT"
    assert any(r.startswith("setuptools>=77") for r in data["build-system"]["requires"])


# --- the minimum Compose version --------------------------------------------------------


@pytest.fixture()
def fake_docker(tmp_path: Path) -> Path:
    """A `docker` on PATH answering `compose version --short` with $FAKE_COMPOSE (empty:
    no compose plugin) and printing any other command it is given."""
    script = tmp_path / "docker"
    script.write_text(
        """#!/bin/sh
if [ "$1 $2" = "compose version" ]; then
    [ -n "$FAKE_COMPOSE" ] || { echo "docker: unknown command: docker compose" >&2; exit 1; }
    echo "$FAKE_COMPOSE"; exit 0
fi
echo "ran: $*"
""",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return tmp_path


@pytest.mark.parametrize(
    ("version", "runs"),
    [("", False), ("2.20.3", False), ("2.23.9", False), ("2.24.0", True), ("v2.31.0", True)],
)
def test_deploy_compose_checks_the_version_the_compose_file_states(
    fake_docker: Path, version: str, runs: bool
) -> None:
    stated = yaml.safe_load((ROOT / cf.BASE).read_text(encoding="utf-8"))
    assert stated["x-mnemo-min-compose-version"] == "2.24.0"
    env = {"PATH": f"{fake_docker}:/usr/bin:/bin", "FAKE_COMPOSE": version}
    done = subprocess.run(
        [str(ROOT / "deploy/compose"), "up", "-d"], env=env, capture_output=True, text=True
    )
    if runs:
        assert (done.returncode, done.stdout) == (0, "ran: compose up -d\n")
    else:
        assert done.returncode == 2 and done.stdout == ""
        assert "2.24.0 or later" in done.stderr
    for doc in ("docs/DEPLOY.md", "docs/OPERATIONS.md"):
        assert "Compose 2.24.0 or later" in (ROOT / doc).read_text(encoding="utf-8")
