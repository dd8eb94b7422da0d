package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/deploy"
	"fke.dev/fke/internal/gitsource"
	"fke.dev/fke/internal/promotion"
	"fke.dev/fke/internal/versions"
)

// sourceError is a problem of the source, with the condition reason that
// names it.
type sourceError struct {
	reason string
	err    error
}

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// fetch brings the repository up to date, resolves the revision and renders
// the new commit; status.revision moves only when it renders, so a bad
// commit or an unreachable repository leaves the last good revision in
// place, with SourceReady False saying why.
func (r *Reconciler) fetch(ctx context.Context, rel *fkev1.Release, now time.Time) {
	rel.Status.LastFetched = &metav1.Time{Time: now}
	commit, err := r.resolve(ctx, rel)
	if err == nil {
		rel.Status.LastAttemptedRevision = commit.Hash
		if commit.Hash != rel.Status.Revision || rel.Status.ObservedGeneration != rel.Generation {
			// Every stage's path must render before the commit (or a
			// change of the render inputs) is taken.
			for _, path := range stagePaths(rel) {
				if _, err = r.render(ctx, rel, commit.Hash, path); err != nil {
					break
				}
			}
		}
	}
	var se *sourceError
	if errors.As(err, &se) {
		msg := se.Error()
		if rel.Status.Revision != "" {
			msg += fmt.Sprintf("; keeping revision %s", promotion.Short(rel.Status.Revision))
		}
		cur := findCondition(rel, fkev1.ConditionSourceReady)
		if cur == nil || cur.Reason != se.reason || cur.Message != msg {
			r.event(rel, true, se.reason, "%s", msg)
		}
		setCondition(rel, fkev1.ConditionSourceReady, metav1.ConditionFalse, se.reason, msg)
		return
	}
	if err != nil {
		setCondition(rel, fkev1.ConditionSourceReady, metav1.ConditionUnknown, fkev1.ReasonInternalError, err.Error())
		return
	}
	if commit.Hash != rel.Status.Revision {
		r.event(rel, false, "NewRevision", "revision %s: %s", promotion.Short(commit.Hash), commit.Subject)
	}
	rel.Status.Revision = commit.Hash
	setCondition(rel, fkev1.ConditionSourceReady, metav1.ConditionTrue, fkev1.ReasonFetched,
		fmt.Sprintf("%s at %s is %s: %s", rel.Spec.Source.Revision, rel.Spec.Source.URL, promotion.Short(commit.Hash), commit.Subject))
}

func findCondition(rel *fkev1.Release, typ string) *metav1.Condition {
	for i := range rel.Status.Conditions {
		if rel.Status.Conditions[i].Type == typ {
			return &rel.Status.Conditions[i]
		}
	}
	return nil
}

// repo returns the Release's cached repository with its credentials.
func (r *Reconciler) repo(ctx context.Context, rel *fkev1.Release) (gitsource.Repo, error) {
	repo := gitsource.Repo{URL: rel.Spec.Source.URL, Dir: r.repoDir(rel.Namespace, rel.Name)}
	ref := rel.Spec.Source.SecretRef
	if ref == nil {
		return repo, nil
	}
	sec := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: ref.Name}, sec); err != nil {
		return repo, &sourceError{fkev1.ReasonAuthFailed, fmt.Errorf("reading the credentials in Secret %s: %w", ref.Name, err)}
	}
	repo.Creds = gitsource.Credentials{
		Username: string(sec.Data["username"]), Token: string(sec.Data["token"]),
		Identity: sec.Data["identity"], KnownHosts: sec.Data["known_hosts"], CABundle: sec.Data["ca.crt"],
	}
	return repo, nil
}

// resolve fetches the repository and returns the commit spec.source.revision names.
func (r *Reconciler) resolve(ctx context.Context, rel *fkev1.Release) (gitsource.Commit, error) {
	repo, err := r.repo(ctx, rel)
	if err != nil {
		return gitsource.Commit{}, err
	}
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := repo.Fetch(fctx); err != nil {
		return gitsource.Commit{}, classify(err)
	}
	rev := rel.Spec.Source.Revision
	if rev == "" {
		rev = "main"
	}
	c, err := repo.Resolve(rev)
	if err != nil {
		return gitsource.Commit{}, classify(err)
	}
	return c, nil
}

func classify(err error) error {
	switch {
	case errors.Is(err, gitsource.ErrAuth):
		return &sourceError{fkev1.ReasonAuthFailed, err}
	case errors.Is(err, gitsource.ErrRevisionNotFound):
		return &sourceError{fkev1.ReasonRevisionNotFound, err}
	case errors.Is(err, gitsource.ErrUnreachable):
		return &sourceError{fkev1.ReasonRepositoryUnreachable, err}
	case errors.Is(err, gitsource.ErrOutsideTree):
		return &sourceError{fkev1.ReasonPathOutsideSource, err}
	}
	return err
}

// stagePaths returns the distinct paths the stages render.
func stagePaths(rel *fkev1.Release) []string {
	var out []string
	for _, s := range rel.Spec.Stages {
		if p := stagePath(rel, s.Name); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// stagePath is the path stage renders: its own, else source.path, else ".".
func stagePath(rel *fkev1.Release, stage string) string {
	for _, s := range rel.Spec.Stages {
		if s.Name == stage && s.Path != "" {
			return s.Path
		}
	}
	if rel.Spec.Source.Path != "" {
		return rel.Spec.Source.Path
	}
	return "."
}

// render exports commit and renders path there with the Release's values.
func (r *Reconciler) render(ctx context.Context, rel *fkev1.Release, commit, path string) (*deploy.Rendered, error) {
	repo, err := r.repo(ctx, rel)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "fke-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "src")
	if err := repo.Export(commit, root); err != nil {
		return nil, classify(err)
	}
	src := rel.Spec.Source
	// Every path is read inside the export (deploy.Render opens it with
	// os.Root): a values file, a base or a link that leads out of the
	// repository is refused, never read.
	in := deploy.Source{Root: root, Path: path, ValuesFiles: src.ValuesFiles, Set: src.Set, ReleaseName: rel.Name, Namespace: rel.Spec.Namespace, KubeVersion: versions.Default}
	if src.Values != nil && len(src.Values.Raw) > 0 && string(src.Values.Raw) != "null" {
		in.Values = []deploy.Values{{Name: "spec.source.values", Data: src.Values.Raw}}
	}
	out, err := deploy.Render(in)
	var pe *deploy.PathError
	if errors.As(err, &pe) {
		return nil, &sourceError{fkev1.ReasonPathOutsideSource, fmt.Errorf("revision %s: %w", promotion.Short(commit), pe)}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &sourceError{fkev1.ReasonPathNotFound, fmt.Errorf("path %s does not exist in revision %s", path, promotion.Short(commit))}
	}
	if err != nil {
		// The error names files in the export; name them in the repository.
		msg := strings.ReplaceAll(err.Error(), root+string(filepath.Separator), "")
		return nil, &sourceError{fkev1.ReasonRenderFailed, fmt.Errorf("revision %s does not render: %s", promotion.Short(commit), msg)}
	}
	return out, nil
}

// stageConfig is a digest of what stage renders besides the commit: the
// path, the values and the namespace.
func stageConfig(rel *fkev1.Release, stage string) string {
	src := rel.Spec.Source
	in := struct {
		Path, Namespace string
		Values          *apiextensionsv1.JSON
		ValuesFiles     []string
		Set             []string
	}{stagePath(rel, stage), rel.Spec.Namespace, src.Values, src.ValuesFiles, src.Set}
	data, err := json.Marshal(in)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}
