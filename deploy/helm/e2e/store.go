package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/sandbox/snapshot/snapshottest"
)

// SnapshotStore is a bucket of the CI's S3 server (snapshottest.S3Bucket:
// made for t, removed after it) as the server pods reach it, and the
// chart's values and Secret that name it. The S3 server listens on this
// host's loopback; pods reach it through a TCP relay on the node's
// address that lives as long as t. SigV4 signs the Host header the pods
// send, which the relay passes through unchanged.
func SnapshotStore(t testing.TB, c *kubetest.Cluster) (vals map[string]any, secrets map[string]map[string]string, o snapshot.S3Options, mc *minio.Client) {
	t.Helper()
	o, mc = snapshottest.S3Bucket(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(NodeIP(t, c), "0"))
	if err != nil {
		t.Fatalf("the S3 relay for pods: %v", err)
	}
	relay(t, ln, o.Endpoint)
	vals = map[string]any{"snapshots": map[string]any{"store": "s3", "s3": map[string]any{
		"endpoint": ln.Addr().String(), "bucket": o.Bucket, "insecure": true,
		"accessKey": o.AccessKey, "secretKeySecret": "e2e-snapshots", "secretKeySecretKey": "secretKey"}}}
	secrets = map[string]map[string]string{"e2e-snapshots": {"secretKey": o.SecretKey}}
	return vals, secrets, o, mc
}

// relay copies every connection ln accepts to and from target until t
// ends (then ln and the open connections are closed and waited for).
func relay(t testing.TB, ln net.Listener, target string) {
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			return false
		}
		conns = append(conns, c)
		return true
	}
	conns = []net.Conn{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Logf("S3 relay: %v", err)
				}
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				t.Logf("S3 relay to %s: %v", target, err)
				in.Close()
				continue
			}
			if !track(in) || !track(out) {
				in.Close()
				out.Close()
				return
			}
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
			}
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
}

// NodeIP is the cluster node's InternalIP: this host, as pods reach it.
func NodeIP(t testing.TB, c *kubetest.Cluster) string {
	nodes, err := c.CS.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("the cluster's node: %v", err)
	}
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("node %s has no InternalIP", nodes.Items[0].Name)
	return ""
}
