package snapshottest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/shellbox/shellbox/sandbox/snapshot"
)

// The S3 server the tests use: .ci/setup-s3.sh starts SeaweedFS and writes
// these to /etc/shellbox-s3/env. SHELLBOX_S3_BUCKET is a prefix: each test
// makes a bucket of its own under it and deletes it at its end.
const (
	EnvEndpoint  = "SHELLBOX_S3_ENDPOINT"
	EnvAccessKey = "SHELLBOX_S3_ACCESS_KEY"
	EnvSecretKey = "SHELLBOX_S3_SECRET_KEY"
	EnvBucket    = "SHELLBOX_S3_BUCKET"
)

// S3Bucket connects to the S3 server of the environment and makes a bucket
// for t, removed with all it holds when t ends. Without a server the test is
// skipped with the reason, and fails under CI=true.
func S3Bucket(t testing.TB) (snapshot.S3Options, *minio.Client) {
	endpoint := os.Getenv(EnvEndpoint)
	if endpoint == "" {
		const reason = EnvEndpoint + " is not set: no S3 server to test against (bash .ci/setup-s3.sh starts one; then source /etc/shellbox-s3/env)"
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true, so not skipping: %s", reason)
		}
		t.Skip(reason)
	}
	prefix := os.Getenv(EnvBucket)
	if prefix == "" {
		prefix = "shellbox-test"
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(os.Getenv(EnvAccessKey), os.Getenv(EnvSecretKey), ""),
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
	return snapshot.S3Options{
		Endpoint: endpoint, Insecure: true, Bucket: bucket,
		AccessKey: os.Getenv(EnvAccessKey), SecretKey: os.Getenv(EnvSecretKey),
	}, client
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
