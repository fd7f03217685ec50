package testlong

import "testing"

func TestPick(t *testing.T) {
	for _, c := range []struct {
		env  string
		long bool
	}{{"", false}, {"0", false}, {"1", true}, {"yes", true}} {
		t.Setenv(Env, c.env)
		if got := Enabled(); got != c.long {
			t.Errorf("%s=%q: Enabled() = %v, want %v", Env, c.env, got, c.long)
		}
		want := 10
		if c.long {
			want = 1000
		}
		if got := Pick(10, 1000); got != want {
			t.Errorf("%s=%q: Pick(10, 1000) = %d, want %d", Env, c.env, got, want)
		}
	}
}
