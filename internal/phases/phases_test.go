package phases

import (
	"context"
	"errors"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

func TestRun(t *testing.T) {
	t.Parallel()
	step := func(name string, done bool, err error) Phase[*[]string] {
		return Phase[*[]string]{Name: name, Run: func(_ context.Context, ran *[]string) (ctrl.Result, bool, error) {
			*ran = append(*ran, name)
			return ctrl.Result{RequeueAfter: time.Second}, done, err
		}}
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		list  []Phase[*[]string]
		ran   int
		ended string
		err   error
	}{
		{"all run", []Phase[*[]string]{step("a", false, nil), step("b", false, nil)}, 2, "", nil},
		{"a done phase ends the pass", []Phase[*[]string]{step("a", true, nil), step("b", false, nil)}, 1, "a", nil},
		{"an error ends the pass", []Phase[*[]string]{step("a", false, nil), step("b", false, boom), step("c", false, nil)}, 2, "b", boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ran []string
			res, name, ended, err := Run(context.Background(), &ran, tc.list)
			if len(ran) != tc.ran || name != tc.ended || ended != (tc.ended != "") || !errors.Is(err, tc.err) {
				t.Fatalf("ran %v, ended at %q (%v), %v", ran, name, ended, err)
			}
			if ended && res.RequeueAfter != time.Second {
				t.Errorf("result %+v, want the ending phase's", res)
			}
		})
	}
}
