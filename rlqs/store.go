package rlqs

import "time"

// A Store shares each bucket's limit among the servers that use it. A
// Server without one (New with a nil Store) serves alone: each bucket's
// whole limit is its own. RedisStore is the one Store: replicas on one
// Redis (or Redis Cluster) share every bucket's limit among all their
// clients.
//
// The interface is sealed: its methods are unexported.
type Store interface {
	// claim tells the store what this server's clients of one bucket
	// want and may be running at, and returns the rate it may commit to
	// them, all in one atomic step.
	// timeout bounds the call.
	claim(timeout time.Duration, c *claim) (grant, error)
}

// claim is one server's call about one bucket.
type claim struct {
	server string  // the server's id (WithServerID)
	key    string  // the bucket's store key
	rate   float64 // the bucket's limit, requests per second
	// floor is the sum of the rates this server's clients of the bucket
	// may be running at now (assigned, or lowered but not yet settled, or
	// of clients gone whose assignments have not expired): the store
	// counts it, whatever else it grants.
	floor float64
	// hold is how long the claim counts if this server calls no more
	// (it died): the longest any of its assignments may stay in force.
	hold time.Duration
	// demands are the rates its active clients want (+Inf: not measured
	// yet, counted as the whole limit).
	demands []float64
	// known: this server has claimed on the bucket before, so a store
	// without its claim has lost its data (a Redis restarted empty): the
	// store then grants no raise until every server has had time to
	// claim again.
	known bool
	// release: the server gives the bucket up: floor counts for hold
	// more, then the claim is gone; no demand.
	release bool
}

// grant is the store's answer to a claim.
type grant struct {
	// budget is the rate this server may commit to the bucket's clients:
	// at least the claim's floor, at most what the other servers' claims
	// leave of the limit, and aimed at target.
	budget float64
	// target is the sum of the max-min fair shares of this server's
	// clients among all the bucket's clients: what it should give them
	// (lowering them first if they run above it).
	target float64
	// servers and clients count the claims and the clients the store
	// knows of for the bucket, this server's included.
	servers, clients int
	// contested: another server is short of its target, waiting for the
	// others to lower their claims: claim again soon.
	contested bool
}
