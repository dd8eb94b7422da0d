package storetest

import "testing"

func TestMemoryKeepsTheContract(t *testing.T) { Run(t, &Memory{}) }
