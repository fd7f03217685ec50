package ctxtest

import (
	"context"
	"testing"
)

func TestCountdown(t *testing.T) {
	c := NewCountdown(3)
	for i, want := range []error{nil, nil, context.Canceled, context.Canceled} {
		if err := c.Err(); err != want {
			t.Errorf("look %d: %v, want %v", i+1, err, want)
		}
	}
	if c.Looks() != 4 {
		t.Errorf("%d looks counted, want 4", c.Looks())
	}
}
