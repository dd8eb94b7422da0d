package main

import (
	"context"
	"flag"
	"fmt"

	"go.etcd.io/etcd/pkg/v3/flags"
	"go.etcd.io/etcd/server/v3/embed"
)

// etcdConfig parses the etcd flags fke gives a tenant's etcd into an
// embedded server's configuration. The flags are etcd's own (embed.Config
// registers them); the list-valued ones are read back from the flag set,
// as etcd's command does, and --initial-cluster-state is the one flag the
// command adds itself.
func etcdConfig(args []string) (*embed.Config, error) {
	cfg := embed.NewConfig()
	fs := flag.NewFlagSet(etcdName, flag.ContinueOnError)
	cfg.AddFlags(fs)
	state := fs.String("initial-cluster-state", embed.ClusterStateFlagNew, "new or existing")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.ListenPeerUrls = flags.UniqueURLsFromFlag(fs, "listen-peer-urls")
	cfg.AdvertisePeerUrls = flags.UniqueURLsFromFlag(fs, "initial-advertise-peer-urls")
	cfg.ListenClientUrls = flags.UniqueURLsFromFlag(fs, "listen-client-urls")
	cfg.ListenClientHttpUrls = flags.UniqueURLsFromFlag(fs, "listen-client-http-urls")
	cfg.AdvertiseClientUrls = flags.UniqueURLsFromFlag(fs, "advertise-client-urls")
	cfg.ListenMetricsUrls = flags.UniqueURLsFromFlag(fs, "listen-metrics-urls")
	cfg.PeerTLSInfo.AllowedCNs = flags.StringsFromFlag(fs, "peer-cert-allowed-cn")
	cfg.LogOutputs = flags.UniqueStringsFromFlag(fs, "log-outputs")
	cfg.ClusterState = *state
	fs.Visit(func(f *flag.Flag) { cfg.FlagsExplicitlySet[f.Name] = true })
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// startEtcd starts the embedded etcd and returns once its listeners are
// bound: clients may connect at once, and their requests wait until it
// serves, so the API server's own start (most of a plane's start) runs
// beside etcd's. It sends an error to stopped when the server stops, or
// when it stops before it served.
func startEtcd(ctx context.Context, cfg *embed.Config, stopped chan<- error) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	go func() {
		select {
		case <-e.Server.ReadyNotify():
		case <-e.Server.StopNotify():
			stopped <- fmt.Errorf("%s stopped before it was ready: %w", etcdName, <-e.Err())
			return
		case <-ctx.Done():
			e.Close()
			return
		}
		select {
		case err := <-e.Err():
			stopped <- fmt.Errorf("%s stopped: %w", etcdName, err)
		case <-e.Server.StopNotify():
			stopped <- fmt.Errorf("%s stopped", etcdName)
		case <-ctx.Done():
			e.Close()
		}
	}()
	return e, nil
}
