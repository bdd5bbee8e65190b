package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// bigPolicy is the tenant whose sessions' workspaces are measured at
// deletion: room for 50 MiB of files.
const bigPolicy = `version: 1
description: the pod-deleted case's large workspaces
default: allow
sandbox:
  runtime: runc
  cpus: 0.5
  memory: 256MiB
  disk: 96MiB
  tmp: 16MiB
limits:
  sessions: 8
`

// deletedFiles writes the files a deletion must not lose: odd modes, a
// symlink, a hard link, a read-only directory, and size MiB of random
// bytes (zstd cannot shrink them: the store gets them all).
func deletedFiles(size int) string {
	return `mkdir -p /workspace/del/d && cd /workspace/del && echo a > d/f && chmod 0640 d/f && printf '#!/bin/sh\n' > run.sh && chmod 0751 run.sh &&
ln -sf d/f link && ln -f d/f hard && mkdir -p ro && echo r > ro/g && chmod 0555 ro && head -c ` + strconv.Itoa(size) + `M /dev/urandom > blob && echo ok`
}

// deletedManifest lists /workspace/del as a restore must match it: each
// entry's type, mode, size and link count, symlinks' targets, the files'
// sha256.
const deletedManifest = `cd /workspace/del && find . -mindepth 1 \( -type l -printf '%p l -> %l\n' \) -o -printf '%p %y %m %s %n\n' | LC_ALL=C sort &&
find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum`

// podDeleted: a session pod deleted behind shellbox's back (default grace)
// and one evicted (the Eviction API, as kubectl drain does) lose no file:
// the leader snapshots each workspace during the pod's grace, and the
// session's next call, through the other replica, resumes it in a new
// pod. It logs how long from the deletion until the pod was gone (its
// agent ends once the snapshot is stored), for 1 MiB and 50 MiB.
func podDeleted(t *testing.T, c *kubetest.Cluster, r *Release, rest []*client.Client, big *client.Client) {
	ctx := context.Background()
	call := func(t *testing.T, cl *client.Client, session, command string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		res, err := cl.Call(cctx, session, tools.ToolBash, bashArgs(command, false))
		if err != nil {
			t.Fatalf("%q: %v", command, err)
		}
		if res.IsError {
			t.Fatalf("%q: %s", command, res.Text)
		}
		return res.Text
	}
	pods := c.CS.CoreV1().Pods(r.SessionsNamespace)
	// gone waits until the pod of uid is gone and returns how long that
	// took from start.
	gone := func(t *testing.T, name string, uid string, start time.Time) time.Duration {
		t.Helper()
		for {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && string(p.UID) != uid) {
				return time.Since(start)
			}
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("pod %s still there %s after its deletion", name, time.Since(start))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	uid := func(t *testing.T, tenant, session string) string {
		t.Helper()
		p, err := pods.Get(ctx, kube.PodName(tenant, session), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the session's pod: %v", err)
		}
		return string(p.UID)
	}
	for _, tc := range []struct {
		name   string
		tenant string
		cl     []*client.Client
		size   int
		delete func(name string) error
	}{
		{"delete", "rep", rest, 1, func(name string) error { return pods.Delete(ctx, name, metav1.DeleteOptions{}) }},
		{"evict", "big", []*client.Client{big, big}, 50, func(name string) error {
			return c.CS.PolicyV1().Evictions(r.SessionsNamespace).Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.SessionsNamespace}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := "deleted-" + tc.name
			call(t, tc.cl[0], session, deletedFiles(tc.size))
			before := call(t, tc.cl[0], session, deletedManifest)
			name, was := kube.PodName(tc.tenant, session), uid(t, tc.tenant, session)
			start := time.Now()
			deleted := metav1.NewTime(start)
			if err := tc.delete(name); err != nil {
				t.Fatalf("%s %s: %v", tc.name, name, err)
			}
			took := gone(t, name, was, start)
			t.Logf("%s of a session pod with %d MiB of files: gone %s after the deletion (snapshot stored, agent ended)", tc.name, tc.size, took.Round(10*time.Millisecond))
			start = time.Now()
			after := call(t, tc.cl[1], session, deletedManifest)
			t.Logf("first result after the %s: %s (a new pod, the workspace restored)", tc.name, time.Since(start).Round(10*time.Millisecond))
			logged(t, r, deleted, session)
			if after != before {
				t.Fatalf("workspace after the %s:\n%s\nwant:\n%s", tc.name, after, before)
			}
			if now := uid(t, tc.tenant, session); now == was {
				t.Errorf("the same pod (uid %s) after the %s", was, tc.name)
			}
		})
	}
}

// logged logs what each server replica logged of session since since:
// who saved it, who resumed it, and when (the log's own times), to tell
// where a slow next call spent its time.
func logged(t *testing.T, r *Release, since metav1.Time, session string) {
	t.Helper()
	ctx := context.Background()
	pods, err := r.ServerPods(ctx)
	if err != nil {
		t.Logf("the server pods: %v", err)
		return
	}
	limit := int64(1 << 20)
	for _, p := range pods {
		b, err := r.c.CS.CoreV1().Pods(r.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &since, Timestamps: true, LimitBytes: &limit}).DoRaw(ctx)
		if err != nil {
			t.Logf("the log of %s: %v", p.Name, err)
			continue
		}
		var lines []string
		for l := range strings.Lines(string(b)) {
			if strings.Contains(l, session) {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
		t.Logf("%s logged of %s since its deletion (%d lines):\n%s", p.Name, session, len(lines), strings.Join(lines, "\n"))
	}
}
