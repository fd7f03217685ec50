//go:build !unix

package pipe

import "github.com/smoothrate/ratelimit/internal/cli/command"

// Outside Unix a pipe listens on no control socket, and -R says so.

type control struct{}

type retuneFunc func(rate float64) (string, error)

type badRate struct{ error }

func listenControl(int, retuneFunc) (*control, error) { return nil, nil }

func (*control) Close() {}

func requestRate(int, float64) (string, int) {
	return "a running pipe's rate can be changed on Unix systems only", command.ExitUsage
}
