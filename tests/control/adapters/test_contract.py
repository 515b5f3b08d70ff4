"""Adapter contracts against SmolLM2-135M: real safetensors adapters, good and broken."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from sits.control.adapters.base_model import load_base_spec
from sits.control.adapters.contract import EngineLimits, check_contract
from sits.control.adapters.peft_files import AdapterFileError, read_adapter
from sits.errors import InvalidRequest
from tests.control.adapters.peft_factory import MLP, SMOLLM2_ID, write_ia3, write_lora

LIMITS = EngineLimits(max_lora_rank=16)


def fields(violations):
    return [v.field for v in violations]


def test_the_base_architecture_comes_from_the_gguf_metadata(smollm2):
    assert (smollm2.architecture, smollm2.hidden_size, smollm2.intermediate_size) == ("llama", 576, 1536)
    assert (smollm2.num_layers, smollm2.num_heads, smollm2.num_kv_heads, smollm2.head_dim) == (30, 9, 3, 64)
    assert smollm2.vocab_size == 49152
    assert smollm2.module_shapes()["k_proj"] == (576, 192)  # grouped-query attention: 3 KV heads of 64


def test_the_same_architecture_from_a_config_json(tmp_path, smollm2):
    config = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
              "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152}
    (tmp_path / "config.json").write_bytes(orjson.dumps(config))
    spec = load_base_spec(SMOLLM2_ID, tmp_path)
    assert spec.module_shapes() == smollm2.module_shapes() and spec.num_layers == smollm2.num_layers


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"hidden_size": 5}'])
def test_an_unreadable_base_config_names_the_field(tmp_path, content):
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(InvalidRequest) as info:
        load_base_spec(SMOLLM2_ID, tmp_path / "config.json")
    assert info.value.param == "base.config"


@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), ("q_proj", "k_proj", "v_proj", "o_proj", *MLP)])
def test_a_well_formed_lora_for_smollm2_has_no_violation(tmp_path, smollm2, targets):
    files = read_adapter(write_lora(tmp_path / "good", smollm2, r=8, targets=targets))
    assert len(files.tensors) == 2 * 30 * len(targets)
    assert check_contract(files, smollm2, LIMITS, declared_dtype="float16") == []


def test_an_ia3_adapter_is_checked_with_its_own_shapes(tmp_path, smollm2):
    files = read_adapter(write_ia3(tmp_path / "ia3", smollm2))
    assert check_contract(files, smollm2, LIMITS) == []
    bad = read_adapter(write_ia3(tmp_path / "ia3-bad", smollm2, feedforward=()))  # down_proj shaped (out, 1)
    # the config now says down_proj is not feed-forward, and the tensors agree: still consistent
    assert check_contract(bad, smollm2, LIMITS) == []
    config = orjson.loads((tmp_path / "ia3-bad" / "adapter_config.json").read_bytes())
    config["feedforward_modules"] = ["down_proj"]
    (tmp_path / "ia3-bad" / "adapter_config.json").write_bytes(orjson.dumps(config))
    violations = check_contract(read_adapter(tmp_path / "ia3-bad"), smollm2, LIMITS)
    assert fields(violations) == ["tensors.base_model.model.model.layers.*.mlp.down_proj.ia3_l"]
    assert violations[0].message.endswith("in layers 0-29 (30 tensors)")


def test_rank_above_the_engines_max_lora_rank(tmp_path, smollm2):
    files = read_adapter(write_lora(tmp_path / "big", smollm2, r=32))
    assert fields(check_contract(files, smollm2, LIMITS)) == ["r"]
    assert check_contract(files, smollm2, EngineLimits(max_lora_rank=64)) == []


def test_tensors_whose_rank_disagrees_with_the_config(tmp_path, smollm2):
    files = read_adapter(write_lora(tmp_path / "liar", smollm2, r=8, targets=("q_proj",), layers=2,
                                    config_overrides={"r": 4}))
    violations = check_contract(files, smollm2, LIMITS)
    assert [v.message for v in violations] == [  # one line per part, not one per tensor per layer
        "q_proj.lora_A: shape [8, 576] != expected [4, 576] in layers 0-1 (2 tensors)",
        "q_proj.lora_B: shape [576, 8] != expected [576, 4] in layers 0-1 (2 tensors)"]
    assert fields(violations) == ["tensors.base_model.model.model.layers.*.self_attn.q_proj.lora_A.weight",
                                  "tensors.base_model.model.model.layers.*.self_attn.q_proj.lora_B.weight"]


def test_violations_are_grouped_by_module_part_and_problem_with_their_layers(tmp_path, smollm2):
    broken = {f"base_model.model.model.layers.{i}.self_attn.k_proj.lora_B.weight": (576, 8) for i in (3, 5, 6, 7)}
    files = read_adapter(write_lora(tmp_path / "many", smollm2, r=8, targets=("q_proj", "k_proj"),
                                    config_overrides={"r": 16}, shape_overrides=broken))
    violations = check_contract(files, smollm2, LIMITS)
    assert fields(violations)[1] == fields(violations)[2] == (
        "tensors.base_model.model.model.layers.*.self_attn.k_proj.lora_B.weight")
    messages = [v.message for v in violations]
    assert messages == [
        "k_proj.lora_A: shape [8, 576] != expected [16, 576] in layers 0-29 (30 tensors)",
        "k_proj.lora_B: shape [192, 8] != expected [192, 16] in layers 0-2, 4, 8-29 (26 tensors)",
        "k_proj.lora_B: shape [576, 8] != expected [192, 16] in layers 3, 5-7 (4 tensors)",
        "q_proj.lora_A: shape [8, 576] != expected [16, 576] in layers 0-29 (30 tensors)",
        "q_proj.lora_B: shape [576, 8] != expected [576, 16] in layers 0-29 (30 tensors)",
    ]


def test_wrong_shapes_are_reported_per_tensor(tmp_path, smollm2):
    name = "base_model.model.model.layers.3.self_attn.k_proj.lora_B.weight"
    files = read_adapter(write_lora(tmp_path / "shapes", smollm2, targets=("q_proj", "k_proj"),
                                    shape_overrides={name: (576, 8)}))  # k_proj's output is 192 wide, not 576
    violations = check_contract(files, smollm2, LIMITS)
    assert fields(violations) == [f"tensors.{name}"]  # one tensor: named exactly
    assert violations[0].message == "k_proj.lora_B: shape [576, 8] != expected [192, 8] in layer 3"


def test_unknown_target_module(tmp_path, smollm2):
    files = read_adapter(write_lora(tmp_path / "fused", smollm2, targets=("qkv_proj",), layers=1))
    violations = check_contract(files, smollm2, LIMITS)
    assert fields(violations)[0] == "target_modules" and "qkv_proj" in violations[0].message
    assert all(f == "target_modules" or f.startswith("tensors.") for f in fields(violations))


def test_a_targeted_module_without_tensors(tmp_path, smollm2):
    files = read_adapter(write_lora(tmp_path / "half", smollm2, targets=("q_proj",),
                                    config_overrides={"target_modules": ["q_proj", "v_proj"]}))
    violations = check_contract(files, smollm2, LIMITS)
    assert fields(violations) == ["target_modules"] and "v_proj" in violations[0].message


def test_wrong_base_model_id(tmp_path, smollm2):
    files = read_adapter(write_lora(tmp_path / "llama", smollm2, base_id="meta-llama/Llama-3.1-8B-Instruct"))
    assert fields(check_contract(files, smollm2, LIMITS)) == ["base_model_name_or_path"]


@pytest.mark.parametrize("named", ["huggingfacetb/smollm2-135m-instruct", "/models/SmolLM2-135M-Instruct"])
def test_base_ids_match_across_case_and_local_paths(tmp_path, smollm2, named):
    files = read_adapter(write_lora(tmp_path / "ok", smollm2, base_id=named, layers=30))
    assert check_contract(files, smollm2, LIMITS) == []


def test_wrong_dtype_against_the_declared_one(tmp_path, smollm2):
    files = read_adapter(write_lora(tmp_path / "f16", smollm2, dtype=np.float16))
    violations = check_contract(files, smollm2, LIMITS, declared_dtype="bfloat16")
    assert fields(violations) == ["dtype"] and "F16" in violations[0].message
    assert check_contract(files, smollm2, LIMITS, declared_dtype="fp16") == []
    assert fields(check_contract(files, smollm2, LIMITS, declared_dtype="int3")) == ["dtype"]


def test_mixed_dtypes_without_a_declaration(tmp_path, smollm2):
    extra = {"base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight": np.zeros((8, 576), np.float32),
             "base_model.model.model.layers.0.self_attn.o_proj.lora_B.weight": np.zeros((576, 8), np.float32)}
    files = read_adapter(write_lora(tmp_path / "mixed", smollm2, extra_tensors=extra,
                                    config_overrides={"target_modules": ["q_proj", "v_proj", "o_proj"]}))
    assert fields(check_contract(files, smollm2, LIMITS)) == ["dtype"]


def test_a_layer_the_base_does_not_have(tmp_path, smollm2):
    files = read_adapter(write_lora(tmp_path / "deep", smollm2, layers=31))
    violations = check_contract(files, smollm2, LIMITS)
    assert len(violations) == 4 and all(".layers.30." in f for f in fields(violations))
    assert violations[0].message == "q_proj.lora_A: no such layer (the base has 30, numbered from 0) in layer 30"


def test_every_violation_is_reported_at_once(tmp_path, smollm2):
    files = read_adapter(write_lora(tmp_path / "bad", smollm2, r=32, targets=("q_proj", "router"), layers=1,
                                    base_id="Qwen/Qwen3-0.6B"))
    found = set(fields(check_contract(files, smollm2, LIMITS, declared_dtype="float32")))
    assert {"r", "base_model_name_or_path", "target_modules", "dtype"} <= found


def test_adapted_embeddings_need_the_base_vocabulary(tmp_path, smollm2):
    extra = {"base_model.model.model.embed_tokens.lora_embedding_A": np.zeros((8, 49152), np.float16),
             "base_model.model.model.embed_tokens.lora_embedding_B": np.zeros((576, 8), np.float16)}
    directory = write_lora(tmp_path / "emb", smollm2, extra_tensors=extra,
                           config_overrides={"target_modules": ["q_proj", "v_proj", "embed_tokens"]})
    assert check_contract(read_adapter(directory), smollm2, LIMITS) == []
    # ... and a tokenizer it ships must have exactly the base's vocabulary size
    vocab = {f"t{i}": i for i in range(49152 + 2)}
    (directory / "tokenizer.json").write_bytes(orjson.dumps({"model": {"type": "BPE", "vocab": vocab}}))
    violations = check_contract(read_adapter(directory), smollm2, LIMITS)
    assert fields(violations) == ["tokenizer"] and "49154" in violations[0].message


def test_embedding_tensors_for_another_vocabulary(tmp_path, smollm2):
    extra = {"base_model.model.model.embed_tokens.lora_embedding_A": np.zeros((8, 128256), np.float16),
             "base_model.model.model.embed_tokens.lora_embedding_B": np.zeros((576, 8), np.float16)}
    files = read_adapter(write_lora(tmp_path / "emb", smollm2, extra_tensors=extra,
                                    config_overrides={"target_modules": ["q_proj", "v_proj", "embed_tokens"]}))
    assert fields(check_contract(files, smollm2, LIMITS)) == [
        "tensors.base_model.model.model.embed_tokens.lora_embedding_A"]


@pytest.mark.parametrize(("setup", "field"), [
    (lambda d: None, "path"),
    (lambda d: (d.mkdir(), (d / "adapter_config.json").write_text("{")), "adapter_config.json"),
    (lambda d: (d.mkdir(), (d / "adapter_config.json").write_text("{}")), "path"),
    (lambda d: (d.mkdir(), (d / "adapter_config.json").write_text("{}"),
                (d / "adapter_model.safetensors").write_bytes(b"\x00" * 16)), "adapter_model.safetensors"),
])
def test_unreadable_adapter_directories_name_what_is_wrong(tmp_path, setup, field):
    directory = tmp_path / "a"
    setup(directory)
    with pytest.raises(AdapterFileError) as info:
        read_adapter(directory)
    assert info.value.field == field


def test_an_unsupported_peft_type(tmp_path, smollm2):
    files = read_adapter(write_lora(tmp_path / "prefix", smollm2, config_overrides={"peft_type": "PREFIX_TUNING"}))
    assert fields(check_contract(files, smollm2, LIMITS)) == ["peft_type"]
