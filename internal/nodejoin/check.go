package nodejoin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TokenProbe is one bootstrap token checked against an API server before
// a kubelet starts its TLS bootstrap with it: a kubelet whose token is
// refused retries quietly forever, so a join that cannot work must say so
// first.
type TokenProbe struct {
	// Server is the API server's URL, as the message names it.
	Server string
	// TokenID is the token's public part ("id" of "id.secret").
	TokenID string
	// Expires is when the token expires, as its bootstrap file says; zero
	// when unknown.
	Expires time.Time
}

// ProbeLimits bound a check.
type ProbeLimits struct {
	// Grace is how long after the first request a refusal (401) is tried
	// again: an API server learns a new token from its cache of Secrets a
	// moment after the Secret is made.
	Grace time.Duration
	// Unreachable is how long an API server that does not answer (no
	// connection, a timeout, 429 or 5xx) is tried again.
	Unreachable time.Duration
	// Interval is the pause between requests.
	Interval time.Duration
}

// DefaultProbeLimits are those of `fke node join`.
var DefaultProbeLimits = ProbeLimits{Grace: 2 * time.Second, Unreachable: 30 * time.Second, Interval: 500 * time.Millisecond}

// ProbeDecision is what a check does after one request.
type ProbeDecision struct {
	// Retry: ask again after ProbeLimits.Interval.
	Retry bool
	// Err, when set, ends the check: the join cannot work, and Err says why
	// and what to do. Neither Retry nor Err: the token is accepted.
	Err error
}

// Errors a failed check wraps, for errors.Is.
var (
	ErrTokenExpired    = errors.New("bootstrap token expired")
	ErrTokenRefused    = errors.New("bootstrap token refused")
	ErrServerUntrusted = errors.New("API server not trusted")
	ErrUnreachable     = errors.New("API server unreachable")
)

// DecideProbe decides, from err of the latest request made with p's token
// (nil: it was answered) at now, elapsed after the first one, whether the
// token is accepted, the check goes on, or the join fails. Any answer but
// 401, 429 and 5xx means the token authenticated (the API server
// authenticates before all else). A token its file says has expired fails
// at once; a refusal (401) once it lasted Grace; a certificate the file's
// CA does not verify at once (another cluster's file, or a changed CA); an
// API server that does not answer once it did not for Unreachable. Pure.
func DecideProbe(p TokenProbe, err error, now time.Time, elapsed time.Duration, lim ProbeLimits) ProbeDecision {
	if err == nil {
		return ProbeDecision{}
	}
	if !p.Expires.IsZero() && !now.Before(p.Expires) {
		return ProbeDecision{Err: fmt.Errorf("%w: token %s expired at %s: write a new bootstrap file with `fke node bootstrap-file CLUSTER --pool POOL`",
			ErrTokenExpired, p.TokenID, p.Expires.UTC().Format(time.RFC3339))}
	}
	var status apierrors.APIStatus
	switch {
	case apierrors.IsUnauthorized(err):
		if elapsed < lim.Grace {
			return ProbeDecision{Retry: true}
		}
		return ProbeDecision{Err: fmt.Errorf("%w: the API server at %s refused token %s (401 Unauthorized): the token is wrong, has expired or was deleted; write a new bootstrap file with `fke node bootstrap-file CLUSTER --pool POOL`",
			ErrTokenRefused, p.Server, p.TokenID)}
	case untrusted(err):
		return ProbeDecision{Err: fmt.Errorf("%w: the bootstrap file's CA does not verify the API server at %s (%v): is the file of this cluster? Write a new one with `fke node bootstrap-file CLUSTER --pool POOL`",
			ErrServerUntrusted, p.Server, err)}
	case errors.As(err, &status) && !retriable(status.Status().Code):
		return ProbeDecision{}
	case elapsed < lim.Unreachable:
		return ProbeDecision{Retry: true}
	default:
		return ProbeDecision{Err: fmt.Errorf("%w: no answer from the API server at %s for %s: %v", ErrUnreachable, p.Server, lim.Unreachable, err)}
	}
}

// untrusted reports a TLS failure that no retry mends: a certificate that
// does not verify, or a server that speaks no TLS.
func untrusted(err error) bool {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		verify   *tls.CertificateVerificationError
		header   tls.RecordHeaderError
	)
	return errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) ||
		errors.As(err, &verify) || errors.As(err, &header)
}

func retriable(code int32) bool {
	return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
}

// CheckToken asks the API server of cfg, which authenticates with p's
// bootstrap token, who the token's holder is (a SelfSubjectReview) until
// DecideProbe accepts the token or fails the check, or ctx ends. It
// returns nil once the token is accepted.
func CheckToken(ctx context.Context, cfg *rest.Config, p TokenProbe, lim ProbeLimits) error {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 || cfg.Timeout > 5*time.Second {
		cfg.Timeout = 5 * time.Second
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("checking bootstrap token %s: %w", p.TokenID, err)
	}
	start := time.Now()
	for {
		_, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if ctx.Err() != nil {
			return fmt.Errorf("checking bootstrap token %s: %w", p.TokenID, ctx.Err())
		}
		now := time.Now()
		d := DecideProbe(p, err, now, now.Sub(start), lim)
		if !d.Retry {
			return d.Err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("checking bootstrap token %s: %w", p.TokenID, ctx.Err())
		case <-time.After(lim.Interval):
		}
	}
}
