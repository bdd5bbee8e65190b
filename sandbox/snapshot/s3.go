package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/shellbox/shellbox/errdefs"
)

// S3Options configures an S3 store.
type S3Options struct {
	// Endpoint is the S3 API's host[:port], without a scheme (AWS:
	// s3.<region>.amazonaws.com; SeaweedFS: host:8333).
	Endpoint string
	// Insecure speaks plain HTTP instead of HTTPS (a server on loopback).
	Insecure bool
	// AccessKey, SecretKey (and SessionToken for temporary credentials).
	AccessKey, SecretKey, SessionToken string
	// Region, if the server wants one ("" asks the server).
	Region string
	// Bucket holds the snapshots; it must exist (the store never makes or
	// deletes buckets).
	Bucket string
	// Prefix is put before every key ("shellbox/", say), so the bucket can
	// hold other things; "" for none. It must end with '/' if not empty.
	Prefix string
	// PartSize is the size of a multipart upload's part, and what one Put
	// holds in memory: the stream is read one part at a time, each part
	// uploaded before the next is read. Default 16 MiB; at least 5 MiB
	// (S3's minimum). A snapshot can be at most 10,000 parts (156 GiB at
	// 16 MiB).
	PartSize int64
	// Transport, if set, is the HTTP transport (tests, proxies).
	Transport http.RoundTripper
}

// DefaultPartSize is S3Options.PartSize's default.
const DefaultPartSize = 16 << 20

// minPartSize is S3's smallest part but the last.
const minPartSize = 5 << 20

// S3 is a Store in a bucket of any S3-compatible object store (AWS S3, GCS,
// Ceph RGW, SeaweedFS, MinIO), through the minio-go client:
//
//	<Prefix><tenant>/<session>/data/<id>       the stream
//	<Prefix><tenant>/<session>/snapshots/<id>  the commit: an empty object
//	                                           whose metadata holds the
//	                                           stream's size and sha256
//	<Prefix><tenant>/<session>/record          the session's record
//
// Put uploads the stream to its data key as a multipart upload (one part in
// memory at a time, PartSize), which S3 makes visible only when complete;
// then it writes the commit object. A snapshot exists when its commit
// object does: an upload cut short leaves an unfinished multipart upload,
// and a crash between the two writes a data object with no commit, both
// invisible to List and Get and removed by Put's own cleanup or by Sweep.
// No object is ever overwritten (ids are new), so no reader sees one change
// under it, and the store needs no server-side copy. Get reads the commit's
// metadata, then verifies the data object's bytes against it.
type S3 struct {
	client *minio.Client
	bucket string
	prefix string
	part   uint64
	// index spares Records a read of every record (recordIndex).
	index recordIndex
}

var _ Store = (*S3)(nil)

// The commit object's user metadata (x-amz-meta-*). minio-go returns the
// keys in canonical MIME form.
const (
	metaSize   = "Shellbox-Size"
	metaSHA256 = "Shellbox-Sha256"
)

// NewS3 returns a store on opts.Bucket, after checking under ctx that the
// bucket answers with these credentials and honours conditional writes
// (probeConditional).
func NewS3(ctx context.Context, opts S3Options) (*S3, error) {
	switch {
	case opts.Endpoint == "":
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "snapshot s3: no endpoint")
	case strings.Contains(opts.Endpoint, "://"):
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "snapshot s3: endpoint %q: want host[:port], no scheme (Insecure for plain HTTP)", opts.Endpoint)
	case opts.Bucket == "":
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "snapshot s3: no bucket")
	case opts.Prefix != "" && !strings.HasSuffix(opts.Prefix, "/"):
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "snapshot s3: prefix %q: must end with '/'", opts.Prefix)
	case opts.PartSize != 0 && opts.PartSize < minPartSize:
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "snapshot s3: part size %d: at least %d (5 MiB)", opts.PartSize, minPartSize)
	}
	part := opts.PartSize
	if part == 0 {
		part = DefaultPartSize
	}
	client, err := minio.New(opts.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(opts.AccessKey, opts.SecretKey, opts.SessionToken),
		Secure:    !opts.Insecure,
		Region:    opts.Region,
		Transport: opts.Transport,
	})
	if err != nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "snapshot s3: %w", err)
	}
	ok, err := client.BucketExists(ctx, opts.Bucket)
	if err != nil {
		return nil, fmt.Errorf("snapshot s3: bucket %s at %s: %w", opts.Bucket, opts.Endpoint, s3Err(err))
	}
	if !ok {
		return nil, errdefs.Errorf(errdefs.ErrUnavailable, "snapshot s3: bucket %s at %s does not exist; create it, or name another", opts.Bucket, opts.Endpoint)
	}
	s := &S3{client: client, bucket: opts.Bucket, prefix: opts.Prefix, part: uint64(part)}
	if err := s.probeConditional(ctx); err != nil {
		return nil, fmt.Errorf("snapshot s3: bucket %s at %s: %w", opts.Bucket, opts.Endpoint, err)
	}
	return s, nil
}

