"""Berth's scheduler: cluster view, queue, cycle and plugins, as kube-scheduler splits them."""
