"""SITS: a multi-model inference gateway speaking the OpenAI HTTP API."""

__version__ = "0.1.0"
