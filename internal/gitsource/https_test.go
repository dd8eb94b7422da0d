package gitsource

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// TestFetchHTTPSWithToken serves a repository with git's own smart-HTTP
// backend behind basic authentication (token as password, as GitHub and
// GitLab take it) over TLS, and fetches it with the right token, a wrong
// one and none. Skipped where git is not installed.
func TestFetchHTTPSWithToken(t *testing.T) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skip("git is not installed; the https test needs git-http-backend to serve")
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	root := t.TempDir()
	origin := filepath.Join(root, "app")
	repo, err := git.PlainInitWithOptions(origin, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName("main")}})
	if err != nil {
		t.Fatal(err)
	}
	want := commitFiles(t, repo, origin, map[string]string{"cm.yaml": "kind: ConfigMap\n"}, "first")

	const token = "s3cret-token"
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "ci" || p != token {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	url := srv.URL + "/app/.git"
	ctx := context.Background()
	good := Repo{URL: url, Dir: filepath.Join(t.TempDir(), "c"), Creds: Credentials{Username: "ci", Token: token, CABundle: ca}}
	if err := good.Fetch(ctx); err != nil {
		t.Fatalf("fetch with the token: %v", err)
	}
	if c, err := good.Resolve("main"); err != nil || c.Hash != want {
		t.Fatalf("Resolve(main) = %v, %v; want %s", c, err, want)
	}
	untrusted := Repo{URL: url, Dir: filepath.Join(t.TempDir(), "c"), Creds: Credentials{Username: "ci", Token: token}}
	if err := untrusted.Fetch(ctx); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a server of an unknown CA: %v, want ErrUnreachable naming the certificate", err)
	}
	for name, creds := range map[string]Credentials{"wrong token": {Username: "ci", Token: "nope", CABundle: ca}, "no token": {CABundle: ca}} {
		r := Repo{URL: url, Dir: filepath.Join(t.TempDir(), "c"), Creds: creds}
		if err := r.Fetch(ctx); !errors.Is(err, ErrAuth) {
			t.Errorf("%s: %v, want ErrAuth", name, err)
		}
	}
}
