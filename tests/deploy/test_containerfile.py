"""deploy/Containerfile, read statically (no container engine here): the image the manifests assume."""

from __future__ import annotations

import re
import shlex

from tests.deploy.manifests import CONTAINERFILE, REPO, container, env, gateway_deployment

ROUTES_SERVED = {"/healthz", "/readyz"}


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in CONTAINERFILE.read_text().splitlines()
                                            if not line.lstrip().startswith("#")))
    out = []
    for line in text.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    values: dict[str, str] = {}
    for word, args in stage:
        if word == "ENV":
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                values[key] = value
    return values


def test_the_image_runs_as_a_numeric_non_root_user_matching_the_pods_security_context():
    users = [args for word, args in final_stage() if word == "USER"]
    assert users, "the final stage sets no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "USER must be a numeric non-root uid (runAsNonRoot can check only numbers)"
    pod = gateway_deployment("base")["spec"]["template"]["spec"]["securityContext"]
    assert pod["runAsUser"] == int(uid)
    assert pod["runAsGroup"] == int(gid)


def test_the_exposed_port_is_sits_port_and_the_deployments_container_port():
    stage = final_stage()
    exposed = [int(p.split("/")[0]) for word, args in stage if word == "EXPOSE" for p in args.split()]
    variables = env_of(stage)
    sits = container(gateway_deployment("base"))
    assert exposed == [int(variables["SITS_PORT"])]
    assert int(env(sits)["SITS_PORT"]) == exposed[0]
    assert sits["ports"][0]["containerPort"] == exposed[0]
    assert variables["SITS_HOST"] == "0.0.0.0"  # reachable from outside the container
    assert variables["SITS_DATA_DIR"] == env(sits)["SITS_DATA_DIR"]


def test_the_healthcheck_asks_a_route_sits_serves_on_its_port():
    checks = [args for word, args in final_stage() if word == "HEALTHCHECK"]
    assert len(checks) == 1
    assert any(route in checks[0] for route in ROUTES_SERVED)
    assert "SITS_PORT" in checks[0]


def test_the_entrypoint_is_sits_under_an_init_that_forwards_sigterm():
    stage = final_stage()
    (entrypoint,) = [args for word, args in stage if word == "ENTRYPOINT"]
    assert entrypoint.startswith('["tini", "--", "sits"')  # exec form: no shell swallowing SIGTERM
    (cmd,) = [args for word, args in stage if word == "CMD"]
    assert cmd == '["serve"]'


def test_local_models_are_an_opt_in_build_arg_and_the_default_image_is_slim():
    steps = instructions()
    froms = [args for word, args in steps if word == "FROM"]
    assert all("${PYTHON_IMAGE}" in f for f in froms)
    (base,) = [args for word, args in steps if word == "ARG" and args.startswith("PYTHON_IMAGE=")]
    assert "-slim" in base
    for name in ("WITH_LOCAL_MODELS", "WITH_EPP"):
        args = [a for word, a in steps if word == "ARG" and a.startswith(f"{name}=")]
        assert args and all(a == f"{name}=false" for a in args)  # declared per stage, off by default
    install = " ".join(a for word, a in steps if word == "RUN" and "pip install" in a)
    assert 'if [ "$WITH_LOCAL_MODELS" = "true" ]; then extras="local"; fi' in install
    assert 'if [ "$WITH_EPP" = "true" ]; then extras="${extras:+$extras,}epp"; fi' in install
    assert 'pip install --no-cache-dir ".${extras:+[$extras]}"' in install  # "." alone when neither is asked


def test_the_epp_build_puts_back_the_proto_files_as_the_readme_install_does():
    install = " ".join(a for word, a in instructions() if word == "RUN" and "--force-reinstall" in a)
    readme = (REPO / "README.md").read_text()
    ours = set(re.search(r"--force-reinstall --no-deps (.*?);", install).group(1).split())
    theirs = set(re.search(r"--force-reinstall --no-deps (.*?) &&", readme).group(1).split())
    assert ours == theirs


def test_what_the_image_copies_exists_and_is_not_ignored():
    copied = [args.split()[:-1] for word, args in instructions() if word == "COPY" and "--from" not in args]
    paths = [p for group in copied for p in group]
    assert paths
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    for path in paths:
        assert (REPO / path).exists(), path
        assert f"!{path.rstrip('/')}" in ignore or f"!{path.rstrip('/')}/" in ignore, f"{path} is excluded by .dockerignore"