// probeConditional checks that the store honours a conditional PUT, which
// SwapRecord's promise rests on: a store that ignored If-None-Match would
// let two servers claim one session's resume and restore it twice, with
// nothing said. It writes a probe object under the prefix (a name no
// tenant's can be: it starts with a dot) with If-None-Match: *, writes it
// again the same way, which must be refused with 412, and removes it.
func (s *S3) probeConditional(ctx context.Context) error {
	key := s.prefix + ".conditional-probe-" + newToken()
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	defer s.client.RemoveObject(cctx, s.bucket, key, minio.RemoveObjectOptions{})
	put := func() error {
		opts := minio.PutObjectOptions{ContentType: "text/plain"}
		opts.SetMatchETagExcept("*")
		_, err := s.client.PutObject(ctx, s.bucket, key, strings.NewReader("probe"), 5, opts)
		return err
	}
	if err := put(); err != nil {
		return fmt.Errorf("a conditional PUT (If-None-Match: *) of a new object failed: %w", s3Err(err))
	}
	err := put()
	if err == nil {
		return errdefs.Errorf(errdefs.ErrUnavailable, "the store ignores If-None-Match on PUT: it overwrote an object a conditional write had to leave alone, so two servers could both resume one suspended session; use a store that honours conditional writes (AWS S3 and SeaweedFS do)")
	}
	if minio.ToErrorResponse(err).Code != minio.PreconditionFailed {
		return fmt.Errorf("a conditional PUT (If-None-Match: *) over an object: %w, want 412 Precondition Failed", s3Err(err))
	}
	return nil
}

// newToken returns 12 random bytes in hex.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

func (s *S3) sessionKey(tenant, session string) string {
	return s.prefix + tenant + "/" + session + "/"
}
func (s *S3) dataKey(tenant, session, id string) string {
	return s.sessionKey(tenant, session) + "data/" + id
}
func (s *S3) commitKey(tenant, session, id string) string {
	return s.sessionKey(tenant, session) + "snapshots/" + id
}

// Put implements Store.
func (s *S3) Put(ctx context.Context, tenant, session string, r io.Reader) (Info, error) {
	if err := checkSession(tenant, session); err != nil {
		return Info{}, err
	}
	info := newInfo(tenant, session)
	fail := func(err error) (Info, error) {
		return Info{}, fmt.Errorf("snapshot %s: put: %w", name(tenant, session, info.ID), err)
	}
	data := s.dataKey(tenant, session, info.ID)
	pr := newPutReader(ctx, r)
	// Size -1: a multipart upload whatever the length (a stream shorter than
	// a part is one part), reading one PartSize buffer at a time, in turn.
	up, err := s.client.PutObject(ctx, s.bucket, data, pr, -1, minio.PutObjectOptions{
		PartSize:    s.part,
		ContentType: "application/octet-stream",
	})
	if err == nil && up.Size != pr.n {
		err = fmt.Errorf("the store took %d bytes of %d", up.Size, pr.n)
	}
	if err != nil {
		s.removeData(ctx, data)
		return fail(pr.failure(s3Err(err)))
	}
	if err := ctx.Err(); err != nil {
		s.removeData(ctx, data)
		return fail(err)
	}
	info.Size, info.SHA256 = pr.n, pr.sum()
	_, err = s.client.PutObject(ctx, s.bucket, s.commitKey(tenant, session, info.ID), bytes.NewReader(nil), 0, minio.PutObjectOptions{
		UserMetadata: map[string]string{metaSize: strconv.FormatInt(info.Size, 10), metaSHA256: info.SHA256},
	})
	if err != nil {
		// The commit may have landed and only its answer been lost: then the
		// snapshot stands whole, but Put reports a failure, so remove both.
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		_ = s.client.RemoveObject(cctx, s.bucket, s.commitKey(tenant, session, info.ID), minio.RemoveObjectOptions{})
		s.removeData(ctx, data)
		return fail(s3Err(err))
	}
	return info, nil
}

