"""The ``berth`` command: the local cluster, the components, and the demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from berth.image.spec import ImageError
from berth.kube.client import ConnectError
from berth.localcluster.build import BuildError, ensure_built
from berth.localcluster.errors import ClusterError
from berth.localcluster.kubectl import KubectlError

if TYPE_CHECKING:  # the local cluster (and its certificates' library) is not `run`'s
    from berth.localcluster.cluster import LocalCluster


def say(message: str) -> None:
    """Progress for a person at a terminal (logs go through structlog instead)."""
    sys.stderr.write(f"berth: {message}\n")
    sys.stderr.flush()


def _cluster(args: argparse.Namespace) -> int:
    from berth.localcluster.cluster import LocalCluster

    cluster = LocalCluster.default()
    if args.action == "build":
        ensure_built(say)
    elif args.action == "up":
        _up(cluster, args)
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


def _image(args: argparse.Namespace) -> int:
    from berth.image import build, lock

    if args.action == "lock":
        for path in lock.refresh():
            say(f"wrote {path}")
    elif args.reproducible:
        build.build_twice(say)
    elif args.force:
        build.build(say)
    else:
        build.ensure_image(say)
    return 0


def _version(args: argparse.Namespace) -> int:
    from berth.version import current

    sys.stdout.write(current().line() + "\n")
    return 0


def _up(cluster: LocalCluster, args: argparse.Namespace) -> None:
    """The cluster; with ``--real-node`` its real node with Berth's image loaded; with
    ``--install`` Berth installed there from that image, as users install it."""
    from berth.image.build import ensure_image
    from berth.localcluster.incluster import install

    real_node = args.real_node or args.install
    cluster.up(nodes=args.nodes, say=say, real_node=real_node)
    if args.install:
        install(cluster, say)
    elif real_node:
        cluster.start_real_node([ensure_image(say)], say)
    sys.stdout.write(cluster.env(ensure_built(say)))


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
            stall_seconds=args.liveness_stall_seconds,
            webhook_address=args.webhook_address,
            webhook_url=args.webhook_url,
        )
    )


def _quota(args: argparse.Namespace) -> int:
    from berth.kubectl.main import main as kubectl_berth

    argv = ["quota", "tree"]
    for flag in ("kubeconfig", "context", "output"):
        value = getattr(args, flag)
        if value:
            argv.append(f"--{flag}={value}")
    return kubectl_berth(argv)


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
    from berth.bench import suite
    from berth.bench.backlog import TrialError
    from berth.bench.fixture import FixtureError
    from berth.bench.operatorlag import LagError, lag_table
    from berth.bench.report import conditions
    from berth.localcluster.paths import REPO_DIR

    command = "berth bench " + " ".join(sys.argv[2:] if len(sys.argv) > 2 else [])
    refused = _bench_refusal(args)
    if refused:
        say(f"error: {refused}")
        return 2
    if args.cycle_only:
        from berth.bench.cycle import cycle_bench, workload_cycle_bench

        measured = conditions(REPO_DIR, None, 0, command.strip())
        sys.stdout.write(measured.show() + "\n")
        if args.workload:
            table = workload_cycle_bench(args.workload, args.nodes, args.pods, args.repeats)
        else:
            table = cycle_bench(args.nodes, args.pods or 5000)
        sys.stdout.write(table + "\n")
        return 0
    if args.memory:
        from berth.bench.memory import memory_bench, points

        measured = conditions(REPO_DIR, None, 0, command.strip())
        sys.stdout.write(measured.show() + "\n")
        wanted = points(args.curve or [args.nodes], args.pods)
        sys.stdout.write(memory_bench(wanted, args.repeats) + "\n")
        return 0
    if args.collections:
        from berth.bench.collections import SCHEDULED, collections_bench
        from berth.bench.memory import points as bench_points

        measured = conditions(REPO_DIR, None, 0, command.strip())
        sys.stdout.write(measured.show() + "\n")
        wanted = bench_points(args.curve or [args.nodes], args.pods)
        sys.stdout.write(collections_bench(wanted, SCHEDULED, args.repeats) + "\n")
        return 0
    if args.numa:
        from berth.bench.numa import numa_bench

        sys.stdout.write(numa_bench() + "\n")
        return 0
    if args.replot:
        for path in args.replot:
            suite.replot(Path(path))
        return 0
    plan = suite.Plan(
        workloads=tuple(args.workload or ["SchedulingBasic"]),
        node_counts=tuple(args.curve or [args.nodes]),
        pods=args.pods,
        sides=tuple(args.sides),
        repeats=args.repeats,
        qps=args.qps,
        burst=args.burst,
        rate=args.rate,
        churn=args.churn,
        bound_per_node=args.bound_per_node,
        feature_objects=not args.without_objects,
    )
    from berth.localcluster.cluster import LocalCluster

    cluster = LocalCluster.default()
    binaries = ensure_built(say)
    started = not cluster.is_up()
    cluster.up(nodes=1, say=say)
    qps = None if args.operator_lag else args.qps
    measured = conditions(REPO_DIR, qps, args.burst, command.strip())
    try:
        if args.operator_lag:
            lags = suite.operator_lag(str(cluster.kubeconfig), args.nodes, say)
            sys.stdout.write(measured.show() + "\n" + lag_table(lags) + "\n")
            return 0
        outcome = suite.run(plan, str(cluster.kubeconfig), binaries, say)
    except (TrialError, FixtureError, LagError) as err:
        say(f"error: {err}")
        return 1
    finally:
        if started and not args.keep:
            cluster.down()
    suite.publish(outcome, measured, Path(args.csv) if args.csv else None)
    return 1 if outcome.failures else 0


def _bench_refusal(args: argparse.Namespace) -> str | None:
    """Why the bench options cannot measure the workloads asked for, if they cannot: the
    gang workloads' PodGroups and the initial pods made for each trial are a backlog's."""
    from berth.bench.sides import NOOP
    from berth.bench.workloads import WORKLOADS

    if args.churn is not None:
        if args.churn <= 0:
            return f"--churn {args.churn:g}: the churn's length in seconds must be positive"
        others = {
            "--rate": args.rate is not None,
            "--operator-lag": args.operator_lag,
            "--cycle-only": args.cycle_only,
            "--memory": args.memory,
            "--collections": args.collections,
            "--numa": args.numa,
            "--replot": bool(args.replot),
        }
        named = [option for option, given in others.items() if given]
        if named:
            return f"--churn is a mode of its own: not with {', '.join(named)}"
        if NOOP in args.sides:
            return "--churn compares schedulers' attempts: the noop-binder makes none; name --sides"
        if args.csv:
            return "--churn prints its table only: --csv writes the backlog's trials"
    for name in args.workload or []:
        workload = WORKLOADS[name]
        if workload.init_each_trial and (args.rate is not None or args.cycle_only):
            option = "--rate" if args.rate is not None else "--cycle-only"
            return (
                f"{option} does not make initial pods per trial: "
                f"{name} is measured on a backlog only"
            )
        if not workload.gang_size:
            continue
        if args.rate is not None or args.cycle_only:
            option = "--rate" if args.rate is not None else "--cycle-only"
            return f"{option} does not create PodGroups: {name} is measured on a backlog only"
        if args.pods is not None:
            try:
                workload.check_pods(args.pods)
            except ValueError as err:
                return str(err)
    return None


def _node_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text}") from None
    if any(c < 1 for c in counts):
        raise argparse.ArgumentTypeError("node counts must be positive")
    return counts


def _sides(text: str) -> list[str]:
    from berth.bench.sides import SIDES

    chosen = [part.strip() for part in text.split(",")]
    unknown = [c for c in chosen if c not in SIDES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown side(s) {', '.join(unknown)}; known: {', '.join(SIDES)}"
        )
    return chosen


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="berth", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)

    cluster = sub.add_parser(
        "cluster", help="the local cluster (kube-apiserver + etcd, controller-manager, kwok)"
    )
    actions = cluster.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start it (building it first if needed)")
    up.add_argument("--nodes", type=int, default=3, help="kwok nodes (default 3)")
    up.add_argument(
        "--real-node",
        action="store_true",
        help="and a real node (kubelet, containerd) with Berth's image loaded (needs root)",
    )
    up.add_argument(
        "--install",
        action="store_true",
        help="and Berth installed on the real node from its image (kubectl apply -k)",
    )
    actions.add_parser("down", help="stop every process and wipe the data")
    actions.add_parser("env", help="print the shell exports for kubectl")
    actions.add_parser("build", help="build the binaries from Go modules")
    actions.add_parser("status", help="exit 0 when it is up")
    cluster.set_defaults(func=_cluster)

    image = sub.add_parser(
        "image", help="Berth's container image, built without a Docker engine or a registry"
    )
    image_actions = image.add_subparsers(dest="action", required=True)
    image_build = image_actions.add_parser(
        "build",
        help="build the image archive (OCI layout and docker manifest) into .cache/image, "
        "unless it is up to date with the sources, the locks and the package list",
    )
    image_build.add_argument(
        "--force", action="store_true", help="build even when the archive is up to date"
    )
    image_build.add_argument(
        "--reproducible",
        action="store_true",
        help="build it twice from scratch and fail unless both archives are the same bytes",
    )
    image_actions.add_parser(
        "lock", help="refresh image/requirements.lock and image/build-requirements.lock from PyPI"
    )
    image.set_defaults(func=_image)

    version = sub.add_parser("version", help="the version, the Python and the commit")
    version.set_defaults(func=_version)

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
    run.add_argument(
        "--liveness-stall-seconds",
        type=float,
        default=120.0,
        help="/healthz fails when pods (or an operator's marked objects) have waited this long "
        "with no scheduling cycle (or no finished decision)",
    )
    run.add_argument(
        "--webhook-address",
        help="host:port to serve the ElasticQuota admission webhook on (HTTPS; default: "
        "not served)",
    )
    run.add_argument(
        "--webhook-url",
        help="the URL the API server dials for the webhook, e.g. https://127.0.0.1:9443 when "
        "Berth runs beside kube-apiserver (default: the berth-webhook Service)",
    )
    run.set_defaults(func=_run)

    quota = sub.add_parser("quota", help="ElasticQuotas (the same as kubectl berth quota)")
    views = quota.add_subparsers(dest="view", required=True)
    tree = views.add_parser(
        "tree", help="the quota tree: min, max, request, runtime, used, borrowed, lent"
    )
    tree.add_argument("--kubeconfig", help="kubeconfig path (default: KUBECONFIG)")
    tree.add_argument("--context", help="the kubeconfig context to use")
    tree.add_argument("-o", "--output", choices=("text", "json"), default="text")
    quota.set_defaults(func=_quota)

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

    from berth.bench.workloads import WORKLOADS

    bench = sub.add_parser(
        "bench",
        help="Berth's scheduler beside kube-scheduler and a no-op binder on the local cluster",
        description="Throughput on a backlog (pods created before the side starts; "
        "first-to-last binding and start-to-last), repeats alternating the order; "
        "scheduler_perf's workloads; the scale curve over node counts; or, with --rate, "
        "latency at a fixed arrival rate.",
    )
    bench.add_argument("--nodes", type=int, default=1000, help="kwok nodes (default 1000)")
    bench.add_argument(
        "--pods",
        type=int,
        help="pending pods per run (default: the workload's scheduler_perf proportion; "
        "GangScheduling: a multiple of 3, three pods a gang)",
    )
    bench.add_argument(
        "--workload",
        action="append",
        choices=sorted(WORKLOADS),
        help="scheduler_perf workload, repeatable (default SchedulingBasic)",
    )
    bench.add_argument(
        "--curve",
        type=_node_counts,
        help="node counts of the scale curve, e.g. 500,1000,2000 (replaces --nodes)",
    )
    bench.add_argument(
        "--bound-per-node",
        type=float,
        help="pods already bound per node, created once per node count and kept across its "
        "trials (default: the workload's scheduler_perf proportion)",
    )
    bench.add_argument(
        "--without-objects",
        action="store_true",
        help="berth-installed without the quotas, NodeMetrics and reservations its plugins "
        "read: the cost of those plugins when they have nothing to decide",
    )
    bench.add_argument("--repeats", type=int, default=3, help="runs of each side (default 3)")
    bench.add_argument(
        "--sides",
        type=_sides,
        default="kube-scheduler,berth,berth-installed,noop-binder",
        help="comma-separated: kube-scheduler, berth (its default profile), berth-installed "
        "(the profile the manifests install, with quotas, NodeMetrics and reservations "
        "present), noop-binder (default all four)",
    )
    bench.add_argument(
        "--qps", type=float, default=5000.0, help="client QPS of every side (default 5000)"
    )
    bench.add_argument(
        "--burst", type=int, default=5000, help="client burst of every side (default 5000)"
    )
    bench.add_argument(
        "--rate",
        type=float,
        help="latency mode: pods created at this rate per second once the side runs",
    )
    bench.add_argument(
        "--churn",
        type=float,
        metavar="SECONDS",
        help="requeues under churn: plain pods arriving faster than the nodes hold them "
        "while nodes go and come back, for SECONDS per trial; each side's scheduling "
        "attempts per pod bound",
    )
    bench.add_argument(
        "--operator-lag",
        action="store_true",
        help="the operators' delays at --nodes nodes: ttl expiry, quota status.used, "
        "a ConfigMap change reaching every NodeMetric",
    )
    bench.add_argument("--csv", help="write the runs to this CSV, and its picture beside it")
    bench.add_argument(
        "--replot", metavar="CSV", nargs="+", help="redraw the pictures of written CSVs"
    )
    bench.add_argument("--keep", action="store_true", help="leave the cluster running")
    bench.add_argument(
        "--cycle-only",
        action="store_true",
        help="time the scheduling cycle in process, without a cluster (with --workload: "
        "those workloads, --repeats runs each, the median)",
    )
    bench.add_argument(
        "--memory",
        action="store_true",
        help="in process, without a cluster: the scheduler's RSS per node and per bound pod "
        "(--pods bound pods, default 10 a node, at --nodes or each --curve point) and its "
        "cycle time with them, each point --repeats times in a fresh process",
    )
    bench.add_argument(
        "--collections",
        action="store_true",
        help="in process, without a cluster: whole-heap collections while 5000 pods are "
        "scheduled and bound after the view is listed (--pods bound pods, default 10 a "
        "node), with the synced view frozen as berth run does and without",
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
    except (BuildError, ClusterError, ConnectError, ImageError, KubectlError) as err:
        say(f"error: {err}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
