package cli

import (
	"strings"
	"testing"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

func TestRestoreTarget(t *testing.T) {
	local := fkev1.ClusterSpec{Runtime: fkev1.RuntimeLocal, Datastore: fkev1.DatastoreDedicated}
	shared := fkev1.ClusterSpec{Runtime: fkev1.RuntimeHosted, Datastore: fkev1.DatastoreShared}
	tests := []struct {
		name          string
		src           fkev1.ClusterSpec
		rt, ds        string
		wantRT        fkev1.ControlPlaneRuntime
		wantDS        fkev1.Datastore
		wantErrSubstr string
	}{
		{name: "the source's runtime and datastore", src: shared, wantRT: fkev1.RuntimeHosted, wantDS: fkev1.DatastoreShared},
		{name: "an old source without a runtime", src: fkev1.ClusterSpec{}, wantRT: fkev1.RuntimeLocal},
		{name: "local onto hosted, shared", src: local, rt: "hosted", ds: "shared", wantRT: fkev1.RuntimeHosted, wantDS: fkev1.DatastoreShared},
		{name: "hosted shared into dedicated", src: shared, ds: "dedicated", wantRT: fkev1.RuntimeHosted, wantDS: fkev1.DatastoreDedicated},
		{name: "hosted into local", src: shared, rt: "local", wantErrSubstr: "restores into a hosted cluster only"},
		{name: "local, shared", src: local, ds: "shared", wantErrSubstr: "needs --runtime hosted"},
		{name: "unknown runtime", src: local, rt: "cloud", wantErrSubstr: `--runtime "cloud": use local or hosted`},
		{name: "unknown datastore", src: shared, ds: "sqlite", wantErrSubstr: `--datastore "sqlite": use dedicated or shared`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, ds, err := restoreTarget(tt.src, tt.rt, tt.ds)
			if tt.wantErrSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstr) {
					t.Fatalf("err = %v, want one that says %q", err, tt.wantErrSubstr)
				}
				return
			}
			if err != nil || rt != tt.wantRT || ds != tt.wantDS {
				t.Fatalf("= %q, %q, %v; want %q, %q", rt, ds, err, tt.wantRT, tt.wantDS)
			}
		})
	}
}
