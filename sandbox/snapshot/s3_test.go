package snapshot_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/sandbox/snapshot/snapshottest"
)

// s3Server is a test's S3 server and a bucket of its own on it.
type s3Server struct {
	opts   snapshot.S3Options // Bucket set, Prefix not
	client *minio.Client
}

// newS3Server is snapshottest.S3Bucket's bucket.
func newS3Server(t testing.TB) *s3Server {
	opts, client := snapshottest.S3Bucket(t)
	return &s3Server{opts: opts, client: client}
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
	prefix := map[snapshot.Store]string{}
	return snapshottest.Harness{
		New: func(t *testing.T) snapshot.Store {
			n++
			s := srv.store(t, fmt.Sprintf("case%d/", n), 0) // the default part size, as in production
			prefix[s] = fmt.Sprintf("case%d/", n)
			return s
		},
		Reopen: func(t *testing.T, s snapshot.Store) snapshot.Store {
			return srv.store(t, prefix[s], 0)
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
