"""The API's routes, one module per group: fill, admin, probes (health, readiness, info, metrics)."""
