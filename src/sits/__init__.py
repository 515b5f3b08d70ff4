"""SITS: a multi-model inference gateway speaking the OpenAI HTTP API."""

from sits.hot_path import STATE as _HOT_PATH
from sits.hot_path import install as _install_hot_path

__version__ = "0.1.0"
_install_hot_path(_HOT_PATH)  # before any compiled module is imported (sits/hot_path.py)
