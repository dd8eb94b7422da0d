package image

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"fke.dev/fke/internal/binaries"
)

// SystemImage is an image fke builds from one of the binaries it ships and
// keeps in its registry.
type SystemImage struct {
	// Name is "<repository>:<tag>" in fke's registry.
	Name string
	// Binary is found with binaries.Finder.
	Binary string
	// Version, when set, is the Kubernetes version of Binary (found with
	// binaries.Finder.PathFor).
	Version string
	// Path is where the binary lives in the image.
	Path         string
	Args         []string
	User         string
	ExposedPorts []string
}

// The images fke keeps in its registry. Pods and node configuration name
// them as <registry address>/<Name>.
var (
	// Pause is every local node's sandbox image (containerd's sandbox_image).
	Pause = SystemImage{Name: "fke/pause:1.0", Binary: binaries.Pause, Path: "/pause", User: "65535:65535"}
	// DemoServer is the demo inference server (HTTP on 8080).
	DemoServer = SystemImage{Name: "fke/demo-server:v1", Binary: binaries.DemoServer, Path: "/fke-demo-server",
		User: "65534:65534", ExposedPorts: []string{"8080/tcp"}}
	// GPUAgent is fke's GPU node agent (device plugin, labels, metrics).
	GPUAgent = SystemImage{Name: "fke/gpu-agent:v1", Binary: binaries.GPUAgent, Path: "/usr/bin/fke-gpu-agent"}
	// CoreDNS is the cluster DNS of clusters with local nodes.
	CoreDNS = SystemImage{Name: "fke/coredns:v1.15.0", Binary: binaries.CoreDNS, Path: "/coredns",
		ExposedPorts: []string{"53/udp", "53/tcp", "9153/tcp"}}
)

// Manager is fke-manager for a Deployment on a Kubernetes cluster (the Helm
// chart charts/fke, whose appVersion is its tag). It is not among
// SystemImages: `fke up` does not need it, and `fke image push-manager`
// pushes it.
var Manager = SystemImage{Name: "fke/manager:v0.1.0", Binary: binaries.Manager, Path: "/usr/bin/fke-manager", User: "65532:65532",
	ExposedPorts: []string{"8080/tcp", "8081/tcp"}}

// EtcdVersion is the version of the etcd binary fke builds (hack/k8s/etcd),
// the tag of its image.
const EtcdVersion = "3.7.0"

// ControlPlaneRepository is the repository, under a registry, of the
// control-plane images of the hosted runtime: <registry>/fke/<binary>:<tag>.
const ControlPlaneRepository = "fke"

// ControlPlane is the image of one control-plane component for the hosted
// runtime: binary (kube-apiserver, kube-controller-manager, kube-scheduler
// at Kubernetes version, or etcd at EtcdVersion) at /usr/local/bin/<binary>,
// where the upstream images (registry.k8s.io) keep it, so that the runtime
// runs either with the same command.
func ControlPlane(binary, version string) SystemImage {
	si := SystemImage{Name: ControlPlaneRepository + "/" + binary + ":" + version, Binary: binary, Path: "/usr/local/bin/" + binary, User: "65532:65532"}
	if binary != binaries.Etcd {
		si.Version = version
	}
	return si
}

// ControlPlaneImages are the images the hosted runtime runs for Kubernetes
// version.
func ControlPlaneImages(version string) []SystemImage {
	return []SystemImage{
		ControlPlane(binaries.KubeAPIServer, version), ControlPlane(binaries.KubeControllerManager, version),
		ControlPlane(binaries.KubeScheduler, version), ControlPlane(binaries.Etcd, EtcdVersion),
	}
}

// addonTags are the tags of the addon images, by binary: metrics-server
// at the version fke builds (hack/k8s/metrics-server, the addons package
// checks the two agree), fke's GPU metrics adapter and VPA at v1.
var addonTags = map[string]string{"metrics-server": "v0.8.0", "fke-gpu-metrics": "v1", "fke-vpa": "v1"}

