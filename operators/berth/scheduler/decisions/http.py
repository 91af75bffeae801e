"""``/debug/pods/{namespace}/{name}``: a pod's decision record as JSON, read-only;
``/debug/nodes/{name}``: what the scheduler's view counts on a node."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from berth.scheduler.cache.view import ClusterView
from berth.scheduler.decisions.ledger import DecisionLedger
from berth.scheduler.decisions.nodereport import node_report

PATH = "/debug/pods/{namespace}/{name}"
NODE_PATH = "/debug/nodes/{name}"
NOT_LEADING = "this replica is not scheduling (standby, or not synced yet)"

Handler = Callable[[web.Request], Awaitable[web.Response]]
# Where the scheduling queue holds a pod (namespace, name), None if it does not.
Where = Callable[[str, str], "dict[str, object] | None"]


def pod_decision_handler(
    ledger: DecisionLedger, leading: Callable[[], bool], where: Where | None = None
) -> Handler:
    """The route's handler. A replica that is not scheduling (a standby, or before its view
    has synced) answers 503, so a client reaching it through a Service can try again. A pod
    with no record yet is answered with where it waits in the queue, when it does: a pod
    never tried and one tried long ago (its record gone) read differently."""

    async def handle(request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        name = request.match_info["name"]
        if not leading():
            return web.json_response({"error": NOT_LEADING}, status=503)
        decision = ledger.get(namespace, name)
        if decision is None:
            answer: dict[str, object] = {
                "error": f"no decision recorded for pod {namespace}/{name}"
            }
            place = where(namespace, name) if where is not None else None
            if place is not None:
                answer["queued"] = place
            return web.json_response(answer, status=404)
        return web.json_response(decision.to_json())

    return handle


def node_view_handler(view: ClusterView, leading: Callable[[], bool]) -> Handler:
    """The node route's handler; 503 on a replica that is not scheduling, as above."""

    async def handle(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if not leading():
            return web.json_response({"error": NOT_LEADING}, status=503)
        report = node_report(view, name)
        if report is None:
            return web.json_response({"error": f"no node {name} in the view"}, status=404)
        return web.json_response(report)

    return handle
