// Command release lays out a release of fke from binaries built
// beforehand; `make release VERSION=vX.Y.Z` builds them and runs it.
//
//	go run ./hack/release --version v1.2.3 --out _output/release/v1.2.3 \
//	    --platform linux/amd64=_output/bin [--platform linux/arm64=DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"fke.dev/fke/internal/release"
)

type platforms []release.Platform

func (p *platforms) String() string { return fmt.Sprint(*p) }
func (p *platforms) Set(s string) error {
	pl, err := release.ParsePlatform(s)
	if err != nil {
		return err
	}
	*p = append(*p, pl)
	return nil
}

func main() {
	var s release.Spec
	var ps platforms
	flag.StringVar(&s.Version, "version", "", "the release's version, e.g. v1.2.3")
	flag.StringVar(&s.Out, "out", "", "directory to write the release into (must not exist or be empty)")
	flag.StringVar(&s.Chart, "chart", "charts/fke", "the Helm chart's directory")
	flag.Var(&ps, "platform", "os/arch=directory of that platform's binaries (repeat)")
	listUpstream := flag.Bool("list-upstream", false, "print the upstream binaries a release holds (for hack/k8s/build.sh) and exit")
	flag.Parse()
	if *listUpstream {
		fmt.Println(strings.Join(release.Upstream(), " "))
		return
	}
	s.Platforms, s.Progress = ps, os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	arts, err := release.Make(ctx, s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		os.Exit(1)
	}
	fmt.Printf("release %s in %s:\n", s.Version, s.Out)
	for _, a := range arts {
		fmt.Printf("  %-40s %10.1f MiB  sha256:%s\n", a.Name, float64(a.Size)/(1<<20), a.SHA256)
	}
}