// removeData removes a failed Put's data object and any unfinished upload
// of it, under a context of its own (ctx's values only). What it cannot
// remove, Sweep will.
func (s *S3) removeData(ctx context.Context, key string) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	_ = s.client.RemoveIncompleteUpload(cctx, s.bucket, key)
	_ = s.client.RemoveObject(cctx, s.bucket, key, minio.RemoveObjectOptions{})
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, tenant, session, id string) (io.ReadCloser, Info, error) {
	created, err := checkSnapshot(tenant, session, id)
	if err != nil {
		return nil, Info{}, err
	}
	info, err := s.stat(ctx, tenant, session, id, created)
	if err != nil {
		return nil, Info{}, fmt.Errorf("snapshot %s: get: %w", name(tenant, session, id), err)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, s.dataKey(tenant, session, id), minio.GetObjectOptions{})
	if err != nil {
		return nil, Info{}, fmt.Errorf("snapshot %s: get: %w", name(tenant, session, id), s3Err(err))
	}
	// GetObject is lazy: a missing data object shows at the first Read.
	return newVerifier(ctx, obj, info, s3DataErr), info, nil
}

// stat reads a commit object's record.
func (s *S3) stat(ctx context.Context, tenant, session, id string, created time.Time) (Info, error) {
	oi, err := s.client.StatObject(ctx, s.bucket, s.commitKey(tenant, session, id), minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s3Err(err)
	}
	info := Info{Tenant: tenant, Session: session, ID: id, Created: created, SHA256: oi.UserMetadata[metaSHA256]}
	info.Size, err = strconv.ParseInt(oi.UserMetadata[metaSize], 10, 64)
	if err != nil || info.Size < 0 || len(info.SHA256) != 64 {
		return Info{}, fmt.Errorf("%w: the commit object has no valid %s and %s metadata", ErrCorrupt, metaSize, metaSHA256)
	}
	return info, nil
}

// List implements Store: the commit objects, each stat'ed for its record.
func (s *S3) List(ctx context.Context, tenant, session string) ([]Info, error) {
	if err := checkSession(tenant, session); err != nil {
		return nil, err
	}
	fail := func(err error) ([]Info, error) {
		return nil, fmt.Errorf("snapshot %s/%s: list: %w", tenant, session, err)
	}
	prefix := s.commitKey(tenant, session, "")
	infos := []Info{}
	for oi := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if oi.Err != nil {
			return fail(s3Err(oi.Err))
		}
		id := strings.TrimPrefix(oi.Key, prefix)
		created, err := parseID(id)
		if err != nil {
			continue // not the store's
		}
		info, err := s.stat(ctx, tenant, session, id, created)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue // deleted meanwhile
		}
		if errors.Is(err, ErrCorrupt) {
			// Listed with what is known, so the caller sees it and moves
			// on to the one before; Get refuses it.
			info = Info{Tenant: tenant, Session: session, ID: id, Created: created}
		} else if err != nil {
			return fail(err)
		}
		infos = append(infos, info)
	}
	slices.SortFunc(infos, newest)
	return infos, nil
}

// Delete implements Store: the commit first, so a failure between the two
// leaves a data object with no commit (Sweep's), never a listed snapshot
// without data.
func (s *S3) Delete(ctx context.Context, tenant, session, id string) error {
	if _, err := checkSnapshot(tenant, session, id); err != nil {
		return err
	}
	for _, key := range []string{s.commitKey(tenant, session, id), s.dataKey(tenant, session, id)} {
		// S3's DELETE of a missing key succeeds: idempotent as it stands.
		if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
			return fmt.Errorf("snapshot %s: delete: %w", name(tenant, session, id), s3Err(err))
		}
	}
	return nil
}

