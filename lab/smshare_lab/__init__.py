"""The local lab: Kubernetes from Debian's source, registry, GPU-node containers."""
