"""Learned quality router: predict each model's quality for a prompt, route by quality and cost."""
