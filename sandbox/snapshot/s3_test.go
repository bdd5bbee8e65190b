package snapshot_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/sandbox/snapshot/snapshottest"
)

// The S3 server the tests use: .ci/setup-s3.sh starts SeaweedFS and writes
// these to /etc/shellbox-s3/env. SHELLBOX_S3_BUCKET is a prefix: each test
// makes a bucket of its own under it and deletes it at its end.
const (
	envEndpoint  = "SHELLBOX_S3_ENDPOINT"
	envAccessKey = "SHELLBOX_S3_ACCESS_KEY"
	envSecretKey = "SHELLBOX_S3_SECRET_KEY"
	envBucket    = "SHELLBOX_S3_BUCKET"
)

// s3Server is a test's S3 server and a bucket of its own on it.
type s3Server struct {
	opts   snapshot.S3Options // Bucket set, Prefix not
	client *minio.Client
}

// newS3Server connects to the server of the environment and makes a bucket
// for t, removed with all it holds when t ends. Without a server the test is
// skipped with the reason, and fails under CI=true.
func newS3Server(t testing.TB) *s3Server {
	endpoint := os.Getenv(envEndpoint)
	if endpoint == "" {
		const reason = envEndpoint + " is not set: no S3 server to test against (bash .ci/setup-s3.sh starts one; then source /etc/shellbox-s3/env)"
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true, so not skipping: %s", reason)
		}
		t.Skip(reason)
	}
	prefix := os.Getenv(envBucket)
	if prefix == "" {
		prefix = "shellbox-test"
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(os.Getenv(envAccessKey), os.Getenv(envSecretKey), ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	removeStaleBuckets(t, client, prefix)
	var r [4]byte
	_, _ = rand.Read(r[:])
	bucket := fmt.Sprintf("%s-%d-%s", prefix, time.Now().Unix(), hex.EncodeToString(r[:]))
	if err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("making bucket %s at %s: %v", bucket, endpoint, err)
	}
	t.Cleanup(func() { removeBucket(t, client, bucket) })
	return &s3Server{
		opts: snapshot.S3Options{
			Endpoint: endpoint, Insecure: true, Bucket: bucket,
			AccessKey: os.Getenv(envAccessKey), SecretKey: os.Getenv(envSecretKey),
		},
		client: client,
	}
}

// removeBucket empties bucket and removes it.
func removeBucket(t testing.TB, client *minio.Client, bucket string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for up := range client.ListIncompleteUploads(ctx, bucket, "", true) {
		if up.Err == nil {
			_ = client.RemoveIncompleteUpload(ctx, bucket, up.Key)
		}
	}
	objects := client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true})
	for rerr := range client.RemoveObjects(ctx, bucket, objects, minio.RemoveObjectsOptions{}) {
		t.Errorf("removing %s from bucket %s: %v", rerr.ObjectName, bucket, rerr.Err)
	}
	if err := client.RemoveBucket(ctx, bucket); err != nil {
		t.Errorf("removing bucket %s: %v", bucket, err)
	}
}

// removeStaleBuckets removes the buckets of earlier runs that did not
// clean up (killed, crashed): the prefix's, made over an hour ago.
func removeStaleBuckets(t testing.TB, client *minio.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	buckets, err := client.ListBuckets(ctx)
	if err != nil {
		t.Fatalf("listing buckets: %v", err)
	}
	for _, b := range buckets {
		if strings.HasPrefix(b.Name, prefix+"-") && b.CreationDate.Before(time.Now().Add(-time.Hour)) {
			t.Logf("removing bucket %s, left by an earlier run (made %v)", b.Name, b.CreationDate)
			removeBucket(t, client, b.Name)
		}
	}
}

