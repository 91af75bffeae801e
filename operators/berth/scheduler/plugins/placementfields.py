"""PlacementFields: a pod that asks for placement Berth does not provide is refused, by name.

kube-scheduler honours a pod's device claims and workload gangs when it places the pod;
binding such a pod while ignoring them would put it where it cannot run. Until Berth
implements them, such a pod stays Pending, Unschedulable, with a message naming the
field. ``HONOURED`` and ``NOT_PLACEMENT`` say what Berth does with every other PodSpec
field (a unit test walks the API's PodSpec so a new field cannot go unclassified).
"""

from __future__ import annotations

from typing import Any

from berth.scheduler.framework import SUCCESS, CycleState, Plugin, Status, unschedulable
from berth.scheduler.nodetable import NodeTable
from berth.scheduler.podinfo import PodInfo

# PodSpec fields the scheduler reads and honours.
HONOURED = frozenset(
    {
        "affinity",
        "containers",  # requests, host ports, images
        "initContainers",
        "hostNetwork",  # its container ports are host ports (API defaulting)
        "nodeName",
        "nodeSelector",
        "overhead",
        "preemptionPolicy",
        "priority",
        "priorityClassName",  # resolved into priority at admission
        "resources",  # pod-level requests
        "schedulerName",
        "schedulingGates",
        "tolerations",
        "topologySpreadConstraints",
        "volumes",  # PLACED_VOLUME_SOURCES by the volume plugins; the others have no say
    }
)
# PodSpec fields that make Berth refuse the pod while it does not implement them.
REFUSED = {
    "resourceClaims": "Berth does not allocate device claims: spec.resourceClaims",
    "schedulingGroup": "Berth does not schedule pod groups: spec.schedulingGroup",
}
# PodSpec fields kube-scheduler does not read either (runtimeClassName acts through the
# overhead, nodeSelector and tolerations admission writes).
NOT_PLACEMENT = frozenset(
    {
        "activeDeadlineSeconds",
        "automountServiceAccountToken",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
        "ephemeralContainers",
        "hostAliases",
        "hostIPC",
        "hostPID",
        "hostUsers",
        "hostname",
        "hostnameOverride",
        "imagePullSecrets",
        "os",
        "readinessGates",
        "restartPolicy",
        "runtimeClassName",
        "securityContext",
        "serviceAccount",
        "serviceAccountName",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "subdomain",
        "terminationGracePeriodSeconds",
    }
)
# Volume sources the volume plugins place by, as kube-scheduler's: claims (VolumeBinding,
# VolumeZone, VolumeRestrictions, NodeVolumeLimits), unshareable disks
# (VolumeRestrictions) and CSI-migratable in-tree disks (NodeVolumeLimits).
PLACED_VOLUME_SOURCES = frozenset(
    {
        "persistentVolumeClaim",
        "ephemeral",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cinder",
        "vsphereVolume",
        "portworxVolume",
        "iscsi",
        "rbd",
    }
)
# Inline CSI volumes are ephemeral, never attached: no plugin counts them.
UNPLACED_VOLUME_SOURCES = frozenset(
    {
        "csi",
        "configMap",
        "secret",
        "downwardAPI",
        "projected",
        "emptyDir",
        "hostPath",
        "image",
        "gitRepo",
        "nfs",
        "cephfs",
        "fc",
        "flexVolume",
        "flocker",
        "glusterfs",
        "quobyte",
        "scaleIO",
        "storageos",
        "photonPersistentDisk",
    }
)


def refusals(spec: dict[str, Any]) -> tuple[str, ...]:
    """Why Berth will not place a pod with this spec, one message per field; () if none."""
    return tuple(message for name, message in REFUSED.items() if spec.get(name))


class PlacementFields(Plugin):
    name = "PlacementFields"

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        reasons = refusals(pod.raw.get("spec") or {})
        if reasons:
            return unschedulable(self.name, *reasons, resolvable=False)
        return SUCCESS