// Addon is the image of an addon process (controlplane.Addon) for the
// hosted runtime, which runs it in pods: <ControlPlaneRepository>/<binary>
// with the binary at /usr/local/bin, as ControlPlane has it; false for a
// binary that has none.
func Addon(binary string) (SystemImage, bool) {
	tag, ok := addonTags[binary]
	if !ok {
		return SystemImage{}, false
	}
	si := ControlPlane(binary, tag)
	si.Version = "" // the tag is not a Kubernetes version: the binary beside fke
	return si, true
}

// AddonImages are the images of every addon process the hosted runtime
// runs, sorted by binary.
func AddonImages() []SystemImage {
	var out []SystemImage
	for _, b := range slices.Sorted(maps.Keys(addonTags)) {
		si, _ := Addon(b)
		out = append(out, si)
	}
	return out
}

// KwokVersion is the version of the kwok binary fke builds (hack/k8s/kwok),
// the tag of its image.
const KwokVersion = "v0.8.0"

// Kwok is kwok for the hosted runtime: the simulated nodes of a hosted
// cluster are kept by a kwok Deployment next to its control plane.
var Kwok = SystemImage{Name: ControlPlaneRepository + "/" + binaries.Kwok + ":" + KwokVersion, Binary: binaries.Kwok,
	Path: "/usr/local/bin/" + binaries.Kwok, User: "65532:65532"}

// SystemImages lists every system image.
var SystemImages = []SystemImage{Pause, DemoServer, GPUAgent, CoreDNS}

// Ref is si's reference in the registry at host (host:port), as pods and
// containerd name it, e.g. Pause.Ref("172.29.0.1:5000") for a node's
// sandbox_image.
func (si SystemImage) Ref(host string) string { return host + "/" + si.Name }

// ownBinaries are built by `make build`, not `make binaries`.
var ownBinaries = map[string]bool{binaries.Pause: true, binaries.DemoServer: true, binaries.GPUAgent: true, binaries.Manager: true}

// Build builds si from the binary at binPath.
func (si SystemImage) Build(binPath string) (v1.Image, error) {
	s, err := si.Spec(binPath)
	if err != nil {
		return nil, err
	}
	return Build(s)
}

// Spec is the image of si with the binary at binPath, for the binary's
// architecture.
func (si SystemImage) Spec(binPath string) (Spec, error) {
	files, err := BinaryFiles(binPath, si.Path)
	if err != nil {
		return Spec{}, fmt.Errorf("image %s: %w", si.Name, err)
	}
	arch, err := ELFArch(binPath)
	if err != nil {
		return Spec{}, fmt.Errorf("image %s: %w", si.Name, err)
	}
	return Spec{
		Files: files, Entrypoint: append([]string{si.Path}, si.Args...), User: si.User, ExposedPorts: si.ExposedPorts,
		Labels: map[string]string{"org.opencontainers.image.title": si.Name, "dev.fke.built-by": "fke"}, Arch: arch,
	}, nil
}

// Pushed is one system image in the registry.
type Pushed struct {
	Name   string
	Digest v1.Hash
}

// EnsureSystemImages builds each of images (all SystemImages when none is
// given) from the binaries finder finds and pushes it to reg. Idempotent:
// an image that is already there is not sent again. It pushes every image
// it can and returns the others' errors joined (a missing binary is a
// *binaries.MissingError).
func EnsureSystemImages(ctx context.Context, reg Registry, finder binaries.Finder, log *slog.Logger, images ...SystemImage) ([]Pushed, error) {
	if len(images) == 0 {
		images = SystemImages
	}
	if log == nil {
		log = slog.Default()
	}
	var out []Pushed
	var errs []error
	for _, si := range images {
		p, err := finder.PathFor(si.Version, si.Binary)
		if err != nil {
			if ownBinaries[si.Binary] {
				err = fmt.Errorf("%s is built by `make build` (next to fke): %w", si.Binary, err)
			}
			errs = append(errs, fmt.Errorf("image %s: %w", si.Name, err))
			continue
		}
		img, err := si.Build(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d, err := reg.Push(ctx, si.Name, img)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("system image in registry", "image", si.Name, "digest", d.String())
		out = append(out, Pushed{Name: si.Name, Digest: d})
	}
	return out, errors.Join(errs...)
}
