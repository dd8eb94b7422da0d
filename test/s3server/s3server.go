// Package s3server runs an S3-compatible endpoint on 127.0.0.1 for tests:
// gofakes3 (an S3 server library) with its on-disk backend, behind a check
// of each request's AWS Signature V4 against one access key, so that wrong
// credentials are refused as a real store refuses them
// (InvalidAccessKeyId, SignatureDoesNotMatch). The check covers the
// signed headers, the query and the payload: its SHA-256, or the
// signature of each chunk of a streamed upload (handed on decoded).
package s3server

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"encoding/xml"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3afero"
	"github.com/spf13/afero"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// Server is one S3 endpoint.
type Server struct {
	// URL is the endpoint, http://127.0.0.1:PORT.
	URL string
	// AccessKeyID and SecretAccessKey are the one key it accepts.
	AccessKeyID, SecretAccessKey string
	// Region is the region requests must be signed for.
	Region string
	// Dir holds the objects on disk.
	Dir string
	// CACert is the PEM certificate that signs an https server's.
	CACert []byte
	srv    *httptest.Server
}

// Start serves an S3 endpoint over http with the given buckets until the
// test ends.
func Start(t testing.TB, buckets ...string) *Server { return start(t, false, buckets) }

// StartTLS serves it over https, with a certificate of its own CA (CACert).
func StartTLS(t testing.TB, buckets ...string) *Server { return start(t, true, buckets) }

