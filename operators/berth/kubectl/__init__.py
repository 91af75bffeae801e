"""``kubectl berth``: the kubectl plugin that shows what Berth decided and holds."""
