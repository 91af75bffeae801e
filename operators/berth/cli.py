"""The ``berth`` command: the local cluster, the components, and the demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from berth.localcluster.build import BuildError, ensure_built
from berth.localcluster.cluster import ClusterError, LocalCluster
from berth.localcluster.kubectl import KubectlError


def say(message: str) -> None:
    """Progress for a person at a terminal (logs go through structlog instead)."""
    sys.stderr.write(f"berth: {message}\n")
    sys.stderr.flush()


def _cluster(args: argparse.Namespace) -> int:
    cluster = LocalCluster.default()
    if args.action == "build":
        ensure_built(say)
    elif args.action == "up":
        cluster.up(nodes=args.nodes, say=say)
        sys.stdout.write(cluster.env(ensure_built(say)))
    elif args.action == "down":
        cluster.down()
        say("local cluster stopped")
    elif args.action == "env":
        sys.stdout.write(cluster.env(ensure_built(say)))
    elif args.action == "status":
        up = cluster.is_up()
        say(f"local cluster is {'up' if up else 'down'}; KUBECONFIG={cluster.kubeconfig}")
        return 0 if up else 1
    return 0


def _run(args: argparse.Namespace) -> int:
    from berth.run import RunOptions, run

    return run(
        RunOptions(
            kubeconfig=args.kubeconfig,
            operators=not args.no_operators,
            scheduler=not args.no_scheduler,
            scheduler_config=args.config,
            descheduler_config=args.descheduler_config,
            log_level=args.log_level,
            health_address=args.health_address,
        )
    )


def _agent(args: argparse.Namespace) -> int:
    from berth.agent.service import AgentOptions, run

    if not args.node_name:
        say("error: no node name: pass --node-name or set NODE_NAME")
        return 2
    return run(
        AgentOptions(
            node_name=args.node_name,
            kubeconfig=args.kubeconfig,
            proc_root=Path(args.proc_root),
            cgroup_root=Path(args.cgroup_root),
            sample_interval=args.sample_interval,
            log_level=args.log_level,
        )
    )


def _demo(args: argparse.Namespace) -> int:
    from berth.demo import DemoOptions, demo

    options = DemoOptions(nodes=args.nodes, keep=args.keep, with_tests=args.with_tests)
    return demo(options, say)


def _at_least_three(text: str) -> int:
    nodes = int(text)
    if nodes < 3:
        raise argparse.ArgumentTypeError("the stories need at least 3 nodes")
    return nodes


def _bench(args: argparse.Namespace) -> int:
    from berth.bench.scheduler import bench, cycle_bench

    if args.cycle_only:
        sys.stdout.write(cycle_bench(args.nodes, args.pods) + "\n")
        return 0
    if args.numa:
        from berth.bench.numa import numa_bench

        sys.stdout.write(numa_bench() + "\n")
        return 0
    return bench(
        nodes=args.nodes,
        pods=args.pods,
        qps=args.qps,
        burst=args.burst,
        keep=args.keep,
        say=say,
        only=args.only,
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="berth", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)

    cluster = sub.add_parser(
        "cluster", help="the local cluster (kube-apiserver + etcd, controller-manager, kwok)"
    )
    actions = cluster.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start it (building it first if needed)")
    up.add_argument("--nodes", type=int, default=3, help="kwok nodes (default 3)")
    actions.add_parser("down", help="stop every process and wipe the data")
    actions.add_parser("env", help="print the shell exports for kubectl")
    actions.add_parser("build", help="build the binaries from Go modules")
    actions.add_parser("status", help="exit 0 when it is up")
    cluster.set_defaults(func=_cluster)

    run = sub.add_parser("run", help="run the operators and the scheduler in one process")
    run.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then KUBECONFIG)")
    run.add_argument(
        "--config",
        help="scheduler configuration (KubeSchedulerConfiguration; default: the profile "
        "`kubectl apply -k manifests` installs)",
    )
    run.add_argument(
        "--descheduler-config",
        help="descheduler configuration (DeschedulerConfiguration): the migration limits "
        "and the LowNodeLoad balancer",
    )
    run.add_argument("--no-operators", action="store_true", help="do not run the operators")
    run.add_argument("--no-scheduler", action="store_true", help="do not run the scheduler")
    run.add_argument("--log-level", default="info")
    run.add_argument(
        "--health-address",
        default="0.0.0.0:10251",
        help="host:port of /healthz, /readyz and /metrics (port 0: any free port)",
    )
    run.set_defaults(func=_run)

    agent = sub.add_parser("agent", help="report this node's usage into its NodeMetric")
    agent.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        help="the node (and NodeMetric) reported for (default: $NODE_NAME)",
    )
    agent.add_argument(
        "--kubeconfig", help="kubeconfig path (default: in-cluster, then KUBECONFIG)"
    )
    agent.add_argument("--proc-root", default="/proc", help="the host's /proc (default /proc)")
    agent.add_argument(
        "--cgroup-root",
        default="/sys/fs/cgroup",
        help="the host's cgroup mount (default /sys/fs/cgroup)",
    )
    agent.add_argument(
        "--sample-interval", type=float, default=1.0, help="seconds between samples (default 1)"
    )
    agent.add_argument("--log-level", default="info")
    agent.set_defaults(func=_agent)

    demo = sub.add_parser(
        "demo",
        help="the local cluster with Berth installed, and the design's stories played on it",
    )
    demo.add_argument("--nodes", type=_at_least_three, default=3, help="kwok nodes (default 3)")
    demo.add_argument(
        "--keep",
        action="store_true",
        help="leave the cluster, berth run and berth agent running afterwards",
    )
    demo.add_argument("--with-tests", action="store_true", help="run the test suite (pytest) first")
    demo.set_defaults(func=_demo)

    bench = sub.add_parser(
        "bench", help="Berth's scheduler beside kube-scheduler on the local cluster"
    )
    bench.add_argument("--nodes", type=int, default=1000)
    bench.add_argument("--pods", type=int, default=5000)
    bench.add_argument("--qps", type=float, default=100.0, help="client QPS of both schedulers")
    bench.add_argument("--burst", type=int, default=200, help="client burst of both schedulers")
    bench.add_argument("--keep", action="store_true", help="leave the cluster running")
    bench.add_argument(
        "--only", choices=["kube-scheduler", "berth"], help="run one scheduler, not both"
    )
    bench.add_argument(
        "--cycle-only",
        action="store_true",
        help="time the scheduling cycle in process, without a cluster",
    )
    bench.add_argument(
        "--numa",
        action="store_true",
        help="the pending ledger's trade-off: NUMA placements refused on nodes, off vs on",
    )
    bench.set_defaults(func=_bench)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (BuildError, ClusterError, KubectlError) as err:
        say(f"error: {err}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
