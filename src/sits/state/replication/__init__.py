"""The replicated cluster document and the transports that spread it between replicas."""
