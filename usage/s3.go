package usage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/errdefs"
)

// S3Options configures an S3 store (the snapshot store's bucket and
// credentials serve: snapshots.s3).
type S3Options struct {
	// Endpoint is host[:port], no scheme; Insecure speaks plain HTTP.
	Endpoint string
	Insecure bool
	// AccessKey, SecretKey, Region: as the snapshot store's.
	AccessKey, SecretKey, Region string
	// Bucket must exist; Prefix ("" or ending in '/') is put before
	// every key: the usage objects are under <Prefix>usage/.
	Bucket, Prefix string
	// Writer names this process's objects; "" is a random id. Two
	// processes must never share one.
	Writer string
}

// S3 is a Store in a bucket of an S3-compatible object store, for the
// replicas of a fleet, which share no disk:
//
//	<Prefix>usage/<tenant>/<YYYY-MM-DD>/<writer>.jsonl
//
// one object per tenant, UTC day and writing process, one JSON bucket a
// line. S3 cannot append, so each Add rewrites the objects of the
// tenant-days it touches with every bucket this process wrote there,
// summed per session and hour: at most one line per session and hour, and
// a day's object is replaced whole (a PUT is atomic), so a reader sees the
// one before or the one after. A process keeps the tenant-days of today
// and yesterday in memory; an Add to an older one reads its object back
// first. A reader sums the objects of every writer of a day: a query of d
// days costs d listings and a GET per writer per day and tenant.
type S3 struct {
	client *minio.Client
	bucket string
	prefix string
	writer string

	mu   sync.Mutex
	days map[dayKey]map[bkey]*Bucket
}

type dayKey struct {
	tenant string
	day    time.Time
}

var _ Store = (*S3)(nil)

// maxObjectBytes bounds one usage object read back (a day of 10,000
// sessions' 24 hours is about 60 MiB).
const maxObjectBytes = 256 << 20

// NewS3 returns an S3 store, after checking that the bucket answers.
func NewS3(ctx context.Context, o S3Options) (*S3, error) {
	switch {
	case o.Endpoint == "" || o.Bucket == "":
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "usage s3: want an endpoint and a bucket")
	case o.Prefix != "" && !strings.HasSuffix(o.Prefix, "/"):
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "usage s3: prefix %q: must end with '/'", o.Prefix)
	}
	if o.Writer == "" {
		var b [8]byte
		rand.Read(b[:])
		o.Writer = hex.EncodeToString(b[:])
	}
	if !confine.ValidID(o.Writer) {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "usage s3: writer %q (want %s)", o.Writer, confine.IDRule)
	}
	client, err := minio.New(o.Endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""), Secure: !o.Insecure, Region: o.Region})
	if err != nil {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "usage s3: %w", err)
	}
	ok, err := client.BucketExists(ctx, o.Bucket)
	if err != nil {
		return nil, fmt.Errorf("usage s3: bucket %s at %s: %w", o.Bucket, o.Endpoint, err)
	}
	if !ok {
		return nil, errdefs.Errorf(errdefs.ErrUnavailable, "usage s3: bucket %s at %s does not exist", o.Bucket, o.Endpoint)
	}
	return &S3{client: client, bucket: o.Bucket, prefix: o.Prefix + "usage/", writer: o.Writer, days: map[dayKey]map[bkey]*Bucket{}}, nil
}

func (s *S3) dayPrefix(tenant string, day time.Time) string {
	return s.prefix + tenant + "/" + day.Format(dayLayout) + "/"
}

