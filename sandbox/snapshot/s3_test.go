package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/shellbox/shellbox/errdefs"
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

// recordGets counts the GETs of records an S3 store sends.
type recordGets struct {
	n  atomic.Int32
	rt http.RoundTripper
}

func (c *recordGets) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/record") {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// TestS3RecordsIndex: a listing of records reads again only those that
// changed since the last (by the ETags the listing carries): a metrics
// scrape over many suspended sessions is one listing, not a GET each,
// and still sees every change another process made.
func TestS3RecordsIndex(t *testing.T) {
	srv := newS3Server(t)
	ctx := t.Context()
	gets := &recordGets{rt: http.DefaultTransport}
	opts := srv.opts
	opts.Prefix, opts.Transport = "idx/", gets
	reader, err := snapshot.NewS3(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	writer := srv.store(t, "idx/", 0) // another process
	for _, k := range []string{"t1/s0", "t1/s1", "t1/s2", "t1/s3", "t1/s4", "t2/s0"} {
		tenant, session, _ := strings.Cut(k, "/")
		if err := writer.SetRecord(ctx, tenant, session, []byte(`{"state":"suspended","of":"`+k+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	records := func(tenant string, want int) map[string]string {
		t.Helper()
		recs, err := reader.Records(ctx, tenant)
		if err != nil || len(recs) != want {
			t.Fatalf("Records(%q): %d records, %v; want %d", tenant, len(recs), err, want)
		}
		m := map[string]string{}
		for _, r := range recs {
			m[r.Tenant+"/"+r.Session] = string(r.Data)
		}
		return m
	}
	reads := func(what string, want int32) {
		t.Helper()
		if n := gets.n.Swap(0); n != want {
			t.Fatalf("%s: %d records read, want %d", what, n, want)
		}
	}
	records("", 6)
	reads("the first listing", 6)
	records("", 6)
	reads("a listing with nothing changed", 0)
	records("t1", 5)
	reads("a tenant's listing with nothing changed", 0)

	if err := writer.SetRecord(ctx, "t1", "s2", []byte(`{"state":"running"}`)); err != nil {
		t.Fatal(err)
	}
	if m := records("", 6); m["t1/s2"] != `{"state":"running"}` {
		t.Fatalf("after another process changed t1/s2, Records has %q", m["t1/s2"])
	}
	reads("a listing after one record changed", 1)

	if err := writer.DeleteSession(ctx, "t1", "s3"); err != nil {
		t.Fatal(err)
	}
	if m := records("", 5); m["t1/s3"] != "" {
		t.Fatalf("a deleted session's record is listed: %q", m["t1/s3"])
	}
	reads("a listing after a deletion", 0)
	if n := snapshot.S3IndexedRecords(reader); n != 5 {
		t.Fatalf("the index holds %d records, want the 5 that remain", n)
	}
}

// ignoreConditions makes a store seem to ignore conditional PUTs: a 412
// comes back as 200.
type ignoreConditions struct{ rt http.RoundTripper }

func (c ignoreConditions) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err == nil && r.Method == http.MethodPut && resp.StatusCode == http.StatusPreconditionFailed {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resp.StatusCode, resp.Status = http.StatusOK, "200 OK"
		resp.Body = io.NopCloser(strings.NewReader(""))
		resp.ContentLength = 0
		resp.Header.Del("Content-Type")
	}
	return resp, err
}

// TestS3RefusesStoreWithoutConditions: a store that ignores If-None-Match
// is refused at NewS3, saying why, rather than letting two servers both
// win a claim later.
func TestS3RefusesStoreWithoutConditions(t *testing.T) {
	srv := newS3Server(t)
	opts := srv.opts
	opts.Transport = ignoreConditions{rt: http.DefaultTransport}
	_, err := snapshot.NewS3(t.Context(), opts)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "ignores If-None-Match") {
		t.Fatalf("NewS3 on a store that ignores conditional PUTs: %v; want ErrUnavailable saying so", err)
	}
	// The probe leaves nothing behind.
	for oi := range srv.client.ListObjects(t.Context(), opts.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		t.Errorf("left in the bucket: %s (%v)", oi.Key, oi.Err)
	}
}
