"""The endpoint picker: SITS as the Gateway API Inference Extension's EPP behind Envoy (docs/envoy.md)."""
