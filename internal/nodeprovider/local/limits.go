package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// HostLimits are the least values local nodes need of the host's
// per-user kernel limits (sysctl keys under /proc/sys). Every kubelet,
// containerd, kube-proxy and control plane component of every cluster
// runs as the same user and holds inotify instances: a tenant's three
// components hold about 15, a node about 7. Debian's default of 128
// instances runs out near four clusters with a few nodes; containerd 1.6
// then starts without its CRI plugin ("failed to create cni conf monitor:
// too many open files") and the node never registers.
var HostLimits = map[string]int64{
	"fs/inotify/max_user_instances": 8192,
	"fs/inotify/max_user_watches":   524288,
}

// RaiseLimits raises each of limits under procSys (normally /proc/sys) that
// is lower than its value, and leaves higher ones as they are. It returns
// the keys it changed. Idempotent.
func RaiseLimits(procSys string, limits map[string]int64) ([]string, error) {
	var changed []string
	for key, want := range limits {
		path := filepath.Join(procSys, key)
		raw, err := os.ReadFile(path)
		if err != nil {
			return changed, fmt.Errorf("reading %s: %w", sysctlName(key), err)
		}
		have, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			return changed, fmt.Errorf("reading %s: %q is not a number", sysctlName(key), strings.TrimSpace(string(raw)))
		}
		if have >= want {
			continue
		}
		if err := os.WriteFile(path, []byte(strconv.FormatInt(want, 10)), 0o644); err != nil {
			return changed, fmt.Errorf("raising %s from %d to %d: %w", sysctlName(key), have, want, err)
		}
		changed = append(changed, fmt.Sprintf("%s=%d (was %d)", sysctlName(key), want, have))
	}
	return changed, nil
}

func sysctlName(key string) string { return strings.ReplaceAll(key, "/", ".") }
