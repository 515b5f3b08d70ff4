"""The gateway's configuration: one schema composed from each layer's section schema, validated at load."""