func start(t testing.TB, tls bool, buckets []string) *Server {
	t.Helper()
	s := &Server{AccessKeyID: "AKIAFKETEST", SecretAccessKey: "fke-test-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36), Region: "us-east-1", Dir: t.TempDir()}
	backend, err := s3afero.MultiBucket(afero.NewBasePathFs(afero.NewOsFs(), s.Dir))
	if err != nil {
		t.Fatalf("S3 backend: %v", err)
	}
	for _, b := range buckets {
		if err := backend.CreateBucket(b); err != nil {
			t.Fatalf("creating bucket %s: %v", b, err)
		}
	}
	fake := gofakes3.New(backend, gofakes3.WithAutoBucket(false))
	s.srv = httptest.NewUnstartedServer(s.authenticate(fake.Server()))
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes a test refuses on purpose
	if tls {
		s.srv.StartTLS()
		s.CACert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	} else {
		s.srv.Start()
	}
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// Secret is the Secret namespace/name that a Cluster's
// spec.backup.s3.secretRef names, with secretAccessKey as its secret key
// (the server's, or a wrong one).
func (s *Server) Secret(namespace, name, secretAccessKey string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Data:       map[string][]byte{fkev1.S3AccessKeyIDKey: []byte(s.AccessKeyID), fkev1.S3SecretAccessKeyKey: []byte(secretAccessKey)},
	}
}

// Store is the spec.backup.s3 of bucket on this server, with the
// credentials in Secret secretName.
func (s *Server) Store(bucket, secretName string) *fkev1.S3Store {
	return &fkev1.S3Store{Endpoint: s.URL, Bucket: bucket, SecretRef: fkev1.LocalObjectReference{Name: secretName}}
}

// authenticate passes on the requests signed with the server's key.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code, msg := s.check(r, time.Now()); code != "" {
			writeError(w, r, code, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

const algorithm = "AWS4-HMAC-SHA256"

// check returns the S3 error code and message that refuse r, or "".
func (s *Server) check(r *http.Request, now time.Time) (code, msg string) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "AccessDenied", "anonymous requests are refused"
	}
	rest, ok := strings.CutPrefix(auth, algorithm+" ")
	if !ok {
		return "AccessDenied", "only " + algorithm + " (Signature V4) is accepted"
	}
	fields := map[string]string{}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[3] != "s3" || scope[4] != "aws4_request" {
		return "AuthorizationHeaderMalformed", "malformed Credential " + fields["Credential"]
	}
	if scope[0] != s.AccessKeyID {
		return "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
	}
	if scope[2] != s.Region {
		return "AuthorizationHeaderMalformed", fmt.Sprintf("the region %q is wrong; expecting %q", scope[2], s.Region)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	at, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil || !strings.HasPrefix(amzDate, scope[1]) {
		return "AccessDenied", "X-Amz-Date missing or not the credential's date"
	}
	if d := now.Sub(at); d > 15*time.Minute || d < -15*time.Minute {
		return "RequestTimeTooSkewed", "The difference between the request time and the current time is too large."
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		return "InvalidRequest", "missing X-Amz-Content-Sha256"
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	canonical := strings.Join([]string{
		r.Method, encode(r.URL.Path, false), canonicalQuery(r.URL.Query()),
		canonicalHeaders(r, signed), strings.Join(signed, ";"), payload,
	}, "\n")
	sum := sha256.Sum256([]byte(canonical))
	toSign := strings.Join([]string{algorithm, amzDate, strings.Join(scope[1:], "/"), hex.EncodeToString(sum[:])}, "\n")
	key := []byte("AWS4" + s.SecretAccessKey)
	for _, part := range scope[1:] {
		key = mac(key, part)
	}
	want := hex.EncodeToString(mac(key, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method."
	}
	return checkPayload(r, payload, key, amzDate, strings.Join(scope[1:], "/"), want)
}

// checkPayload reads r's body and checks it against the payload hash the
// signature covers: a SHA-256, or the chunk signatures of a streamed
// upload (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, whose chain starts at the
// request's signature seed). It leaves the plain payload as r's body.
func checkPayload(r *http.Request, payload string, key []byte, amzDate, scope, seed string) (code, msg string) {
	if payload == "UNSIGNED-PAYLOAD" || r.Body == nil || r.Body == http.NoBody {
		return "", ""
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return "IncompleteBody", err.Error()
	}
	switch payload {
	case "STREAMING-AWS4-HMAC-SHA256-PAYLOAD":
		var plain []byte
		prev := seed
		emptySum := sha256.Sum256(nil)
		for {
			line, rest, ok := bytes.Cut(body, []byte("\r\n"))
			if !ok {
				return "IncompleteBody", "a chunk header without its end"
			}
			sizeHex, sig, _ := strings.Cut(string(line), ";chunk-signature=")
			size, err := strconv.ParseInt(sizeHex, 16, 64)
			if err != nil || size < 0 || int64(len(rest)) < size+2 {
				return "IncompleteBody", "a malformed chunk"
			}
			chunk := rest[:size]
			sum := sha256.Sum256(chunk)
			toSign := strings.Join([]string{algorithm + "-PAYLOAD", amzDate, scope, prev, hex.EncodeToString(emptySum[:]), hex.EncodeToString(sum[:])}, "\n")
			if want := hex.EncodeToString(mac(key, toSign)); !hmac.Equal([]byte(want), []byte(sig)) {
				return "SignatureDoesNotMatch", "a chunk's signature does not match"
			}
			plain, prev, body = append(plain, chunk...), sig, rest[size+2:]
			if size == 0 {
				break
			}
		}
		body = plain
		sum := sha256.Sum256(body)
		// What the server behind sees: a plain, hashed payload.
		r.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
		r.Header.Del("X-Amz-Decoded-Content-Length")
		r.Header.Del("Content-Encoding")
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		r.ContentLength = int64(len(body))
	default:
		if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != payload {
			return "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed."
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return "", ""
}

func mac(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// encode escapes s as Signature V4 does: every byte but the unreserved
// characters (and "/" in a path).
func encode(s string, slash bool) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~', c == '/' && !slash:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func canonicalQuery(q url.Values) string {
	var parts []string
	for k, vs := range q {
		if k == "X-Amz-Signature" {
			continue
		}
		for _, v := range vs {
			parts = append(parts, encode(k, true)+"="+encode(v, true))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "&")
}

func canonicalHeaders(r *http.Request, signed []string) string {
	var b strings.Builder
	for _, name := range signed {
		var v string
		switch name {
		case "host":
			v = r.Host
		case "content-length":
			v = r.Header.Get("Content-Length")
			if v == "" && r.ContentLength >= 0 {
				v = strconv.FormatInt(r.ContentLength, 10)
			}
		case "transfer-encoding":
			v = strings.Join(r.TransferEncoding, ",")
		default:
			var vals []string
			for _, x := range r.Header.Values(name) {
				vals = append(vals, strings.Join(strings.Fields(x), " "))
			}
			v = strings.Join(vals, ",")
		}
		b.WriteString(name + ":" + v + "\n")
	}
	return b.String()
}

func writeError(w http.ResponseWriter, r *http.Request, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusForbidden)
	if r.Method == http.MethodHead {
		return
	}
	body := struct {
		XMLName  xml.Name `xml:"Error"`
		Code     string
		Message  string
		Resource string
	}{Code: code, Message: msg, Resource: r.URL.Path}
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(body)
}
