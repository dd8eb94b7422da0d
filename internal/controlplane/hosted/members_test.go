package hosted

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"fke.dev/fke/internal/controlplane"
)

const bootstrapped = `{"level":"fatal","msg":"discovery failed","error":"member a0d27f33a7ff572a has already been bootstrapped"}`

// memberPod is a member's pod whose container is in state now (running,
// waiting or terminated), having last exited with last.
func memberPod(name, annotation, now string, last *corev1.ContainerStateTerminated) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if annotation != "" {
		p.Annotations[AnnotationEtcdClusterState] = annotation
	}
	c := corev1.ContainerStatus{Name: "etcd"}
	switch now {
	case "running":
		c.State.Running = &corev1.ContainerStateRunning{}
		c.LastTerminationState.Terminated = last
	case "waiting":
		c.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		c.LastTerminationState.Terminated = last
	case "terminated":
		c.State.Terminated = last
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{c}
	return p
}

func TestNeedsReplacing(t *testing.T) {
	said := &corev1.ContainerStateTerminated{ExitCode: 1, Message: bootstrapped}
	removed := &corev1.ContainerStateTerminated{ExitCode: 1, Message: `{"level":"warn","msg":"server error","error":"the member has been permanently removed from the cluster"}`}
	other := &corev1.ContainerStateTerminated{ExitCode: 1, Message: "open /var/lib/etcd/new: permission denied"}
	now := metav1.Now()
	deleting := memberPod("etcd-5", "new", "waiting", said)
	deleting.DeletionTimestamp = &now
	pods := []corev1.Pod{
		memberPod("etcd-0", "new", "running", nil),       // never failed
		memberPod("etcd-1", "new", "waiting", said),      // crash-looping on the refusal
		memberPod("etcd-2", "new", "terminated", said),   // refused just now
		memberPod("etcd-3", "new", "running", said),      // refused once, running now: left alone
		memberPod("etcd-4", "existing", "waiting", said), // replaced already, joining
		deleting, // going away
		memberPod("etcd-6", "new", "waiting", other),   // failing for another reason
		memberPod("etcd-7", "", "terminated", said),    // no annotation (an older template)
		memberPod("etcd-8", "new", "waiting", removed), // removed, and the add failed
	}
	var got []string
	for _, p := range needsReplacing(pods) {
		got = append(got, p.Name)
	}
	if want := []string{"etcd-1", "etcd-2", "etcd-7", "etcd-8"}; !slices.Equal(got, want) {
		t.Errorf("needsReplacing = %v, want %v", got, want)
	}
}

// fakeCluster is etcd's membership API over a list of members.
type fakeCluster struct {
	clientv3.Cluster
	members []*etcdserverpb.Member
	calls   []string
	next    uint64
	// hang is how many adds wait until their context ends, as an add
	// etcd dropped does, or answer timeout where it is set (etcd's
	// answer when the deadline reaches it first); land says whether
	// those adds are made all the same.
	hang    int
	land    bool
	timeout error
}

func (f *fakeCluster) MemberList(context.Context, ...clientv3.OpOption) (*clientv3.MemberListResponse, error) {
	return &clientv3.MemberListResponse{Members: slices.Clone(f.members)}, nil
}

func (f *fakeCluster) MemberRemove(_ context.Context, id uint64) (*clientv3.MemberRemoveResponse, error) {
	f.calls = append(f.calls, "remove")
	f.members = slices.DeleteFunc(f.members, func(m *etcdserverpb.Member) bool { return m.ID == id })
	return &clientv3.MemberRemoveResponse{}, nil
}

