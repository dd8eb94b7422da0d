package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// waitRetry is how often a CSR of a node that is not registered yet is looked at again.
const waitRetry = 2 * time.Second

// CSRApprover is a controller of one tenant cluster: it approves the
// certificate requests of registered nodes that fke checks itself, and
// denies the others with a reason: kubelet serving certificates whose
// requester and SANs match the Node (see DecideServing), and the client
// certificates of a node's own kube-proxy (see DecideProxyClient).
// kube-controller-manager's csrsigning controller then signs the approved
// ones with the cluster CA.
type CSRApprover struct {
	client kubernetes.Interface
	log    *slog.Logger
}

// NewCSRApprover returns an approver acting through c (which must be
// allowed to read Nodes and approve CSRs of signers kubelet-serving and
// kube-apiserver-client).
func NewCSRApprover(c kubernetes.Interface, log *slog.Logger) *CSRApprover {
	if log == nil {
		log = slog.Default()
	}
	return &CSRApprover{client: c, log: log}
}

// approvedSigners are the signers whose CSRs CSRApprover looks at.
var approvedSigners = []string{certv1.KubeletServingSignerName, certv1.KubeAPIServerClientSignerName}

// Run watches CSRs and decides on them until ctx ends. It returns nil when
// ctx ends, or an error when its cache cannot sync.
func (a *CSRApprover) Run(ctx context.Context) error {
	// A field selector matches one signer; CSRs are few, so the cache
	// holds them all and the handler picks.
	factory := informers.NewSharedInformerFactory(a.client, 0)
	csrs := factory.Certificates().V1().CertificateSigningRequests()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if csr, ok := obj.(*certv1.CertificateSigningRequest); ok && slices.Contains(approvedSigners, csr.Spec.SignerName) && !decided(csr) {
			queue.Add(csr.Name)
		}
	}
	if _, err := csrs.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
	}); err != nil {
		return fmt.Errorf("CSR approver: %w", err)
	}
	lister := csrs.Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !toolscache.WaitForCacheSync(ctx.Done(), csrs.Informer().HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("CSR approver: CSR cache did not sync")
	}
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		name, quit := queue.Get()
		if quit {
			return nil
		}
		retry, err := a.sync(ctx, lister, name)
		switch {
		case err != nil:
			a.log.Error("deciding on CSR failed", "csr", name, "error", err)
			queue.AddRateLimited(name)
		case retry:
			queue.Forget(name)
			queue.AddAfter(name, waitRetry)
		default:
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

// sync decides on the CSR name; retry reports that it waits for its node.
func (a *CSRApprover) sync(ctx context.Context, lister certlisters.CertificateSigningRequestLister, name string) (retry bool, err error) {
	csr, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var node *corev1.Node
	if nodeName, ok := nodeOf(csr); ok {
		n, err := a.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		switch {
		case err == nil:
			node = n
		case !apierrors.IsNotFound(err):
			return false, fmt.Errorf("getting node %s: %w", nodeName, err)
		}
	}
	d := Decide(csr, node)
	switch d.Action {
	case Ignore:
		return false, nil
	case Wait:
		return true, nil
	}
	csr = csr.DeepCopy()
	cond := certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: d.Reason, Message: d.Message,
		LastUpdateTime: metav1.Now(),
	}
	if d.Action == Deny {
		cond.Type = certv1.CertificateDenied
	}
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	if _, err := a.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("updating approval of %s: %w", csr.Name, err)
	}
	if d.Action == Deny {
		a.log.Warn("denied CSR", "csr", csr.Name, "signer", csr.Spec.SignerName, "user", csr.Spec.Username, "reason", d.Reason, "message", d.Message)
	} else {
		a.log.Info("approved CSR", "csr", csr.Name, "signer", csr.Spec.SignerName, "user", csr.Spec.Username)
	}
	return false, nil
}

func nodeOf(csr *certv1.CertificateSigningRequest) (string, bool) {
	name, ok := strings.CutPrefix(csr.Spec.Username, NodeUserPrefix)
	return name, ok && name != ""
}

// Approvers runs one CSRApprover per tenant cluster, for a manager that
// learns about tenants one by one. Safe for concurrent use.
type Approvers struct {
	Log *slog.Logger

	mu      sync.Mutex
	running map[string]*runningApprover
}

type runningApprover struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Ensure starts the approver of the tenant key acting through c, unless one
// already runs for key. Idempotent; the approver runs until Stop or StopAll.
func (a *Approvers) Ensure(key string, c kubernetes.Interface) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running == nil {
		a.running = map[string]*runningApprover{}
	}
	if _, ok := a.running[key]; ok {
		return
	}
	log := a.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("cluster", key)
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningApprover{cancel: cancel, done: make(chan struct{})}
	a.running[key] = r
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			if err := NewCSRApprover(c, log).Run(ctx); err != nil {
				log.Error("CSR approver stopped; restarting", "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
				}
			}
		}
	}()
}

// Running reports whether an approver runs for key.
func (a *Approvers) Running(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.running[key]
	return ok
}

// Stop stops the approver of key and waits for it. Idempotent.
func (a *Approvers) Stop(key string) {
	a.mu.Lock()
	r, ok := a.running[key]
	delete(a.running, key)
	a.mu.Unlock()
	if ok {
		r.cancel()
		<-r.done
	}
}

// StopAll stops every approver.
func (a *Approvers) StopAll() {
	a.mu.Lock()
	keys := make([]string, 0, len(a.running))
	for k := range a.running {
		keys = append(keys, k)
	}
	a.mu.Unlock()
	for _, k := range keys {
		a.Stop(k)
	}
}
