package e2e

import (
	"testing"

	"fke.dev/fke/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
