package hosted

// Replacing etcd members. A member of an etcd cluster the runtime runs (a
// tenant's dedicated etcd, the shared one) keeps its data in its pod. A
// member whose pod is replaced (a rolling update of its StatefulSet, an
// eviction, a lost node) starts with no data, and etcd refuses to
// bootstrap it again: the cluster still lists the member it was. The
// runtime then replaces the member: it removes the old one, adds one at
// the same peer URL, and marks the pod to start as a member of an
// existing cluster; the new member receives the data from the leader.
// A cluster that lost its quorum cannot be repaired this way; its tenant
// is restored from a snapshot.
//
// The kubelet may restart the container while the runtime works. In that
// order no restart does harm: before the removal etcd refuses as before;
// between the removal and the mark, a start as "new" bootstraps a lone
// member in the data directory of "new", which the start as "existing"
// does not use (its own directory, etcdCluster), and that exits as a
// removed member, which the runtime takes up again if the add failed;
// after the mark the start joins as the member just added. The runtime
// acts only on a container that is not running and whose last exit was
// one of those two.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// AnnotationEtcdClusterState is an etcd member pod's
	// --initial-cluster-state: "new" as the template makes it, "existing"
	// once the runtime has added the member to the running cluster.
	AnnotationEtcdClusterState = "fke.dev/etcd-initial-cluster-state"
	etcdStateNew               = "new"
	etcdStateExisting          = "existing"
	// bootstrappedMessage is what etcd says as it exits when it would
	// bootstrap a member the cluster already has.
	bootstrappedMessage = "has already been bootstrapped"
	// removedMessage is what it says when it started as a member the
	// cluster has removed: a start as "new" after the runtime removed the
	// old member and before it added the new one (an add that failed, a
	// manager that stopped in between).
	removedMessage = "has been permanently removed from the cluster"
)

// needsReplacing returns the member pods whose container is not running
// and last exited because etcd refused to bootstrap a member the cluster
// already has, or found its member removed, and that the runtime has not
// replaced yet.
func needsReplacing(pods []corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Annotations[AnnotationEtcdClusterState] == etcdStateExisting || !p.DeletionTimestamp.IsZero() {
			continue
		}
		for _, c := range p.Status.ContainerStatuses {
			last := c.State.Terminated
			if c.State.Waiting != nil {
				last = c.LastTerminationState.Terminated
			}
			if last != nil && (strings.Contains(last.Message, bootstrappedMessage) || strings.Contains(last.Message, removedMessage)) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// memberCallTimeout bounds each membership call. etcd makes one
// membership change at a time: the leader turns a change proposed before
// it has applied the one before into a no-op, and a member that passed
// such an add on to the leader waits for an answer that never comes,
// until the call's context ends. A variable for the tests.
var memberCallTimeout = 10 * time.Second

// memberAttempts is how many times replaceMember tries before it leaves
// the rest to the next reconcile.
const memberAttempts = 3

// replaceMember makes the member at peerURL a new, not yet started member
// of the cluster: it removes the member that was started there and adds
// one. It is idempotent: a member added and not started yet is left as it
// is, and a removed one is added. A try that failed (a call that ran out
// of time, which etcd answers as a timeout or the client as its deadline)
// is followed by another from the member list, which says what was made.
func replaceMember(ctx context.Context, cl clientv3.Cluster, peerURL string) error {
	var err error
	for range memberAttempts {
		if err = replaceMemberOnce(ctx, cl, peerURL); err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func replaceMemberOnce(ctx context.Context, cl clientv3.Cluster, peerURL string) error {
	bounded := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, memberCallTimeout) }
	callCtx, cancel := bounded()
	list, err := cl.MemberList(callCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("listing the members: %w", err)
	}
	for _, m := range list.Members {
		if !slices.Contains(m.PeerURLs, peerURL) {
			continue
		}
		if m.Name == "" {
			return nil // added, waiting for its pod to start
		}
		callCtx, cancel := bounded()
		_, err := cl.MemberRemove(callCtx, m.ID)
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
			return fmt.Errorf("removing member %s (%x): %w", m.Name, m.ID, err)
		}
	}
	callCtx, cancel = bounded()
	_, err = cl.MemberAdd(callCtx, []string{peerURL})
	cancel()
	// ErrPeerURLExist: an add whose call ran out of time was made after all.
	if err != nil && !errors.Is(err, rpctypes.ErrPeerURLExist) {
		return fmt.Errorf("adding a member at %s: %w", peerURL, err)
	}
	return nil
}

// replaceMembers replaces the members of the etcd StatefulSet name in ns
// whose pods need it (needsReplacing); pods are ns's pods, just read.
// connect connects to the cluster's ready members with credentials that
// may change its membership; without a quorum (errStarting) nothing is
// done.
func (r *Runtime) replaceMembers(ctx context.Context, ns, name string, pods []corev1.Pod, connect func(context.Context) (*clientv3.Client, error)) error {
	members := slices.DeleteFunc(slices.Clone(pods), func(p corev1.Pod) bool { return p.Labels[LabelComponent] != name })
	todo := needsReplacing(members)
	if len(todo) == 0 {
		return nil
	}
	cli, err := connect(ctx)
	if errors.Is(err, errStarting) {
		return nil
	}
	if err != nil {
		return err
	}
	defer cli.Close()
	for _, p := range todo {
		peer := "https://" + etcdPodHost(p.Name, name, ns) + ":" + strconv.Itoa(etcdPeerPort)
		if err := replaceMember(ctx, cli, peer); err != nil {
			return fmt.Errorf("replacing etcd member %s/%s: %w", ns, p.Name, err)
		}
		patch := client.MergeFrom(p.DeepCopy())
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[AnnotationEtcdClusterState] = etcdStateExisting
		if err := r.c.Patch(ctx, p, patch); err != nil {
			return fmt.Errorf("marking etcd member %s/%s to join: %w", ns, p.Name, err)
		}
		r.log.Info("etcd member replaced: its pod started without its data and joins again", "namespace", ns, "member", p.Name)
	}
	return nil
}
