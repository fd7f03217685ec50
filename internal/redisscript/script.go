package redisscript

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Prelude is the Lua every script starts with: packd and unpackd, the
// doubles' packing with or without the server's struct library (see
// pack.lua). Scripts call them instead of struct.pack and struct.unpack.
//
//go:embed pack.lua
var Prelude string

// Script is a Lua script with its SHA1, for EVALSHA.
type Script struct {
	src string
	sha string
}

// New returns the script whose source is Prelude followed by body.
func New(body string) *Script {
	src := Prelude + "\n" + body
	h := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(h[:])}
}

// NewPlain returns the script whose source is body alone, for a script
// that uses neither packd nor unpackd: Redis runs a script's whole source
// on every EVALSHA, and the Prelude's definitions cost every call.
func NewPlain(body string) *Script {
	h := sha1.Sum([]byte(body))
	return &Script{src: body, sha: hex.EncodeToString(h[:])}
}

// Source is the whole source sent with EVAL: Prelude and the body.
func (s *Script) Source() string { return s.src }

// Hash is the script's SHA1 in hex, as EVALSHA wants it.
func (s *Script) Hash() string { return s.sha }

// Run runs the script with EVALSHA and, when the server answers with an
// error reply that may mean it does not have the script, once more with
// EVAL, which also loads it. That is NOSCRIPT (after a restart, a failover
// or SCRIPT FLUSH) but also any reply a proxy may put in its place
// (go-redis/redis_rate#88 saw NOSCRIPT rewritten) and an unknown EVALSHA
// (a proxy that has EVAL only). The replies that cannot mean that are final
// (see retryWithEval): the server's refusal of this client (NOAUTH,
// WRONGPASS, NOPERM, a database or cluster mode it lacks), a server that
// cannot serve now (LOADING, BUSY, CLUSTERDOWN, ...), WRONGTYPE, and the
// scripts' own errors. Retrying is safe because every script writes
// nothing before the last point at which it can fail. A connection failure
// or a timeout is never retried: the script may have run.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	cmd := c.EvalSha(ctx, s.sha, keys, args...)
	if err := cmd.Err(); err != nil && retryWithEval(err) {
		cmd = c.Eval(ctx, s.src, keys, args...)
	}
	return cmd
}

// finalReplies are the error replies after which EVAL cannot do better
// than EVALSHA did.
var finalReplies = []string{
	"NOAUTH", "WRONGPASS", "NOPERM", "Protocol error", "DB index", "called without any password",
	"cluster support disabled", "WRONGTYPE",
	"LOADING", "BUSY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "READONLY", "MISCONF", "OOM", "NOREPLICAS",
	"MOVED", "ASK ",
}

func retryWithEval(err error) bool {
	if !IsReply(err) {
		return false
	}
	msg := err.Error()
	for _, m := range finalReplies {
		if strings.Contains(msg, m) {
			return false
		}
	}
	for _, m := range ownMisconfigured {
		if strings.Contains(msg, m) {
			return false
		}
	}
	for _, m := range ownBugs {
		if strings.Contains(msg, m) {
			return false
		}
	}
	return true
}

// IsReply reports whether err is an error reply from the server (not a
// connection failure or a timeout, after which a script may have run).
func IsReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}
