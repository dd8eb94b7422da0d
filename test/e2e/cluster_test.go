package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/test/testenv"
)

// TestClusterLifecycle drives the CLI as a user would: two tenant clusters,
// isolation between them, crash recovery, manager restart, delete, down.
func TestClusterLifecycle(t *testing.T) {
	e := testenv.Up(t)
	ctx := context.Background()

	// A second `fke up` reports the running plane instead of starting another.
	if out := e.MustRun("up"); !strings.Contains(out, "already running") {
		t.Fatalf("second fke up: want 'already running', got:\n%s", out)
	}

	e.MustRun("cluster", "create", "alpha", "--wait")
	e.MustRun("cluster", "create", "beta", "--wait")

	list := e.MustRun("cluster", "list")
	for _, name := range []string{"alpha", "beta"} {
		if !regexpLine(list, name, "v1.37.2", "Ready", "True") {
			t.Fatalf("cluster list does not show %s Ready:\n%s", name, list)
		}
	}

	// Each admin kubeconfig works with client-go and reports v1.37.2.
	for _, name := range []string{"alpha", "beta"} {
		cs := e.Tenant(name)
		v, err := cs.Discovery().ServerVersion()
		if err != nil || v.GitVersion != "v1.37.2" {
			t.Fatalf("%s version = %v, %v; want v1.37.2", name, v, err)
		}
		mustCreateConfigMap(t, cs, "team-"+name, "settings", name)
	}

	// alpha's credentials are rejected by beta (TLS trusts beta's CA, the
	// client certificate is alpha's).
	alphaCfg, betaCfg := e.TenantConfig("alpha"), e.TenantConfig("beta")
	cross := rest.CopyConfig(alphaCfg)
	cross.Host = betaCfg.Host
	cross.TLSClientConfig.CAData = betaCfg.TLSClientConfig.CAData
	crossCS := kubernetes.NewForConfigOrDie(cross)
	_, err := crossCS.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Fatalf("alpha's credentials on beta: want 401 Unauthorized, got %v", err)
	}

	// Kill alpha's kube-apiserver: the supervisor restarts it, data intact.
	alpha := getCluster(t, e, "alpha")
	apiPort := strconv.Itoa(int(alpha.Status.Ports.APIServer))
	procs := testenv.FindProcs("kube-apiserver", "--secure-port="+apiPort)
	if len(procs) != 1 {
		t.Fatalf("want one kube-apiserver for alpha, found %v", procs)
	}
	if err := syscall.Kill(procs[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	alphaCS := e.Tenant("alpha")
	testenv.Eventually(t, 60*time.Second, "alpha's kube-apiserver restarted with its data", func() error {
		now := testenv.FindProcs("kube-apiserver", "--secure-port="+apiPort)
		if len(now) != 1 || now[0].PID == procs[0].PID {
			return fmt.Errorf("no new kube-apiserver process yet: %v", now)
		}
		return configMapHas(alphaCS, "team-alpha", "settings", "alpha")
	})

	// Restart the manager: alpha comes back Ready with the same CA and data.
	caBefore := clusterCA(t, e, "alpha")
	var mgrPID int
	for _, c := range e.State().Components {
		if c.Name == "fke-manager" {
			mgrPID = c.PID
		}
	}
	if mgrPID == 0 {
		t.Fatalf("fke status shows no fke-manager: %+v", e.State())
	}
	// Beta is deleted while no manager runs: its processes, which the
	// daemon holds, stop once the next manager is back, whether or not it
	// took them over first.
	beta := getCluster(t, e, "beta")
	if err := syscall.Kill(mgrPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.MustRun("cluster", "delete", "beta")
	testenv.Eventually(t, 90*time.Second, "manager restarted and alpha Ready again", func() error {
		st, err := readState(e)
		if err != nil {
			return err
		}
		for _, c := range st.Components {
			if c.Name == "fke-manager" && (c.PID == mgrPID || !c.Ready) {
				return fmt.Errorf("manager not restarted yet")
			}
		}
		return configMapHas(e.Tenant("alpha"), "team-alpha", "settings", "alpha")
	})
	if caAfter := clusterCA(t, e, "alpha"); caAfter != caBefore {
		t.Fatal("alpha's CA changed across a manager restart")
	}
	waitReady(t, e, "alpha")
	testenv.Eventually(t, 60*time.Second, "beta deleted", func() error {
		err := e.Client().Get(ctx, client.ObjectKey{Namespace: "default", Name: "beta"}, &fkev1.Cluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("beta still there (%v)", err)
	})
	p := beta.Status.Ports
	for _, port := range []int32{p.APIServer, p.EtcdClient, p.EtcdPeer, p.ControllerManager, p.Scheduler, p.MetricsServer} {
		if left := testenv.FindProcs(e.DataDir, "="+strconv.Itoa(int(port))); len(left) > 0 {
			t.Errorf("process still uses beta's port %d: %v", port, left)
		}
	}
	testenv.Eventually(t, 10*time.Second, "beta's ports free", func() error {
		for _, port := range []int32{p.APIServer, p.EtcdClient, p.EtcdPeer, p.ControllerManager, p.Scheduler, p.MetricsServer} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(int(port)))
			if err != nil {
				return err
			}
			l.Close()
		}
		return nil
	})
	var secrets corev1.SecretList
	if err := e.Client().List(ctx, &secrets, client.InNamespace("default"), client.MatchingLabels{fkev1.LabelCluster: "beta"}); err != nil || len(secrets.Items) != 0 {
		t.Errorf("beta's secrets left behind: %d, %v", len(secrets.Items), err)
	}
	if out := e.RunFail("cluster", "get", "beta"); !strings.Contains(out, "not found") {
		t.Errorf("get deleted cluster: want 'not found', got %s", out)
	}

	// fke down leaves no process behind.
	daemon := e.State().PID
	e.MustRun("down")
	if testenv.Alive(daemon) {
		t.Errorf("daemon %d still alive after fke down", daemon)
	}
	if left := testenv.FindProcs(e.DataDir); len(left) > 0 {
		t.Errorf("processes left after fke down: %v", left)
	}
	if out := e.RunFail("cluster", "list"); !strings.Contains(out, "not running") || !strings.Contains(out, "fke up") {
		t.Errorf("cluster list with the plane down: want a 'not running ... fke up' hint, got %s", out)
	}
}

// TestCLIErrors checks that bad input gets a clear message and changes nothing.
func TestCLIErrors(t *testing.T) {
	e := testenv.New(t)
	if out := e.RunFail("cluster", "list"); !strings.Contains(out, "not running") {
		t.Errorf("before fke up: want 'not running', got %s", out)
	}
	if out := e.RunFail("up", "--bin-dir", t.TempDir()); !strings.Contains(out, "make binaries") {
		// --bin-dir given twice: the last one wins, an empty directory.
		t.Errorf("missing binaries: want a `make binaries` hint, got %s", out)
	}
}

func readState(e *testenv.Env) (struct {
	Components []struct {
		Name  string
		PID   int
		Ready bool
	}
}, error) {
	var out struct {
		Components []struct {
			Name  string
			PID   int
			Ready bool
		}
	}
	st := e.State()
	for _, c := range st.Components {
		out.Components = append(out.Components, struct {
			Name  string
			PID   int
			Ready bool
		}{c.Name, c.PID, c.Ready})
	}
	return out, nil
}

func getCluster(t *testing.T, e *testenv.Env, name string) *fkev1.Cluster {
	t.Helper()
	cl := &fkev1.Cluster{}
	if err := e.Client().Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, cl); err != nil {
		t.Fatal(err)
	}
	return cl
}

func waitReady(t *testing.T, e *testenv.Env, name string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, name+" Ready", func() error {
		cl := &fkev1.Cluster{}
		if err := e.Client().Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, cl); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionReady) {
			return fmt.Errorf("conditions %+v", cl.Status.Conditions)
		}
		return nil
	})
}

func clusterCA(t *testing.T, e *testenv.Env, name string) string {
	t.Helper()
	s := &corev1.Secret{}
	if err := e.Client().Get(context.Background(), client.ObjectKey{Namespace: "default", Name: fkev1.PKISecretName(name)}, s); err != nil {
		t.Fatal(err)
	}
	return string(s.Data[pki.CACertFile])
}

func mustCreateConfigMap(t *testing.T, cs kubernetes.Interface, ns, name, value string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"owner": value}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating configmap: %v", err)
	}
}

func configMapHas(cs kubernetes.Interface, ns, name, value string) error {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if cm.Data["owner"] != value {
		return fmt.Errorf("configmap %s/%s has owner %q, want %q", ns, name, cm.Data["owner"], value)
	}
	return nil
}

// regexpLine reports whether one line of out contains every field.
func regexpLine(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		ok := true
		for _, f := range fields {
			if !strings.Contains(line, f) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
