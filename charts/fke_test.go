package charts

import (
	"k8s.io/apimachinery/pkg/api/equality"

	"bytes"
	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/catalog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"fke.dev/fke/internal/image"
)

const (
	chartDir  = "fke"
	namespace = "fke-system"
)

// kubeVersion is the oldest Kubernetes the chart supports.
var kubeVersion = chartutil.KubeVersion{Version: "v1.35.0", Major: "1", Minor: "35"}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return ch
}

// rendered is the chart's objects by kind and name.
type rendered struct {
	deployment     *appsv1.Deployment
	serviceAccount *corev1.ServiceAccount
	service        *corev1.Service
	clusterRoles   []rbacv1.ClusterRole
	roles          []rbacv1.Role
	crBindings     []rbacv1.ClusterRoleBinding
	roleBindings   []rbacv1.RoleBinding
	pdb            *policyv1.PodDisruptionBudget
	instanceTypes  []fkev1.InstanceType
	kinds          []string
}

// render renders the chart as `helm install fke fke --namespace fke-system
// --set set` would (schema validation included), or returns its error.
func render(t *testing.T, set string) (*rendered, error) {
	t.Helper()
	ch := loadChart(t)
	vals := map[string]any{}
	if set != "" {
		if err := strvals.ParseInto(set, vals); err != nil {
			t.Fatalf("--set %s: %v", set, err)
		}
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = kubeVersion
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "fke", Namespace: namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	out := &rendered{}
	for name, body := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range releaseutil.SplitManifests(body) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			out.add(t, name, doc)
		}
	}
	return out, nil
}

func (r *rendered) add(t *testing.T, file, doc string) {
	t.Helper()
	var head struct{ Kind string }
	if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	r.kinds = append(r.kinds, head.Kind)
	var into any
	switch head.Kind {
	case "Deployment":
		r.deployment = &appsv1.Deployment{}
		into = r.deployment
	case "ServiceAccount":
		r.serviceAccount = &corev1.ServiceAccount{}
		into = r.serviceAccount
	case "Service":
		r.service = &corev1.Service{}
		into = r.service
	case "PodDisruptionBudget":
		r.pdb = &policyv1.PodDisruptionBudget{}
		into = r.pdb
	case "ClusterRole":
		r.clusterRoles = append(r.clusterRoles, rbacv1.ClusterRole{})
		into = &r.clusterRoles[len(r.clusterRoles)-1]
	case "Role":
		r.roles = append(r.roles, rbacv1.Role{})
		into = &r.roles[len(r.roles)-1]
	case "ClusterRoleBinding":
		r.crBindings = append(r.crBindings, rbacv1.ClusterRoleBinding{})
		into = &r.crBindings[len(r.crBindings)-1]
	case "RoleBinding":
		r.roleBindings = append(r.roleBindings, rbacv1.RoleBinding{})
		into = &r.roleBindings[len(r.roleBindings)-1]
	case "InstanceType":
		r.instanceTypes = append(r.instanceTypes, fkev1.InstanceType{})
		into = &r.instanceTypes[len(r.instanceTypes)-1]
	default:
		t.Fatalf("%s: unexpected kind %q", file, head.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
		t.Fatalf("%s: decoding %s: %v", file, head.Kind, err)
	}
}

func mustRender(t *testing.T, set string) *rendered {
	t.Helper()
	r, err := render(t, set)
	if err != nil {
		t.Fatalf("rendering with %q: %v", set, err)
	}
	if r.deployment == nil {
		t.Fatal("no Deployment rendered")
	}
	return r
}

func manager(t *testing.T, r *rendered) corev1.Container {
	t.Helper()
	cs := r.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("want one container, got %d", len(cs))
	}
	return cs[0]
}

// TestLint runs `helm lint` (the lint package) with the default values and
// with others; anything from a warning up fails.
func TestLint(t *testing.T) {
	for _, vals := range []map[string]any{
		nil,
		{"runtimes": []any{"local"}, "providers": []any{"kwok", "local"}, "replicas": 3},
	} {
		l := lint.AllWithKubeVersion(chartDir, vals, namespace, &kubeVersion)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("lint (values %v): %s", vals, m)
			}
		}
	}
}

