package e2e

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// resumePolicy is a runc tenant with room for a workspace of 100 MiB of
// small files (the memory emptyDir counts toward the pod's memory), with
// a warm pool of size.
func resumePolicy(size int) string {
	return fmt.Sprintf(`version: 1
default: allow
sandbox:
  runtime: runc
  cpus: 1
  memory: 1GiB
  disk: 384MiB
  tmp: 16MiB
  pool:
    size: %d
limits:
  sessions: 8
`, size)
}

// BenchmarkChartResume measures on the real cluster, through the chart's
// Service from outside the cluster (one replica, the S3 store: SeaweedFS
// on this host, through the test's relay), the suspend and resume of a
// workspace of 100 MiB of this repository's files (~14,000 of them),
// side by side: cold (the resume makes a new session pod) and with a warm
// pool of one (the resume claims the pooled pod, and the pool is refilled,
// outside the timer, before the next suspend). Suspend is the REST call
// to its answer (the workspace packed into the store, the pod deleted);
// resume is the next call's first result (`echo`: a pod, the workspace
// restored from the store, the call).
//
//	flock -s /tmp/shellbox-cluster.lock go test -run '^$' -bench ChartResume -benchtime 2x -timeout 30m ./deploy/helm/e2e/
func BenchmarkChartResume(b *testing.B) {
	c := kubetest.Connect(b)
	storeVals, storeSecrets, _, _ := SnapshotStore(b, c)
	for _, size := range []int{0, 1} {
		name := "cold"
		if size > 0 {
			name = "pool"
		}
		b.Run("100MiB/"+name, func(b *testing.B) {
			r := Install(b, c, Options{
				Tenants: []Tenant{{Name: "acme", Policy: resumePolicy(size)}},
				Secrets: storeSecrets,
				Values:  map[string]any{"snapshots": storeVals["snapshots"]},
			})
			rc := client.New(r.URL, r.Tokens["acme"], nil)
			ctx := context.Background()
			if size > 0 {
				waitPool(b, r, size, 5*time.Minute)
			}
			const s = "bench"
			if _, err := rc.PutFile(ctx, s, "/workspace", repoFilesTar(b, 100<<20), client.PutOptions{Tar: true}); err != nil {
				b.Fatalf("filling the workspace: %v", err)
			}
			var suspend, resume time.Duration
			for b.Loop() {
				if size > 0 {
					b.StopTimer()
					waitPool(b, r, size, 5*time.Minute)
					b.StartTimer()
				}
				t0 := time.Now()
				if _, err := rc.SuspendSession(ctx, s); err != nil {
					b.Fatalf("suspend: %v", err)
				}
				t1 := time.Now()
				res, err := rc.Call(ctx, s, tools.ToolBash, bashArgs("echo back", false))
				if err != nil || res.IsError || res.Text != "back" {
					b.Fatalf("resume: %v %+v", err, res)
				}
				suspend += t1.Sub(t0)
				resume += time.Since(t1)
			}
			b.ReportMetric(float64(suspend.Milliseconds())/float64(b.N), "suspend-ms/op")
			b.ReportMetric(float64(resume.Milliseconds())/float64(b.N), "resume-ms/op")
		})
	}
}

// repoFilesTar streams a tar of copies of this repository's tracked files
// under copy0/, copy1/, ... until size bytes of files: real source,
// compressible as a checkout is (cmd/shellbox's BenchmarkSuspendResume
// uses the same workload).
func repoFilesTar(b testing.TB, size int64) io.Reader {
	const root = "../../.."
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		b.Fatalf("git ls-files: %v", err)
	}
	var paths []string
	for p := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		if fi, err := os.Lstat(filepath.Join(root, p)); err == nil && fi.Mode().IsRegular() {
			paths = append(paths, p)
		}
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		var n int64
		for c := 0; n < size; c++ {
			for _, p := range paths {
				if n >= size {
					break
				}
				data, err := os.ReadFile(filepath.Join(root, p))
				if err != nil {
					pw.CloseWithError(err)
					return
				}
				hdr := &tar.Header{Name: fmt.Sprintf("copy%d/%s", c, p), Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(1e9, 0)}
				if err := tw.WriteHeader(hdr); err != nil {
					pw.CloseWithError(err)
					return
				}
				if _, err := tw.Write(data); err != nil {
					pw.CloseWithError(err)
					return
				}
				n += int64(len(data))
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	return pr
}
