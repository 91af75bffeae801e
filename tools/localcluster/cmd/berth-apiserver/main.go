// Command berth-apiserver runs kube-apiserver with an embedded etcd in one
// process, for Berth's local development and test cluster.
//
// It consumes one flag of its own, --berth-data-dir DIR: etcd keeps its data in
// DIR/etcd and the cluster's PKI (a CA, the serving certificate, the service
// account key pair and an admin client certificate in system:masters) is
// created once in DIR/pki. Every other argument goes to kube-apiserver
// unchanged; the etcd, certificate and service-account flags are appended.
package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

const dataDirFlag = "--berth-data-dir"

func main() {
	dataDir, rest, err := splitArgs(os.Args[1:])
	if err != nil {
		fail(err)
	}
	pki := filepath.Join(dataDir, "pki")
	if err := ensurePKI(pki); err != nil {
		fail(fmt.Errorf("creating PKI in %s: %w", pki, err))
	}
	etcdURL, stop, err := startEtcd(filepath.Join(dataDir, "etcd"))
	if err != nil {
		fail(fmt.Errorf("starting embedded etcd: %w", err))
	}
	defer stop()

	args := append(rest,
		"--etcd-servers="+etcdURL,
		"--client-ca-file="+filepath.Join(pki, "ca.crt"),
		"--tls-cert-file="+filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file="+filepath.Join(pki, "apiserver.key"),
		"--service-account-key-file="+filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
	)
	command := app.NewAPIServerCommand()
	command.SetArgs(args)
	code := cli.Run(command)
	stop()
	os.Exit(code)
}

func splitArgs(argv []string) (string, []string, error) {
	var dataDir string
	var rest []string
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == dataDirFlag && i+1 < len(argv):
			dataDir = argv[i+1]
			i++
		case strings.HasPrefix(a, dataDirFlag+"="):
			dataDir = strings.TrimPrefix(a, dataDirFlag+"=")
		default:
			rest = append(rest, a)
		}
	}
	if dataDir == "" {
		return "", nil, fmt.Errorf("%s is required", dataDirFlag)
	}
	return dataDir, rest, nil
}

// startEtcd starts a single-member etcd on two free loopback ports. Fsync is
// off: the data lives only as long as the test cluster, and writes are the
// cost that benchmarks would otherwise measure.
func startEtcd(dir string) (string, func(), error) {
	clientPort, err := freePort()
	if err != nil {
		return "", nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return "", nil, err
	}
	clientURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", clientPort))
	peerURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", peerPort))

	cfg := embed.NewConfig()
	cfg.Name = "berth"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = 8 * 1024 * 1024 * 1024

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return "", nil, fmt.Errorf("etcd not ready after 60s")
	}
	closed := false
	stop := func() {
		if !closed {
			closed = true
			e.Close()
		}
	}
	return clientURL.String(), stop, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "berth-apiserver:", err)
	os.Exit(1)
}
