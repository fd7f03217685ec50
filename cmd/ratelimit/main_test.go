package main

import (
	"testing"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m) }
