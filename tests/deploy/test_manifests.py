"""The kustomizations under deploy/kubernetes/: rendered offline, checked against the Kubernetes schemas and
against what SITS itself does (its routes, its config loader, its settings, its drain)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import aiohttp
import kubernetes_validate
import pytest
import yaml

from sits.configuration.gateway import GatewayConfig, load_config
from sits.configuration.embedded_default import with_embedded_models
from tests.deploy.manifests import (
    KUSTOMIZE,
    OVERLAYS,
    TARGETS,
    container,
    env,
    gateway_deployment,
    named_port,
    objects,
    one,
    probes,
    render,
    selects,
)
from tests.upstream_server import FakeUpstream

# Kinds defined by CRDs, which kubernetes-validate has no schema for: their fields are asserted below instead.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
# The oldest Kubernetes these manifests are meant for, and the newest the validator knows.
KUBE_VERSIONS = ("1.29", kubernetes_validate.latest_version())
DRAIN_MARGIN_S = 5  # serve.py waits drain_timeout_s + 5 for each worker process


def pod_labels(target: str) -> dict[str, str]:
    return gateway_deployment(target)["spec"]["template"]["metadata"]["labels"]


def rendered_config(target: str, tmp_path: Path) -> GatewayConfig:
    """The ConfigMap's sits.yaml through SITS' own loader, as `sits serve --config` reads it."""
    deployment = gateway_deployment(target)
    config_path = PurePosixPath(env(container(deployment))["SITS_CONFIG"])
    spec = deployment["spec"]["template"]["spec"]
    (mount,) = [m for m in container(deployment)["volumeMounts"] if m["mountPath"] == str(config_path.parent)]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    config_map = one(target, "ConfigMap", volume["configMap"]["name"])
    path = tmp_path / config_path.name
    path.write_text(config_map["data"][config_path.name], encoding="utf-8")
    config = load_config(path)  # every section validated, as `sits serve` loads it
    return with_embedded_models(config)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_every_object_validates_against_the_kubernetes_schema(target, version):
    validated = 0
    for obj in render(target):
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)  # strict: unknown fields are errors
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{target} {obj['kind']}/{obj['metadata']['name']} against {version}: "
                        f"{'.'.join(map(str, exc.path))}: {exc.message}")
        validated += 1
    assert validated >= 7


@pytest.mark.parametrize("target", TARGETS)
def test_only_crd_kinds_lack_a_schema(target):
    for obj in render(target):
        try:
            kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            assert (obj["apiVersion"], obj["kind"]) in CRD_KINDS, obj["kind"]


async def test_the_probes_and_the_scrape_path_are_routes_sits_answers(start_gateway):
    upstream = FakeUpstream()
    await upstream.start()
    try:
        gateway = await start_gateway({"models": [{"name": "m1", "endpoints": [{"url": upstream.url}]}]})
        paths = {p["httpGet"]["path"] for t in TARGETS for _, p in probes(container(gateway_deployment(t)))}
        paths |= {e["path"] for t in TARGETS for e in one(t, "ServiceMonitor")["spec"]["endpoints"]}
        assert paths == {"/healthz", "/readyz", "/metrics"}
        async with aiohttp.ClientSession() as session:
            for path in sorted(paths):
                async with session.get(f"http://127.0.0.1:{gateway.bound_port}{path}") as response:
                    assert response.status == 200, path
    finally:
        await upstream.stop()


@pytest.mark.parametrize("target", TARGETS)
def test_readiness_is_readyz_and_liveness_cannot_kill_a_draining_pod(target):
    deployment = gateway_deployment(target)
    sits = container(deployment)
    found = dict(probes(sits))
    assert found["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert found["livenessProbe"]["httpGet"]["path"] == "/healthz"
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    live = found["livenessProbe"]
    # SITS closes its listener on SIGTERM, so liveness fails while it drains: it must not fire before the end.
    assert live["periodSeconds"] * live["failureThreshold"] > grace
    for probe in found.values():
        assert named_port(sits, probe["httpGet"]["port"]) == int(env(sits)["SITS_PORT"])


@pytest.mark.parametrize("target", TARGETS)
def test_the_grace_period_covers_pre_stop_and_the_drain(target, tmp_path):
    deployment = gateway_deployment(target)
    sits = container(deployment)
    command = sits["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2
    pre_stop = float(command[1])
    assert pre_stop >= 5  # long enough for endpoints and kube-proxy to drop the pod before SIGTERM
    drain = rendered_config(target, tmp_path).server.drain_timeout_s
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= pre_stop + drain + DRAIN_MARGIN_S


@pytest.mark.parametrize("target", TARGETS)
def test_the_container_listens_where_the_service_and_image_say(target):
    sits = container(gateway_deployment(target))
    variables = env(sits)
    port = int(variables["SITS_PORT"])
    assert [p["containerPort"] for p in sits["ports"]] == [port]
    assert variables["SITS_HOST"] == "0.0.0.0"
    service = one(target, "Service", "sits")
    assert selects({"matchLabels": service["spec"]["selector"]}, pod_labels(target))
    assert [named_port(sits, p["targetPort"]) for p in service["spec"]["ports"]] == [port]


@pytest.mark.parametrize("target", TARGETS)
def test_the_config_map_parses_with_sits_own_loader_and_is_mounted_at_sits_config(target, tmp_path):
    config = rendered_config(target, tmp_path)
    assert config.models, "a gateway with no model"
    assert config.server.host is None and config.server.port is None  # SITS_HOST / SITS_PORT decide


@pytest.mark.parametrize("target", TARGETS)
def test_the_pod_runs_non_root_on_a_read_only_root_with_writable_data_and_tmp(target):
    deployment = gateway_deployment(target)
    spec = deployment["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    sits = container(deployment)
    context = sits["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in sits["volumeMounts"]}
    for path in (env(sits)["SITS_DATA_DIR"], "/tmp"):
        assert "emptyDir" in volumes[mounts[path]], path
    assert spec["automountServiceAccountToken"] is False


@pytest.mark.parametrize("target", TARGETS)
def test_the_replica_id_is_the_pod_name(target):
    replica = env(container(gateway_deployment(target)))["SITS_REPLICA_ID"]
    assert replica == {"fieldRef": {"fieldPath": "metadata.name"}}


@pytest.mark.parametrize("target", TARGETS)
def test_selectors_match_the_gateway_pods(target):
    labels = pod_labels(target)
    deployment = gateway_deployment(target)
    assert selects(deployment["spec"]["selector"], labels)
    for policy in objects(target, "PodDisruptionBudget"):
        assert selects(policy["spec"]["selector"], labels)
    gateway_policy = one(target, "NetworkPolicy", "sits")
    assert selects(gateway_policy["spec"]["podSelector"], labels)
    sits = container(deployment)
    assert {named_port(sits, p["port"]) for rule in gateway_policy["spec"]["ingress"] for p in rule["ports"]} \
        == {int(env(sits)["SITS_PORT"])}


@pytest.mark.parametrize("target", TARGETS)
def test_the_service_monitor_scrapes_the_gateway_service(target):
    monitor = one(target, "ServiceMonitor", "sits")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = one(target, "Service", "sits")
    assert selects(monitor["spec"]["selector"], service["metadata"]["labels"])
    assert not any(selects(monitor["spec"]["selector"], s["metadata"]["labels"])
                   for s in objects(target, "Service") if s["metadata"]["name"] != "sits")
    names = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in names
        assert endpoint["path"] == "/metrics"
        assert float(endpoint["scrapeTimeout"].rstrip("s")) < float(endpoint["interval"].rstrip("s"))


@pytest.mark.parametrize("target", ["base", "production"])
def test_the_autoscaler_scales_the_gateway_on_in_flight_requests_and_cpu(target):
    hpa = one(target, "HorizontalPodAutoscaler", "sits")
    assert hpa["apiVersion"] == "autoscaling/v2"
    ref = hpa["spec"]["scaleTargetRef"]
    deployment = one(target, ref["kind"], ref["name"])
    assert ref["apiVersion"] == deployment["apiVersion"] == "apps/v1"
    assert hpa["spec"]["minReplicas"] == deployment["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    kinds = {m["type"]: m for m in hpa["spec"]["metrics"]}
    assert kinds["Resource"]["resource"]["name"] == "cpu"
    assert "cpu" in container(deployment)["resources"]["requests"]  # utilisation is relative to the request
    # The pods metric is what the prometheus-adapter rule serves, from a metric SITS exports
    # (tests/deploy/test_drain.py scrapes it from a running gateway).
    rules = yaml.safe_load((KUSTOMIZE / "prometheus-adapter" / "rules.yaml").read_text())["rules"]["custom"]
    served = {r["name"]["as"]: r["seriesQuery"] for r in rules}
    assert kinds["Pods"]["pods"]["metric"]["name"] in served
    assert served[kinds["Pods"]["pods"]["metric"]["name"]].startswith("sits_endpoint_in_flight_requests{")


def test_dev_is_one_replica_of_the_embedded_models_without_autoscaler_budget_or_redis(tmp_path):
    deployment = gateway_deployment("dev")
    assert deployment["spec"]["replicas"] == 1
    assert not objects("dev", "HorizontalPodAutoscaler")
    assert not objects("dev", "PodDisruptionBudget")  # one replica: a budget would block every node drain
    assert container(deployment)["image"].endswith("-local")  # built with WITH_LOCAL_MODELS=true
    config = rendered_config("dev", tmp_path)
    assert {m.name for m in config.models if m.local is not None} == {"smollm2-135m", "gemma3-270m"}
    assert config.cluster.redis_url is None
    assert not [d for d in objects("dev", "Deployment") if d["metadata"]["name"] != "sits"]


def test_production_is_three_replicas_of_external_engines_sharing_redis(tmp_path):
    deployment = gateway_deployment("production")
    assert deployment["spec"]["replicas"] == 3
    assert not container(deployment)["image"].endswith("-local")
    config = rendered_config("production", tmp_path)
    assert config.models and all(m.local is None and m.endpoints for m in config.models)
    redis_service = one("production", "Service", "sits-redis")
    redis = one("production", "Deployment", "sits-redis")
    for url in (config.cluster.redis_url, config.semantic_cache.redis_url):
        parts = urlsplit(url)
        assert parts.hostname == redis_service["metadata"]["name"]
        assert parts.port in {p["port"] for p in redis_service["spec"]["ports"]}
    assert selects({"matchLabels": redis_service["spec"]["selector"]}, redis["spec"]["template"]["metadata"]["labels"])
    redis_policy = one("production", "NetworkPolicy", "sits-redis")
    assert selects(redis_policy["spec"]["podSelector"], redis["spec"]["template"]["metadata"]["labels"])
    (rule,) = redis_policy["spec"]["ingress"]
    assert [selects(peer["podSelector"], pod_labels("production")) for peer in rule["from"]] == [True]
    hostnames = [c["topologyKey"] for c in deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]]
    assert len(hostnames) == len(set(hostnames)) and "topology.kubernetes.io/zone" in hostnames


def test_production_leaves_the_example_secret_out_and_dev_carries_every_key_the_config_names(tmp_path):
    assert not objects("production", "Secret")  # applying it would overwrite the real keys
    for target in ("dev", "production"):
        (ref,) = container(gateway_deployment(target))["envFrom"]
        assert ref["secretRef"]["name"] == "sits-secrets"
    example = one("dev", "Secret", "sits-secrets")
    keys = set(example["stringData"])
    assert all("change-me" in value for value in example["stringData"].values())  # placeholders, not keys
    for target in TARGETS:
        config = rendered_config(target, tmp_path)
        named = {config.control.admin_key_env, config.server.api_keys_env,
                 *(e.api_key_env for m in config.models for e in m.endpoints)} - {None}
        assert named <= keys, f"{target}: the config reads {sorted(named - keys)}, absent from the Secret"


@pytest.mark.parametrize("target", OVERLAYS)
def test_each_overlay_has_its_own_namespace(target):
    (namespace,) = objects(target, "Namespace")
    name = namespace["metadata"]["name"]
    assert all(o["metadata"].get("namespace") == name for o in render(target) if o["kind"] != "Namespace")
