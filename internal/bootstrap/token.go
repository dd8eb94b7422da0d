package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	tokenutil "k8s.io/cluster-bootstrap/token/util"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// PoolGroupPrefix prefixes the extra group of a pool's token holders:
// system:bootstrappers:fke:<pool>.
const PoolGroupPrefix = bootstrapapi.BootstrapDefaultGroup + ":fke:"

// PoolGroup is the extra group EnsureToken gives the holders of pool's token.
func PoolGroup(pool string) string { return PoolGroupPrefix + pool }

// Token is a bootstrap token stored in a Secret.
type Token struct {
	ID, Secret string
	Expires    time.Time
}

// String returns the token as "id.secret".
func (t Token) String() string { return tokenutil.TokenFromIDAndSecret(t.ID, t.Secret) }

// EnsureToken returns a bootstrap token "id.secret" for pool, valid until at
// least now+minValid. It keeps one Secret bootstrap-token-<id> per pool in
// kube-system (labelled fke.dev/nodepool=<pool>; usage-bootstrap-authentication,
// usage-bootstrap-signing, auth-extra-groups system:bootstrappers:fke:<pool>,
// expiration): the pool's current token is returned while it is valid for
// minValid more; otherwise a new one valid for ttl is created. Superseded
// tokens are left to expire (a node may be joining with one) and are then
// removed by kube-controller-manager's tokencleaner. pool is the pool's short
// name (a DNS label); ttl must be at least minValid.
func EnsureToken(ctx context.Context, c kubernetes.Interface, pool string, ttl, minValid time.Duration) (token string, expires time.Time, err error) {
	if errs := validation.IsDNS1123Label(pool); len(errs) > 0 {
		return "", time.Time{}, fmt.Errorf("bootstrap token: pool name %q: %v", pool, errs)
	}
	if ttl <= 0 || minValid < 0 || ttl < minValid {
		return "", time.Time{}, fmt.Errorf("bootstrap token for pool %s: ttl %s must be positive and at least minValid %s", pool, ttl, minValid)
	}
	sel := labels.SelectorFromSet(labels.Set{fkev1.LabelNodePool: pool}).String()
	list, err := c.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("listing bootstrap tokens of pool %s: %w", pool, err)
	}
	now := time.Now()
	if t, ok := CurrentToken(list.Items, pool, now, minValid); ok {
		return t.String(), t.Expires, nil
	}
	return createToken(ctx, c, pool, now, ttl)
}

// CreateToken makes a new bootstrap token "id.secret" of pool that expires
// ttl from now (to the second), as EnsureToken does when the pool's
// current token will not do: for a holder who asks for a lifetime of its
// own (`fke node bootstrap-file --ttl`). pool is the pool's short name
// (a DNS label); ttl must be positive.
func CreateToken(ctx context.Context, c kubernetes.Interface, pool string, ttl time.Duration) (token string, expires time.Time, err error) {
	if errs := validation.IsDNS1123Label(pool); len(errs) > 0 {
		return "", time.Time{}, fmt.Errorf("bootstrap token: pool name %q: %v", pool, errs)
	}
	if ttl <= 0 {
		return "", time.Time{}, fmt.Errorf("bootstrap token for pool %s: ttl %s must be positive", pool, ttl)
	}
	return createToken(ctx, c, pool, time.Now(), ttl)
}

func createToken(ctx context.Context, c kubernetes.Interface, pool string, now time.Time, ttl time.Duration) (string, time.Time, error) {
	raw, err := tokenutil.GenerateBootstrapToken()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("generating bootstrap token: %w", err)
	}
	t, err := parseToken(raw)
	if err != nil {
		return "", time.Time{}, err
	}
	// Whole seconds: the expiration is stored as RFC 3339.
	t.Expires = now.Add(ttl).Truncate(time.Second)
	if _, err := c.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, TokenSecret(t, pool), metav1.CreateOptions{}); err != nil {
		return "", time.Time{}, fmt.Errorf("creating bootstrap token of pool %s: %w", pool, err)
	}
	return t.String(), t.Expires, nil
}

// TokenSecret is the kube-system Secret holding t for pool.
func TokenSecret(t Token, pool string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceSystem,
			Name:      tokenutil.BootstrapTokenSecretName(t.ID),
			Labels:    map[string]string{fkev1.LabelNodePool: pool, "app.kubernetes.io/managed-by": "fke"},
		},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenDescriptionKey:      "fke: joins nodes of pool " + pool,
			bootstrapapi.BootstrapTokenIDKey:               t.ID,
			bootstrapapi.BootstrapTokenSecretKey:           t.Secret,
			bootstrapapi.BootstrapTokenExpirationKey:       t.Expires.UTC().Format(time.RFC3339),
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenUsageSigningKey:     "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      PoolGroup(pool),
		},
	}
}

// CurrentToken picks, among secrets, pool's usable token that stays valid
// the longest, if it is valid until at least now+minValid. A Secret counts
// only when it is a well-formed bootstrap token of pool that may authenticate
// and carries an expiration. Pure.
func CurrentToken(secrets []corev1.Secret, pool string, now time.Time, minValid time.Duration) (Token, bool) {
	var best Token
	found := false
	for i := range secrets {
		t, ok := poolToken(&secrets[i], pool)
		if !ok || t.Expires.Before(now.Add(minValid)) {
			continue
		}
		if !found || t.Expires.After(best.Expires) {
			best, found = t, true
		}
	}
	return best, found
}

// poolToken reads s as a token of pool.
func poolToken(s *corev1.Secret, pool string) (Token, bool) {
	get := func(k string) string {
		if v, ok := s.Data[k]; ok {
			return string(v)
		}
		return s.StringData[k]
	}
	if s.Type != bootstrapapi.SecretTypeBootstrapToken || s.Labels[fkev1.LabelNodePool] != pool || !s.DeletionTimestamp.IsZero() {
		return Token{}, false
	}
	t := Token{ID: get(bootstrapapi.BootstrapTokenIDKey), Secret: get(bootstrapapi.BootstrapTokenSecretKey)}
	if !tokenutil.IsValidBootstrapToken(t.String()) || s.Name != tokenutil.BootstrapTokenSecretName(t.ID) ||
		get(bootstrapapi.BootstrapTokenUsageAuthentication) != "true" ||
		get(bootstrapapi.BootstrapTokenExtraGroupsKey) != PoolGroup(pool) {
		return Token{}, false
	}
	exp, err := time.Parse(time.RFC3339, get(bootstrapapi.BootstrapTokenExpirationKey))
	if err != nil {
		return Token{}, false
	}
	t.Expires = exp
	return t, true
}

func parseToken(raw string) (Token, error) {
	if !tokenutil.IsValidBootstrapToken(raw) {
		return Token{}, errors.New("generated bootstrap token is malformed")
	}
	return Token{ID: raw[:6], Secret: raw[7:]}, nil
}