// DeleteSession implements Store: the commit objects first, then the rest
// of the session's keys, then its unfinished uploads.
func (s *S3) DeleteSession(ctx context.Context, tenant, session string) error {
	if err := checkSession(tenant, session); err != nil {
		return err
	}
	fail := func(err error) error {
		return fmt.Errorf("snapshot %s/%s: delete session: %w", tenant, session, err)
	}
	for _, prefix := range []string{s.commitKey(tenant, session, ""), s.sessionKey(tenant, session)} {
		if err := s.removePrefix(ctx, prefix); err != nil {
			return fail(err)
		}
	}
	for up := range s.client.ListIncompleteUploads(ctx, s.bucket, s.sessionKey(tenant, session), true) {
		if up.Err != nil {
			return fail(s3Err(up.Err))
		}
		if err := s.client.RemoveIncompleteUpload(ctx, s.bucket, up.Key); err != nil {
			return fail(s3Err(err))
		}
	}
	return nil
}

// removePrefix removes every object under prefix, in batches.
func (s *S3) removePrefix(ctx context.Context, prefix string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var listErr error
	objects := make(chan minio.ObjectInfo)
	go func() {
		defer close(objects)
		for oi := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if oi.Err != nil {
				listErr = oi.Err
				return
			}
			select {
			case objects <- oi:
			case <-ctx.Done():
				return
			}
		}
	}()
	// Read every result: RemoveObjects ends when objects is closed, and the
	// lister closes it after ctx's end; the first error cancels both.
	var rmErr error
	for rerr := range s.client.RemoveObjects(ctx, s.bucket, objects, minio.RemoveObjectsOptions{}) {
		if rerr.Err != nil && rmErr == nil {
			rmErr = rerr.Err
			cancel()
		}
	}
	// The results are closed after objects is: the lister has returned.
	switch {
	case rmErr != nil:
		return s3Err(rmErr)
	case listErr != nil:
		return s3Err(listErr)
	}
	return ctx.Err()
}

// Sweep implements Store: data objects with no commit object, and
// unfinished multipart uploads, last written (or begun) before before.
func (s *S3) Sweep(ctx context.Context, before time.Time) ([]Leftover, error) {
	fail := func(swept []Leftover, err error) ([]Leftover, error) {
		return swept, fmt.Errorf("snapshot s3: sweep: %w", err)
	}
	// One listing: keys come in order, but a session's data/ sorts before
	// its snapshots/, so collect both first.
	commits := map[string]bool{}
	var stale []minio.ObjectInfo
	for oi := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, Recursive: true}) {
		if oi.Err != nil {
			return fail(nil, s3Err(oi.Err))
		}
		sess, kind, id, ok := s.splitKey(oi.Key)
		switch {
		case !ok:
		case kind == "snapshots":
			commits[sess+id] = true
		case kind == "data" && oi.LastModified.Before(before):
			stale = append(stale, oi)
		}
	}
	var swept []Leftover
	for _, oi := range stale {
		sess, _, id, _ := s.splitKey(oi.Key)
		if commits[sess+id] {
			continue
		}
		// Committed since the listing? Then it stays.
		if _, err := s.client.StatObject(ctx, s.bucket, sess+"snapshots/"+id, minio.StatObjectOptions{}); err == nil {
			continue
		} else if !errors.Is(s3Err(err), errdefs.ErrNotFound) {
			return fail(swept, s3Err(err))
		}
		if err := s.client.RemoveObject(ctx, s.bucket, oi.Key, minio.RemoveObjectOptions{}); err != nil {
			return fail(swept, s3Err(err))
		}
		swept = append(swept, Leftover{Name: oi.Key, Size: oi.Size, Modified: oi.LastModified})
	}
	for up := range s.client.ListIncompleteUploads(ctx, s.bucket, s.prefix, true) {
		if up.Err != nil {
			return fail(swept, s3Err(up.Err))
		}
		if _, _, _, ok := s.splitKey(up.Key); !ok || !up.Initiated.Before(before) {
			continue
		}
		if err := s.client.RemoveIncompleteUpload(ctx, s.bucket, up.Key); err != nil {
			return fail(swept, s3Err(err))
		}
		swept = append(swept, Leftover{Name: up.Key + " (upload " + up.UploadID + ")", Modified: up.Initiated})
	}
	return swept, nil
}

// recordKey is a session's record: one object, replaced whole by each
// SetRecord (S3 PUTs are atomic per object).
func (s *S3) recordKey(tenant, session string) string {
	return s.sessionKey(tenant, session) + "record"
}