// Add implements Store. Adds are serialised: each rewrites whole objects.
func (s *S3) Add(ctx context.Context, buckets []Bucket) error {
	for _, b := range buckets {
		if err := checkNames(b.Tenant, b.Session); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	touched := map[dayKey]bool{}
	for _, b := range buckets {
		b.Hour = b.Hour.UTC().Truncate(time.Hour)
		dk := dayKey{b.Tenant, b.Hour.Truncate(24 * time.Hour)}
		held := s.days[dk]
		if held == nil {
			var err error
			if held, err = s.readOwn(ctx, dk); err != nil {
				return err
			}
			s.days[dk] = held
		}
		k := bkey{b.Tenant, b.Session, b.Hour}
		if p := held[k]; p != nil {
			p.Figures.add(b.Figures)
			p.Final = p.Final || b.Final
		} else {
			nb := b
			held[k] = &nb
		}
		touched[dk] = true
	}
	for dk := range touched {
		var buf bytes.Buffer
		for _, b := range s.days[dk] {
			line, err := json.Marshal(b)
			if err != nil {
				return err
			}
			buf.Write(append(line, '\n'))
		}
		key := s.dayPrefix(dk.tenant, dk.day) + s.writer + ".jsonl"
		if _, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(buf.Bytes()), int64(buf.Len()),
			minio.PutObjectOptions{ContentType: "application/x-ndjson"}); err != nil {
			// What was added is held: the next Add writes it.
			return fmt.Errorf("usage s3: put %s: %w", key, err)
		}
	}
	// Only today and yesterday stay in memory.
	yesterday := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	for dk := range s.days {
		if dk.day.Before(yesterday) {
			delete(s.days, dk)
		}
	}
	return nil
}

// readOwn reads back this writer's object of a tenant-day, if any.
func (s *S3) readOwn(ctx context.Context, dk dayKey) (map[bkey]*Bucket, error) {
	held := map[bkey]*Bucket{}
	err := s.readObject(ctx, s.dayPrefix(dk.tenant, dk.day)+s.writer+".jsonl", Filter{From: dk.day, To: dk.day.Add(24 * time.Hour)}, func(b Bucket) error {
		k := bkey{b.Tenant, b.Session, b.Hour.UTC()}
		if p := held[k]; p != nil {
			p.Figures.add(b.Figures)
		} else {
			held[k] = &b
		}
		return nil
	})
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return held, nil
	}
	return held, err
}

// readObject calls fn with each bucket of an object f selects; a line
// that does not parse is skipped.
func (s *S3) readObject(ctx context.Context, key string, f Filter, fn func(Bucket) error) error {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	if _, err := obj.Stat(); err != nil {
		return err
	}
	return scanBuckets(&limitedReader{r: obj, n: maxObjectBytes}, "s3 "+key, f, fn)
}

type limitedReader struct {
	r interface{ Read([]byte) (int, error) }
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("over %d bytes", maxObjectBytes)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// Query implements Store: every writer's objects of the days f spans.
func (s *S3) Query(ctx context.Context, f Filter, fn func(Bucket) error) error {
	if !f.To.After(f.From) {
		return nil
	}
	if f.To.Sub(f.From) > maxDays*24*time.Hour {
		return errdefs.Errorf(errdefs.ErrInvalid, "usage: a range of more than %d days", maxDays)
	}
	tenants := []string{f.Tenant}
	if f.Tenant == "" {
		tenants = tenants[:0]
		for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix}) {
			if o.Err != nil {
				return fmt.Errorf("usage s3: list %s: %w", s.prefix, o.Err)
			}
			if t := strings.TrimSuffix(strings.TrimPrefix(o.Key, s.prefix), "/"); confine.ValidID(t) {
				tenants = append(tenants, t)
			}
		}
	} else if err := checkNames(f.Tenant, "x"); err != nil {
		return err
	}
	for _, t := range tenants {
		for day := f.From.UTC().Truncate(24 * time.Hour); day.Before(f.To); day = day.Add(24 * time.Hour) {
			prefix := s.dayPrefix(t, day)
			for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix}) {
				if o.Err != nil {
					return fmt.Errorf("usage s3: list %s: %w", prefix, o.Err)
				}
				if !strings.HasSuffix(o.Key, ".jsonl") {
					continue
				}
				err := s.readObject(ctx, o.Key, f, fn)
				if minio.ToErrorResponse(err).Code == "NoSuchKey" {
					continue
				}
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}
