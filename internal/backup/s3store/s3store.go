// Package s3store is a backup.Store in a bucket of an S3-compatible object
// store (AWS S3, MinIO, Ceph RGW, ...), through minio-go with AWS
// Signature V4.
package s3store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"fke.dev/fke/internal/backup"
)

// Config says where the bucket is and how to reach it.
type Config struct {
	// Endpoint is the store's URL: http(s)://host[:port].
	Endpoint string
	Bucket   string
	// Region signs the requests; us-east-1 when empty.
	Region string
	// AccessKeyID and SecretAccessKey (and SessionToken, for temporary
	// credentials) authenticate the requests.
	AccessKeyID, SecretAccessKey, SessionToken string
	// CABundle is PEM certificates trusted besides the system's.
	CABundle []byte
	// InsecureSkipTLSVerify does not check the store's certificate.
	InsecureSkipTLSVerify bool
	// MaxRetries bounds the tries of one request (3 when 0): a store that
	// does not answer makes an upload fail in seconds, not minutes.
	MaxRetries int
}

// Store is a bucket of an S3-compatible store.
type Store struct {
	c        *minio.Client
	bucket   string
	endpoint string
}

var _ backup.Store = (*Store)(nil)

// New returns the Store of cfg. It checks cfg but does not reach the
// store.
func New(cfg Config) (*Store, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		return nil, fmt.Errorf("S3 endpoint %q: want http(s)://host[:port]", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("S3 store: no bucket")
	}
	if cfg.AccessKeyID == "" || cfg.SecretAccessKey == "" {
		return nil, errors.New("S3 store: no access key ID or secret access key")
	}
	secure := u.Scheme == "https"
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	if secure {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipTLSVerify}
		if len(cfg.CABundle) > 0 {
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(cfg.CABundle) {
				return nil, errors.New("S3 store: caBundle holds no PEM certificate")
			}
			tr.TLSClientConfig.RootCAs = pool
		}
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	retries := cfg.MaxRetries
	if retries == 0 {
		retries = 3
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken),
		Secure: secure, Transport: tr, Region: region, MaxRetries: retries,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 store at %s: %w", cfg.Endpoint, err)
	}
	return &Store{c: c, bucket: cfg.Bucket, endpoint: u.Scheme + "://" + u.Host}, nil
}

// String implements backup.Store.
func (s *Store) String() string { return "s3://" + s.bucket + " at " + s.endpoint }

// Put implements backup.Store (one PUT, or a multipart upload that the
// store completes only once every part is there).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	_, err := s.c.PutObject(ctx, s.bucket, key, r, size, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	return s.explain("uploading", key, err)
}

// Get implements backup.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := s.c.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.explain("downloading", key, err)
	}
	// The request goes out with the first read or Stat: ask now, so that
	// a missing object or a refusal is Get's error.
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		return nil, s.explain("downloading", key, err)
	}
	return obj, nil
}

// List implements backup.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var keys []string
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, s.explain("listing", prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys, nil
}

// Delete implements backup.Store (S3 answers a DELETE of a missing key
// with success).
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.explain("removing", key, s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}))
}

// explain wraps err of doing what to key with what a user needs to fix
// it; a missing object is backup.ErrNotFound.
func (s *Store) explain(what, key string, err error) error {
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("%s s3://%s/%s at %s", what, s.bucket, key, s.endpoint)
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "NoSuchKey":
		return fmt.Errorf("%s: %w", where, backup.ErrNotFound)
	case "NoSuchBucket":
		return fmt.Errorf("%s: bucket %s does not exist (fke does not create it): %w", where, s.bucket, err)
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken":
		return fmt.Errorf("%s: the store refused the credentials (%s; check the access key ID and secret access key): %w", where, resp.Code, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}
