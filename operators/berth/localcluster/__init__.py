"""A real Kubernetes control plane on loopback, built from Go modules, with kwok nodes."""
