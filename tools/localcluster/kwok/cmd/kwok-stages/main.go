// Command kwok-stages prints kwok's own default stages (fast node start-up,
// node heartbeat with lease, fast pod ready/complete/delete) as one kwok
// configuration document, so the local cluster's kwok plays the kubelet the
// same way a kwokctl cluster does.
package main

import (
	"fmt"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	stages := []string{
		nodefast.DefaultNodeInit,
		nodeheartbeat.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	for i, s := range stages {
		stages[i] = strings.TrimSpace(s)
	}
	fmt.Println(strings.Join(stages, "\n---\n"))
}