// SetRecord implements Store.
func (s *S3) SetRecord(ctx context.Context, tenant, session string, data []byte) error {
	if err := checkRecord(tenant, session, data); err != nil {
		return err
	}
	_, err := s.client.PutObject(ctx, s.bucket, s.recordKey(tenant, session), bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/json"})
	if err != nil {
		return fmt.Errorf("snapshot %s/%s: set record: %w", tenant, session, s3Err(err))
	}
	return nil
}

// SwapRecord implements Store: a conditional PUT, If-Match the version
// (the record's ETag) or, for a session with no record, If-None-Match *.
// The server checks and writes in one step: AWS S3 (since 2024) and
// SeaweedFS (the filer evaluates the condition under its per-path lock:
// weed/server/filer_grpc_server_condition.go) answer 412 Precondition
// Failed, or 404 for an If-Match on a key that is gone, to the loser.
// A 412 may also answer a retry of this very PUT whose first answer was
// lost (the client retries on a timeout or a 5xx), and any other error
// may hide a write that landed: either way the record is read back, and
// data equal to what is stored is this call's write.
func (s *S3) SwapRecord(ctx context.Context, tenant, session, old string, data []byte) (string, error) {
	if err := checkRecord(tenant, session, data); err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("snapshot %s/%s: swap record: %w", tenant, session, err)
	}
	opts := minio.PutObjectOptions{ContentType: "application/json"}
	if old == "" {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(old)
	}
	key := s.recordKey(tenant, session)
	up, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), opts)
	if err == nil {
		return up.ETag, nil
	}
	cur, version, rerr := s.readRecord(ctx, key)
	if rerr == nil && bytes.Equal(cur, data) {
		return version, nil
	}
	switch minio.ToErrorResponse(err).Code {
	case minio.PreconditionFailed:
		return fail(fmt.Errorf("%w: not at version %s", ErrConflict, old))
	case "NoSuchKey":
		return fail(fmt.Errorf("%w: the record at version %s is gone", ErrConflict, old))
	}
	return fail(s3Err(err))
}

// Record implements Store.
func (s *S3) Record(ctx context.Context, tenant, session string) ([]byte, string, error) {
	if err := checkSession(tenant, session); err != nil {
		return nil, "", err
	}
	data, version, err := s.readRecord(ctx, s.recordKey(tenant, session))
	if err != nil {
		return nil, "", fmt.Errorf("snapshot %s/%s: record: %w", tenant, session, err)
	}
	return data, version, nil
}

// readRecord reads a record object, at most MaxRecord bytes of it, and its
// ETag, the version SwapRecord compares.
func (s *S3) readRecord(ctx context.Context, key string) ([]byte, string, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, "", s3Err(err)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, MaxRecord+1))
	if err != nil {
		err = s3Err(err)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, "", errdefs.Errorf(errdefs.ErrNotFound, "no record")
		}
		return nil, "", err
	}
	if len(data) > MaxRecord {
		return nil, "", errdefs.Errorf(errdefs.ErrUnavailable, "record %s: more than %d bytes: not one SetRecord wrote", key, MaxRecord)
	}
	// The answer's headers, read with the body: the ETag of these bytes.
	oi, err := obj.Stat()
	if err != nil {
		return nil, "", s3Err(err)
	}
	if oi.ETag == "" {
		return nil, "", errdefs.Errorf(errdefs.ErrUnavailable, "record %s: the store gave it no ETag", key)
	}
	return data, oi.ETag, nil
}

// Records implements Store: one listing of the records' keys, with their
// ETags, then a read of each record the index does not hold at that ETag.
func (s *S3) Records(ctx context.Context, tenant string) ([]Record, error) {
	fail := func(err error) ([]Record, error) {
		return nil, fmt.Errorf("snapshot s3: records: %w", err)
	}
	prefix := s.prefix
	if tenant != "" {
		if err := checkTenant(tenant); err != nil {
			return nil, err
		}
		prefix += tenant + "/"
	}
	type ref struct{ tenant, session, etag string }
	var refs []ref
	for oi := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if oi.Err != nil {
			return fail(s3Err(oi.Err))
		}
		rest, _ := strings.CutPrefix(oi.Key, s.prefix)
		parts := strings.Split(rest, "/")
		if len(parts) == 3 && parts[2] == "record" && checkSession(parts[0], parts[1]) == nil {
			refs = append(refs, ref{parts[0], parts[1], oi.ETag})
		}
	}
	out := []Record{}
	seen := make(map[string]bool, len(refs))
	for _, r := range refs {
		key := s.recordKey(r.tenant, r.session)
		seen[key] = true
		data, ok := s.index.get(key, r.etag)
		if !ok {
			var version string
			var err error
			data, version, err = s.readRecord(ctx, key)
			if errors.Is(err, errdefs.ErrNotFound) {
				continue
			}
			if err != nil {
				return fail(err)
			}
			s.index.put(key, version, data)
		}
		out = append(out, Record{Tenant: r.tenant, Session: r.session, Data: data})
	}
	s.index.keepOnly(prefix, seen)
	return out, nil
}

