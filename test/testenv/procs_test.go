package testenv

import (
	"net"
	"os"
	"slices"
	"testing"
)

func TestListeningAddrs(t *testing.T) {
	var want []string
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("listening on %s: %v", addr, err)
		}
		defer ln.Close()
		want = append(want, ln.Addr().String())
	}
	got, err := ListeningAddrs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ListeningAddrs = %v, want %v", got, want)
	}
}
