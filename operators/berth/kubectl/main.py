"""``kubectl-berth``: the entry point kubectl runs for ``kubectl berth ...``.

kubectl hands a plugin the arguments after its name and the environment, so the usual
kubectl flags (``--kubeconfig``, ``--context``, ``-n``) come after the subcommand and
``KUBECONFIG`` is honoured the way kubectl honours it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import yaml

from berth.api.elasticquota import GROUP as QUOTA_GROUP
from berth.api.elasticquota import VERSION as QUOTA_VERSION
from berth.kubectl import tables, treeview, why
from berth.kubectl.client import (
    DEFAULT_SCHEDULER_SERVICE,
    Cluster,
    ServiceRef,
    default_namespace,
)
from berth.kubectl.errors import PluginError
from berth.loadaware.args import LoadAwareArgs
from berth.podresources import Resources
from berth.quota.tree import outside_max_args
from berth.scheduler.config import ConfigError, parse

RESERVATIONS = ("scheduling.koordinator.sh", "v1alpha1", "reservations")
NODE_METRICS = ("slo.koordinator.sh", "v1alpha1", "nodemetrics")
SCHEDULER_CONFIG = "berth-scheduler-config"
SCHEDULER_CONFIG_KEY = "scheduler-config.yaml"


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", help="path of the kubeconfig (default: as kubectl)")
    common.add_argument("--context", help="the kubeconfig context to use")
    common.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    common.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format"
    )
    common.add_argument(
        "--scheduler-service",
        default=DEFAULT_SCHEDULER_SERVICE,
        help="the scheduler's Service as NAMESPACE/NAME[:PORT], reached through the API "
        f"server's service proxy (default {DEFAULT_SCHEDULER_SERVICE})",
    )
    common.add_argument(
        "--scheduler-url",
        help="read the scheduler at this address instead (e.g. http://127.0.0.1:10251 after "
        "`kubectl port-forward`, or a scheduler run outside the cluster)",
    )
    main = argparse.ArgumentParser(
        prog="kubectl berth", description="What Berth decided, holds and sees."
    )
    commands = main.add_subparsers(dest="command", required=True)
    explain = commands.add_parser(
        "why", parents=[common], help="why a pod is pending, as the scheduler decided it"
    )
    explain.add_argument("pod", help="the pod's name (or pod/NAME)")
    quota = commands.add_parser(
        "quota", parents=[common], help="ElasticQuotas with used, min and max"
    )
    quota.add_argument(
        "view",
        nargs="?",
        choices=("tree",),
        help="tree: the whole quota tree (all namespaces) with min, max, request, runtime, "
        "used, borrowed and lent",
    )
    quota.add_argument("-A", "--all-namespaces", action="store_true")
    held = commands.add_parser(
        "reservations", parents=[common], help="what reservations hold, where and for whom"
    )
    held.add_argument("node", nargs="?", help="only the reservations on this node")
    top = commands.add_parser("top", help="usage against load-aware thresholds")
    what = top.add_subparsers(dest="what", required=True)
    what.add_parser("nodes", parents=[common], help="NodeMetric usage against thresholds")
    return main


def main(argv: Sequence[str] | None = None) -> int:
    options = parser().parse_args(argv)
    try:
        output = asyncio.run(run(options))
    except PluginError as err:
        sys.stderr.write(f"error: {err}\n")
        return 1
    sys.stdout.write(output + "\n")
    return 0


async def run(options: argparse.Namespace) -> str:
    service = ServiceRef.parse(options.scheduler_service)
    cluster = await Cluster.connect(
        options.kubeconfig, options.context, service, options.scheduler_url
    )
    try:
        namespace = options.namespace or default_namespace(options.kubeconfig, options.context)
        if options.command == "why":
            return await run_why(cluster, namespace, options.pod, options.output)
        if options.command == "quota" and options.view == "tree":
            return await run_quota_tree(cluster, service.namespace, options.output)
        if options.command == "quota":
            scope = None if options.all_namespaces else namespace
            return await run_quota(cluster, scope, options.output)
        if options.command == "reservations":
            return await run_reservations(cluster, options.node, options.output)
        return await run_top(cluster, service.namespace, options.output)
    finally:
        await cluster.close()


async def run_why(cluster: Cluster, namespace: str, pod_name: str, output: str) -> str:
    name = pod_name.removeprefix("pod/").removeprefix("pods/")
    pod = await cluster.pod(namespace, name)
    settled = why.bound_report(pod)
    answer = None if settled else await cluster.decision(namespace, name)
    record = None if answer is None or "error" in answer else answer
    queued = answer.get("queued") if answer is not None and record is None else None
    if output == "json":
        found = {"pod": f"{namespace}/{name}", "pending": not settled, "decision": record}
        return _json({**found, "queued": queued} if queued else found)
    if settled:
        return settled
    return why.no_record_report(pod, queued) if record is None else why.report(record)


async def run_quota(cluster: Cluster, namespace: str | None, output: str) -> str:
    quotas = await cluster.objects(QUOTA_GROUP, QUOTA_VERSION, "elasticquotas", namespace)
    rows = tables.quota_rows(quotas)
    if output == "json":
        return _json(rows)
    if not rows:
        return "No ElasticQuotas found" + (f" in namespace {namespace}." if namespace else ".")
    return tables.columns(rows, tables.QUOTA_HEADERS)


async def run_quota_tree(cluster: Cluster, config_namespace: str, output: str) -> str:
    quotas = await cluster.objects(QUOTA_GROUP, QUOTA_VERSION, "elasticquotas")
    pods = await cluster.pods()
    outside_max = await capacity_outside_max(cluster, config_namespace)
    if output == "json":
        rows, refused = treeview.tree_rows(quotas, pods, outside_max)
        return _json({"quotas": rows, "refused": refused})
    return treeview.render(quotas, pods, outside_max)


async def run_reservations(cluster: Cluster, node: str | None, output: str) -> str:
    rows = tables.reservation_rows(await cluster.objects(*RESERVATIONS), node)
    if output == "json":
        return _json(rows)
    if not rows:
        return "No Reservations found" + (f" on node {node}." if node else ".")
    return tables.columns(rows, tables.RESERVATION_HEADERS)


async def run_top(cluster: Cluster, config_namespace: str, output: str) -> str:
    args, source = await load_aware_args(cluster, config_namespace)
    metrics = await cluster.objects(*NODE_METRICS)
    rows = tables.top_rows(metrics, await cluster.nodes(), args, time.time())
    if output == "json":
        return _json({"thresholds": source, "nodes": rows})
    if not rows:
        return "No NodeMetrics found: is the node agent running?"
    header = f"Thresholds: {source}; a node's usage-thresholds annotation overrides them."
    return header + "\n" + tables.columns(rows, tables.TOP_HEADERS)


async def load_aware_args(cluster: Cluster, namespace: str) -> tuple[LoadAwareArgs, str]:
    """LoadAwareScheduling's arguments from the scheduler's ConfigMap, else the defaults."""
    config_map = await cluster.config_map(namespace, SCHEDULER_CONFIG)
    text = ((config_map or {}).get("data") or {}).get(SCHEDULER_CONFIG_KEY)
    if text:
        try:
            settings = parse(yaml.safe_load(text), SCHEDULER_CONFIG)
            for profile in settings.profiles:
                for entry in profile.plugin_config:
                    if entry.name == "LoadAwareScheduling":
                        args = LoadAwareArgs.parse(entry.args)
                        return args, f"ConfigMap {namespace}/{SCHEDULER_CONFIG} ({_pct(args)})"
        except (ConfigError, ValueError, yaml.YAMLError) as err:
            raise PluginError(f"ConfigMap {namespace}/{SCHEDULER_CONFIG}: {err}") from err
    args = LoadAwareArgs.parse({})
    return args, f"defaults ({_pct(args)})"


async def capacity_outside_max(cluster: Cluster, namespace: str) -> dict[str, Resources]:
    """The default and system quotas' max from CapacityScheduling's arguments in the
    scheduler's ConfigMap (``defaultQuotaGroupMax``, ``systemQuotaGroupMax``); none when
    the ConfigMap is absent or does not set them."""
    config_map = await cluster.config_map(namespace, SCHEDULER_CONFIG)
    text = ((config_map or {}).get("data") or {}).get(SCHEDULER_CONFIG_KEY)
    if not text:
        return {}
    try:
        settings = parse(yaml.safe_load(text), SCHEDULER_CONFIG)
        for profile in settings.profiles:
            for entry in profile.plugin_config:
                if entry.name in ("CapacityScheduling", "ElasticQuota"):
                    return outside_max_args(entry.args)
    except (ConfigError, ValueError, yaml.YAMLError) as err:
        raise PluginError(f"ConfigMap {namespace}/{SCHEDULER_CONFIG}: {err}") from err
    return {}


def _pct(args: LoadAwareArgs) -> str:
    return ", ".join(f"{r} {v}%" for r, v in sorted(args.usage_thresholds.items()))


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())
