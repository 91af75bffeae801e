"""PlacementFields: a pod that asks for placement Berth does not provide is refused, by name.

kube-scheduler honours a pod's device claims when it places the pod, and a gang (of any
scheme Coscheduling reads) needs the plugin in the pod's profile;
binding such a pod while ignoring them would put it where it cannot run. Until Berth
implements them, such a pod stays Pending, Unschedulable, with a message naming the
field. ``HONOURED`` and ``NOT_PLACEMENT`` say what Berth does with every other PodSpec
field (a unit test walks the API's PodSpec so a new field cannot go unclassified).
"""

from __future__ import annotations

from typing import Any

from berth.api.podgroup import POD_GROUP_LABEL
from berth.gang import koordinator, workload
from berth.scheduler.cache.nodetable import NodeTable
from berth.scheduler.cache.podinfo import PodInfo
from berth.scheduler.framework.interface import SUCCESS, CycleState, Plugin, Status, unschedulable

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
        "schedulingGroup",  # kube-scheduler 1.36's PodGroup: Coscheduling places its gang
        "tolerations",
        "topologySpreadConstraints",
        "volumes",  # PLACED_VOLUME_SOURCES by the volume plugins; the others have no say
    }
)
# PodSpec fields that make Berth refuse the pod while it does not implement them.
REFUSED = {
    "resourceClaims": "Berth does not allocate device claims: spec.resourceClaims",
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


# Koordinator's PodGroup (its label names one in scheduling.sigs.k8s.io, not served here).
KOORDINATOR_PODGROUP = (
    f"label {koordinator.PODGROUP_LABEL}: Berth does not serve Koordinator's PodGroup "
    f"(scheduling.sigs.k8s.io); name a scheduler-plugins PodGroup with the label "
    f"{POD_GROUP_LABEL}, or use the annotations {koordinator.PREFIX}*"
)
NO_COSCHEDULING = (
    "{keys}: profile {profile} has no Coscheduling plugin to place the pod with its gang"
)


def refusals(spec: dict[str, Any]) -> tuple[str, ...]:
    """Why Berth will not place a pod with this spec, one message per field; () if none."""
    return tuple(message for name, message in REFUSED.items() if spec.get(name))


def gang_refusals(pod: PodInfo, profile: str, grouping: bool) -> tuple[str, ...]:
    """A gang Berth would place as single pods: Koordinator's PodGroup, or any gang (a
    Reservation's too) in a profile without Coscheduling."""
    found = [KOORDINATOR_PODGROUP] if koordinator.PODGROUP_LABEL in pod.labels else []
    keys = [workload.FIELD] if workload.group_name(pod.raw.get("spec") or {}) else []
    keys += [f"label {k}" for k in (POD_GROUP_LABEL, koordinator.LEGACY_NAME) if k in pod.labels]
    keys += [f"annotation {k}" for k in pod.annotations if k.startswith(koordinator.PREFIX)]
    if keys and not grouping:
        found.append(NO_COSCHEDULING.format(keys=", ".join(keys), profile=profile))
    return tuple(found)


class PlacementFields(Plugin):
    name = "PlacementFields"

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        handle = self.handle
        grouping = handle.framework is not None and handle.framework.group is not None
        reasons = refusals(pod.raw.get("spec") or {})
        reasons += gang_refusals(pod, handle.profile, grouping)
        if reasons:
            return unschedulable(self.name, *reasons, resolvable=False)
        return SUCCESS