func TestDefaults(t *testing.T) {
	r := mustRender(t, "")
	c := manager(t, r)
	for _, want := range []string{"--leader-elect", "--leader-election-namespace=" + namespace, "--runtimes=", "--providers=kwok"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %q", c.Args, want)
		}
	}
	if got := *r.deployment.Spec.Replicas; got != 1 {
		t.Errorf("replicas = %d, want 1", got)
	}
	if r.pdb != nil {
		t.Error("one replica, yet a PodDisruptionBudget (it would block every drain)")
	}
	if want := "fke/manager:" + loadChart(t).Metadata.AppVersion; c.Image != want {
		t.Errorf("image = %q, want %q", c.Image, want)
	}

	// Probes on the manager's health endpoints, on the port it serves them.
	health := portNamed(t, c, "health")
	for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port.String() != "health" {
			t.Errorf("probe of %s = %+v", name, p)
		}
	}
	if !slices.Contains(c.Args, "--health-addr=:"+itoa(health)) {
		t.Errorf("args %q do not serve health on %d", c.Args, health)
	}
	metrics := portNamed(t, c, "metrics")
	if !slices.Contains(c.Args, "--metrics-addr=:"+itoa(metrics)) {
		t.Errorf("args %q do not serve metrics on %d", c.Args, metrics)
	}

	for _, res := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		if res.Cpu().IsZero() || res.Memory().IsZero() {
			t.Errorf("resources %v lack cpu or memory", c.Resources)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("container securityContext = %+v", sc)
	}
	if psc := r.deployment.Spec.Template.Spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod securityContext = %+v", psc)
	}

	// The metrics Service reaches the pods' metrics port.
	if r.service == nil {
		t.Fatal("no metrics Service")
	}
	if len(r.service.Spec.Ports) != 1 || r.service.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("service ports = %+v", r.service.Spec.Ports)
	}
	for k, v := range r.service.Spec.Selector {
		if r.deployment.Spec.Template.Labels[k] != v {
			t.Errorf("service selects %s=%s, pods have %q", k, v, r.deployment.Spec.Template.Labels[k])
		}
	}
}

func TestNonDefaultValues(t *testing.T) {
	r := mustRender(t, "runtimes={local},providers={kwok,local},replicas=2,resources.limits.memory=2Gi,resources.limits.cpu=3,"+
		"image.registry=172.29.0.1:5000,image.digest=sha256:"+strings.Repeat("ab", 32)+",extraArgs={--webhook-port=0}")
	c := manager(t, r)
	for _, want := range []string{"--leader-elect", "--runtimes=local", "--providers=kwok,local", "--webhook-port=0"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %q", c.Args, want)
		}
	}
	if got := *r.deployment.Spec.Replicas; got != 2 {
		t.Errorf("replicas = %d, want 2", got)
	}
	if r.pdb == nil || r.pdb.Spec.MaxUnavailable == nil || r.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("two replicas, PodDisruptionBudget %+v; want one that keeps a manager running", r.pdb)
	} else {
		for k, v := range r.pdb.Spec.Selector.MatchLabels {
			if r.deployment.Spec.Template.Labels[k] != v {
				t.Errorf("the PodDisruptionBudget selects %s=%s, pods have %q", k, v, r.deployment.Spec.Template.Labels[k])
			}
		}
	}
	if got := c.Resources.Limits.Memory().String(); got != "2Gi" {
		t.Errorf("memory limit = %s, want 2Gi", got)
	}
	if got := c.Resources.Limits.Cpu().String(); got != "3" {
		t.Errorf("cpu limit = %s, want 3", got)
	}
	if want := "172.29.0.1:5000/fke/manager@sha256:" + strings.Repeat("ab", 32); c.Image != want {
		t.Errorf("image = %q, want %q", c.Image, want)
	}

	// The hosted runtime's settings reach the manager's flags.
	r = mustRender(t, "runtimes={hosted},hosted.registry=172.29.0.1:5000/fke,hosted.endpointHost=10.0.0.5,hosted.maxStarting=4")
	for _, want := range []string{"--runtimes=hosted", "--hosted-registry=172.29.0.1:5000/fke",
		"--hosted-system-namespace=" + namespace, "--hosted-endpoint-host=10.0.0.5", "--hosted-max-starting=4"} {
		if !slices.Contains(manager(t, r).Args, want) {
			t.Errorf("args %v lack %s", manager(t, r).Args, want)
		}
	}

	// One replica without leader election: no Lease.
	r = mustRender(t, "leaderElection.enabled=false")
	for _, a := range manager(t, r).Args {
		if strings.HasPrefix(a, "--leader-elect") {
			t.Errorf("leader election off, yet args hold %q", a)
		}
	}
}

// TestBadValues: mistakes fail rendering with a message that names them.
func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want []string
	}{
		{set: "runtimes={docker}", want: []string{"/runtimes/0", "must be one of 'local', 'hosted'"}},
		{set: "runtimes={hosted}", want: []string{"runtimes [hosted] needs hosted.registry"}},
		{set: "hosted.registy=x", want: []string{"registy", "additional"}},
		{set: "providers={kwok,openstack}", want: []string{"/providers/1", "must be one of 'kwok', 'local'"}},
		{set: "providers={kwok,kwok}", want: []string{"/providers", "equal"}},
		{set: "hosted.maxStarting=-2", want: []string{"/hosted/maxStarting", "minimum"}},
		{set: "replica=2", want: []string{"replica", "additional"}},
		{set: "replicas=0", want: []string{"/replicas", "minimum"}},
		{set: "replicas=2,leaderElection.enabled=false", want: []string{"replicas above 1 need leaderElection.enabled"}},
		{set: "image.digest=latest", want: []string{"/image/digest", "does not match pattern"}},
	} {
		_, err := render(t, tc.set)
		if err == nil {
			t.Errorf("--set %s rendered; want an error", tc.set)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("--set %s: error %q lacks %q", tc.set, err, w)
			}
		}
	}
}