// store returns an S3 store on the server's bucket under a prefix of its
// own, with part size part (0: the default).
func (srv *s3Server) store(t testing.TB, prefix string, part int64) *snapshot.S3 {
	opts := srv.opts
	opts.Prefix, opts.PartSize = prefix, part
	s, err := snapshot.NewS3(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rewrite replaces an object's bytes with f(bytes), behind the store's back.
func (srv *s3Server) rewrite(t *testing.T, key string, f func([]byte) []byte) {
	ctx := context.Background()
	obj, err := srv.client.GetObject(ctx, srv.opts.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	b = f(b)
	if _, err := srv.client.PutObject(ctx, srv.opts.Bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("rewriting %s: %v", key, err)
	}
}

func s3Harness(srv *s3Server) snapshottest.Harness {
	n := 0
	return snapshottest.Harness{
		New: func(t *testing.T) snapshot.Store {
			n++
			return srv.store(t, fmt.Sprintf("case%d/", n), 0) // the default part size, as in production
		},
		Corrupt: func(t *testing.T, s snapshot.Store, info snapshot.Info) {
			srv.rewrite(t, snapshot.S3DataKey(s.(*snapshot.S3), info), func(b []byte) []byte {
				b[len(b)/2] ^= 0x40
				return b
			})
		},
		Truncate: func(t *testing.T, s snapshot.Store, info snapshot.Info, n int64) {
			srv.rewrite(t, snapshot.S3DataKey(s.(*snapshot.S3), info), func(b []byte) []byte { return b[:n] })
		},
		// A crash midway leaves an unfinished multipart upload, or a data
		// object whose commit was never written: plant one of each.
		Plant: func(t *testing.T, s snapshot.Store, tenant, session string) int {
			ctx := context.Background()
			core := minio.Core{Client: srv.client}
			key := snapshot.S3NewDataKey(s.(*snapshot.S3), tenant, session)
			id, err := core.NewMultipartUpload(ctx, srv.opts.Bucket, key, minio.PutObjectOptions{})
			if err != nil {
				t.Fatalf("starting an upload of %s: %v", key, err)
			}
			part := make([]byte, 1024)
			if _, err := core.PutObjectPart(ctx, srv.opts.Bucket, key, id, 1, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{}); err != nil {
				t.Fatalf("uploading a part of %s: %v", key, err)
			}
			key = snapshot.S3NewDataKey(s.(*snapshot.S3), tenant, session)
			if _, err := srv.client.PutObject(ctx, srv.opts.Bucket, key, bytes.NewReader(part), int64(len(part)), minio.PutObjectOptions{}); err != nil {
				t.Fatalf("writing %s: %v", key, err)
			}
			return 2
		},
		PartSize: snapshot.DefaultPartSize,
	}
}

func TestS3(t *testing.T) {
	srv := newS3Server(t)
	snapshottest.Run(t, s3Harness(srv))
}

// TestS3Options: the constructor refuses what cannot work, clearly.
func TestS3Options(t *testing.T) {
	srv := newS3Server(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		edit func(*snapshot.S3Options)
		want string
	}{
		{"no bucket", func(o *snapshot.S3Options) { o.Bucket = "" }, "no bucket"},
		{"scheme", func(o *snapshot.S3Options) { o.Endpoint = "http://" + o.Endpoint }, "no scheme"},
		{"prefix", func(o *snapshot.S3Options) { o.Prefix = "x" }, "must end with '/'"},
		{"part size", func(o *snapshot.S3Options) { o.PartSize = 1 << 20 }, "at least"},
		{"missing bucket", func(o *snapshot.S3Options) { o.Bucket += "-missing" }, "does not exist"},
		{"wrong key", func(o *snapshot.S3Options) { o.SecretKey += "x" }, "refuses shellbox's credentials"},
	} {
		opts := srv.opts
		c.edit(&opts)
		if _, err := snapshot.NewS3(ctx, opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

func BenchmarkS3(b *testing.B) {
	srv := newS3Server(b)
	snapshottest.Bench(b, srv.store(b, "bench/", 0), 64<<20)
}
