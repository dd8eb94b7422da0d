package main

import (
	"slices"
	"strings"
	"testing"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/manager"
)

func TestParseFlags(t *testing.T) {
	// What the Helm chart passes.
	opts, err := parseFlags([]string{"--leader-elect", "--leader-election-namespace=fke-system", "--runtimes=", "--providers=kwok",
		"--data-dir=/var/lib/fke", "--health-addr=:8081", "--metrics-addr=:8080"})
	if err != nil {
		t.Fatal(err)
	}
	if !opts.LeaderElection.Enabled || opts.LeaderElection.Namespace != "fke-system" {
		t.Errorf("leader election = %+v", opts.LeaderElection)
	}
	if opts.Runtimes == nil || len(opts.Runtimes) != 0 || !slices.Equal(opts.Providers, []fkev1.ProviderName{fkev1.ProviderKwok}) {
		t.Errorf("runtimes %#v, providers %#v", opts.Runtimes, opts.Providers)
	}
	if opts.DataDir != "/var/lib/fke" || opts.HealthAddr != ":8081" || opts.MetricsAddr != ":8080" {
		t.Errorf("options = %+v", opts)
	}

	// The defaults run the local runtime and every provider, without
	// leader election, as `fke up` does.
	opts, err = parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if opts.LeaderElection.Enabled || !slices.Equal(opts.Runtimes, manager.DefaultRuntimes) || !slices.Equal(opts.Providers, manager.Providers) {
		t.Errorf("defaults: %+v", opts)
	}

	for args, want := range map[string]string{
		"--runtimes=hosted":    `--runtimes=hosted needs --hosted-registry`,
		"--runtimes=docker":    `--runtimes: unknown runtime "docker"`,
		"--providers=kwok,aws": `--providers: unknown provider "aws"`,
		"--no-such-flag":       "flag provided but not defined",
		"extra":                "unexpected arguments",
	} {
		if _, err := parseFlags(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", args, err, want)
		}
	}
}