// recordIndex holds the records Records read, by key, with the ETag each
// had: an S3 listing carries every key's ETag, so a listing reads again
// only the records that changed since (a metrics scrape or a console
// refresh over thousands of suspended sessions is one listing, not a GET
// per session). An ETag changes with the content, so a record is never
// answered from the index after it changed, only after it did not. It is
// bounded by maxIndexBytes; past that, records are read as before.
type recordIndex struct {
	mu    sync.Mutex
	m     map[string]indexedRecord
	bytes int
}

type indexedRecord struct {
	etag string
	data []byte
}

// maxIndexBytes bounds the index: 16 MiB, some 16,000 records of 1 KiB.
const maxIndexBytes = 16 << 20

// get returns a copy of key's record if the index holds it at etag.
func (x *recordIndex) get(key, etag string) ([]byte, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	r, ok := x.m[key]
	if !ok || etag == "" || r.etag != etag {
		return nil, false
	}
	return bytes.Clone(r.data), true
}

// put keeps a copy of key's record at etag, if the bound allows.
func (x *recordIndex) put(key, etag string, data []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m == nil {
		x.m = map[string]indexedRecord{}
	}
	if old, ok := x.m[key]; ok {
		x.bytes -= len(old.data)
		delete(x.m, key)
	}
	if x.bytes+len(data) > maxIndexBytes {
		return
	}
	x.m[key] = indexedRecord{etag: etag, data: bytes.Clone(data)}
	x.bytes += len(data)
}

// keepOnly drops the records under prefix that a listing of it did not
// see (their sessions deleted).
func (x *recordIndex) keepOnly(prefix string, seen map[string]bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for key, r := range x.m {
		if strings.HasPrefix(key, prefix) && !seen[key] {
			x.bytes -= len(r.data)
			delete(x.m, key)
		}
	}
}

// splitKey reads one of the store's keys: its session's key prefix, its
// kind (data, snapshots) and its id; ok is false for any other key.
func (s *S3) splitKey(key string) (sess, kind, id string, ok bool) {
	rest, found := strings.CutPrefix(key, s.prefix)
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || checkSession(parts[0], parts[1]) != nil || (parts[2] != "data" && parts[2] != "snapshots") {
		return "", "", "", false
	}
	if _, err := parseID(parts[3]); err != nil {
		return "", "", "", false
	}
	return s.sessionKey(parts[0], parts[1]), parts[2], parts[3], true
}

// s3Err classifies an error of the S3 client: a missing key ErrNotFound; a
// full store ErrNoSpace; a missing bucket, refused credentials, a server
// error or no answer ErrUnavailable (the store's configuration or health,
// not the request's fault); a context's end as it is.
func s3Err(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "NoSuchKey", "NoSuchUpload":
		return errdefs.Errorf(errdefs.ErrNotFound, "%w", err)
	case "XMinioStorageFull", "QuotaExceeded", "XMinioAdminBucketQuotaExceeded":
		return errdefs.Errorf(errdefs.ErrNoSpace, "%w", err)
	case "NoSuchBucket":
		return errdefs.Errorf(errdefs.ErrUnavailable, "%w (the store's bucket is gone)", err)
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch":
		return errdefs.Errorf(errdefs.ErrUnavailable, "%w (the store refuses shellbox's credentials)", err)
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return errdefs.Errorf(errdefs.ErrUnavailable, "%w (the store does not answer)", err)
	}
	return errdefs.Errorf(errdefs.ErrUnavailable, "%w", err)
}

// s3DataErr classifies an error reading a committed snapshot's data: the
// object missing under its commit is a corrupt snapshot, not a missing one.
func s3DataErr(err error) error {
	err = s3Err(err)
	if errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("%w: its data object is missing: %w", ErrCorrupt, err)
	}
	return err
}
