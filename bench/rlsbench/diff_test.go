package rlsbench

import (
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/bench/distbench"
)

var (
	oursFlag    = flag.String("rls.ours", "", "our ratelimit binary (default: built from the working tree); \"ref\": a second reference instead, to check the harness")
	refFlag     = flag.String("rls.ref", "", "the reference's binary (default: built from bench/envoyref)")
	batchesFlag = flag.Int("rls.batches", 20, "batches (one second each) per configuration")
	callsFlag   = flag.Int("rls.calls", 12, "calls per batch")
	seedFlag    = flag.Uint64("rls.seed", 0, "random seed (0: from the clock; the seed is logged)")
	storesFlag  = flag.String("rls.stores", "redis,memory,env,shared", "ours to compare with the reference: redis, memory (by flags), env (no flags, the reference's environment, on Redis), shared (a reference and ours on one Redis, answering in turn)")
	showFlag    = flag.Int("rls.show", 15, "mismatching calls printed per configuration")
	envFlag     = flag.String("rls.ours-env", "", "extra environment (comma-separated) of the servers compared with the reference, e.g. STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true with -rls.ours ref to see the harness catch a difference")
	argsFlag    = flag.String("rls.ours-args", "", "extra flags of ours, comma-separated (e.g. --store-timeout=1s on a loaded machine)")
	jsonFlag    = flag.Int("rls.json", 4, "one call in N goes through POST /json instead of gRPC (0: none)")
	invalidFlag = flag.Bool("rls.invalid", false, "also send invalid calls (empty domain, no descriptors), which the reference refuses with gRPC code Unknown")
	addendFlag  = flag.Bool("rls.descriptor-addend", true, "also send per-descriptor hits_addend (honoured by the reference)")
)

var (
	buildOnce      sync.Once
	refBin, ourBin string
	buildErr       error
)

func binaries(t *testing.T) (ref, ours string) {
	t.Helper()
	buildOnce.Do(func() {
		bench, root, err := Dirs()
		if err != nil {
			buildErr = err
			return
		}
		refBin, ourBin = *refFlag, *oursFlag
		if refBin == "" {
			if refBin, buildErr = BuildReference(bench); buildErr != nil {
				return
			}
		}
		switch ourBin {
		case "ref":
			ourBin = refBin
		case "":
			ourBin, buildErr = BuildOurs(root)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return refBin, ourBin
}

// TestDifferential drives envoyproxy/ratelimit and `ratelimit rls` with the
// same random calls at the same instants and fails on any field that
// differs (see Differential and Diff). It needs redis-server on PATH and
// builds both servers (the reference from the Go module proxy):
//
//	cd bench && go test -count=1 -v -run TestDifferential ./rlsbench/
//	cd bench && go test -count=1 -v -run TestDifferential ./rlsbench/ -args -rls.batches 60 -rls.seed 7
//	cd bench && go test -count=1 -v -run TestDifferential ./rlsbench/ -args -rls.ours ref   # the harness against itself
func TestDifferential(t *testing.T) {
	ref, ours := binaries(t)
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	cases := []struct {
		name    string
		config  map[string]string
		pool    []descSpec
		combos  [][][][2]string
		domains []string
		headers bool
		// quirk: where the reference is wrong; mismatches are logged,
		// not failed.
		quirk bool
	}{
		{"core", CoreConfig, CorePool, CoreCombos, []string{"rl", "other"}, false, false},
		{"core-headers", CoreConfig, CorePool, CoreCombos, []string{"rl", "other"}, true, false},
		{"extra", ExtraConfig, ExtraPool, nil, []string{"extra"}, true, false},
		{"quirk", QuirkConfig, QuirkPool, nil, []string{"quirk"}, false, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := WriteConfig(t.TempDir(), c.config)
			if err != nil {
				t.Fatal(err)
			}
			redisFor := func() string {
				r, err := distbench.StartServer()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(r.Stop)
				return r.Addr
			}
			o := Options{ConfigDir: cfg, Headers: c.headers, Redis: redisFor()}
			rs, err := StartReference(ref, o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rs.Stop)
			var others []*Server
			for _, store := range strings.Split(*storesFlag, ",") {
				o := o
				o.Redis = ""
				if *envFlag != "" {
					o.Env = strings.Split(*envFlag, ",")
				}
				if *argsFlag != "" {
					o.Args = strings.Split(*argsFlag, ",")
				}
				if store == "redis" || store == "env" || store == "shared" {
					o.Redis = redisFor() // a server of its own: no shared keys
				}
				var s *Server
				switch {
				case *oursFlag == "ref":
					if o.Redis == "" {
						continue
					}
					s, err = StartReference(ours, o)
					if s != nil {
						s.Name = "reference#" + store
					}
				case store == "env":
					s, err = StartOursAsReference(ours, o)
				case store == "shared":
					var r2, o2 *Server
					if r2, err = StartReference(ref, o); err != nil {
						break
					}
					t.Cleanup(r2.Stop)
					if o2, err = StartOurs(ours, o); err != nil {
						break
					}
					t.Cleanup(o2.Stop)
					s = Shared("reference+ours/shared", r2, o2, seed)
				case store == "redis" || store == "memory":
					s, err = StartOurs(ours, o)
				default:
					t.Fatalf("-rls.stores: unknown %q", store)
				}
				if err != nil {
					t.Fatalf("%s: %v", store, err)
				}
				if s.pick == nil {
					t.Cleanup(s.Stop)
				}
				others = append(others, s)
			}
			d := &Differential{Ref: rs, Others: others, Batches: *batchesFlag, Calls: *callsFlag, JSONEvery: *jsonFlag, Log: testWriter{t},
				Gen: &Gen{Rand: rand.New(rand.NewPCG(seed, uint64(i))), Pool: c.pool, Combos: c.combos, Domains: c.domains, DescriptorAddend: *addendFlag, Invalid: *invalidFlag}}
			rep, err := d.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Log(rep.Summary())
			for i, m := range rep.Mismatches {
				if i == *showFlag {
					t.Logf("... %d more", len(rep.Mismatches)-i)
					break
				}
				t.Log(m)
			}
			if len(rep.Mismatches) > 0 && c.quirk {
				t.Logf("%d of %d calls answered differently where the reference is wrong (seed %d)", len(rep.Mismatches), rep.Compared, seed)
			} else if len(rep.Mismatches) > 0 {
				t.Errorf("%d of %d calls answered differently (seed %d)", len(rep.Mismatches), rep.Compared, seed)
			}
			if rep.Compared == 0 {
				t.Error("no call compared")
			}
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(m.Run())
}
