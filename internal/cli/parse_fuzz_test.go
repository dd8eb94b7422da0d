package cli

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The fuzz tests below run their seed corpus with every `go test`; run one
// longer with e.g. `go test -run '^$' -fuzz FuzzParsePoolShortcut ./internal/cli`.

// FuzzParsePoolShortcut: any --nodepool value is either refused with an
// error or gives a pool that is internally consistent, and the pool written
// back in canonical form parses to the same spec.
func FuzzParsePoolShortcut(f *testing.F) {
	for _, s := range []string{
		"name=gpu,type=gpu-h100x8,replicas=2",
		"name=gpu,type=gpu-h100x8,min=0,max=4,unneeded=30s",
		"name=cpu,instance-type=cpu-small,provider=kwok",
		"name=gpu,type=x,min=3,max=1",
		"name=gpu,type=x,replicas=-1",
		"name=gpu,type=x,unneeded=-5m,min=0,max=1",
		"name=gpu,type=x,replicas=99999999999",
		"name=Bad,type=x", "type=x", "name=gpu", "", ",", "=", "name=gpu,,type=x", "name=gpu,type=a=b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		np, err := parsePoolShortcut("default", "demo", spec)
		if err != nil {
			if np != nil {
				t.Fatalf("%q: an error and a pool", spec)
			}
			return
		}
		s := np.Spec
		if s.ClusterName != "demo" || s.InstanceType == "" || s.Provider == "" || s.Replicas == nil || *s.Replicas < 0 {
			t.Fatalf("%q: inconsistent pool %+v", spec, s)
		}
		canon := []string{"name=" + strings.TrimPrefix(np.Name, "demo."), "type=" + s.InstanceType, "provider=" + string(s.Provider)}
		if a := s.Autoscaling; a != nil {
			if a.MinSize < 0 || a.MinSize > a.MaxSize || *s.Replicas != a.MinSize {
				t.Fatalf("%q: inconsistent autoscaling %+v, replicas %d", spec, a, *s.Replicas)
			}
			canon = append(canon, "min="+strconv.Itoa(int(a.MinSize)), "max="+strconv.Itoa(int(a.MaxSize)))
			if d := a.ScaleDownUnneededTime; d != nil {
				if d.Duration <= 0 {
					t.Fatalf("%q: unneeded time %s", spec, d.Duration)
				}
				canon = append(canon, "unneeded="+d.Duration.String())
			}
		} else {
			canon = append(canon, "replicas="+strconv.Itoa(int(*s.Replicas)))
		}
		again, err := parsePoolShortcut("default", "demo", strings.Join(canon, ","))
		if err != nil {
			t.Fatalf("%q: canonical form %q refused: %v", spec, strings.Join(canon, ","), err)
		}
		if !reflect.DeepEqual(again.Spec, np.Spec) || again.Name != np.Name {
			t.Fatalf("%q: round trip changed the pool:\n%+v\n%+v", spec, np.Spec, again.Spec)
		}
	})
}

// FuzzParseTaint: a --taint value is refused, or gives a taint with a key
// and one of the three effects that prints back to an equal taint.
func FuzzParseTaint(f *testing.F) {
	for _, s := range []string{"dedicated=ssd:NoSchedule", "gpu:NoExecute", "a=:PreferNoSchedule", "a=b=c:NoSchedule",
		"a:b:NoSchedule", ":NoSchedule", "a=b", "a=b:Sometimes", "", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		tn, err := parseTaint(spec)
		if err != nil {
			return
		}
		switch tn.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			t.Fatalf("%q: effect %q accepted", spec, tn.Effect)
		}
		if tn.Key == "" {
			t.Fatalf("%q: empty key accepted", spec)
		}
		printed := tn.Key
		if tn.Value != "" {
			printed += "=" + tn.Value
		}
		printed += ":" + string(tn.Effect)
		again, err := parseTaint(printed)
		if err != nil || again != tn {
			t.Fatalf("%q: printed as %q, parsed back as %+v, %v", spec, printed, again, err)
		}
	})
}

// FuzzParseLabel: a --label value is refused, or splits at its first '='
// into a non-empty key and a value that join back to the input.
func FuzzParseLabel(f *testing.F) {
	for _, s := range []string{"team=ml", "example.com/tier=gpu", "empty=", "a=b=c", "=x", "novalue", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, kv string) {
		k, v, err := parseLabel(kv)
		if err != nil {
			return
		}
		if k == "" || strings.Contains(k, "=") || k+"="+v != kv {
			t.Fatalf("%q: parsed as %q = %q", kv, k, v)
		}
	})
}