func (f *fakeCluster) MemberAdd(ctx context.Context, peers []string) (*clientv3.MemberAddResponse, error) {
	f.calls = append(f.calls, "add")
	if slices.ContainsFunc(f.members, func(m *etcdserverpb.Member) bool { return slices.Equal(m.PeerURLs, peers) }) {
		return nil, rpctypes.ErrPeerURLExist
	}
	if f.hang > 0 {
		f.hang--
		if f.land {
			f.next++
			f.members = append(f.members, &etcdserverpb.Member{ID: 100 + f.next, PeerURLs: peers})
		}
		if f.timeout != nil {
			return nil, f.timeout
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.next++
	f.members = append(f.members, &etcdserverpb.Member{ID: 100 + f.next, PeerURLs: peers})
	return &clientv3.MemberAddResponse{}, nil
}

func TestReplaceMember(t *testing.T) {
	const peer = "https://etcd-2.etcd.ns.svc:2380"
	started := func() []*etcdserverpb.Member {
		return []*etcdserverpb.Member{
			{ID: 1, Name: "etcd-0", PeerURLs: []string{"https://etcd-0.etcd.ns.svc:2380"}},
			{ID: 2, Name: "etcd-1", PeerURLs: []string{"https://etcd-1.etcd.ns.svc:2380"}},
			{ID: 3, Name: "etcd-2", PeerURLs: []string{peer}},
		}
	}
	defer func(d time.Duration) { memberCallTimeout = d }(memberCallTimeout)
	memberCallTimeout = 10 * time.Millisecond
	for _, tc := range []struct {
		name    string
		members []*etcdserverpb.Member
		hang    int
		land    bool
		timeout error
		calls   []string
	}{
		{"the old member is removed and a new one added", started(), 0, false, nil, []string{"remove", "add"}},
		{"removed, not added yet (a crash in between): added", started()[:2], 0, false, nil, []string{"add"}},
		{"added, not started yet: left as it is", append(started()[:2], &etcdserverpb.Member{ID: 9, PeerURLs: []string{peer}}), 0, false, nil, nil},
		{"an add dropped (a removal not applied yet on the leader): added again", started(), 1, false, nil, []string{"remove", "add", "add"}},
		{"an add whose answer never came, made all the same: not added twice", started(), 1, true, nil, []string{"remove", "add"}},
		{"an add dropped, answered by etcd as timed out: added again", started(), 1, false, rpctypes.ErrTimeout, []string{"remove", "add", "add"}},
		{"two adds dropped: added at the third", started(), 2, false, nil, []string{"remove", "add", "add", "add"}},
	} {
		f := &fakeCluster{members: tc.members, hang: tc.hang, land: tc.land, timeout: tc.timeout}
		if err := replaceMember(context.Background(), f, peer); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(f.calls, tc.calls) {
			t.Errorf("%s: calls %v, want %v", tc.name, f.calls, tc.calls)
		}
		var at []*etcdserverpb.Member
		for _, m := range f.members {
			if slices.Contains(m.PeerURLs, peer) {
				at = append(at, m)
			}
		}
		if len(f.members) != 3 || len(at) != 1 || at[0].Name != "" {
			t.Errorf("%s: members after: %v, want three, one of them unstarted at %s", tc.name, f.members, peer)
		}
		// Again: nothing more to do.
		f.calls = nil
		if err := replaceMember(context.Background(), f, peer); err != nil || f.calls != nil {
			t.Errorf("%s: a second call did %v (%v), want nothing", tc.name, f.calls, err)
		}
	}
}

func TestAwaitMembers(t *testing.T) {
	const ns = "fke-t-a"
	// slice lists members of the etcd Service: "etcd-0=10.0.0.1"; an
	// address "-" is none yet, a trailing "!" a terminating endpoint.
	slice := func(name, service string, members ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for _, m := range members {
			host, addr, _ := strings.Cut(m, "=")
			ep := discoveryv1.Endpoint{Hostname: ptr.To(host)}
			if addr, gone := strings.CutSuffix(addr, "!"); gone {
				ep.Conditions.Terminating = ptr.To(true)
				ep.Addresses = []string{addr}
			} else if addr != "-" {
				ep.Addresses = []string{addr}
			}
			s.Endpoints = append(s.Endpoints, ep)
		}
		return s
	}
	apiServer := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controlplane.APIServer}}
	for _, tc := range []struct {
		name string
		objs []client.Object
		want bool
	}{
		{"no member listed yet", nil, true},
		{"one of three listed; another Service's do not count", []client.Object{
			slice("etcd-a", EtcdService, "etcd-0=10.0.0.1", "etcd-1=-"),
			slice("other", "kube-apiserver", "etcd-1=10.0.0.2", "etcd-2=10.0.0.3"),
		}, true},
		{"a quorum listed, over two slices", []client.Object{
			slice("etcd-a", EtcdService, "etcd-0=10.0.0.1"), slice("etcd-b", EtcdService, "etcd-1=10.0.0.2", "etcd-2=-"),
		}, false},
		{"one of the two is terminating", []client.Object{slice("etcd-a", EtcdService, "etcd-0=10.0.0.1", "etcd-1=10.0.0.2!")}, true},
		// Once made, the API server is never held back (a member replaced
		// later, a plane scaled back after Stop).
		{"the API server exists", []client.Object{apiServer}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(tc.objs...).Build()
			r, err := New(Options{Client: c, Registry: "registry.test/fke"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.awaitMembers(context.Background(), ns)
			if err != nil || got != tc.want {
				t.Errorf("awaitMembers = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
