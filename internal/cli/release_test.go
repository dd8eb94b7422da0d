package cli

import (
	"slices"
	"strings"
	"testing"
)

func TestParseStage(t *testing.T) {
	cases := []struct {
		in, want, err string
	}{
		{in: "dev=dev", want: "dev [dev] <nil> 0s false "},
		{in: "prod=prod-a+prod-b,soak=10m,approval,path=overlays/prod", want: "prod [prod-a prod-b] <nil> 10m0s true overlays/prod"},
		{in: "prod=selector:env=prod&tier=gpu,soak=1h", want: "prod [] env=prod,tier=gpu 1h0m0s false "},
		{in: "prod", err: "write NAME=CLUSTER"},
		{in: "prod=a,soak=soon", err: `soak "soon"`},
		{in: "prod=a,fast", err: `unknown option "fast"`},
		{in: "prod=selector:env in (", err: "selector"},
	}
	for _, tc := range cases {
		st, err := parseStage(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseStage(%q) = %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseStage(%q): %v", tc.in, err)
			continue
		}
		sel := "<nil>"
		if st.Selector != nil {
			var parts []string
			for k, v := range st.Selector.MatchLabels {
				parts = append(parts, k+"="+v)
			}
			slices.Sort(parts)
			sel = strings.Join(parts, ",")
		}
		got := strings.Join([]string{st.Name, "[" + strings.Join(st.Clusters, " ") + "]", sel, st.SoakTime().String(), map[bool]string{true: "true", false: "false"}[st.RequireApproval], st.Path}, " ")
		if got != tc.want {
			t.Errorf("parseStage(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
