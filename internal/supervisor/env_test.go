package supervisor

import (
	"slices"
	"testing"
)

// TestGoEnv: GOGC is added unless the environment sets one, which wins.
func TestGoEnv(t *testing.T) {
	t.Setenv("GOGC", "")
	if env := GoEnv("50"); !slices.Contains(env, "GOGC=50") {
		t.Errorf("GoEnv without GOGC set: no GOGC=50 in %v", env)
	}
	t.Setenv("GOGC", "80")
	env := GoEnv("50")
	if slices.Contains(env, "GOGC=50") || !slices.Contains(env, "GOGC=80") {
		t.Errorf("GoEnv with GOGC=80 set: want only GOGC=80, got %v", slices.DeleteFunc(env, func(s string) bool { return len(s) < 5 || s[:5] != "GOGC=" }))
	}
}
