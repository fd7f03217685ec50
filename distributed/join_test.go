package distributed

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestJoinMismatchIsReported: a limiter that joins a name holding another
// rate, kind or unit adopts the stored limiter and says so in Stats (a job
// limit at 1/s joining a byte limit at 1e6/s is not silent).
func TestJoinMismatchIsReported(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	bytes := newSim(t, newClient(t, srv), "col", "pipe", 1e6, base, WithUnit("bytes"))
	if !bytes.TryAcquire(1, 0) {
		t.Fatal("the first permit of a new name was refused")
	}
	if st := bytes.Stats(); st.Mismatch || st.StoredUnit != "bytes" || st.StoredRate != 1e6 || st.StoredKind != "bursty" {
		t.Fatalf("the creator's own stats: %+v", st)
	}
	for _, tc := range []struct {
		what string
		rate float64
		opts []Option
	}{
		{"another rate and unit", 1, []Option{WithUnit("jobs")}},
		{"another unit", 1e6, []Option{WithUnit("jobs")}},
		{"another rate", 2e6, []Option{WithUnit("bytes")}},
		{"another kind", 1e6, []Option{WithUnit("bytes"), WithWarmup(0)}},
	} {
		jobs := newSim(t, newClient(t, srv), "col", "run-"+strings.ReplaceAll(tc.what, " ", "-"), tc.rate, base, tc.opts...)
		jobs.TryAcquire(1, 0)
		st := jobs.Stats()
		if !st.Mismatch || st.StoredRate != 1e6 || st.StoredUnit != "bytes" || st.StoredKind != "bursty" {
			t.Errorf("%s: joined without reporting it: %+v", tc.what, st)
		}
		_ = jobs.Close(context.Background())
	}
	same := newSim(t, newClient(t, srv), "col", "pipe-2", 1e6, base, WithUnit("bytes"), WithRefuseMismatch())
	same.TryAcquire(1, 0) // its lease may be usable only later: the others took the free ones
	if st := same.Stats(); st.Leases != 1 || st.Mismatch || st.LastError != nil {
		t.Fatalf("a limiter of the same configuration did not join: %+v", st)
	}
	_ = same.Close(context.Background())
	_ = bytes.Close(context.Background())
}

// TestJoinMismatchRefused: with WithRefuseMismatch, a limiter of another
// configuration takes nothing from the name, does not register, refuses
// and reports ErrNameMismatch (and ErrMisconfigured: it does not fail open
// at its safe rate).
func TestJoinMismatchRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	bytes := newSim(t, c, "col", "pipe", 1e6, base, WithUnit("bytes"))
	if !bytes.TryAcquire(1, 0) {
		t.Fatal("the first permit of a new name was refused")
	}
	next := stateField(t, c, "col", "next")
	jobs := newSim(t, newClient(t, srv), "col", "run", 1, base, WithUnit("jobs"), WithRefuseMismatch(), WithSafeRate(1))
	if jobs.TryAcquire(1, 0) {
		t.Fatal("a mismatched limiter joined")
	}
	_, err := jobs.Acquire(context.Background(), 1)
	if !errors.Is(err, ErrNameMismatch) || !errors.Is(err, ErrMisconfigured) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Acquire of a mismatched limiter: %v", err)
	}
	if got := stateField(t, c, "col", "next"); got != next {
		t.Fatalf("the refused limiter moved next from %v to %v", next, got)
	}
	// The registry is the state hash's "p:" fields.
	if n, err := c.HExists(context.Background(), keysOf("col")[0], "p:run").Result(); err != nil || n {
		t.Fatal("the refused limiter is in the registry")
	}
	if st := jobs.Stats(); st.FallbackAdmitted != 0 || st.Leases != 0 {
		t.Fatalf("the refused limiter admitted: %+v", st)
	}
	// Refused, it says what it refused: a program can tell its user.
	if st := jobs.Stats(); !st.Mismatch || st.StoredRate != 1e6 || st.StoredUnit != "bytes" || st.StoredKind != "bursty" {
		t.Fatalf("the refused limiter's stats: %+v", st)
	}
	if jobs.Rate() != 1 {
		t.Fatalf("the refused limiter adopted the rate %v", jobs.Rate())
	}
	_ = jobs.Close(context.Background())
	_ = bytes.Close(context.Background())
}

