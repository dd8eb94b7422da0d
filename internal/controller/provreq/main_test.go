package provreq_test

import (
	"testing"

	"fke.dev/fke/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
