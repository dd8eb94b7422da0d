package deploy

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Where a tenant cluster keeps its releases: the inventories and the
// revision Secrets live in one namespace of their own.
const (
	// SystemNamespace holds the inventory ConfigMaps and revision Secrets.
	SystemNamespace = "fke-deploy"
	// SecretType marks a revision Secret.
	SecretType corev1.SecretType = "fke.dev/release.v1"

	LabelRelease  = "fke.dev/release"
	LabelRevision = "fke.dev/revision"
	LabelStatus   = "fke.dev/release-status"

	annotationDigest  = "fke.dev/digest"
	annotationSource  = "fke.dev/source"
	annotationKind    = "fke.dev/source-kind"
	annotationApplied = "fke.dev/applied"
	annotationMessage = "fke.dev/message"
	annotationObjects = "fke.dev/objects"
	keyObjects        = "objects.json.gz"
)

// Store keeps the revisions of releases as Secrets in a tenant cluster.
type Store struct {
	Client kubernetes.Interface
}

// SecretName is the name of revision n of release.
func SecretName(release string, n int) string {
	return fmt.Sprintf("%s.v%d", release, n)
}

// List returns the revisions of release, or of every release when release
// is "", without their objects. No namespace means no revisions.
func (s Store) List(ctx context.Context, release string) ([]Revision, error) {
	sel := labels.Set{}
	if release != "" {
		sel[LabelRelease] = release
	}
	opts := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()}
	if release == "" {
		opts.LabelSelector = LabelRelease
	}
	list, err := s.Client.CoreV1().Secrets(SystemNamespace).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing revisions: %w", err)
	}
	var out []Revision
	for i := range list.Items {
		if list.Items[i].Type != SecretType {
			continue
		}
		r, err := revisionOf(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Objects returns the rendered objects revision n of release applied.
func (s Store) Objects(ctx context.Context, release string, n int) ([]*unstructured.Unstructured, error) {
	sec, err := s.Client.CoreV1().Secrets(SystemNamespace).Get(ctx, SecretName(release, n), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading revision %d of %s: %w", n, release, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(sec.Data[keyObjects]))
	if err != nil {
		return nil, fmt.Errorf("revision %d of %s: %w", n, release, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("revision %d of %s: %w", n, release, err)
	}
	var raw []map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("revision %d of %s: %w", n, release, err)
	}
	out := make([]*unstructured.Unstructured, len(raw))
	for i, m := range raw {
		out[i] = &unstructured.Unstructured{Object: m}
	}
	return out, nil
}

// Create records a new revision with its objects (gzip-compressed JSON).
func (s Store) Create(ctx context.Context, r Revision, objs []*unstructured.Unstructured) error {
	if err := EnsureNamespace(ctx, s.Client); err != nil {
		return err
	}
	raw := make([]map[string]any, len(objs))
	for i, o := range objs {
		raw[i] = o.Object
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: SystemNamespace, Name: SecretName(r.Release, r.Number)},
		Type:       SecretType,
		Data:       map[string][]byte{keyObjects: buf.Bytes()},
	}
	setRevision(sec, r)
	if _, err := s.Client.CoreV1().Secrets(SystemNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// The revision Secret is the release's lock: two deploys of one
			// release cannot both record revision N.
			return fmt.Errorf("revision %d of %s already exists: another deploy of release %s is running; try again once it is done", r.Number, r.Release, r.Release)
		}
		return fmt.Errorf("recording revision %d of %s: %w", r.Number, r.Release, err)
	}
	return nil
}

// SetStatus changes the status (and message) of revision n of release.
func (s Store) SetStatus(ctx context.Context, release string, n int, st RevisionStatus, msg string) error {
	secs := s.Client.CoreV1().Secrets(SystemNamespace)
	sec, err := secs.Get(ctx, SecretName(release, n), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading revision %d of %s: %w", n, release, err)
	}
	r, err := revisionOf(sec)
	if err != nil {
		return err
	}
	r.Status, r.Message = st, msg
	setRevision(sec, r)
	if _, err := secs.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating revision %d of %s: %w", n, release, err)
	}
	return nil
}

// Delete removes revision n of release; a missing one is no error.
func (s Store) Delete(ctx context.Context, release string, n int) error {
	err := s.Client.CoreV1().Secrets(SystemNamespace).Delete(ctx, SecretName(release, n), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting revision %d of %s: %w", n, release, err)
	}
	return nil
}

// EnsureNamespace creates SystemNamespace when it is missing.
func EnsureNamespace(ctx context.Context, cs kubernetes.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SystemNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", SystemNamespace, err)
	}
	return nil
}

func setRevision(sec *corev1.Secret, r Revision) {
	sec.Labels = map[string]string{LabelRelease: r.Release, LabelRevision: strconv.Itoa(r.Number), LabelStatus: string(r.Status)}
	sec.Annotations = map[string]string{
		annotationDigest:  r.Digest,
		annotationSource:  r.Source,
		annotationKind:    string(r.Kind),
		annotationApplied: r.Applied.UTC().Format(time.RFC3339),
		annotationObjects: strconv.Itoa(r.Objects),
	}
	if r.Message != "" {
		sec.Annotations[annotationMessage] = r.Message
	}
}

func revisionOf(sec *corev1.Secret) (Revision, error) {
	n, err := strconv.Atoi(sec.Labels[LabelRevision])
	if err != nil {
		return Revision{}, fmt.Errorf("secret %s: bad %s label: %w", sec.Name, LabelRevision, err)
	}
	// Both are informational: a Secret edited by hand shows a zero time or
	// count rather than hiding the revision.
	applied, err := time.Parse(time.RFC3339, sec.Annotations[annotationApplied])
	if err != nil {
		applied = time.Time{}
	}
	objs, err := strconv.Atoi(sec.Annotations[annotationObjects])
	if err != nil {
		objs = 0
	}
	return Revision{
		Release: sec.Labels[LabelRelease],
		Number:  n,
		Status:  RevisionStatus(sec.Labels[LabelStatus]),
		Digest:  sec.Annotations[annotationDigest],
		Source:  sec.Annotations[annotationSource],
		Kind:    SourceKind(sec.Annotations[annotationKind]),
		Objects: objs,
		Applied: applied,
		Message: sec.Annotations[annotationMessage],
	}, nil
}