// TestJoinBeforeWork: Join makes the first lease at once, so that a program
// is refused before it does any work; once the name is free (its state
// gone), the same limiter joins it with its own rate and unit.
func TestJoinBeforeWork(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	ctx := context.Background()
	bytes := newSim(t, c, "col", "pipe", 1e6, base, WithUnit("bytes"))
	require.NoError(t, bytes.Join(ctx))
	st := bytes.Stats()
	assert.Equal(t, int64(1), st.RedisCalls, "Join made no call")
	assert.Equal(t, "bytes", st.StoredUnit)
	assert.False(t, st.Mismatch)
	require.NoError(t, bytes.Join(ctx))
	assert.Equal(t, int64(1), bytes.Stats().RedisCalls, "a second Join called Redis")

	jobs := newSim(t, newClient(t, srv), "col", "run", 1, base, WithUnit("jobs"), WithRefuseMismatch())
	err := jobs.Join(ctx)
	assert.ErrorIs(t, err, ErrNameMismatch)
	assert.ErrorIs(t, err, ErrMisconfigured)
	assert.ErrorContains(t, err, `unit "bytes"`)
	assert.Equal(t, "bytes", jobs.Stats().StoredUnit)
	assert.ErrorIs(t, jobs.Join(ctx), ErrNameMismatch, "a second Join joined")

	adopter := newSim(t, newClient(t, srv), "col", "run-join", 1, base, WithUnit("jobs"))
	require.NoError(t, adopter.Join(ctx))
	assert.True(t, adopter.Stats().Mismatch)
	assert.Equal(t, 1e6, adopter.Rate(), "joining without WithRefuseMismatch adopts the stored rate")

	_ = bytes.Close(ctx)
	_ = adopter.Close(ctx)
	require.NoError(t, c.Del(ctx, keysOf("col")...).Err())
	require.NoError(t, jobs.Join(ctx), "the name is free")
	st = jobs.Stats()
	assert.False(t, st.Mismatch)
	assert.Equal(t, 1.0, st.StoredRate)
	assert.Equal(t, "jobs", st.StoredUnit)
	unit, err := c.HGet(ctx, keysOf("col")[0], "unit").Result()
	require.NoError(t, err)
	assert.Equal(t, "jobs", unit)
	_ = jobs.Close(ctx)
}

// TestJoinedRecreatesAdoptedKind: a limiter that joined a name holding
// another kind (a warming-up one joining a bursty fleet, as pipe and run
// do with --join) makes the state again, once it is lost, with the kind it
// adopted, as it does with the rate and the unit: it made it with its own
// kind, and the fleet silently became a warming-up limiter that refused
// a process configured as its creator.
func TestJoinedRecreatesAdoptedKind(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	ctx := context.Background()
	creator := newSim(t, c, "kindadopt", "creator", 100, base, WithUnit("jobs"))
	if err := creator.Join(ctx); err != nil {
		t.Fatal(err)
	}
	joiner := newSim(t, newClient(t, srv), "kindadopt", "joiner", 50, base, WithUnit("bytes"), WithWarmup(0))
	if err := joiner.Join(ctx); err != nil {
		t.Fatal(err)
	}
	if st := joiner.Stats(); !st.Mismatch || st.StoredKind != "bursty" || joiner.Rate() != 100 {
		t.Fatalf("the joiner did not adopt: %+v, rate %v", st, joiner.Rate())
	}
	srv.CLI("FLUSHALL") // the state lost; the joiner leases first
	drive(base, 300*time.Millisecond, 10, joiner)
	if kind := stateField(t, c, "kindadopt", "kind"); kind != 0 {
		t.Errorf("the state made again is warming up (%v), the joiner's own kind; the fleet's, which it adopted, is bursty", kind)
	}
	fresh := newSim(t, newClient(t, srv), "kindadopt", "fresh", 100, base, WithUnit("jobs"), WithRefuseMismatch())
	if err := fresh.Join(ctx); err != nil {
		t.Errorf("a process configured as the fleet's creator: %v", err)
	}
}
