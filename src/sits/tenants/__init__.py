"""Tenants: teams and their keys, limits, budgets, prices and the spend log (docs/tenants.md)."""
