package manager

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/admission"
	"fke.dev/fke/internal/nodeprovider"
)

// WebhookOptions configure the validating admission webhook fke-manager
// serves for the fke.dev kinds.
type WebhookOptions struct {
	// Host is the address the webhook listens on and the API server calls
	// (default 127.0.0.1).
	Host string
	// Port of the webhook; 0 disables it (and installs no configuration).
	Port int
	// CertDir keeps the webhook's CA and serving certificate (see
	// admission.EnsureCertificates); created when missing.
	CertDir string
}

// webhookSetup is the prepared webhook: its server (for the manager's
// options) and its CA, until register completes it.
type webhookSetup struct {
	opts   WebhookOptions
	server webhook.Server
	caPEM  []byte
}

// removeWebhook deletes the configuration a previous run installed, when
// this run serves no webhook.
func removeWebhook(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) error {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	return admission.RemoveConfiguration(ctx, c)
}

// prepareWebhook makes the webhook's certificates and server; nil when disabled.
func prepareWebhook(o WebhookOptions) (*webhookSetup, error) {
	if o.Port == 0 {
		return nil, nil
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.CertDir == "" {
		return nil, fmt.Errorf("the webhook needs a certificate directory")
	}
	caPEM, err := admission.EnsureCertificates(o.CertDir, o.Host)
	if err != nil {
		return nil, fmt.Errorf("webhook certificates: %w", err)
	}
	srv := webhook.NewServer(webhook.Options{Host: o.Host, Port: o.Port, CertDir: o.CertDir,
		CertName: admission.TLSCertFile, KeyName: "tls.key"})
	return &webhookSetup{opts: o, server: srv, caPEM: caPEM}, nil
}

// register serves the handlers, makes readiness wait for the server, and
// installs the ValidatingWebhookConfiguration that points the API server
// at it. providers are the node providers this manager runs.
func (w *webhookSetup) register(ctx context.Context, mgr ctrl.Manager, cfg *rest.Config, scheme *runtime.Scheme, providers map[fkev1.ProviderName]nodeprovider.Provider) error {
	names := make([]fkev1.ProviderName, 0, len(providers))
	for name := range providers {
		names = append(names, name)
	}
	slices.Sort(names)
	v := admission.New(scheme, mgr.GetAPIReader(), func() []fkev1.ProviderName { return names })
	// GetWebhookServer (not w.server) also adds the server to the manager's runnables.
	srv := mgr.GetWebhookServer()
	srv.Register(admission.PathCluster, &webhook.Admission{Handler: v.ClusterHandler()})
	srv.Register(admission.PathNodePool, &webhook.Admission{Handler: v.NodePoolHandler()})
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	base := "https://" + net.JoinHostPort(w.opts.Host, strconv.Itoa(w.opts.Port))
	return admission.EnsureConfiguration(ctx, c, admission.Configuration(base, w.caPEM))
}
