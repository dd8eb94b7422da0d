package crd

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// internalCRDs converts the embedded CRDs to the API server's internal form.
func internalCRDs(t *testing.T) map[string]*apiextensions.CustomResourceDefinition {
	t.Helper()
	crds, err := All()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*apiextensions.CustomResourceDefinition{}
	for _, c := range crds {
		in := &apiextensions.CustomResourceDefinition{}
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(c, in, nil); err != nil {
			t.Fatalf("converting %s: %v", c.Name, err)
		}
		in.Status.StoredVersions = []string{c.Spec.Versions[0].Name}
		out[c.Spec.Names.Kind] = in
	}
	return out
}

// TestCRDsAreAccepted runs the API server's own checks of a CRD, which
// compile every CEL rule and bound its cost: a CRD that fails them is
// refused when fke installs it.
func TestCRDsAreAccepted(t *testing.T) {
	for kind, c := range internalCRDs(t) {
		if errs := validation.ValidateCustomResourceDefinition(context.Background(), c); len(errs) > 0 {
			t.Errorf("%s: %v", kind, errs.ToAggregate())
		}
	}
}

// celCheck evaluates the CEL rules of kind's schema against obj (and old,
// for an update) as the API server does, and returns the messages.
func celCheck(t *testing.T, c *apiextensions.CustomResourceDefinition, obj, old string) string {
	t.Helper()
	props := c.Spec.Validation
	if props == nil {
		props = c.Spec.Versions[0].Schema
	}
	s, err := schema.NewStructural(props.OpenAPIV3Schema)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(y string) any {
		if y == "" {
			return nil
		}
		// As the API server decodes: JSON, integers as int64.
		j, err := yaml.YAMLToJSON([]byte(y))
		if err != nil {
			t.Fatalf("test object: %v\n%s", err, y)
		}
		var m map[string]any
		if err := utiljson.Unmarshal(j, &m); err != nil {
			t.Fatalf("test object: %v\n%s", err, y)
		}
		return m
	}
	v := cel.NewValidator(s, true, celconfig.PerCallLimit)
	errs, _ := v.Validate(context.Background(), nil, s, decode(obj), decode(old), celconfig.RuntimeCELCostBudget)
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return strings.Join(msgs, "\n")
}

