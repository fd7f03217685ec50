package distributed

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/internal/testlong"
)

// timeHook moves miniredis's clock to the test's before every command, so
// that lease.lua's TIME reads the fake time: the way a user drives
// miniredis from the fake clock the rest of their code reads (SetTime for
// TIME; ClockTTL so that TTLs follow it too).
type timeHook struct {
	mr  *miniredis.Miniredis
	now func() time.Time
}

func (h timeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h timeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mr.SetTime(h.now())
		return next(ctx, cmd)
	}
}
func (h timeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// syncCalls makes background calls run inline with a long call timeout,
// as withSim does, but leaves the script reading TIME.
func syncCalls() Option {
	return optionFunc(func(c *config) error {
		c.syncPrefetch = true
		c.callTimeout = 5 * time.Second
		return nil
	})
}

// TestMiniredisLeases: on miniredis (no Lua struct library: the scripts
// pack with redisscript's pure Lua there), a fleet of three limiters
// leases and admits exactly as the same fleet on a real redis-server,
// lease for lease. On redis-server the script is given the fake time; on
// miniredis it reads TIME, which follows the fake clock through SetTime.
func TestMiniredisLeases(t *testing.T) {
	t.Parallel()
	run := func(c redis.UniversalClient, base *clocktest.Fake, opts ...Option) ([]int64, []Stats) {
		var lims []*Limiter
		for _, pid := range []string{"a", "b", "c"} {
			o := append([]Option{WithLocalClock(base), WithProcessID(pid)}, opts...)
			l, err := New(c, "fleet", 100, o...)
			require.NoError(t, err)
			lims = append(lims, l)
		}
		got := drive(base, 5*time.Second, 60, lims...)
		var st []Stats
		for _, l := range lims {
			s := l.Stats()
			require.NoError(t, s.LastError)
			st = append(st, s)
			_ = l.Close(context.Background())
		}
		return got, st
	}

	srv := redistest.Start(t)
	base := clocktest.NewFake()
	wantGot, wantSt := run(newClient(t, srv), base, withSim(base))

	mr := miniredis.RunT(t)
	mr.ClockTTL(true)
	mbase := clocktest.NewFake()
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(timeHook{mr, func() time.Time { return time.UnixMicro(redisEpoch).Add(mbase.Elapsed()) }})
	got, st := run(c, mbase, syncCalls())

	assert.Equal(t, wantGot, got, "admitted per limiter")
	var total int64
	for i := range st {
		total += got[i]
		assert.Equal(t, wantSt[i].Leases, st[i].Leases, "limiter %d leases", i)
		assert.Equal(t, wantSt[i].PermitsLeased, st[i].PermitsLeased, "limiter %d permits leased", i)
		assert.Equal(t, 3, st[i].Processes, "limiter %d", i)
	}
	// 3 × 60/s asked of a 100/s fleet for 5 s: the fleet admits about 500.
	assert.InDelta(t, 500, total, 60, "admitted by the fleet")
}

// TestMiniredisMisconfigured: on miniredis too, a key of another type under
// the name is a misconfiguration (no fallback), and a server that says it
// is loading is an outage (the fail-open fallback runs).
func TestMiniredisMisconfigured(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, mr.Set("ratelimit:{taken}:state", "a string"))
	l, err := New(c, "taken", 100, WithFailurePolicy(FailOpen), WithSafeRate(50), WithProcessID("p"), syncCalls())
	require.NoError(t, err)
	defer l.Close(context.Background())
	_, err = l.Acquire(context.Background(), 1)
	assert.ErrorIs(t, err, ErrMisconfigured)
	assert.False(t, errors.Is(err, ErrUnavailable), "%v", err)

	l2, err := New(c, "fresh", 100, WithFailurePolicy(FailOpen), WithSafeRate(50), WithProcessID("p"), syncCalls(), WithLocalClock(clocktest.NewFake()))
	require.NoError(t, err)
	defer l2.Close(context.Background())
	_, err = l2.Acquire(context.Background(), 1)
	require.NoError(t, err)
	mr.SetError("LOADING Redis is loading the dataset in memory")
	defer mr.SetError("")
	for range 200 { // past the leased permits, into the fallback
		if _, err = l2.Acquire(context.Background(), 1); err != nil {
			break
		}
	}
	assert.NoError(t, err, "fail open on an outage")
	st := l2.Stats()
	assert.True(t, st.InFallback)
	assert.False(t, isMisconfiguration(st.LastError), "%v", st.LastError)
}

// TestMiniredisUnlimited: a fleet at +Inf admits without waiting on
// miniredis too. (Its Lua's math.huge is the largest finite double, so the
// scripts write their infinity as 1 / 0.)
func TestMiniredisUnlimited(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	base := clocktest.NewFake()
	l, err := New(c, "unlimited", math.Inf(1), WithLocalClock(base), WithProcessID("p"), syncCalls())
	require.NoError(t, err)
	defer l.Close(context.Background())
	// A script call on miniredis each, under -race: 200 in scripts/test,
	// 1000 under RATELIMIT_LONG_TESTS=1.
	for i := range testlong.Pick(200, 1000) {
		w, err := l.Acquire(context.Background(), 1000)
		require.NoError(t, err, "Acquire %d", i)
		require.Zero(t, w, "Acquire %d waited", i)
	}
	assert.Zero(t, base.Elapsed(), "slept")
	assert.Equal(t, math.Inf(1), l.Stats().StoredRate)
}
