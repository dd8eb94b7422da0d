package main

import (
	"reflect"
	"testing"
)

func TestSplitArgs(t *testing.T) {
	three := []string{"kube-apiserver", "--a=1", "--", "kube-controller-manager", "--b", "--", "kube-scheduler"}
	for _, tc := range []struct {
		name    string
		argv    []string
		want    map[string][]string
		wantErr bool
	}{
		{name: "the three components", argv: three, want: map[string][]string{
			apiServer: {"--a=1"}, controllerManager: {"--b"}, scheduler: {},
		}},
		{name: "the seed first, then etcd", argv: append([]string{"--seed=/s.json", "etcd", "--name=x", "--"}, three...), want: map[string][]string{
			seedFlag: {"/s.json"}, etcdName: {"--name=x"},
			apiServer: {"--a=1"}, controllerManager: {"--b"}, scheduler: {},
		}},
		// After a component's name, --seed= is that component's flag.
		{name: "the seed after a component", argv: append([]string{"etcd", "--seed=x", "--"}, three...), want: map[string][]string{
			etcdName: {"--seed=x"}, apiServer: {"--a=1"}, controllerManager: {"--b"}, scheduler: {},
		}},
		{name: "the seed between components", argv: append([]string{"etcd", "--", "--seed=x"}, three...), wantErr: true},
		{name: "an unknown component", argv: append([]string{"kubelet", "--"}, three...), wantErr: true},
		{name: "a component twice", argv: append(append([]string{}, three...), "--", "kube-scheduler"), wantErr: true},
		{name: "a component missing", argv: three[:5], wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := splitArgs(tc.argv)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