// TestCELRules checks each CEL rule of the fke.dev kinds accepts good objects
// and refuses bad ones with its message. test/integration runs the same
// objects against a real API server; this is the fast loop.
func TestCELRules(t *testing.T) {
	crds := internalCRDs(t)
	const pool = "metadata: {name: gpu}\nspec: {clusterName: demo, instanceType: gpu-h100x8, replicas: 1"
	const cluster = "metadata: {name: demo}\nspec: {version: v1.37.2, network: {podCIDR: 10.112.0.0/12, serviceCIDR: 10.96.0.0/16}"
	const itype = "metadata: {name: t}\nspec: {cpu: '4', memory: 16Gi, pricePerHour: '1.00'"
	long := strings.Repeat("x", 10000)
	tests := []struct {
		name, kind, obj, old string
		want                 string // "" = accepted
	}{
		{"good pool", "NodePool", pool + ", labels: {team: ml, example.com/tier: gpu, node-restriction.kubernetes.io/pool: a, topology.kubernetes.io/zone: local-b}, taints: [{key: example.com/dedicated, value: ml, effect: NoSchedule}, {key: nvidia.com/gpu, effect: NoExecute}]}", "", ""},
		{"label key with spaces", "NodePool", pool + ", labels: {'bad key': x}}", "", "label key bad key is not a valid Kubernetes label key: write [prefix/]name"},
		{"label key prefix not a domain", "NodePool", pool + ", labels: {'Example_com/x': 'z'}}", "", "label key Example_com/x is not a valid Kubernetes label key"},
		{"label key name too long", "NodePool", pool + ", labels: {'example.com/" + strings.Repeat("n", 64) + "': 'z'}}", "", "is not a valid Kubernetes label key"},
		{"label value of 10000 characters", "NodePool", pool + ", labels: {team: " + long + "}}", "", "label team: a label value must be at most 63 characters"},
		{"reserved label kubernetes.io", "NodePool", pool + ", labels: {kubernetes.io/hostname: x}}", "", "label key kubernetes.io/hostname uses a prefix reserved for Kubernetes and fke"},
		{"reserved label node.kubernetes.io", "NodePool", pool + ", labels: {node.kubernetes.io/instance-type: x}}", "", "label key node.kubernetes.io/instance-type uses a prefix reserved"},
		{"reserved topology label", "NodePool", pool + ", labels: {topology.kubernetes.io/rack: x}}", "", "label key topology.kubernetes.io/rack uses a prefix reserved"},
		{"reserved label k8s.io", "NodePool", pool + ", labels: {k8s.io/x: y}}", "", "label key k8s.io/x uses a prefix reserved"},
		{"reserved label fke.dev", "NodePool", pool + ", labels: {fke.dev/nodepool: other}}", "", "label key fke.dev/nodepool uses a prefix reserved"},
		{"taint value too long", "NodePool", pool + ", taints: [{key: a, value: " + long + ", effect: NoSchedule}]}", "", "a taint value at most 63"},
		{"taint key too long", "NodePool", pool + ", taints: [{key: " + long + ", effect: NoSchedule}]}", "", "a taint key must be at most 317 characters"},
		{"taint effect unknown", "NodePool", pool + ", taints: [{key: a, effect: Sometimes}]}", "", "a taint effect must be NoSchedule, PreferNoSchedule or NoExecute"},
		{"good cluster", "Cluster", cluster + "}", "", ""},
		{"backups to S3", "Cluster", cluster + ", backup: {schedule: '@daily', s3: {endpoint: 'https://s3.eu-west-1.amazonaws.com', bucket: fke-backups, prefix: prod/fke, region: eu-west-1, secretRef: {name: s3-creds}}}}", "", ""},
		{"backups to a local S3 without TLS", "Cluster", cluster + ", backup: {s3: {endpoint: 'http://127.0.0.1:9000/', bucket: snapshots, secretRef: {name: s3}}}}", "", ""},
		{"S3 endpoint not a URL", "Cluster", cluster + ", backup: {s3: {endpoint: 's3.amazonaws.com', bucket: b-1, secretRef: {name: s}}}}", "", "endpoint must be the store's http:// or https:// URL without a path or query"},
		{"S3 endpoint with a path", "Cluster", cluster + ", backup: {s3: {endpoint: 'https://minio.example.com/bucket', bucket: b-1, secretRef: {name: s}}}}", "", "endpoint must be the store's http:// or https:// URL"},
		{"S3 endpoint ftp", "Cluster", cluster + ", backup: {s3: {endpoint: 'ftp://minio.example.com', bucket: b-1, secretRef: {name: s}}}}", "", "endpoint must be the store's http:// or https:// URL"},
		{"S3 bucket with capitals", "Cluster", cluster + ", backup: {s3: {endpoint: 'https://x.example.com', bucket: My_Bucket, secretRef: {name: s}}}}", "", "bucket must be a valid S3 bucket name"},
		{"S3 prefix with a leading slash", "Cluster", cluster + ", backup: {s3: {endpoint: 'https://x.example.com', bucket: b-1, prefix: /fke, secretRef: {name: s}}}}", "", "prefix is a relative key prefix"},
		{"S3 prefix with ..", "Cluster", cluster + ", backup: {s3: {endpoint: 'https://x.example.com', bucket: b-1, prefix: fke/../other, secretRef: {name: s}}}}", "", "prefix is a relative key prefix"},
		{"S3 CA bundle and insecure", "Cluster", cluster + ", backup: {s3: {endpoint: 'https://x.example.com', bucket: b-1, secretRef: {name: s}, insecureSkipTLSVerify: true, caBundle: 'LS0tLS0='}}}", "", "set caBundle (to trust the store's certificate) or insecureSkipTLSVerify"},
		{"cluster without network", "Cluster", "metadata: {name: demo}\nspec: {network: {}}", "", ""},
		{"pod CIDR equals service CIDR", "Cluster", "metadata: {name: demo}\nspec: {network: {podCIDR: 10.96.0.0/16, serviceCIDR: 10.96.0.0/16}}", "", "podCIDR 10.96.0.0/16 and serviceCIDR 10.96.0.0/16 overlap"},
		{"service CIDR inside pod CIDR", "Cluster", "metadata: {name: demo}\nspec: {network: {podCIDR: 10.96.0.0/12, serviceCIDR: 10.100.0.0/16}}", "", "overlap: pods and Services need separate ranges"},
		{"patch upgrade", "Cluster", cluster + "}", "metadata: {name: demo}\nspec: {version: v1.37.1, network: {podCIDR: 10.112.0.0/12, serviceCIDR: 10.96.0.0/16}}", ""},
		{"minor upgrade", "Cluster", cluster + "}", "metadata: {name: demo}\nspec: {version: v1.36.3, network: {podCIDR: 10.112.0.0/12, serviceCIDR: 10.96.0.0/16}}", ""},
		{"downgrade", "Cluster", "metadata: {name: demo}\nspec: {version: v1.36.3}", "metadata: {name: demo}\nspec: {version: v1.37.2}", "cannot change version from v1.37.2 back to v1.36.3: downgrades are not supported"},
		{"patch downgrade", "Cluster", "metadata: {name: demo}\nspec: {version: v1.37.1}", "metadata: {name: demo}\nspec: {version: v1.37.2}", "downgrades are not supported"},
		{"two minors at once", "Cluster", "metadata: {name: demo}\nspec: {version: v1.39.0}", "metadata: {name: demo}\nspec: {version: v1.37.2}", "cannot upgrade from v1.37.2 to v1.39.0: upgrade one minor version at a time"},
		{"good instance type", "InstanceType", itype + ", gpu: {count: 8, product: NVIDIA-H100, memoryMiB: 81559, migProfiles: [1g.10gb, 3g.40gb, 1c.3g.40gb, 1g.10gb+me, 7g.80gb]}}", "", ""},
		{"integer cpu", "InstanceType", "metadata: {name: t}\nspec: {cpu: 4, memory: 1024}", "", ""},
		{"cpu zero", "InstanceType", "metadata: {name: t}\nspec: {cpu: '0', memory: 16Gi}", "", "cpu must be greater than zero, such as 4 or 500m (got 0)"},
		{"cpu negative", "InstanceType", "metadata: {name: t}\nspec: {cpu: '-4', memory: 16Gi}", "", "cpu must be greater than zero, such as 4 or 500m (got -4)"},
		{"integer cpu negative", "InstanceType", "metadata: {name: t}\nspec: {cpu: -4, memory: 16Gi}", "", "cpu must be greater than zero"},
		{"memory zero", "InstanceType", "metadata: {name: t}\nspec: {cpu: '4', memory: 0Gi}", "", "memory must be greater than zero, such as 16Gi (got 0Gi)"},
		{"ephemeral storage negative", "InstanceType", itype + ", ephemeralStorage: -1Gi}", "", "ephemeralStorage must be greater than zero"},
		{"price negative", "InstanceType", "metadata: {name: t}\nspec: {cpu: '4', memory: 16Gi, pricePerHour: '-1'}", "", "pricePerHour must be a non-negative decimal such as 2.50 (got -1)"},
		{"MIG profile malformed", "InstanceType", itype + ", gpu: {count: 1, product: NVIDIA-A100, memoryMiB: 81920, migProfiles: [1g.10gb, 10gb]}}", "", "MIG profile 10gb is not well formed"},
		{"MIG profile too many slices", "InstanceType", itype + ", gpu: {count: 1, product: NVIDIA-A100, memoryMiB: 81920, migProfiles: [8g.80gb]}}", "", "MIG profile 8g.80gb is not well formed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := celCheck(t, crds[tt.kind], tt.obj, tt.old)
			switch {
			case tt.want == "" && got != "":
				t.Fatalf("refused: %s", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Fatalf("got %q, want a message containing %q", got, tt.want)
			}
		})
	}
}
