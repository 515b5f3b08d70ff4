"""Real tokenizers and the cross-family token bridge (docs/tokenizers.md)."""