// TestRBAC: least privilege, bound to the manager's ServiceAccount.
func TestRBAC(t *testing.T) {
	r := mustRender(t, "")
	if len(r.clusterRoles) != 1 || len(r.roles) != 1 || len(r.crBindings) != 1 || len(r.roleBindings) != 1 {
		t.Fatalf("want one ClusterRole, Role and binding of each; got kinds %v", r.kinds)
	}
	rules := append(slices.Clone(r.clusterRoles[0].Rules), r.roles[0].Rules...)
	for _, rule := range rules {
		for _, s := range slices.Concat(rule.Verbs, rule.Resources, rule.APIGroups, rule.ResourceNames) {
			if strings.Contains(s, "*") {
				t.Errorf("rule %+v has a wildcard", rule)
			}
		}
		if len(rule.NonResourceURLs) > 0 {
			t.Errorf("rule %+v grants non-resource URLs", rule)
		}
		if slices.Contains(rule.Verbs, "escalate") || slices.Contains(rule.Verbs, "bind") || slices.Contains(rule.Verbs, "impersonate") {
			t.Errorf("rule %+v can escalate", rule)
		}
	}
	// Leases only in the manager's namespace.
	for _, rule := range r.clusterRoles[0].Rules {
		if slices.Contains(rule.APIGroups, "coordination.k8s.io") {
			t.Errorf("the ClusterRole grants leases in every namespace: %+v", rule)
		}
	}
	if r.roles[0].Namespace != namespace || !grants(r.roles[0].Rules, "coordination.k8s.io", "leases", "get", "create", "update") {
		t.Errorf("the Role (namespace %q) does not allow leader election: %+v", r.roles[0].Namespace, r.roles[0].Rules)
	}
	// What the controllers need without a control-plane runtime, and
	// nothing they do not call.
	type need struct {
		group, resource string
		verbs           []string
	}
	always := []need{
		{"fke.dev", "clusters", []string{"get", "list", "watch"}},
		{"fke.dev", "nodepools", []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{"fke.dev", "machines", []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{"fke.dev", "nodepools/status", []string{"patch"}},
		{"fke.dev", "machines/status", []string{"patch"}},
		{"fke.dev", "nodepools/finalizers", []string{"update"}},
		{"fke.dev", "releases", []string{"get", "list", "watch"}},
		{"fke.dev", "releases/status", []string{"patch"}},
		{"fke.dev", "instancetypes", []string{"get", "list", "watch"}},
		{"", "secrets", []string{"get", "list", "watch"}},
		{"", "events", []string{"create", "patch"}},
	}
	// What the cluster and backup controllers add, with a runtime.
	withRuntime := []need{
		{"fke.dev", "clusters", []string{"update", "patch"}},
		{"fke.dev", "clusters/status", []string{"update", "patch"}},
		{"fke.dev", "clusters/finalizers", []string{"update"}},
		{"", "secrets", []string{"create", "update", "delete"}},
	}
	cr := r.clusterRoles[0].Rules
	for _, n := range always {
		if !grants(cr, n.group, n.resource, n.verbs...) {
			t.Errorf("the ClusterRole does not allow %v on %s.%s", n.verbs, n.resource, n.group)
		}
	}
	for _, n := range withRuntime {
		for _, v := range n.verbs {
			if grants(cr, n.group, n.resource, v) {
				t.Errorf("without a runtime, the ClusterRole still allows %s on %s.%s", v, n.resource, n.group)
			}
		}
	}
	if grants(cr, "fke.dev", "instancetypes", "update") || grants(cr, "fke.dev", "clusters", "delete") || grants(cr, "", "secrets", "patch") {
		t.Error("the ClusterRole allows writes no controller makes")
	}
	local := mustRender(t, "runtimes={local}").clusterRoles[0].Rules
	for _, n := range append(always, withRuntime...) {
		if !grants(local, n.group, n.resource, n.verbs...) {
			t.Errorf("with runtime local, the ClusterRole does not allow %v on %s.%s", n.verbs, n.resource, n.group)
		}
	}

	// The hosted runtime adds what it keeps in tenants' namespaces.
	hostedRules := mustRender(t, "runtimes={hosted},hosted.registry=reg.example/fke").clusterRoles[0].Rules
	for _, n := range append(withRuntime,
		need{"", "namespaces", []string{"get", "list", "create", "patch", "delete"}},
		need{"", "secrets", []string{"create", "patch", "delete"}},
		// An addon turned off: its Service goes.
		need{"", "services", []string{"get", "create", "patch", "delete"}},
		// kwok of hosted clusters: applied, and removed with the pool's cluster.
		need{"apps", "deployments", []string{"get", "list", "create", "patch", "delete"}},
		need{"apps", "statefulsets", []string{"get", "create", "patch"}},
		need{"policy", "poddisruptionbudgets", []string{"get", "create", "patch"}},
		need{"", "pods", []string{"list"}},
		need{"", "nodes", []string{"list"}},
		// A new plane's etcd members listed before its API server starts.
		need{"discovery.k8s.io", "endpointslices", []string{"list"}},
	) {
		if !grants(hostedRules, n.group, n.resource, n.verbs...) {
			t.Errorf("with runtime hosted, the ClusterRole does not allow %v on %s.%s", n.verbs, n.resource, n.group)
		}
	}
	if grants(local, "", "namespaces", "create") || grants(local, "apps", "deployments", "patch") {
		t.Error("with runtime local only, the ClusterRole allows the hosted runtime's writes")
	}

	sa := r.deployment.Spec.Template.Spec.ServiceAccountName
	if r.serviceAccount == nil || r.serviceAccount.Name != sa {
		t.Fatalf("the Deployment runs as %q, the chart makes %+v", sa, r.serviceAccount)
	}
	subjects := append(slices.Clone(r.crBindings[0].Subjects), r.roleBindings[0].Subjects...)
	for _, s := range subjects {
		if s.Kind != "ServiceAccount" || s.Name != sa || s.Namespace != namespace {
			t.Errorf("binding subject %+v is not the manager's ServiceAccount", s)
		}
	}
	if r.crBindings[0].RoleRef.Name != r.clusterRoles[0].Name || r.roleBindings[0].RoleRef.Name != r.roles[0].Name {
		t.Error("a binding names a role the chart does not make")
	}
}

func grants(rules []rbacv1.PolicyRule, group, resource string, verbs ...string) bool {
	for _, v := range verbs {
		ok := false
		for _, r := range rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, v) && len(r.ResourceNames) == 0 {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// TestCRDsMatchConfig: the chart's CRDs are config/crd/bases, byte for byte
// (`make chart-crds` copies them after `make generate`).
// TestInstanceTypesMatchCatalog: the chart installs fke's default instance
// types, as `fke up` does, kept on uninstall; none when asked not to.
func TestInstanceTypesMatchCatalog(t *testing.T) {
	got := mustRender(t, "").instanceTypes
	want := catalog.Default()
	if len(got) != len(want) {
		t.Fatalf("the chart installs %d instance types, the catalog has %d: run `make chart-crds`", len(got), len(want))
	}
	byName := map[string]fkev1.InstanceType{}
	for _, it := range got {
		byName[it.Name] = it
	}
	for _, w := range want {
		g, ok := byName[w.Name]
		if !ok || !equality.Semantic.DeepEqual(g.Spec, w.Spec) {
			t.Errorf("instance type %s: chart %+v, catalog %+v: run `make chart-crds`", w.Name, g.Spec, w.Spec)
		}
		if g.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%s is removed on uninstall while pools may name it", w.Name)
		}
	}
	if n := len(mustRender(t, "instanceTypes.install=false").instanceTypes); n != 0 {
		t.Errorf("instanceTypes.install=false still installs %d instance types", n)
	}
}

func TestCRDsMatchConfig(t *testing.T) {
	src := filepath.Join("..", "config", "crd", "bases")
	want, err := filepath.Glob(filepath.Join(src, "*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no CRDs in %s: %v", src, err)
	}
	crds := loadChart(t).CRDObjects()
	got := map[string][]byte{}
	for _, c := range crds {
		got[filepath.Base(c.Filename)] = c.File.Data
	}
	for _, p := range want {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(p)
		if !bytes.Equal(got[name], data) {
			t.Errorf("charts/fke/crds/%s differs from config/crd/bases/%s (or is missing): run `make chart-crds`", name, name)
		}
		delete(got, name)
	}
	for name := range got {
		t.Errorf("charts/fke/crds/%s is not in config/crd/bases: run `make chart-crds`", name)
	}
}

// TestImageTag: the chart's default image is the one `fke image
// push-manager` pushes.
func TestImageTag(t *testing.T) {
	if want := "fke/manager:" + loadChart(t).Metadata.AppVersion; image.Manager.Name != want {
		t.Errorf("fke pushes the manager as %q, the chart pulls %q", image.Manager.Name, want)
	}
}

func portNamed(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container has no port %q: %+v", name, c.Ports)
	return 0
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
