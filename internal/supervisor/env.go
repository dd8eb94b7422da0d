package supervisor

import "os"

// GoEnv returns an environment for a Go child: this process's, with the Go
// garbage collector's target GOGC=gogc unless this environment sets GOGC
// (which the child then inherits).
func GoEnv(gogc string) []string {
	env := os.Environ()
	if os.Getenv("GOGC") == "" {
		env = append(env, "GOGC="+gogc)
	}
	return env
}
