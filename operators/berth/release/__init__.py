"""What users install Berth from besides ``kubectl apply -k manifests``: the Helm chart, the
single-file ``install.yaml`` and the krew manifest of ``kubectl-berth``, each made from
``manifests/`` and ``crds/`` so that those stay the one source of truth."""
